//! `cdef_gen FILE.rs...`: prints the cdef manifest generated from the given
//! Rust FFI sources (the build does the same for libcutile_kernels).

fn main() {
    let sources: Vec<std::path::PathBuf> = std::env::args_os().skip(1).map(Into::into).collect();
    if sources.is_empty() {
        eprintln!("usage: cdef_gen FILE.rs...");
        std::process::exit(2);
    }
    match cdef_gen::generate(&sources) {
        Ok(header) => print!("{header}"),
        Err(e) => {
            eprintln!("cdef_gen: {e}");
            std::process::exit(1);
        }
    }
}
