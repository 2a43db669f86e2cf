//! Discovers the ops and generates the C ABI's manifest.
//!
//! - Every directory `src/ops/<name>/` with a `mod.rs` becomes `cutile_ops::<name>`,
//!   and `OPS` lists them: adding an op means adding its directory, no list to edit.
//! - cdef_gen turns every file named `ffi.rs` under `src/` (the library's own and
//!   each op's) into the cdef manifest, `cutile_kernels.h` in OUT_DIR; its SHA-256 is
//!   baked into the library (`cutile_abi_fingerprint`), and its path is handed to the
//!   cutile_kernels build script (the `links` metadata `DEP_CUTILE_ABI_HEADER`).
//! - Each op's ABI fingerprint: the SHA-256 of the manifest cbindgen makes from the
//!   shared C sources (every `ffi.rs` outside `src/ops/`) and that op's own `ffi.rs`
//!   alone (`OP_ABI`). A shipped or cached kernel's identity holds its op's, so adding or
//!   changing one op's exports leaves every other op's kernels valid (shipped.rs).
//! - Cargo.lock's fingerprint keys the shipped-kernel build cache (shipped.rs).
use std::{env, fs, path::PathBuf};

fn main() {
    let src = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("src");
    let ops_dir = src.join("ops");
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
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    fs::write(out_dir.join("ops.rs"), out).unwrap();

    let sources = cdef_gen::ffi_sources(&src).expect("read crates/ops/src");
    for source in &sources {
        println!("cargo:rerun-if-changed={}", source.display());
    }
    let header = cdef_gen::generate(&sources).unwrap_or_else(|e| panic!("cbindgen failed: {e}"));
    let header_path = out_dir.join(cdef_gen::HEADER);
    fs::write(&header_path, &header).unwrap();
    println!("cargo:rustc-env=CUTILE_ABI_FINGERPRINT={}", cdef_gen::fingerprint(&header));
    let shared: Vec<PathBuf> = sources.iter().filter(|s| !s.starts_with(&ops_dir)).cloned().collect();
    let mut abi = String::from(
        "/// Each op's ABI fingerprint (the shared C sources and its own `ffi.rs`), by op name.\npub const OP_ABI: &[(&str, &str)] = &[\n",
    );
    for name in &names {
        let own: Vec<PathBuf> = sources.iter().filter(|s| s.starts_with(ops_dir.join(name))).cloned().collect();
        let op_header = cdef_gen::generate(&[shared.clone(), own].concat())
            .unwrap_or_else(|e| panic!("cbindgen failed for {name}: {e}"));
        abi.push_str(&format!("    ({name:?}, {:?}),\n", cdef_gen::fingerprint(&op_header)));
    }
    abi.push_str("];\n");
    fs::write(out_dir.join("op_abi.rs"), abi).unwrap();
    // The locked dependency versions (cutile's lowering among them), for the shipped-kernel
    // build cache's key: an upgrade that leaves every kernel's key alone still misses.
    let lock = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let locked = fs::read_to_string(&lock).unwrap_or_default();
    println!("cargo:rustc-env=CUTILE_LOCK_FINGERPRINT={}", cdef_gen::fingerprint(&locked));
    println!("cargo:header={}", header_path.display());
}
