//! Host side of softmax: validates the views, picks the row kernel and
//! enqueues it on the caller's stream (crate::launch) without waiting for it.

use super::kernel::softmax_kernels;
use crate::abi::{CheckedTensor, DType, OpError, OpResult};
use crate::launch::{self, FirstLaunch, Key};
use crate::replay::{Args, Value};
use crate::spec::{check_block, Hints, KernelModule, KernelSpec};
use cutile::half::{bf16, f16};
use cutile::prelude::*;
use cutile::tensor::KernelOutputStored;

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
    check_block("block_m", block_m)?;
    check_block("block_n", block_n)?;
    let hints = Hints::checked(occupancy, warps)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    // One CTA per row block: in the loop kernel y is cut into [block_m, n_pad]
    // slabs, n_pad the row length rounded up to whole tiles (one variant per n_pad).
    let n_pad = (n as i64 + block_n as i64 - 1) / block_n as i64 * block_n as i64;
    let n_pad = i32::try_from(n_pad)
        .map_err(|_| OpError::invalid(format!("row length {n} rounded up to tiles of {block_n} overflows i32")))?;
    let kernel = Kernel::for_view(x, block_n);
    let key = Key::new(KERNELS.name, kernel.name(), device).with(block_m).with(block_n).with(n_pad).hints(hints).tensor(x).tensor(y);
    let values = [Value::Ptr(y.ptr), Value::Ptr(x.ptr)];
    let tiles = [block_m, block_n, n_pad];
    let spec = || spec(x, y, kernel, tiles, hints);
    launch::enqueue("softmax", key, device, stream, &values, spec, |first| match x.dtype {
        DType::F32 => launch_first::<f32>(first, x, y, kernel, tiles),
        DType::F16 => launch_first::<f16>(first, x, y, kernel, tiles),
        DType::BF16 => launch_first::<bf16>(first, x, y, kernel, tiles),
    })
}

const KERNELS: KernelModule = KernelModule {
    name: "softmax_kernels",
    ast: softmax_kernels::__module_ast_self,
    source_hash: softmax_kernels::_SOURCE_HASH,
};

/// The launch as cutile specializes it: kernel, generics, hints, then the kernel's
/// parameters in order (y's tiles, x, and the gather kernels' row stride).
fn spec(x: &CheckedTensor, y: &CheckedTensor, kernel: Kernel, [block_m, block_n, n_pad]: [i32; 3], hints: Hints) -> KernelSpec {
    let mut generics = vec![x.dtype.jit_name().to_string(), block_m.to_string(), block_n.to_string()];
    if !kernel.single_tile() {
        generics.push(n_pad.to_string());
    }
    let spec = KernelSpec::new(KERNELS, kernel.name(), generics, hints).tensor("y", y).tensor("x", x);
    if kernel.takes_row_stride() {
        spec.int("x_row_stride", x.strides[0])
    } else {
        spec
    }
}

/// The kernel family a softmax row takes, which decides both the kernel (with
/// the config's `block_n`, [`Kernel::for_view`]) and which of the heuristic's
/// tables Python looks its config up in (`cutile_softmax_row_family`; its values are
/// ffi.rs's `CUTILE_SOFTMAX_ROWS_*`, checked there at compile time).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(i32)]
pub enum RowFamily {
    /// Rows of any length through partition views.
    Plain = 0,
    /// Rows of a power-of-two length: every power-of-two tile is a whole tile, so
    /// the exact-width kernels (no column bounds checks) take them.
    Exact = 1,
    /// 2-byte rows that are not whole 16-byte vectors (N or the row stride not a
    /// multiple of 8): the masked-gather kernels (kernel.rs says why).
    Gather = 2,
}

impl RowFamily {
    pub fn of(dtype: DType, m: i32, n: i32, row_stride: i32) -> Self {
        let two_byte = matches!(dtype, DType::F16 | DType::BF16);
        if two_byte && (n % 8 != 0 || (m > 1 && row_stride % 8 != 0)) {
            Self::Gather
        } else if n > 0 && n & (n - 1) == 0 {
            Self::Exact
        } else {
            Self::Plain
        }
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
        let gather = RowFamily::of(x.dtype, m, n, x.strides[0]) == RowFamily::Gather;
        // Whole tiles only: the exact kernels type x's row length as a constant
        // (every row of the Exact family, and any row that block_n divides).
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
fn launch_first<T: cutile::DType>(
    first: &FirstLaunch,
    x: &CheckedTensor,
    y: &CheckedTensor,
    kernel: Kernel,
    [block_m, block_n, n_pad]: [i32; 3],
) -> OpResult<()> {
    // SAFETY: torch owns both allocations and keeps them alive while the work
    // it ordered on the stream runs; y is a fresh output nobody else writes.
    let tensors = || unsafe { (first.borrow::<T>(x), first.borrow::<T>(y)) };
    let single_tile = kernel.single_tile();
    let tile = if single_tile { [block_m, block_n] } else { [block_m, n_pad] };
    // This launch's launcher, handed to `$finish` as `$l` (the kernels' launcher types differ).
    macro_rules! with_launcher {
        (|$l:ident| $finish:expr) => {{
            let (xt, mut yt) = tensors();
            let (g, o) = (first.spec().generics(), first.spec().options());
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
    first.run(
        |s| with_launcher!(|l| l.specialize_on(s).map(|spec| spec.into_l1_cache_key())),
        // SAFETY (async_on): completion is ordered by the caller's stream, as for any torch op.
        || with_launcher!(|l| unsafe { l.async_on(&first.stream) }.map(|_| ())),
        || {
            // The grid as cutile derives it from y's partition, and its arguments in its order.
            let (_, mut yt) = tensors();
            let grid = KernelOutputStored::<T>::grid(&(&mut yt).partition(tile.map(|t| t as usize)))
                .map_err(|e| OpError::invalid(format!("softmax launch grid: {e}")))?;
            let mut args = Args::default().partition(0, &y.shape, &y.strides, &tile).tensor(1, &x.shape, &x.strides);
            if kernel.takes_row_stride() {
                args = args.scalar(x.strides[0]);
            }
            Ok(Some((grid, args)))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(dtype: DType, m: i32, n: i32, row_stride: i32) -> CheckedTensor {
        CheckedTensor { ptr: 0x1000, dtype, shape: vec![m, n], strides: vec![row_stride, 1] }
    }

    #[test]
    fn row_families() {
        assert_eq!(RowFamily::of(DType::F32, 8, 4096, 4096), RowFamily::Exact);
        assert_eq!(RowFamily::of(DType::F32, 8, 4095, 4095), RowFamily::Plain);
        assert_eq!(RowFamily::of(DType::F32, 8, 4095, 4097), RowFamily::Plain); // float32 never gathers
        assert_eq!(RowFamily::of(DType::BF16, 8, 50257, 50257), RowFamily::Gather);
        assert_eq!(RowFamily::of(DType::BF16, 8, 1024, 1025), RowFamily::Gather); // odd row stride
        assert_eq!(RowFamily::of(DType::BF16, 1, 1024, 1025), RowFamily::Exact); // one row: its stride is unused
        assert_eq!(RowFamily::of(DType::F16, 8, 24, 24), RowFamily::Plain);
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
