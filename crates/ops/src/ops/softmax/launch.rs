//! Host side of softmax: validates the views, picks the row kernel and
//! enqueues it on the caller's stream (crate::launch) without waiting for it.

use super::kernel::softmax_kernels;
use crate::abi::{CheckedTensor, DType, OpError, OpResult};
use crate::launch::{self, FirstLaunch, Generic, Launch, Param};
use crate::spec::{check_block, check_shared_block, Hints, KernelModule};
use cutile::half::{bf16, f16};
use cutile::prelude::*;

// The C export's flat scalar parameters, passed straight through.
#[allow(clippy::too_many_arguments)]
pub fn softmax(
    x: &CheckedTensor,
    y: &CheckedTensor,
    block_m: i32,
    block_n: i32,
    occupancy: i32,
    warps: i32,
    cga: i32,
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
    let hints = Hints::checked(occupancy, warps)?.with_cga(cga)?;
    check_shared_block("block_n", block_n, hints.cga)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    // One CTA per row block: in the loop kernel y is cut into [block_m, n_pad]
    // slabs, n_pad the row length rounded up to whole tiles (one variant per n_pad).
    let n_pad = (n as i64 + block_n as i64 - 1) / block_n as i64 * block_n as i64;
    let n_pad = i32::try_from(n_pad)
        .map_err(|_| OpError::invalid(format!("row length {n} rounded up to tiles of {block_n} overflows i32")))?;
    let kernel = Kernel::for_view(x, block_n);
    let launch = describe(x, y, kernel, [block_m, block_n, n_pad], hints);
    launch::enqueue_launch("softmax", &launch, device, stream, |first| match x.dtype {
        DType::F32 => launch_first::<f32>(first, &launch, x, y, kernel),
        DType::F16 => launch_first::<f16>(first, &launch, x, y, kernel),
        DType::BF16 => launch_first::<bf16>(first, &launch, x, y, kernel),
    })
}

const KERNELS: KernelModule = KernelModule {
    name: "softmax_kernels",
    ast: softmax_kernels::__module_ast_self,
    source_hash: softmax_kernels::_SOURCE_HASH,
};

/// The launch: kernel, generics, hints, then the kernel's parameters in order (y's tiles
/// (the whole row, or `[block_m, n_pad]` slabs), x, and the gather kernels' row stride).
fn describe<'a>(x: &'a CheckedTensor, y: &'a CheckedTensor, kernel: Kernel, [block_m, block_n, n_pad]: [i32; 3], hints: Hints) -> Launch<'a> {
    let mut generics = Generic::list(&[x.dtype], &[block_m, block_n]);
    let tile = if kernel.single_tile() { vec![block_m, block_n] } else { vec![block_m, n_pad] };
    if !kernel.single_tile() {
        generics.push(Generic::Int(n_pad));
    }
    let mut params = vec![Param::Out("y", y, tile), Param::In("x", x)];
    if kernel.takes_row_stride() {
        params.push(Param::Int("x_row_stride", x.strides[0]));
    }
    Launch { module: KERNELS, kernel: kernel.name(), generics, hints, params }
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

/// cutile's typed launch of one variant, as `launch` describes it.
fn launch_first<T: cutile::DType>(first: &FirstLaunch, launch: &Launch, x: &CheckedTensor, y: &CheckedTensor, kernel: Kernel) -> OpResult<()> {
    // SAFETY: torch owns both allocations and keeps them alive while the work
    // it ordered on the stream runs; y is a fresh output nobody else writes.
    let tensors = || unsafe { (first.borrow::<T>(x), first.borrow::<T>(y)) };
    let tile = || launch.tile::<2>("y");
    let stride = || launch.int("x_row_stride");
    match kernel {
        Kernel::Tile => crate::typed_launch!(first, { let (xt, mut yt) = tensors(); }
            softmax_kernels::softmax_row_tile((&mut yt).partition(tile()), &xt)),
        Kernel::Gather => crate::typed_launch!(first, { let (xt, mut yt) = tensors(); }
            softmax_kernels::softmax_row_gather((&mut yt).partition(tile()), &xt, stride())),
        Kernel::Loop => crate::typed_launch!(first, { let (xt, mut yt) = tensors(); }
            softmax_kernels::softmax_row_loop((&mut yt).partition(tile()), &xt)),
        Kernel::TileExact => crate::typed_launch!(first, { let (xt, mut yt) = tensors(); }
            softmax_kernels::softmax_row_tile_exact((&mut yt).partition(tile()), &xt)),
        Kernel::LoopExact => crate::typed_launch!(first, { let (xt, mut yt) = tensors(); }
            softmax_kernels::softmax_row_loop_exact((&mut yt).partition(tile()), &xt)),
        Kernel::LoopGather => crate::typed_launch!(first, { let (xt, mut yt) = tensors(); }
            softmax_kernels::softmax_row_loop_gather((&mut yt).partition(tile()), &xt, stride())),
    }
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

    #[test]
    fn every_kernel_is_described_as_its_signature_reads() {
        let hints = Hints::checked(0, 0).unwrap();
        let cases = [(DType::F32, 4096, 4096, 4096), (DType::F32, 4095, 4095, 4096), (DType::F32, 65535, 65535, 16384), (DType::F32, 65536, 65536, 16384)];
        let gathers = [(DType::BF16, 1024, 1025, 1024), (DType::BF16, 16384, 16385, 8192)];
        for (dtype, n, stride, block_n) in cases.into_iter().chain(gathers) {
            let (x, y) = (view(dtype, 8, n, stride), view(dtype, 8, n, n));
            let kernel = Kernel::for_view(&x, block_n);
            let n_pad = (n + block_n - 1) / block_n * block_n;
            crate::launch::signature::assert_matches_kernel(&describe(&x, &y, kernel, [1, block_n, n_pad], hints));
        }
    }
}
