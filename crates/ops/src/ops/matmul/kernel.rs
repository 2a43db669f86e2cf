//! The GEMM device kernels: one CTA per `[BM, BN]` tile of one batch entry's output.
//! The CTA walks K in `BK` steps, each an mma of an `[BM, BK]` tile of a and a
//! `[BK, BN]` tile of b into a float32 accumulator. Operands are read through
//! partition views of the caller's strides (row-major, column-major, any leading
//! stride), padded with zeros, so K need not be a multiple of BK and the edge tiles
//! of M and N are partial (the output partition drops what falls outside c).
//!
//! float16 and bfloat16 operands go to the tensor cores as they are. float32 ones
//! take `gemm` (float32 mma: full precision) or `gemm_tf32` (rounded to TF32 first,
//! the tensor cores' fast path), as torch.backends.cuda.matmul.allow_tf32 says.
//!
//! The persistent variants launch a fixed number of CTAs (the host picks about the
//! GPU's resident capacity) that walk the output tiles in grouped order: cutile's mapped
//! partitions (`MappedPartitionMut`, `iter_indices`), whose map shape `[1, GROUP, 1]`
//! takes GROUP row blocks of a column before the next column, so the b tiles a group
//! shares are read while they are in L2.

#[cutile::module]
pub mod matmul_kernels {
    use cutile::core::*;

    /// c[batch] tile (pid.1, pid.2) = a[batch] · b[batch], batch = pid.0.
    #[cutile::entry()]
    fn gemm<E: ElementType, const BM: i32, const BN: i32, const BK: i32>(
        c: &mut Tensor<E, { [1, BM, BN] }>,
        a: &Tensor<E, { [-1, -1, -1] }>,
        b: &Tensor<E, { [-1, -1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let (pa, pb) = (operand::<E, 1, BM, BK>(a), operand::<E, 1, BK, BN>(b));
        store_tile(c, product::<E, BM, BN, BK>(&pa, &pb, pid.0, pid.1, pid.2));
    }

    /// `gemm` for float32 operands (E is f32; the host launches nothing else) rounded
    /// to TF32 on the tensor cores, float32 accumulation.
    #[cutile::entry()]
    fn gemm_tf32<E: ElementType, const BM: i32, const BN: i32, const BK: i32>(
        c: &mut Tensor<E, { [1, BM, BN] }>,
        a: &Tensor<E, { [-1, -1, -1] }>,
        b: &Tensor<E, { [-1, -1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let (pa, pb) = (operand::<E, 1, BM, BK>(a), operand::<E, 1, BK, BN>(b));
        store_tile(c, product_tf32::<E, BM, BN, BK>(&pa, &pb, pid.0, pid.1, pid.2));
    }

    /// `gemm` as a persistent kernel: each CTA takes output tiles from the mapped
    /// partition's grouped stream until none is left.
    #[cutile::entry()]
    fn gemm_persistent<E: ElementType, const BM: i32, const BN: i32, const BK: i32, const MAP: [i32; 3]>(
        mut c: MappedPartitionMut<E, { [1, BM, BN] }, MAP>,
        a: &Tensor<E, { [-1, -1, -1] }>,
        b: &Tensor<E, { [-1, -1, -1] }>,
    ) {
        let (pa, pb) = (operand::<E, 1, BM, BK>(a), operand::<E, 1, BK, BN>(b));
        for index in c.iter_indices() {
            let (batch, row, col) = index.components();
            let acc: Tile<f32, { [BM, BN] }> = product::<E, BM, BN, BK>(&pa, &pb, batch, row, col);
            let out: Tile<E, { [1, BM, BN] }> = convert_tile(acc.reshape(shape![1, BM, BN]));
            c.store(out, index);
        }
    }

    /// `gemm_tf32` as a persistent kernel, as `gemm_persistent`.
    #[cutile::entry()]
    fn gemm_tf32_persistent<E: ElementType, const BM: i32, const BN: i32, const BK: i32, const MAP: [i32; 3]>(
        mut c: MappedPartitionMut<E, { [1, BM, BN] }, MAP>,
        a: &Tensor<E, { [-1, -1, -1] }>,
        b: &Tensor<E, { [-1, -1, -1] }>,
    ) {
        let (pa, pb) = (operand::<E, 1, BM, BK>(a), operand::<E, 1, BK, BN>(b));
        for index in c.iter_indices() {
            let (batch, row, col) = index.components();
            let acc: Tile<f32, { [BM, BN] }> = product_tf32::<E, BM, BN, BK>(&pa, &pb, batch, row, col);
            let out: Tile<E, { [1, BM, BN] }> = convert_tile(acc.reshape(shape![1, BM, BN]));
            c.store(out, index);
        }
    }

    /// A batched operand's `[1, R, C]` tiles, zero past its edges (K need not divide).
    fn operand<E: ElementType, const B: i32, const R: i32, const C: i32>(x: &Tensor<E, { [-1, -1, -1] }>) -> Partition<E, { [B, R, C] }> {
        unsafe { make_partition_view(x, shape![B, R, C], padding::Zero, dim_map::Identity, x.token()) }
    }

    /// Output tile (`batch`, `row`, `col`): the sum over K of a's `[BM, BK]` tiles times b's `[BK, BN]` ones.
    fn product<E: ElementType, const BM: i32, const BN: i32, const BK: i32>(
        pa: &Partition<E, { [1, BM, BK] }>,
        pb: &Partition<E, { [1, BK, BN] }>,
        batch: i32,
        row: i32,
        col: i32,
    ) -> Tile<f32, { [BM, BN] }> {
        let steps: i32 = num_tiles(pa, 2);
        let mut acc: Tile<f32, { [BM, BN] }> = constant(0.0f32, shape![BM, BN]);
        for k in 0i32..steps {
            let ta: Tile<E, { [BM, BK] }> = pa.load([batch, row, k]).reshape(shape![BM, BK]);
            let tb: Tile<E, { [BK, BN] }> = pb.load([batch, k, col]).reshape(shape![BK, BN]);
            acc = mma(ta, tb, acc);
        }
        acc
    }

    /// `product` with the operand tiles rounded to TF32 first (E is f32).
    fn product_tf32<E: ElementType, const BM: i32, const BN: i32, const BK: i32>(
        pa: &Partition<E, { [1, BM, BK] }>,
        pb: &Partition<E, { [1, BK, BN] }>,
        batch: i32,
        row: i32,
        col: i32,
    ) -> Tile<f32, { [BM, BN] }> {
        let steps: i32 = num_tiles(pa, 2);
        let mut acc: Tile<f32, { [BM, BN] }> = constant(0.0f32, shape![BM, BN]);
        for k in 0i32..steps {
            let ta: Tile<E, { [BM, BK] }> = pa.load([batch, row, k]).reshape(shape![BM, BK]);
            let tb: Tile<E, { [BK, BN] }> = pb.load([batch, k, col]).reshape(shape![BK, BN]);
            let ta: Tile<tf32, { [BM, BK] }> = convert_tile(ta);
            let tb: Tile<tf32, { [BK, BN] }> = convert_tile(tb);
            acc = mma(ta, tb, acc);
        }
        acc
    }

    /// The accumulator, in c's type, into this CTA's `[1, BM, BN]` output tile.
    fn store_tile<E: ElementType, const BM: i32, const BN: i32>(c: &mut Tensor<E, { [1, BM, BN] }>, acc: Tile<f32, { [BM, BN] }>) {
        let out: Tile<E, { [1, BM, BN] }> = convert_tile(acc.reshape(shape![1, BM, BN]));
        let mut cp = c.partition_mut(shape![1, BM, BN]);
        // SAFETY: c is this CTA's [1, BM, BN] tile, so [0, 0, 0] is its only partition index.
        unsafe { store_view_tko_mut(&mut cp, out, [0i32, 0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
    }
}
