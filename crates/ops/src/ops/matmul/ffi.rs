//! C exports of matmul (read by the cdef generator).

use crate::abi::{ffi_guard, read_desc, TensorDesc};

/// `c[i] = a[i] · b[i]` for batched 3-D views: `a` `[B, M, K]`, `b` `[B, K, N]`, each
/// row- or column-major within a batch entry (read in place, any leading stride), into
/// the contiguous `c` `[B, M, N]`, in `[block_m, block_n]` output tiles over `block_k`
/// steps of K. `tf32` != 0 rounds float32 operands to TF32 on the tensor cores (0: full
/// float32). `group_m` > 0 launches the persistent kernel: `ctas` CTAs (at most the
/// number of output tiles) walk the tiles `group_m` row blocks of a column at a time;
/// 0 launches one CTA per output tile (`ctas` unused). `occupancy`, `warps` and `cga`
/// (CTAs per cluster, sm_90 and later) > 0 are tileiras hints (0: its own choice).
/// Enqueued on `stream` (a CUstream on `device`) and not waited for. Returns a
/// `CUTILE_*` status; on failure `cutile_last_error()` says why.
///
/// # Safety
/// Each descriptor must be null or point to a readable `TensorDesc` whose pointer is a
/// device allocation of at least the described extent.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub unsafe extern "C" fn cutile_matmul(
    c: *const TensorDesc,
    a: *const TensorDesc,
    b: *const TensorDesc,
    tf32: i32,
    ctas: i32,
    block_m: i32,
    block_n: i32,
    block_k: i32,
    occupancy: i32,
    warps: i32,
    group_m: i32,
    cga: i32,
    device: i32,
    stream: u64,
) -> i32 {
    ffi_guard(|| {
        let (c, a, b) = unsafe { (read_desc(c, "c")?, read_desc(a, "a")?, read_desc(b, "b")?) };
        let tiles = super::launch::Tiles { block_m, block_n, block_k, group_m, ctas };
        let hints = crate::spec::Hints::checked(occupancy, warps)?.with_cga(cga)?;
        super::launch::matmul(&c, &a, &b, tf32 != 0, tiles, hints, device, stream)
    })
}
