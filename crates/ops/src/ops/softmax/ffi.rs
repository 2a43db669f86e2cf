//! C exports of softmax (read by the cdef generator).

use crate::abi::{ffi_guard, read_desc, TensorDesc};

/// Softmax over the last dim of the 2-D view `x` into the contiguous `y`.
///
/// Rows up to `block_n` long take one tile; longer rows loop over `block_n`
/// tiles. `block_m` rows share a CTA. `occupancy` > 0 asks tileiras for that
/// many resident CTAs per SM, `warps` > 0 for that many worker warps per CTA
/// (0: its own choice for either). The kernel is enqueued on `stream` (a
/// CUstream on `device`, 0 for the legacy default stream) and not waited for.
/// Returns a `CUTILE_*` status; on failure `cutile_last_error()` says why.
///
/// # Safety
/// `x` and `y` must be null or point to readable descriptors whose pointers
/// are device allocations of at least the described extent.
// Flat scalars, not a config struct: cffi passes them without allocating per call.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn cutile_softmax(
    x: *const TensorDesc,
    y: *const TensorDesc,
    block_m: i32,
    block_n: i32,
    occupancy: i32,
    warps: i32,
    device: i32,
    stream: u64,
) -> i32 {
    ffi_guard(|| {
        let x = unsafe { read_desc(x, "x") }?;
        let y = unsafe { read_desc(y, "y") }?;
        super::launch::softmax(&x, &y, block_m, block_n, occupancy, warps, device, stream)
    })
}
