//! C exports of attention_sink (read by the cdef generator).

use super::launch::{Partials, Views};
use crate::abi::{ffi_guard, read_desc, read_index_desc, OpResult, TensorDesc};

/// The forward's views from its descriptors (out, q, k, v, sinks), start_q and the partials.
///
/// # Safety
/// As for `cutile_attention_sink`'s descriptors.
unsafe fn read_views(
    [out, q, k, v, sinks]: [*const TensorDesc; 5],
    start_q: *const TensorDesc,
    partials: Option<Partials>,
) -> OpResult<Views> {
    unsafe {
        Ok(Views {
            out: read_desc(out, "out")?,
            q: read_desc(q, "q")?,
            k: read_desc(k, "k")?,
            v: read_desc(v, "v")?,
            sinks: read_desc(sinks, "sinks")?,
            start_q: read_index_desc(start_q, "start_q")?,
            partials,
        })
    }
}

/// Attention with sinks into `out`.
///
/// `q` and `out` are `[B, S_q, H*D]` views (`out` contiguous), `k` and `v` `[B, S_kv,
/// H_kv*D]`, each with unit stride along its last dim; H = H_kv * `group` query heads,
/// the `group` heads of one KV head adjacent, `head_dim` D. `sinks` holds H logits
/// (float32 or q's dtype), `start_q` one int32 on the device: query row i sits at
/// position start_q + i and sees the keys at positions up to its own and, when
/// `window` is positive, after its own minus `window`. `scale` multiplies the scores
/// in log2 units (sm_scale * log2(e)). A CTA takes `block_q` positions of
/// `heads_per_tile` heads (a power of two dividing `group`) and walks the keys in
/// `block_n` tiles. With several `splits` the keys are shared among that many CTAs,
/// whose partials go to `acc` (`[splits*B, S_q, H*D]` float32) and `ml`
/// (`[splits*B, S_q, 2H]` float32) before a second kernel combines them; with one
/// split both may be null. `occupancy`, `warps` and `latency` (the K/V loads', 1 to
/// 10; 0 for each: tileiras' choice) are tileiras hints. Enqueued on `stream` (a
/// CUstream on `device`) and not waited for. Returns a `CUTILE_*` status.
///
/// # Safety
/// Each descriptor must be null or point to a readable `TensorDesc` whose pointer is a
/// device allocation of at least the described extent.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn cutile_attention_sink(
    out: *const TensorDesc,
    q: *const TensorDesc,
    k: *const TensorDesc,
    v: *const TensorDesc,
    sinks: *const TensorDesc,
    start_q: *const TensorDesc,
    acc: *const TensorDesc,
    ml: *const TensorDesc,
    scale: f32,
    window: i32,
    group: i32,
    head_dim: i32,
    block_q: i32,
    heads_per_tile: i32,
    block_n: i32,
    splits: i32,
    occupancy: i32,
    warps: i32,
    latency: i32,
    device: i32,
    stream: u64,
) -> i32 {
    ffi_guard(|| {
        let views = unsafe {
            let partials = if splits > 1 { Some(Partials::new(read_desc(acc, "acc")?, read_desc(ml, "ml")?, splits)) } else { None };
            read_views([out, q, k, v, sinks], start_q, partials)?
        };
        let config = super::launch::Config { group, head_dim, block_q, heads_per_tile, block_n, splits, occupancy, warps, latency };
        super::launch::attention_sink(&views, scale, window, config, device, stream)
    })
}

/// `cutile_attention_sink` in one pass (`splits` 1), also writing each query row's
/// log2-sum-exp over its keys and its sink into `lse` (`[B, S_q, H]` float32, contiguous), which
/// `cutile_attention_sink_backward` reads.
///
/// # Safety
/// As for `cutile_attention_sink`.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn cutile_attention_sink_lse(
    out: *const TensorDesc,
    lse: *const TensorDesc,
    q: *const TensorDesc,
    k: *const TensorDesc,
    v: *const TensorDesc,
    sinks: *const TensorDesc,
    start_q: *const TensorDesc,
    scale: f32,
    window: i32,
    group: i32,
    head_dim: i32,
    block_q: i32,
    heads_per_tile: i32,
    block_n: i32,
    occupancy: i32,
    warps: i32,
    latency: i32,
    device: i32,
    stream: u64,
) -> i32 {
    ffi_guard(|| {
        let (views, lse) = unsafe { (read_views([out, q, k, v, sinks], start_q, None)?, read_desc(lse, "lse")?) };
        let config = super::launch::Config { group, head_dim, block_q, heads_per_tile, block_n, splits: 1, occupancy, warps, latency };
        super::launch::attention_sink_lse(&views, &lse, scale, window, config, device, stream)
    })
}

/// The gradients of `cutile_attention_sink_lse`'s `out` (its output O, as saved) given `dout`
/// (like q, unit stride along its last dim), from the saved `lse`: dq (like q), dk and dv (like k),
/// each contiguous, and per query row and head (`[B, S_q, H]` float32, contiguous) `delta` =
/// rowsum(dout * out) and `dsink` = -2^(sink - lse) * delta, whose sums over B and S_q are the
/// sinks' gradient. A query-side kernel (dq, delta, dsink) runs, then a key-side one (dk, dv)
/// that reads its delta: `block_q` positions of `heads_per_tile` heads per query tile,
/// `block_n` keys per key tile. The other arguments as for `cutile_attention_sink`.
///
/// # Safety
/// As for `cutile_attention_sink`.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn cutile_attention_sink_backward(
    dq: *const TensorDesc,
    dk: *const TensorDesc,
    dv: *const TensorDesc,
    delta: *const TensorDesc,
    dsink: *const TensorDesc,
    dout: *const TensorDesc,
    lse: *const TensorDesc,
    out: *const TensorDesc,
    q: *const TensorDesc,
    k: *const TensorDesc,
    v: *const TensorDesc,
    sinks: *const TensorDesc,
    start_q: *const TensorDesc,
    scale: f32,
    window: i32,
    group: i32,
    head_dim: i32,
    block_q: i32,
    heads_per_tile: i32,
    block_n: i32,
    occupancy: i32,
    warps: i32,
    latency: i32,
    device: i32,
    stream: u64,
) -> i32 {
    ffi_guard(|| {
        let (views, grads) = unsafe {
            let views = read_views([out, q, k, v, sinks], start_q, None)?;
            let grads = super::launch::Gradients {
                dq: read_desc(dq, "dq")?,
                dk: read_desc(dk, "dk")?,
                dv: read_desc(dv, "dv")?,
                delta: read_desc(delta, "delta")?,
                dsink: read_desc(dsink, "dsink")?,
                dout: read_desc(dout, "dout")?,
                lse: read_desc(lse, "lse")?,
            };
            (views, grads)
        };
        let config = super::launch::Config { group, head_dim, block_q, heads_per_tile, block_n, splits: 1, occupancy, warps, latency };
        super::launch::attention_sink_backward(&views, &grads, scale, window, config, device, stream)
    })
}
