//! Warm start: a new process's first launch of a kernel it finds in the kernel
//! cache skips cutile's lowering.
//!
//! cutile 0.5.0 keys its disk store by the Tile IR bytecode, so even a disk hit
//! first lowers the kernel (about 85 ms a variant on the H200 host, most of it
//! re-parsing cutile's core module, type inference and inlining). Its in-memory
//! cache, though, is keyed by the specialization (`TileFunctionKey`: kernel,
//! generics, stride and divisibility facts, options, source hash, GPU,
//! compiler and tileiras versions), which the launcher resolves without
//! lowering. So after a kernel first compiles we also store an index entry
//! under that key, holding the cubin, its entry name and its parameter
//! validator; a later process that resolves the same key loads the cubin and
//! puts it into cutile's in-memory cache (`kernel_cache_slot`) before the
//! launch, which then finds it there.
//!
//! The validator's launch checks (bounds obligations the compiler hoisted out
//! of the kernel, which the launcher evaluates before every launch) are stored
//! with it, atom by atom, and rebuilt exactly. Kernels that link a tile library
//! are not indexed (their cubin depends on files the key does not pin). Anything unexpected (no cache installed, a CUDA-graph capture in
//! progress, an unreadable or mismatched entry, a cubin the driver rejects)
//! falls back to cutile's normal path: the index can only save time.
//!
//! A first launch looks in this order: cutile's in-memory slot, this index in
//! the user's cache, the kernels shipped in the wheel ([`crate::shipped`]), and
//! then tileiras, unless Python found no toolchain, when the launch fails with
//! an error that names the kernel, the architecture and the fix.

use crate::abi::OpResult;
use crate::entry;
use crate::shipped;
use crate::spec::KernelSpec;
use crate::{cache, runtime};
use cuda_core::{Context, Stream};
use cutile::cuda_async::device_context::{load_module_from_bytes, CompiledKernel};
use cutile::cuda_async::error::DeviceError;
use cutile::cutile_compiler::cuda_tile_runtime_utils::{get_gpu_name, tileiras_fingerprint};
use cutile::cutile_compiler::kernel_naming::KernelNaming;
use cutile::jit_cache::{decode_entry, encode_entry, EntryParams};
use cutile::tile_kernel::{contains_cuda_function, kernel_cache_slot, TileFunctionKey};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Launch signatures remembered as already handled, before the set is cleared.
const SEEN_MAX: usize = 1 << 16;

static WARM_STARTS: AtomicU64 = AtomicU64::new(0);

/// Kernels this process loaded from the index instead of lowering them.
pub fn warm_starts() -> u64 {
    WARM_STARTS.load(Ordering::Relaxed)
}

/// Whether this launch signature is new to the process (and remembers it).
/// `signature` covers at least everything cutile specializes on.
fn first_sight(signature: u64) -> bool {
    static SEEN: OnceLock<Mutex<HashSet<u64>>> = OnceLock::new();
    let mut seen = SEEN.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if seen.len() >= SEEN_MAX {
        seen.clear();
    }
    seen.insert(signature)
}

/// A stream of our own per device, for resolving specializations: cutile's
/// `specialize_on` synchronizes the stream it is given, and the caller's must not be.
fn private_stream(ctx: &Arc<Context>) -> Result<Arc<Stream>, DeviceError> {
    static STREAMS: OnceLock<Mutex<HashMap<usize, Arc<Stream>>>> = OnceLock::new();
    let mut map = STREAMS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    if let Some(s) = map.get(&ctx.ordinal()) {
        return Ok(s.clone());
    }
    let s = ctx.new_stream()?;
    map.insert(ctx.ordinal(), s.clone());
    Ok(s)
}

fn capturing(stream: &Stream) -> bool {
    use cuda_core::sys;
    let mut status: sys::CUstreamCaptureStatus = sys::CUstreamCaptureStatus_enum_CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: a query on a live stream handle, writing one local.
    let rc = unsafe { sys::cuStreamIsCapturing(stream.cu_stream(), &mut status) };
    rc != sys::cudaError_enum_CUDA_SUCCESS || status != sys::CUstreamCaptureStatus_enum_CU_STREAM_CAPTURE_STATUS_NONE
}

/// Launches through cutile, first loading the kernel from the user's index or
/// the shipped kernels when this launch signature is new to the process, and
/// indexing it after a compile.
///
/// `signature` hashes every launch input cutile can specialize on; `spec` is the
/// launch as the shipped-kernel build derives it; `resolve` yields the launch's
/// cutile key on the given stream without compiling; `launch` performs the real
/// launch. Returns the cutile key when it was resolved: at a signature's first
/// launch outside a CUDA-graph capture (resolving synchronizes a stream, which a
/// capture forbids), for the op to record the launch for [`crate::replay`].
pub fn launch(
    ctx: &Arc<Context>,
    stream: &Stream,
    op: &str,
    signature: u64,
    spec: &KernelSpec,
    resolve: impl FnOnce(&Arc<Stream>) -> Result<TileFunctionKey, DeviceError>,
    launch: impl FnOnce() -> Result<(), DeviceError>,
) -> OpResult<Option<TileFunctionKey>> {
    let failed = |e| runtime::launch_error(op, e);
    if capturing(stream) || !first_sight(signature) {
        return launch().map(|()| None).map_err(failed);
    }
    let Ok(key) = private_stream(ctx).and_then(|s| resolve(&s)) else {
        return launch().map(|()| None).map_err(failed);
    };
    let device = ctx.ordinal();
    let gpu_name = get_gpu_name(device);
    let index = cache::installed().then(|| IndexKey::new(&key, device));
    let loaded = contains_cuda_function(&key) || {
        let shipped_id = shipped::identity(&key);
        shipped::compare(spec, shipped_id, &gpu_name);
        let from_index = index.as_ref().and_then(|index| {
            let bytes = cache::get_index(&index.store_key)?;
            install(&key, device, index, &bytes)
        });
        if from_index.is_some() {
            WARM_STARTS.fetch_add(1, Ordering::Relaxed);
        }
        from_index.is_some()
            || shipped::lookup(shipped_id, &gpu_name).is_some_and(|p| install_payload(&key, device, &p).is_some())
    };
    if !loaded && !shipped::jit_available() {
        return Err(shipped::no_toolchain(op, spec, &gpu_name));
    }
    let Some(index) = index.filter(|_| !loaded) else {
        return launch().map(|()| Some(key)).map_err(failed);
    };
    let (result, captured) = cache::capture_entry(launch);
    result.map_err(failed)?;
    if let Some(cubin) = captured.as_deref().and_then(cubin_of_entry) {
        record(&key, &index, &KernelNaming::new(key.function_name()).entry_name(), &cubin);
    }
    Ok(Some(key))
}

/// Where an index entry lives and what it is validated against.
struct IndexKey {
    store_key: String,
    identity: [u8; 32],
    gpu_name: String,
    tileiras_fp: &'static str,
}

impl IndexKey {
    fn new(key: &TileFunctionKey, device: usize) -> Self {
        let identity: [u8; 32] = Sha256::digest(Self::described(key).as_bytes()).into();
        let store_key = format!("warm-start-{}", identity.iter().map(|b| format!("{b:02x}")).collect::<String>());
        Self { store_key, identity, gpu_name: get_gpu_name(device), tileiras_fp: tileiras_fingerprint() }
    }

    /// What the entry's identity hashes: the key's Debug form (every field, private ones
    /// included) and its op's ABI fingerprint, not the library's, so adding an op leaves the
    /// others' entries valid.
    fn described(key: &TileFunctionKey) -> String {
        format!(
            "{}\0{}\0{}\0{key:?}",
            entry::PAYLOAD_MAGIC,
            env!("CARGO_PKG_VERSION"),
            shipped::op_abi(key.module_name())
        )
    }

    fn params(&self) -> EntryParams<'_> {
        EntryParams {
            bc_sha256: self.identity,
            gpu_name: &self.gpu_name,
            opt_level: 0,
            flags: 0,
            tileiras_fp: self.tileiras_fp,
        }
    }
}

/// The cubin inside one of cutile's own store entries (its codec: a 96-byte
/// header with the payload's SHA-256, GPU name and tileiras fingerprint lengths).
fn cubin_of_entry(bytes: &[u8]) -> Option<Vec<u8>> {
    const HEADER: usize = 96;
    if bytes.len() < HEADER || &bytes[..12] != b"CUTILECUBIN\0" {
        return None;
    }
    let gpu_len = u16::from_le_bytes(bytes[80..82].try_into().ok()?) as usize;
    let fp_len = u16::from_le_bytes(bytes[82..84].try_into().ok()?) as usize;
    let payload = bytes.get(HEADER + gpu_len + fp_len..)?;
    (Sha256::digest(payload).as_slice() == &bytes[16..48]).then(|| payload.to_vec())
}

fn record(key: &TileFunctionKey, index: &IndexKey, entry: &str, cubin: &[u8]) {
    let slot = kernel_cache_slot(key);
    let Some((kernel, links_tile_libraries)) = slot.get() else { return };
    if *links_tile_libraries {
        return;
    }
    if let Some(bytes) = encode_entry(&index.params(), &entry::payload(entry, &kernel.validator, cubin)) {
        cache::put_index(&index.store_key, &bytes);
    }
}

fn install(key: &TileFunctionKey, device: usize, index: &IndexKey, bytes: &[u8]) -> Option<()> {
    install_payload(key, device, &decode_entry(bytes, &index.params())?)
}

/// Loads an [`entry::payload`]'s cubin and puts the kernel into cutile's in-memory slot for `key`.
fn install_payload(key: &TileFunctionKey, device: usize, payload: &[u8]) -> Option<()> {
    let (entry, validator, cubin) = entry::parse(payload)?;
    // SAFETY: `cubin` passed the entry's SHA-256 check and came from tileiras;
    // the driver validates the image itself and an error here only means a miss.
    let module = unsafe { load_module_from_bytes(cubin, device) }.ok()?;
    let function = Arc::new(module.load_function(entry).ok()?);
    // A concurrent compile of the same key may have filled the slot: either is the same kernel.
    let _ = kernel_cache_slot(key).set((CompiledKernel { module, function, validator: Arc::new(validator) }, false));
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cubin_comes_out_of_a_cutile_entry_and_corruption_is_refused() {
        let params =
            EntryParams { bc_sha256: [7; 32], gpu_name: "sm_90", opt_level: 3, flags: 0, tileiras_fp: "tileiras 13.4" };
        let cubin = b"\x7fELF and the rest".to_vec();
        let mut entry = encode_entry(&params, &cubin).unwrap();
        assert_eq!(cubin_of_entry(&entry).as_deref(), Some(&cubin[..]));
        let last = entry.len() - 1;
        entry[last] ^= 1;
        assert_eq!(cubin_of_entry(&entry), None);
        assert_eq!(cubin_of_entry(&entry[..40]), None);
    }

    #[test]
    fn an_index_entry_holds_its_ops_abi_fingerprint_not_the_librarys() {
        for (op, abi) in crate::OP_ABI {
            let key = TileFunctionKey::builder(format!("{op}_kernels"), "f").gpu_name("sm_90").build();
            let described = IndexKey::described(&key);
            assert!(described.contains(abi), "{op}: {described}");
            assert!(!described.contains(env!("CUTILE_ABI_FINGERPRINT")), "{op}: {described}");
        }
    }

    #[test]
    fn a_launch_signature_is_new_once() {
        assert!(first_sight(0xfeed_beef));
        assert!(!first_sight(0xfeed_beef));
    }
}
