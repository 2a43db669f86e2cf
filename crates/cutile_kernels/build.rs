//! Generates the cdef manifest from the ops' FFI sources into OUT_DIR
//! (setuptools-rust copies it into the Python package) and bakes its
//! fingerprint into the library, so a stale manifest is detected at load.
use std::{env, fs, path::PathBuf};

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let ops_src = manifest_dir.join("../ops/src");
    let mut sources = cdef_gen::ffi_sources(&ops_src).expect("read crates/ops/src");
    sources.push(manifest_dir.join("src/lib.rs"));
    println!("cargo:rerun-if-changed={}", ops_src.join("ops").display());
    for src in &sources {
        println!("cargo:rerun-if-changed={}", src.display());
    }
    let header = cdef_gen::generate(&sources).unwrap_or_else(|e| panic!("cbindgen failed: {e}"));
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("cutile_kernels.h");
    fs::write(&out, &header).unwrap();
    println!("cargo:rustc-env=CUTILE_ABI_FINGERPRINT={}", cdef_gen::fingerprint(&header));
}
