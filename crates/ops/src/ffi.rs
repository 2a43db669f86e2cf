//! The library's own C exports, everything that is not an op's: errors, the
//! kernel cache, shipped kernels and describe mode, the toolchain probe, the
//! fingerprint and the op list (the types and constants they share are in
//! `abi/ffi.rs`). cdef_gen reads this file and every op's `ops/<op>/ffi.rs`
//! (files named `ffi.rs`): what is `pub` and `#[repr(C)]` here ends up in the
//! generated cdef manifest Python uses. The work itself is done in the modules
//! each export names.

use crate::abi::ffi::{CacheStats, CUTILE_ERR_INVALID_ARGUMENT};
use crate::abi::{ffi_guard, OpError};
use std::ffi::{c_char, CStr, CString};
use std::sync::OnceLock;

/// The message of the last failed call on this thread ("" after a success).
/// The pointer stays valid until the next op call on the same thread.
#[no_mangle]
pub extern "C" fn cutile_last_error() -> *const c_char {
    crate::abi::last_error_ptr()
}

/// A NUL-terminated UTF-8 argument, or an error naming it.
///
/// # Safety
/// `p` must be null or a NUL-terminated string.
unsafe fn c_str<'a>(p: *const c_char, name: &str) -> Result<&'a str, OpError> {
    if p.is_null() {
        return Err(OpError::new(CUTILE_ERR_INVALID_ARGUMENT, format!("{name} is null")));
    }
    unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| OpError::invalid(format!("{name} is not UTF-8")))
}

/// Installs the kernel cache at `dir` (created if missing; the caller makes it
/// user-only), capped at `capacity_bytes` (0: no cap), keys salted with `salt`
/// (Python passes the ABI fingerprint and the toolchain versions). Replaces a cache installed before.
///
/// # Safety
/// `dir` and `salt` must be null or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn cutile_cache_enable(dir: *const c_char, capacity_bytes: u64, salt: *const c_char) -> i32 {
    ffi_guard(|| {
        let dir = unsafe { c_str(dir, "dir") }?;
        let salt = unsafe { c_str(salt, "salt") }?;
        crate::cache::enable(dir, capacity_bytes, salt)
    })
}

/// Writes the process's cache counters to `out`.
///
/// # Safety
/// `out` must be null or point to writable memory for one `CacheStats`.
#[no_mangle]
pub unsafe extern "C" fn cutile_cache_stats(out: *mut CacheStats) -> i32 {
    ffi_guard(|| {
        if out.is_null() {
            return Err(OpError::new(CUTILE_ERR_INVALID_ARGUMENT, "out is null"));
        }
        let stats = CacheStats {
            warm_starts: crate::warm_start::warm_starts(),
            replays: crate::replay::replays(),
            shipped: crate::shipped::hits(),
            spec_mismatches: crate::shipped::mismatches(),
            ..crate::cache::stats()
        };
        unsafe { out.write(stats) };
        Ok(())
    })
}

/// Reads shipped kernels from `dir` (`<dir>/<gpu_name>/<identity>`; "" reads none).
/// `jit` (non-zero) says whether a Tile IR toolchain is installed: without one, a kernel that is
/// not shipped fails with CUTILE_ERR_NO_TOOLCHAIN instead of running tileiras.
///
/// # Safety
/// `dir` must be null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cutile_shipped_enable(dir: *const c_char, jit: i32) -> i32 {
    ffi_guard(|| {
        crate::shipped::enable(unsafe { c_str(dir, "dir") }?, jit != 0);
        Ok(())
    })
}

/// Starts describe mode on the calling thread, for the wheel build: until
/// `cutile_describe_end`, an op's export checks its arguments and chooses its kernels
/// as for a launch on a `gpu_name` GPU, but records each launch instead of making it
/// (descriptors need no device memory; nothing touches a GPU).
///
/// # Safety
/// `gpu_name` must be null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cutile_describe_begin(gpu_name: *const c_char) -> i32 {
    ffi_guard(|| {
        crate::shipped::describe_begin(unsafe { c_str(gpu_name, "gpu_name") }?);
        Ok(())
    })
}

/// Ends describe mode on the calling thread; `*described` gets how many launches it described.
///
/// # Safety
/// `described` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn cutile_describe_end(described: *mut i32) -> i32 {
    ffi_guard(|| {
        let n = crate::shipped::describe_end();
        if !described.is_null() {
            unsafe { described.write(i32::try_from(n).unwrap_or(i32::MAX)) };
        }
        Ok(())
    })
}

/// Compiles every launch described so far (once per architecture and kernel
/// variant) with `jobs` threads, through the tileiras in CUTILE_TILEIRAS_PATH, and
/// writes the shipped entries under `out_dir/<gpu_name>/`; `*written` gets their number.
///
/// # Safety
/// `out_dir` must be null or a NUL-terminated string; `written` null or writable.
#[no_mangle]
pub unsafe extern "C" fn cutile_shipped_build(out_dir: *const c_char, jobs: i32, written: *mut i32) -> i32 {
    ffi_guard(|| {
        if written.is_null() {
            return Err(OpError::new(CUTILE_ERR_INVALID_ARGUMENT, "written is null"));
        }
        let n = crate::shipped::build(unsafe { c_str(out_dir, "out_dir") }?, usize::try_from(jobs).unwrap_or(1))?;
        unsafe { written.write(i32::try_from(n).unwrap_or(i32::MAX)) };
        Ok(())
    })
}

/// Takes every launch described so far off the pending list and says, without
/// launching, how many of them (`*described`) find a valid shipped entry (`*found`) in
/// the directory `cutile_shipped_enable` named.
///
/// # Safety
/// `found` and `described` must be null or writable.
#[no_mangle]
pub unsafe extern "C" fn cutile_shipped_resolve(found: *mut i32, described: *mut i32) -> i32 {
    ffi_guard(|| {
        if found.is_null() || described.is_null() {
            return Err(OpError::new(CUTILE_ERR_INVALID_ARGUMENT, "found or described is null"));
        }
        let (hits, total) = crate::shipped::resolve();
        unsafe {
            found.write(i32::try_from(hits).unwrap_or(i32::MAX));
            described.write(i32::try_from(total).unwrap_or(i32::MAX));
        }
        Ok(())
    })
}

/// Compiles a trivial kernel for `gpu_name` (for example "sm_90") through
/// tileiras. Returns CUTILE_OK, or CUTILE_ERR_COMPILE_FAILED with the
/// toolchain's message in `cutile_last_error()`.
///
/// # Safety
/// `gpu_name` must be null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn cutile_compile_probe(gpu_name: *const c_char) -> i32 {
    ffi_guard(|| crate::probe::compile_probe(unsafe { c_str(gpu_name, "gpu_name") }?))
}

/// SHA-256 of the generated C declarations (the cdef manifest) this library
/// was built with, as a NUL-terminated hex string.
#[no_mangle]
pub extern "C" fn cutile_abi_fingerprint() -> *const c_char {
    concat!(env!("CUTILE_ABI_FINGERPRINT"), "\0").as_ptr().cast()
}

/// Comma-separated names of the ops compiled into this library, in name order.
#[no_mangle]
pub extern "C" fn cutile_ops_list() -> *const c_char {
    static LIST: OnceLock<CString> = OnceLock::new();
    LIST.get_or_init(|| CString::new(crate::OPS.join(",")).expect("op names have no NUL")).as_ptr()
}
