//! C exports of rope (read by the cdef generator).

use crate::abi::{ffi_guard, read_desc, TensorDesc};

/// q and k (`[B, Hq, S, D]` and `[B, Hk, S, D]` views, unit last stride) rotated by the
/// tables cos and sin (`[Bc, S, >= half]` views, Bc 1 or B; their first `half` entries per
/// position read) into the contiguous `q_out` (`[B * S, Hq, D]`) and `k_out`
/// (`[B * S, Hk, D]`): the first `2 * half` dims rotated (rotate-half layout), the rest
/// copied. `sign` -1 applies the inverse rotation (the backward). One CTA per position and
/// head block rotates `tile_q` heads of q and `tile_k` of k (powers of two, in as many
/// blocks: ceil(Hq / tile_q) == ceil(Hk / tile_k)).
/// `occupancy` and `warps` > 0 are tileiras hints. Enqueued on `stream` (a CUstream on `device`) and not waited for.
/// Returns a `CUTILE_*` status.
///
/// # Safety
/// Each descriptor must be null or point to a readable `TensorDesc` whose pointer is a
/// device allocation of at least the described extent.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn cutile_rope(
    q_out: *const TensorDesc,
    k_out: *const TensorDesc,
    q: *const TensorDesc,
    k: *const TensorDesc,
    cos: *const TensorDesc,
    sin: *const TensorDesc,
    sign: f32,
    half: i32,
    tile_q: i32,
    tile_k: i32,
    occupancy: i32,
    warps: i32,
    device: i32,
    stream: u64,
) -> i32 {
    ffi_guard(|| {
        let (q_out, k_out) = unsafe { (read_desc(q_out, "q_out")?, read_desc(k_out, "k_out")?) };
        let (q, k) = unsafe { (read_desc(q, "q")?, read_desc(k, "k")?) };
        let (cos, sin) = unsafe { (read_desc(cos, "cos")?, read_desc(sin, "sin")?) };
        super::launch::rope(&q_out, &k_out, &q, &k, &cos, &sin, sign, half, [tile_q, tile_k], occupancy, warps, device, stream)
    })
}
