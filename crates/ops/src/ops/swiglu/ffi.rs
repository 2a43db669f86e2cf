//! C exports of swiglu (read by the cdef generator).

use crate::abi::{ffi_guard, read_desc, TensorDesc};

/// `y = silu(a) * b` over the 2-D views `a` and `b` (`[M, H]`, unit column stride,
/// any row stride) into the contiguous `y`, in `[block_m, block_n]` tiles.
/// `occupancy`, `warps` and `cga` (CTAs per cluster, sm_90 and later: a cluster shares
/// one tile) > 0 are tileiras hints (0: its own choice). Enqueued on
/// `stream` (a CUstream on `device`) and not waited for. Returns a `CUTILE_*` status.
///
/// # Safety
/// Each descriptor must be null or point to a readable `TensorDesc` whose pointer
/// is a device allocation of at least the described extent.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn cutile_swiglu_forward(
    y: *const TensorDesc,
    a: *const TensorDesc,
    b: *const TensorDesc,
    block_m: i32,
    block_n: i32,
    occupancy: i32,
    warps: i32,
    cga: i32,
    device: i32,
    stream: u64,
) -> i32 {
    ffi_guard(|| {
        let (y, a, b) = unsafe { (read_desc(y, "y")?, read_desc(a, "a")?, read_desc(b, "b")?) };
        super::launch::forward(&y, &a, &b, block_m, block_n, occupancy, warps, cga, device, stream)
    })
}

/// The gradients of `y = silu(a) * b` given `dy` (`[M, H]` views like `a` and `b`):
/// `dg` is an `[M, 2, H]` view whose `[:, 0]` receives da and `[:, 1]` db (unit
/// column stride, the two never overlapping), written in `[block_m, 2, block_n]` tiles.
///
/// # Safety
/// As for `cutile_swiglu_forward`.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn cutile_swiglu_backward(
    dg: *const TensorDesc,
    dy: *const TensorDesc,
    a: *const TensorDesc,
    b: *const TensorDesc,
    block_m: i32,
    block_n: i32,
    occupancy: i32,
    warps: i32,
    cga: i32,
    device: i32,
    stream: u64,
) -> i32 {
    ffi_guard(|| {
        let (dg, dy) = unsafe { (read_desc(dg, "dg")?, read_desc(dy, "dy")?) };
        let (a, b) = unsafe { (read_desc(a, "a")?, read_desc(b, "b")?) };
        super::launch::backward(&dg, &dy, &a, &b, block_m, block_n, occupancy, warps, cga, device, stream)
    })
}
