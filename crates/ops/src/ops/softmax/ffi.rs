//! C exports of softmax (read by the cdef generator).

use super::launch::RowFamily;
use crate::abi::{ffi_guard, DType, OpError, TensorDesc, CUTILE_ERR_NULL_POINTER};

/// Row families (`cutile_softmax_row_family`, launch.rs's `RowFamily`): rows of any length.
pub const CUTILE_SOFTMAX_ROWS_PLAIN: i32 = 0;
/// Rows of a power-of-two length (the exact-width kernels).
pub const CUTILE_SOFTMAX_ROWS_EXACT: i32 = 1;
/// 2-byte rows that are not whole 16-byte vectors (the masked-gather kernels).
pub const CUTILE_SOFTMAX_ROWS_GATHER: i32 = 2;

const _: () = assert!(
    RowFamily::Plain as i32 == CUTILE_SOFTMAX_ROWS_PLAIN
        && RowFamily::Exact as i32 == CUTILE_SOFTMAX_ROWS_EXACT
        && RowFamily::Gather as i32 == CUTILE_SOFTMAX_ROWS_GATHER
);

/// Softmax over the last dim of the 2-D view `x` into the contiguous `y`.
///
/// Rows up to `block_n` long take one tile; longer rows loop over `block_n`
/// tiles. `block_m` rows share a CTA. `occupancy` > 0 asks tileiras for that
/// many resident CTAs per SM, `warps` > 0 for that many worker warps per CTA
/// (0: its own choice for either). `cga` > 0 shares each tile among a cluster
/// of that many CTAs (sm_90 and later; tileiras reduces across the cluster), so
/// a row tile may then be up to `cga` x `CUTILE_MAX_BLOCK` wide: a row of a
/// large vocabulary read once. The kernel is enqueued on `stream` (a
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
    cga: i32,
    device: i32,
    stream: u64,
) -> i32 {
    ffi_guard(|| {
        let x = unsafe { crate::abi::read_desc(x, "x") }?;
        let y = unsafe { crate::abi::read_desc(y, "y") }?;
        super::launch::softmax(&x, &y, block_m, block_n, occupancy, warps, cga, device, stream)
    })
}

/// Writes to `family` the kernel family (`CUTILE_SOFTMAX_ROWS_*`) that `m` rows of
/// `n` elements of `dtype`, `row_stride` elements apart, take; the shape heuristic
/// looks its tables up by it. Returns a `CUTILE_*` status.
///
/// # Safety
/// `family` must be null or point to a writable `int32_t`.
#[no_mangle]
pub unsafe extern "C" fn cutile_softmax_row_family(dtype: i32, m: i32, n: i32, row_stride: i32, family: *mut i32) -> i32 {
    ffi_guard(|| {
        if family.is_null() {
            return Err(OpError::new(CUTILE_ERR_NULL_POINTER, "family is null"));
        }
        let found = RowFamily::of(DType::from_code(dtype)?, m, n, row_stride) as i32;
        unsafe { family.write(found) };
        Ok(())
    })
}
