//! Per-device CUDA state shared by every op: one retained primary context per
//! device ordinal for the life of the process (the same context torch uses),
//! and the caller's stream borrowed per launch, never created or synchronized.

use crate::abi::{OpError, OpResult, CUTILE_ERR_COMPILE_FAILED, CUTILE_ERR_DEVICE_INIT, CUTILE_ERR_LAUNCH_FAILED};
use cuda_async::error::DeviceError;
use cuda_core::{Context, Stream};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

fn contexts() -> &'static Mutex<HashMap<usize, Arc<Context>>> {
    static CONTEXTS: OnceLock<Mutex<HashMap<usize, Arc<Context>>>> = OnceLock::new();
    CONTEXTS.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The primary context of `device`, retained once and kept for the process.
pub fn context(device: i32) -> OpResult<Arc<Context>> {
    let ordinal =
        usize::try_from(device).map_err(|_| OpError::invalid(format!("device index {device} is negative")))?;
    let mut map = contexts().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(ctx) = map.get(&ordinal) {
        ctx.bind_to_thread().map_err(|e| device_init_error(device, &e))?;
        return Ok(ctx.clone());
    }
    let ctx = Context::new(ordinal).map_err(|e| device_init_error(device, &e))?;
    map.insert(ordinal, ctx.clone());
    Ok(ctx)
}

fn device_init_error(device: i32, err: &dyn std::fmt::Display) -> OpError {
    OpError::new(
        CUTILE_ERR_DEVICE_INIT,
        format!(
            "could not initialise CUDA device {device}: {err}. The kernels need an NVIDIA driver \
             for CUDA 13 (R580 or newer); run `python -m tilegym_cutile_rs.check` for a diagnosis"
        ),
    )
}

/// Borrowed stream wrappers by (device ordinal, `CUstream` handle).
type BorrowedStreams = HashMap<(usize, u64), Arc<Stream>>;

/// Borrows the caller's stream (a `CUstream` handle; 0 is the legacy default stream).
///
/// The wrapper is kept for the process and never dropped: cuda-core's `Drop for
/// Stream` calls `cuStreamQuery` even on a borrowed stream, which invalidates a
/// CUDA-graph capture in progress on it and, on a busy stream, registers a
/// completion callback per launch. One entry per distinct stream handle seen.
pub fn borrow_stream(ctx: &Arc<Context>, stream: u64) -> Arc<Stream> {
    static STREAMS: OnceLock<Mutex<BorrowedStreams>> = OnceLock::new();
    let mut map = STREAMS.get_or_init(|| Mutex::new(HashMap::new())).lock().unwrap_or_else(|p| p.into_inner());
    map.entry((ctx.ordinal(), stream))
        // SAFETY: the caller (torch) owns the stream and keeps it alive past each
        // launch, which only enqueues work on it.
        .or_insert_with(|| unsafe { Stream::borrow_raw(stream as *mut std::ffi::c_void, ctx) })
        .clone()
}

/// Maps a cutile launch error to a status code, keeping the toolchain's own message.
pub fn launch_error(what: &str, err: DeviceError) -> OpError {
    let code = match &err {
        DeviceError::KernelCache(_) | DeviceError::Anyhow(_) => CUTILE_ERR_COMPILE_FAILED,
        _ => CUTILE_ERR_LAUNCH_FAILED,
    };
    OpError::new(code, format!("{what}: {err}"))
}
