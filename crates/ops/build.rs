//! Discovers the ops: every directory `src/ops/<name>/` with a `mod.rs` becomes
//! `cutile_ops::<name>`. Adding an op means adding its directory, no list to edit.
use std::{env, fs, path::PathBuf};

fn main() {
    let ops_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("src/ops");
    println!("cargo:rerun-if-changed={}", ops_dir.display());
    let mut names: Vec<String> = fs::read_dir(&ops_dir)
        .expect("crates/ops/src/ops must exist")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("mod.rs").is_file())
        .map(|e| e.file_name().into_string().expect("op directory names are UTF-8"))
        .collect();
    names.sort();
    let mut out = String::new();
    for name in &names {
        let path = ops_dir.join(name).join("mod.rs");
        out.push_str(&format!("#[path = {:?}]\npub mod {name};\n", path.display().to_string()));
    }
    out.push_str(&format!(
        "/// Every op compiled into this crate, in name order.\npub const OPS: &[&str] = &{names:?};\n"
    ));
    let dest = PathBuf::from(env::var("OUT_DIR").unwrap()).join("ops.rs");
    fs::write(dest, out).unwrap();
}
