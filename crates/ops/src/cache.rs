//! The persistent kernel cache: cutile's own content-addressed cubin store
//! (`FileSystemJitStore`: same-directory temp file + rename, entries checked
//! against a SHA-256 of their payload on read, mtime-LRU eviction under a size
//! cap, eviction serialised by an flock that dies with its holder), installed
//! process-wide when Python asks for it. cutile's key covers the Tile IR
//! bytecode, target, opt level and `tileiras --version`; the salt Python passes
//! adds what it leaves out: the ptxas/libNVVM versions. No ABI fingerprint: a
//! cubin is a function of its bytecode, and the warm-start index entries kept
//! beside the cubins carry their own op's (warm_start.rs), so adding or changing
//! one op's exports leaves every other op's cached kernels valid.

use crate::abi::ffi::CacheStats;
use crate::abi::{OpError, OpResult};
use cutile::jit_cache::{self, FileSystemJitStore, JitStore};
use sha2::{Digest, Sha256};
use std::cell::RefCell;
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
            observe_entry(bytes);
        }
        Ok(found)
    }
    fn put(&self, key: &str, value: &[u8]) -> io::Result<()> {
        observe_entry(value);
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

thread_local! {
    /// The last entry this thread's store read or wrote, while `capture_entry` watches.
    static CAPTURED: RefCell<Option<Option<Vec<u8>>>> = const { RefCell::new(None) };
}

fn observe_entry(bytes: &[u8]) {
    CAPTURED.with(|c| {
        if let Some(slot) = c.borrow_mut().as_mut() {
            *slot = Some(bytes.to_vec());
        }
    });
}

/// Runs `f` and returns its result with the last kernel-cache entry this thread
/// read (a hit) or wrote meanwhile: the cubin cutile compiled or loaded for a launch.
pub(crate) fn capture_entry<R>(f: impl FnOnce() -> R) -> (R, Option<Vec<u8>>) {
    CAPTURED.with(|c| *c.borrow_mut() = Some(None));
    let result = f();
    (result, CAPTURED.with(|c| c.borrow_mut().take()).flatten())
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

/// Installs the kernel cache (`cutile_cache_enable`).
pub(crate) fn enable(dir: &str, capacity_bytes: u64, salt: &str) -> OpResult<()> {
    let inner = FileSystemJitStore::builder(dir)
        .capacity_bytes(capacity_bytes)
        .open()
        .map_err(|e| OpError::invalid(format!("cannot open the kernel cache at {dir}: {e}")))?;
    let store = Arc::new(SaltedStore { inner, salt: salt.to_string() });
    jit_cache::enable(store.clone());
    *INSTALLED.write().unwrap_or_else(|p| p.into_inner()) = Some(store);
    Ok(())
}

/// cutile's store and compile counters (`cutile_cache_stats` adds ours).
pub(crate) fn stats() -> CacheStats {
    let s = jit_cache::stats();
    CacheStats {
        hits: s.hits,
        misses: s.misses,
        puts: s.puts,
        bytes_written: s.bytes_written,
        io_errors: s.io_errors,
        tileiras_runs: jit_cache::jit_backend_compile_count(),
        ..CacheStats::default()
    }
}
