//! Host side of matmul: checks the views and enqueues the GEMM kernel on the caller's
//! stream (crate::launch) without waiting for it.

use super::kernel::matmul_kernels;
use crate::abi::{CheckedTensor, DType, OpError, OpResult};
use crate::launch::{self, FirstLaunch, Generic, Launch, Param};
use crate::spec::{check_block, Hints, KernelModule};
use cutile::half::{bf16, f16};
use cutile::prelude::*;

/// A config's tiling: `[block_m, block_n]` output tiles, K in `block_k` steps; with
/// `group_m` > 0, `ctas` persistent CTAs walk the tiles `group_m` row blocks at a time.
#[derive(Clone, Copy, Debug)]
pub struct Tiles {
    pub block_m: i32,
    pub block_n: i32,
    pub block_k: i32,
    pub group_m: i32,
    pub ctas: i32,
}

/// Whether a `[rows, cols]` matrix with these strides is row- or column-major (either
/// extent 1 makes its stride irrelevant).
fn row_or_column_major(rows: i32, cols: i32, strides: &[i32]) -> bool {
    cols <= 1 || rows <= 1 || strides[1] == 1 || strides[0] == 1
}

fn check_views(c: &CheckedTensor, a: &CheckedTensor, b: &CheckedTensor, tf32: bool) -> OpResult<[i32; 4]> {
    for (name, t) in [("c", c), ("a", a), ("b", b)] {
        if t.shape.len() != 3 {
            return Err(OpError::invalid(format!("matmul takes 3-D [batch, rows, cols] views; {name} has {} dims", t.shape.len())));
        }
        if t.dtype != c.dtype {
            return Err(OpError::invalid(format!("{name} dtype {:?} differs from c dtype {:?}", t.dtype, c.dtype)));
        }
    }
    let [batch, m, k] = [a.shape[0], a.shape[1], a.shape[2]];
    let n = b.shape[2];
    if b.shape[0] != batch || b.shape[1] != k {
        return Err(OpError::invalid(format!("a {:?} and b {:?} do not chain: b must be [{batch}, {k}, N]", a.shape, b.shape)));
    }
    if c.shape != [batch, m, n] {
        return Err(OpError::invalid(format!("c shape {:?} must be [{batch}, {m}, {n}]", c.shape)));
    }
    if !c.is_contiguous() {
        return Err(OpError::invalid(format!("c must be contiguous, got strides {:?}", c.strides)));
    }
    for (name, t) in [("a", a), ("b", b)] {
        if !row_or_column_major(t.shape[1], t.shape[2], &t.strides[1..]) {
            return Err(OpError::invalid(format!(
                "{name} must be row- or column-major within each batch entry, got strides {:?}; copy it first",
                t.strides
            )));
        }
    }
    if tf32 && c.dtype != DType::F32 {
        return Err(OpError::invalid(format!("tf32 applies to float32 operands, not {:?}", c.dtype)));
    }
    if k == 0 && m > 0 && n > 0 && batch > 0 {
        return Err(OpError::invalid("K = 0: the product is all zeros; fill c with zeros instead of launching"));
    }
    Ok([batch, m, n, k])
}

// The C export's flat scalar parameters, passed straight through.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    c: &CheckedTensor,
    a: &CheckedTensor,
    b: &CheckedTensor,
    tf32: bool,
    tiles: Tiles,
    hints: Hints,
    device: i32,
    stream: u64,
) -> OpResult<()> {
    let [batch, m, n, _] = check_views(c, a, b, tf32)?;
    check_block("block_m", tiles.block_m)?;
    check_block("block_n", tiles.block_n)?;
    check_block("block_k", tiles.block_k)?;
    if tiles.group_m < 0 || tiles.group_m > 0 && tiles.ctas < 1 {
        return Err(OpError::invalid(format!(
            "group_m = {}, ctas = {}: group_m is 0 (one CTA per tile) or positive with ctas >= 1",
            tiles.group_m, tiles.ctas
        )));
    }
    if batch == 0 || m == 0 || n == 0 {
        return Ok(());
    }
    let blocks = |extent: i32, block: i32| (i64::from(extent) + i64::from(block) - 1) / i64::from(block);
    let tile_count = i64::from(batch) * blocks(m, tiles.block_m) * blocks(n, tiles.block_n);
    let (tiles, hints) = persistent_launch(tiles, hints, tile_count);
    let kernel = match (tf32, tiles.group_m > 0) {
        (false, false) => "gemm",
        (true, false) => "gemm_tf32",
        (false, true) => "gemm_persistent",
        (true, true) => "gemm_tf32_persistent",
    };
    let launch = describe([c, a, b], kernel, tiles, hints);
    launch::enqueue_launch("matmul", &launch, device, stream, |first| match c.dtype {
        DType::F32 => launch_first::<f32>(first, &launch, [c, a, b]),
        DType::F16 => launch_first::<f16>(first, &launch, [c, a, b]),
        DType::BF16 => launch_first::<bf16>(first, &launch, [c, a, b]),
    })
}

/// The launch of `kernel`: c's `[1, block_m, block_n]` tiles (mapped over `ctas` CTAs for the
/// persistent kernels, whose map is a generic), a, b.
fn describe<'a>([c, a, b]: [&'a CheckedTensor; 3], kernel: &'static str, tiles: Tiles, hints: Hints) -> Launch<'a> {
    let mut generics = Generic::list(&[c.dtype], &[tiles.block_m, tiles.block_n, tiles.block_k]);
    let tile = vec![1, tiles.block_m, tiles.block_n];
    let out = if tiles.group_m > 0 {
        let map = persistent_map(tiles);
        generics.extend(map.map(Generic::Int));
        Param::Mapped("c", c, tile, map, tiles.ctas)
    } else {
        Param::Out("c", c, tile)
    };
    Launch { module: KERNELS, kernel, generics, hints, params: vec![out, Param::In("a", a), Param::In("b", b)] }
}

const KERNELS: KernelModule = KernelModule {
    name: "matmul_kernels",
    ast: matmul_kernels::__module_ast_self,
    source_hash: matmul_kernels::_SOURCE_HASH,
};

/// The persistent kernel's CTA count and hints for `tile_count` output tiles: no more CTAs
/// than tiles (the rest would have nothing to do; cutile refuses them), and with clusters,
/// whole clusters only: a multiple of `cga`, or no cluster hint when fewer CTAs than one
/// cluster remain.
fn persistent_launch(tiles: Tiles, hints: Hints, tile_count: i64) -> (Tiles, Hints) {
    let ctas = i64::from(tiles.ctas).min(tile_count) as i32;
    if tiles.group_m == 0 || hints.cga <= 1 {
        return (Tiles { ctas, ..tiles }, hints);
    }
    if ctas < hints.cga {
        return (Tiles { ctas, ..tiles }, Hints { cga: 0, ..hints });
    }
    (Tiles { ctas: ctas - ctas % hints.cga, ..tiles }, hints)
}

/// The persistent kernels' map: group_m row blocks of one column, batch entries one by one.
fn persistent_map(tiles: Tiles) -> [i32; 3] {
    [1, tiles.group_m.max(1), 1]
}

/// cutile's typed launch of the described kernel for element type `T` (f32 operands take
/// `gemm_tf32` or `gemm`, as the launch names).
fn launch_first<T: cutile::DType>(first: &FirstLaunch, launch: &Launch, [c, a, b]: [&CheckedTensor; 3]) -> OpResult<()> {
    // SAFETY: torch owns the allocations and keeps them alive while the work it
    // ordered on the stream runs; c is an output nobody else writes meanwhile.
    let tensor = |t: &CheckedTensor| unsafe { first.borrow::<T>(t) };
    let tile = || launch.tile::<3>("c");
    let mapping = || launch.mapping("c");
    match launch.kernel {
        "gemm" => crate::typed_launch!(first, { let (mut ct, at, bt) = (tensor(c), tensor(a), tensor(b)); }
            matmul_kernels::gemm((&mut ct).partition(tile()), &at, &bt)),
        "gemm_tf32" => crate::typed_launch!(first, { let (mut ct, at, bt) = (tensor(c), tensor(a), tensor(b)); }
            matmul_kernels::gemm_tf32((&mut ct).partition(tile()), &at, &bt)),
        "gemm_persistent" => crate::typed_launch!(first, { let (mut ct, at, bt) = (tensor(c), tensor(a), tensor(b)); }
            matmul_kernels::gemm_persistent((&mut ct).partition(tile()).map(mapping().0, mapping().1), &at, &bt)),
        "gemm_tf32_persistent" => crate::typed_launch!(first, { let (mut ct, at, bt) = (tensor(c), tensor(a), tensor(b)); }
            matmul_kernels::gemm_tf32_persistent((&mut ct).partition(tile()).map(mapping().0, mapping().1), &at, &bt)),
        other => Err(OpError::invalid(format!("matmul has no kernel {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(dtype: DType, shape: [i32; 3], strides: [i32; 3]) -> CheckedTensor {
        CheckedTensor { ptr: 0x1000, dtype, shape: shape.to_vec(), strides: strides.to_vec() }
    }

    #[test]
    fn a_persistent_cluster_launch_takes_whole_clusters() {
        let tiles = |ctas, group_m| Tiles { block_m: 128, block_n: 256, block_k: 64, group_m, ctas };
        let clusters = Hints::checked(0, 0).unwrap().with_cga(2).unwrap();
        let launch = |ctas, group_m, tile_count| {
            let (t, h) = persistent_launch(tiles(ctas, group_m), clusters, tile_count);
            (t.ctas, h.cga)
        };
        assert_eq!(launch(132, 8, 512), (132, 2)); // a full GPU of CTAs
        assert_eq!(launch(132, 8, 55), (54, 2)); // fewer tiles than SMs: whole clusters of them
        assert_eq!(launch(132, 8, 3), (2, 2));
        assert_eq!(launch(132, 8, 1), (1, 0)); // less than one cluster: no cluster hint
        assert_eq!(launch(132, 0, 55), (55, 2)); // one CTA per tile: the grid is the tiles'
        let plain = persistent_launch(tiles(132, 8), Hints::checked(0, 0).unwrap(), 55);
        assert_eq!((plain.0.ctas, plain.1.cga), (55, 0));
    }

    #[test]
    fn row_and_column_major_operands_pass_others_are_refused() {
        let c = view(DType::BF16, [2, 4, 8], [32, 8, 1]);
        let row_a = view(DType::BF16, [2, 4, 6], [24, 6, 1]);
        let col_a = view(DType::BF16, [2, 4, 6], [24, 1, 4]);
        let col_b = view(DType::BF16, [2, 6, 8], [48, 1, 6]);
        assert_eq!(check_views(&c, &row_a, &col_b, false).unwrap(), [2, 4, 8, 6]);
        assert!(check_views(&c, &col_a, &col_b, false).is_ok());
        let strided = view(DType::BF16, [2, 4, 6], [48, 12, 2]);
        assert!(check_views(&c, &strided, &col_b, false).unwrap_err().message.contains("row- or column-major"));
        let wrong_k = view(DType::BF16, [2, 5, 8], [40, 8, 1]);
        assert!(check_views(&c, &row_a, &wrong_k, false).unwrap_err().message.contains("do not chain"));
        let strided_c = view(DType::BF16, [2, 4, 8], [64, 16, 1]);
        assert!(check_views(&strided_c, &row_a, &col_b, false).unwrap_err().message.contains("contiguous"));
        assert!(check_views(&c, &row_a, &col_b, true).unwrap_err().message.contains("tf32"));
        let empty_k = view(DType::BF16, [2, 4, 0], [0, 0, 1]);
        let empty_b = view(DType::BF16, [2, 0, 8], [0, 8, 1]);
        assert!(check_views(&c, &empty_k, &empty_b, false).unwrap_err().message.contains("K = 0"));
    }

    #[test]
    fn every_kernel_is_described_as_its_signature_reads() {
        let (c, a, b) = (view(DType::F32, [1, 64, 64], [4096, 64, 1]), view(DType::F32, [1, 64, 32], [2048, 32, 1]), view(DType::F32, [1, 32, 64], [2048, 64, 1]));
        let hints = Hints::checked(0, 0).unwrap();
        for (kernel, group_m) in [("gemm", 0), ("gemm_tf32", 0), ("gemm_persistent", 8), ("gemm_tf32_persistent", 8)] {
            let tiles = Tiles { block_m: 64, block_n: 64, block_k: 32, group_m, ctas: 132 };
            let launch = describe([&c, &a, &b], kernel, tiles, hints);
            crate::launch::signature::assert_matches_kernel(&launch);
            // Every launch is recorded for replay, a persistent one over its CTAs (here as given, uncapped).
            assert!(launch.args().is_some(), "{kernel}");
            assert_eq!(launch.grid().unwrap(), if group_m > 0 { (132, 1, 1) } else { (1, 1, 1) }, "{kernel}");
        }
    }
}
