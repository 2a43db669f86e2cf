//! Host side of softmax: validates the views and enqueues one kernel on the
//! caller's stream without waiting for it.

use super::kernel::softmax_kernels;
use crate::abi::{CheckedTensor, DType, OpError, OpResult};
use crate::{replay, runtime, warm_start};
use cutile::half::{bf16, f16};
use cutile::prelude::*;
use cutile::cuda_async::error::DeviceError;
use cutile::cutile_compiler::specialization::DivHint;
use cutile::tensor::KernelOutputStored;
use cutile::tile_kernel::CompileOptions;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// Largest tile edge we compile; tiles are powers of two.
pub const MAX_BLOCK: i32 = 1 << 16;
/// Largest CTAs-per-SM hint tileiras accepts.
pub const MAX_OCCUPANCY: i32 = 32;
/// Worker-warp counts Tile IR defines (tileiras 13.4 takes only 4 and 8 and
/// says so at compile time).
pub const WORKER_WARPS: [i32; 6] = [1, 2, 4, 8, 16, 32];

// The C export's flat scalar parameters, passed straight through.
#[allow(clippy::too_many_arguments)]
pub fn softmax(
    x: &CheckedTensor,
    y: &CheckedTensor,
    block_m: i32,
    block_n: i32,
    occupancy: i32,
    warps: i32,
    device: i32,
    stream: u64,
) -> OpResult<()> {
    if x.shape.len() != 2 || y.shape.len() != 2 {
        return Err(OpError::invalid(format!(
            "softmax takes 2-D [rows, cols] views, got x with {} dims and y with {}",
            x.shape.len(),
            y.shape.len()
        )));
    }
    if x.shape != y.shape {
        return Err(OpError::invalid(format!("x shape {:?} differs from y shape {:?}", x.shape, y.shape)));
    }
    if x.dtype != y.dtype {
        return Err(OpError::invalid(format!("x dtype {:?} differs from y dtype {:?}", x.dtype, y.dtype)));
    }
    let (m, n) = (x.shape[0], x.shape[1]);
    if y.strides != [n, 1] {
        return Err(OpError::invalid(format!("y must be contiguous (strides [{n}, 1]), got {:?}", y.strides)));
    }
    if n > 1 && x.strides[1] != 1 {
        return Err(OpError::invalid(format!("x must have unit stride along the softmax dim, got {:?}", x.strides)));
    }
    if m > 1 && x.strides[0] < n {
        return Err(OpError::invalid(format!("x rows overlap: row stride {} < row length {n}", x.strides[0])));
    }
    for (name, b) in [("block_m", block_m), ("block_n", block_n)] {
        if !(1..=MAX_BLOCK).contains(&b) || b & (b - 1) != 0 {
            return Err(OpError::invalid(format!("{name} = {b}: must be a power of two in 1..={MAX_BLOCK}")));
        }
    }
    if !(0..=MAX_OCCUPANCY).contains(&occupancy) {
        return Err(OpError::invalid(format!("occupancy = {occupancy}: must be 0 (compiler's choice) to {MAX_OCCUPANCY}")));
    }
    if warps != 0 && !WORKER_WARPS.contains(&warps) {
        return Err(OpError::invalid(format!(
            "warps = {warps}: must be 0 (compiler's choice) or one of {WORKER_WARPS:?}"
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    // Occupancy and worker warps are compile-time hints: each value is its own compiled variant.
    let mut options = CompileOptions::default();
    if occupancy > 0 {
        options = options.occupancy(occupancy);
    }
    if warps > 0 {
        options = options.num_worker_warps_per_cta(warps);
    }
    // One CTA per row block: in the loop kernel y is cut into [block_m, n_pad]
    // slabs, n_pad the row length rounded up to whole tiles (one variant per n_pad).
    let n_pad = (n as i64 + block_n as i64 - 1) / block_n as i64 * block_n as i64;
    let n_pad = i32::try_from(n_pad)
        .map_err(|_| OpError::invalid(format!("row length {n} rounded up to tiles of {block_n} overflows i32")))?;
    let kernel = Kernel::for_view(x, block_n);
    let ctx = runtime::context(device)?;
    // Everything cutile can specialize on or checks at launch, pointers aside:
    // the kernel, its generics and options, the device, extents, strides and
    // each pointer's alignment as cutile's specialization takes it (`DivHint`:
    // divisibility up to 16 bytes). A launch equal in all of it replays (crate::replay).
    let key = [
        kernel as i64,
        x.dtype as i64,
        i64::from(block_m),
        i64::from(block_n),
        i64::from(n_pad),
        ctx.ordinal() as i64,
        i64::from(occupancy),
        i64::from(warps),
        i64::from(m),
        i64::from(n),
        i64::from(x.strides[0]),
        i64::from(x.strides[1]),
        i64::from(DivHint::from_ptr(x.ptr).divisor),
        i64::from(DivHint::from_ptr(y.ptr).divisor),
    ];
    if let Some(replay) = replay::get(&key) {
        // SAFETY: x and y were checked above to fit the extents the key records;
        // the caller (torch) keeps them and the stream alive, as for any launch.
        return unsafe { replay.launch(stream, &[y.ptr, x.ptr]) }
            .map_err(|e| runtime::launch_error("softmax", DeviceError::Driver(e)));
    }
    let stream = runtime::borrow_stream(&ctx, stream);
    match x.dtype {
        DType::F32 => launch::<f32>(&ctx, &stream, x, y, kernel, [block_m, block_n, n_pad], options, &key),
        DType::F16 => launch::<f16>(&ctx, &stream, x, y, kernel, [block_m, block_n, n_pad], options, &key),
        DType::BF16 => launch::<bf16>(&ctx, &stream, x, y, kernel, [block_m, block_n, n_pad], options, &key),
    }
}

/// Which of the row kernels in kernel.rs a launch takes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kernel {
    /// Rows longer than one tile.
    Loop = 0,
    /// The whole row in one tile, loaded through a partition view.
    Tile = 1,
    /// The whole row in one tile, 2-byte rows that are not whole 16-byte vectors:
    /// a masked gather (kernel.rs says why).
    Gather = 2,
    /// Rows longer than one tile, 2-byte rows that are not whole 16-byte vectors.
    LoopGather = 3,
    /// `Tile` for rows of exactly `block_n` elements: no column bounds checks.
    TileExact = 4,
    /// `Loop` for rows of whole `block_n` tiles: no column bounds checks.
    LoopExact = 5,
}

impl Kernel {
    fn for_view(x: &CheckedTensor, block_n: i32) -> Self {
        let (m, n) = (x.shape[0], x.shape[1]);
        let two_byte = matches!(x.dtype, DType::F16 | DType::BF16);
        let gather = two_byte && (n % 8 != 0 || (m > 1 && x.strides[0] % 8 != 0));
        // Whole tiles only: the exact kernels type x's row length as a constant.
        let exact = n % block_n == 0;
        match (n > block_n, gather, exact) {
            (true, true, _) => Self::LoopGather,
            (true, false, true) => Self::LoopExact,
            (true, false, false) => Self::Loop,
            (false, true, _) => Self::Gather,
            (false, false, true) => Self::TileExact,
            (false, false, false) => Self::Tile,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Loop => "softmax_row_loop",
            Self::Tile => "softmax_row_tile",
            Self::Gather => "softmax_row_gather",
            Self::LoopGather => "softmax_row_loop_gather",
            Self::TileExact => "softmax_row_tile_exact",
            Self::LoopExact => "softmax_row_loop_exact",
        }
    }

    /// Whether one tile holds the whole row (else y is cut into `[block_m, n_pad]` slabs).
    fn single_tile(self) -> bool {
        matches!(self, Self::Tile | Self::Gather | Self::TileExact)
    }

    /// Whether the kernel takes x's row stride as a scalar argument after x.
    fn takes_row_stride(self) -> bool {
        matches!(self, Self::Gather | Self::LoopGather)
    }
}

/// cutile's launch of one variant; `[block_m, block_n, n_pad]` as `softmax` derived them.
#[allow(clippy::too_many_arguments)]
fn launch<T: cutile::DType>(
    ctx: &Arc<Context>,
    stream: &Arc<cuda_core::Stream>,
    x: &CheckedTensor,
    y: &CheckedTensor,
    kernel: Kernel,
    [block_m, block_n, n_pad]: [i32; 3],
    options: CompileOptions,
    key: &[i64],
) -> OpResult<()> {
    // SAFETY: torch owns both allocations and keeps them alive while the work
    // it ordered on `stream` runs; y is a fresh output nobody else writes.
    let tensors = || unsafe {
        (
            Tensor::<T>::borrow_raw_parts(x.ptr, ctx.clone(), x.shape.clone(), x.strides.clone()),
            Tensor::<T>::borrow_raw_parts(y.ptr, ctx.clone(), y.shape.clone(), y.strides.clone()),
        )
    };
    let single_tile = kernel.single_tile();
    let tile = if single_tile { [block_m, block_n] } else { [block_m, n_pad] };
    // Built where it is consumed (cutile's launcher takes it by value), not cloned.
    let generics = || {
        let mut g = vec![x.dtype.jit_name().to_string(), block_m.to_string(), block_n.to_string()];
        if !single_tile {
            g.push(n_pad.to_string());
        }
        g
    };
    let signature = {
        let mut h = DefaultHasher::new();
        key.hash(&mut h);
        h.finish()
    };
    // This launch's launcher, handed to `$finish` as `$l` (the two kernels' launcher types differ).
    macro_rules! with_launcher {
        (|$l:ident| $finish:expr) => {{
            let (xt, mut yt) = tensors();
            let (g, o) = (generics(), options.clone());
            let tiles = (&mut yt).partition(tile.map(|t| t as usize));
            match kernel {
                Kernel::Tile => {
                    let $l = softmax_kernels::softmax_row_tile(tiles, &xt).generics(g).compile_options(o);
                    $finish
                }
                Kernel::Gather => {
                    let $l = softmax_kernels::softmax_row_gather(tiles, &xt, x.strides[0]).generics(g).compile_options(o);
                    $finish
                }
                Kernel::Loop => {
                    let $l = softmax_kernels::softmax_row_loop(tiles, &xt).generics(g).compile_options(o);
                    $finish
                }
                Kernel::TileExact => {
                    let $l = softmax_kernels::softmax_row_tile_exact(tiles, &xt).generics(g).compile_options(o);
                    $finish
                }
                Kernel::LoopExact => {
                    let $l = softmax_kernels::softmax_row_loop_exact(tiles, &xt).generics(g).compile_options(o);
                    $finish
                }
                Kernel::LoopGather => {
                    let $l =
                        softmax_kernels::softmax_row_loop_gather(tiles, &xt, x.strides[0]).generics(g).compile_options(o);
                    $finish
                }
            }
        }};
    }
    let resolve = |s: &Arc<cuda_core::Stream>| with_launcher!(|l| l.specialize_on(s).map(|spec| spec.into_l1_cache_key()));
    // SAFETY (async_on): completion is ordered by the caller's stream, as for any torch op.
    let run = || with_launcher!(|l| unsafe { l.async_on(stream) }.map(|_| ()));
    let resolved = warm_start::launch(ctx, stream, signature, kernel.name(), resolve, run)
        .map_err(|e| runtime::launch_error("softmax", e))?;
    if let Some(cutile_key) = resolved {
        // The grid as cutile derives it from y's partition, and its arguments in its order.
        let (_, mut yt) = tensors();
        let grid = KernelOutputStored::<T>::grid(&(&mut yt).partition(tile.map(|t| t as usize)))
            .map_err(|e| OpError::invalid(format!("softmax launch grid: {e}")))?;
        let mut args = replay::Args::default().partition(0, &y.shape, &y.strides, &tile).tensor(1, &x.shape, &x.strides);
        if kernel.takes_row_stride() {
            args = args.scalar(x.strides[0]);
        }
        replay::record(key, &cutile_key, grid, args);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(dtype: DType, m: i32, n: i32, row_stride: i32) -> CheckedTensor {
        CheckedTensor { ptr: 0x1000, dtype, shape: vec![m, n], strides: vec![row_stride, 1] }
    }

    #[test]
    fn whole_tile_rows_take_the_exact_kernels() {
        let pick = |dtype, m, n, stride, block_n| Kernel::for_view(&view(dtype, m, n, stride), block_n);
        assert_eq!(pick(DType::F32, 8, 4096, 4096, 4096), Kernel::TileExact);
        assert_eq!(pick(DType::F32, 8, 4095, 4095, 4096), Kernel::Tile);
        assert_eq!(pick(DType::F32, 8, 1, 1, 1), Kernel::TileExact);
        assert_eq!(pick(DType::F32, 8, 65536, 65536, 16384), Kernel::LoopExact);
        assert_eq!(pick(DType::F32, 8, 65535, 65535, 16384), Kernel::Loop);
        // A strided view of whole tiles: exact, whatever its row stride.
        assert_eq!(pick(DType::BF16, 8, 1024, 3000, 1024), Kernel::TileExact);
        // 2-byte rows that are not whole vectors stay with the gathers.
        assert_eq!(pick(DType::BF16, 8, 1024, 1025, 1024), Kernel::Gather);
        assert_eq!(pick(DType::F16, 8, 4, 4, 4), Kernel::Gather);
        assert_eq!(pick(DType::BF16, 8, 16384, 16385, 8192), Kernel::LoopGather);
        assert_eq!(pick(DType::BF16, 8, 16384, 16384, 8192), Kernel::LoopExact);
    }
}
