//! The persistent kernel cache: cutile's own content-addressed cubin store
//! (`FileSystemJitStore`: same-directory temp file + rename, entries checked
//! against a SHA-256 of their payload on read, mtime-LRU eviction under a size
//! cap, eviction serialised by an flock that dies with its holder), installed
//! process-wide when Python asks for it. cutile's key covers the Tile IR
//! bytecode, target, opt level and `tileiras --version`; the salt Python passes
//! adds what it leaves out: this library's ABI fingerprint and the
//! ptxas/libNVVM versions.

use crate::abi::{ffi_guard, OpError, OpResult, CUTILE_ERR_INVALID_ARGUMENT};
use cutile::jit_cache::{self, FileSystemJitStore, JitStore};
use sha2::{Digest, Sha256};
use std::ffi::{c_char, CStr};
use std::io;
use std::sync::{Arc, RwLock};

/// A `FileSystemJitStore` whose keys are re-derived with a salt, so entries
/// written by another library build or toolchain are simply never found.
struct SaltedStore {
    inner: FileSystemJitStore,
    salt: String,
}

impl SaltedStore {
    fn key(&self, key: &str) -> String {
        let mut h = Sha256::new();
        h.update(b"tilegym-cutile-rs-kernel-cache-v1\0");
        h.update(self.salt.as_bytes());
        h.update(b"\0");
        h.update(key.as_bytes());
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl JitStore for SaltedStore {
    fn get(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        let found = self.inner.get(&self.key(key))?;
        if let Some(bytes) = &found {
            crate::warm_start::observe_entry(bytes);
        }
        Ok(found)
    }
    fn put(&self, key: &str, value: &[u8]) -> io::Result<()> {
        crate::warm_start::observe_entry(value);
        self.inner.put(&self.key(key), value)
    }
    fn contains(&self, key: &str) -> io::Result<bool> {
        self.inner.contains(&self.key(key))
    }
    fn delete(&self, key: &str) -> io::Result<()> {
        self.inner.delete(&self.key(key))
    }
    fn clear(&self) -> io::Result<()> {
        self.inner.clear()
    }
}

/// The store installed with `cutile_cache_enable`, for the warm-start index.
static INSTALLED: RwLock<Option<Arc<SaltedStore>>> = RwLock::new(None);

fn installed_store() -> Option<Arc<SaltedStore>> {
    INSTALLED.read().unwrap_or_else(|p| p.into_inner()).clone()
}

pub(crate) fn installed() -> bool {
    installed_store().is_some()
}

/// A warm-start index entry (kept in the same salted store as the cubins).
pub(crate) fn get_index(key: &str) -> Option<Vec<u8>> {
    installed_store()?.get(key).ok().flatten()
}

pub(crate) fn put_index(key: &str, value: &[u8]) {
    if let Some(store) = installed_store() {
        let _ = store.put(key, value); // a lost index entry only costs the next process a lowering
    }
}

/// Process-wide kernel cache counters (since the library was loaded).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheStats {
    /// Compiles served from the disk cache.
    pub hits: u64,
    /// Disk lookups that found nothing usable and ran tileiras.
    pub misses: u64,
    /// Entries written.
    pub puts: u64,
    pub bytes_written: u64,
    /// Cache I/O failures (each one only costs a recompile).
    pub io_errors: u64,
    /// tileiras runs that succeeded in this process, cached or not.
    pub tileiras_runs: u64,
    /// Kernels loaded from the warm-start index, with no lowering.
    pub warm_starts: u64,
    /// Launches replayed straight to the driver, past cutile's launcher (`crate::replay`).
    pub replays: u64,
}

fn c_str<'a>(p: *const c_char, name: &str) -> OpResult<&'a str> {
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
        let dir = c_str(dir, "dir")?;
        let salt = c_str(salt, "salt")?;
        let inner = FileSystemJitStore::builder(dir)
            .capacity_bytes(capacity_bytes)
            .open()
            .map_err(|e| OpError::invalid(format!("cannot open the kernel cache at {dir}: {e}")))?;
        let store = Arc::new(SaltedStore { inner, salt: salt.to_string() });
        jit_cache::enable(store.clone());
        *INSTALLED.write().unwrap_or_else(|p| p.into_inner()) = Some(store);
        Ok(())
    })
}

/// Uninstalls the kernel cache: later compiles neither read nor write disk.
#[no_mangle]
pub extern "C" fn cutile_cache_disable() -> i32 {
    ffi_guard(|| {
        jit_cache::disable();
        *INSTALLED.write().unwrap_or_else(|p| p.into_inner()) = None;
        Ok(())
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
        let s = jit_cache::stats();
        let stats = CacheStats {
            hits: s.hits,
            misses: s.misses,
            puts: s.puts,
            bytes_written: s.bytes_written,
            io_errors: s.io_errors,
            tileiras_runs: jit_cache::jit_backend_compile_count(),
            warm_starts: crate::warm_start::warm_starts(),
            replays: crate::replay::replays(),
        };
        unsafe { out.write(stats) };
        Ok(())
    })
}
