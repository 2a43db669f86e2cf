//! `libcutile_kernels.so`: links every op of `cutile_ops` into one cdylib and
//! adds the ABI fingerprint Python checks before it calls anything.

use std::ffi::c_char;

pub use cutile_ops;

/// SHA-256 of the generated C declarations (the cdef manifest) this library
/// was built with, as a NUL-terminated hex string.
#[no_mangle]
pub extern "C" fn cutile_abi_fingerprint() -> *const c_char {
    concat!(env!("CUTILE_ABI_FINGERPRINT"), "\0").as_ptr().cast()
}

/// Comma-separated names of the ops compiled into this library.
#[no_mangle]
pub extern "C" fn cutile_ops_list() -> *const c_char {
    static LIST: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    LIST.get_or_init(|| std::ffi::CString::new(cutile_ops::OPS.join(",")).unwrap()).as_ptr()
}
