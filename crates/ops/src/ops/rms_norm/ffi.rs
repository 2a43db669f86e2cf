//! C exports of rms_norm (read by the cdef generator).

use crate::abi::{ffi_guard, read_desc, TensorDesc};

/// `y = x / sqrt(mean(x^2) + eps) * (w + offset)` over the rows of the 2-D view `x`
/// (`[M, N]`, unit column stride) into the contiguous `y`; `w` is a contiguous `[N]` of
/// x's dtype. `[block_m, block_n]` tiles, `block_n` covering a row.
/// `occupancy` and `warps` > 0 are tileiras hints. Enqueued on `stream` (a CUstream on
/// `device`) and not waited for. Returns a `CUTILE_*` status.
///
/// # Safety
/// Each descriptor must be null or point to a readable `TensorDesc` whose pointer is a
/// device allocation of at least the described extent.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn cutile_rms_norm_forward(
    y: *const TensorDesc,
    x: *const TensorDesc,
    w: *const TensorDesc,
    eps: f32,
    offset: f32,
    block_m: i32,
    block_n: i32,
    occupancy: i32,
    warps: i32,
    device: i32,
    stream: u64,
) -> i32 {
    ffi_guard(|| {
        let (y, x, w) = unsafe { (read_desc(y, "y")?, read_desc(x, "x")?, read_desc(w, "w")?) };
        super::launch::forward(&y, &x, &w, eps, offset, block_m, block_n, occupancy, warps, device, stream)
    })
}

/// The backward of `cutile_rms_norm_forward` given `dy` (like `x`), each row's rstd
/// recomputed from `x`: dx into the contiguous `dx`, and per-CTA partial sums of dw into the
/// contiguous float32 `dw_part` (`[ceil(M / rows), N]`; `cutile_rms_norm_dw` sums them).
/// Each CTA takes `rows` rows (a multiple of `block_m`), `block_m` at a time.
///
/// # Safety
/// As for `cutile_rms_norm_forward`.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn cutile_rms_norm_backward(
    dx: *const TensorDesc,
    dw_part: *const TensorDesc,
    dy: *const TensorDesc,
    x: *const TensorDesc,
    w: *const TensorDesc,
    eps: f32,
    offset: f32,
    block_m: i32,
    block_n: i32,
    rows: i32,
    occupancy: i32,
    warps: i32,
    device: i32,
    stream: u64,
) -> i32 {
    ffi_guard(|| {
        let (dx, dw_part) = unsafe { (read_desc(dx, "dx")?, read_desc(dw_part, "dw_part")?) };
        let (dy, x) = unsafe { (read_desc(dy, "dy")?, read_desc(x, "x")?) };
        let w = unsafe { read_desc(w, "w")? };
        super::launch::backward(&dx, &dw_part, &dy, &x, &w, eps, offset, block_m, block_n, rows, occupancy, warps, device, stream)
    })
}

/// `dw` (`[N]`, contiguous) = the column sums of the float32 `dw_part` (`[G, N]`),
/// `part_rows` rows at a time, `block_n` columns per CTA.
///
/// # Safety
/// As for `cutile_rms_norm_forward`.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn cutile_rms_norm_dw(
    dw: *const TensorDesc,
    dw_part: *const TensorDesc,
    part_rows: i32,
    block_n: i32,
    occupancy: i32,
    warps: i32,
    device: i32,
    stream: u64,
) -> i32 {
    ffi_guard(|| {
        let (dw, dw_part) = unsafe { (read_desc(dw, "dw")?, read_desc(dw_part, "dw_part")?) };
        super::launch::weight_grad(&dw, &dw_part, part_rows, block_n, occupancy, warps, device, stream)
    })
}
