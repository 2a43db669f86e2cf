//! `libcutile_kernels.so`: links every op of `cutile_ops`, and the library's own
//! exports (`cutile_ops::ffi`: errors, cache, probe, fingerprint, op list), into one cdylib.

pub use cutile_ops;
