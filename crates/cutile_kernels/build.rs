//! Puts the cdef manifest cutile_ops generated (its `links` metadata) into this
//! crate's OUT_DIR, where setuptools-rust picks it up for the Python package.
use std::{env, fs, path::PathBuf};

fn main() {
    let header = env::var("DEP_CUTILE_ABI_HEADER").expect("cutile_ops publishes its header path");
    println!("cargo:rerun-if-changed={header}");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join(cdef_gen::HEADER);
    fs::copy(&header, out).unwrap();
}
