//! The SwiGLU device kernels: one CTA per `[BM, BN]` tile of the output. Inputs
//! are read through partition views (any row stride, unit column stride) with raw
//! loads that declare which axes are in bounds: RX (CX) is 1 where BM divides the
//! rows (BN the columns), so every tile is whole along that axis. An unproven axis
//! keeps its mask, its lanes past the edge undefined and dropped by the output
//! partition. With both proven tileiras issues a CTA's loads back to back; with a
//! masked axis it wraps each load in a bounds branch with the conversion inside, so
//! the loads go to memory one after another (docs/benchmarks.md, "swiglu").
//! Math is float32: sigmoid(a) = 1 / (1 + exp2(-a * log2(e))), exp2 flushing
//! subnormal results (as in softmax: ptxas otherwise wraps MUFU.EX2 in a range
//! test), the reciprocal cutile's approximate divide (MUFU.RCP).
//!
//! The backward writes both gradients of a tile with one store: its output is an
//! `[M, 2, H]` view (index 0 of the middle dim da, 1 db), tiled `[BM, 2, BN]`, so
//! the row blocks stay on the grid's x axis (y and z stop at 65535). For
//! silu_and_mul it is dx `[M, 2H]` itself seen as `[M, 2, H]`, written once, in
//! place; for swiglu a fresh `[2, M, H]` buffer seen so (strides `[H, M*H, 1]`),
//! whose two planes are da and db.

#[cutile::module]
pub mod swiglu_kernels {
    use cutile::core::*;

    /// y = silu(a) * b for this CTA's `[BM, BN]` tile.
    #[cutile::entry()]
    fn swiglu_forward<E: ElementType, const BM: i32, const BN: i32, const RX: i32, const CX: i32>(
        y: &mut Tensor<E, { [BM, BN] }>,
        a: &Tensor<E, { [-1, -1] }>,
        b: &Tensor<E, { [-1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let a: Tile<f32, { [BM, BN] }> = load_block::<E, BM, BN, RX, CX>(a, pid.0, pid.1);
        let b: Tile<f32, { [BM, BN] }> = load_block::<E, BM, BN, RX, CX>(b, pid.0, pid.1);
        let out: Tile<E, { [BM, BN] }> = convert_tile(a * sigmoid::<BM, BN>(a) * b);
        let mut yp = y.partition_mut(shape![BM, BN]);
        // SAFETY: y is this CTA's [BM, BN] tile, so [0, 0] is its only partition index.
        unsafe { store_view_tko_mut(&mut yp, out, [0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
    }

    /// da = dy * b * s * (1 + a * (1 - s)) and db = dy * a * s, s = sigmoid(a), for
    /// this CTA's tile; `dg[:, 0]` takes da, `dg[:, 1]` db. One read of dy, a and b.
    #[cutile::entry()]
    fn swiglu_backward<E: ElementType, const BM: i32, const BN: i32, const RX: i32, const CX: i32>(
        dg: &mut Tensor<E, { [BM, 2, BN] }>,
        dy: &Tensor<E, { [-1, -1] }>,
        a: &Tensor<E, { [-1, -1] }>,
        b: &Tensor<E, { [-1, -1] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let dy: Tile<f32, { [BM, BN] }> = load_block::<E, BM, BN, RX, CX>(dy, pid.0, pid.2);
        let a: Tile<f32, { [BM, BN] }> = load_block::<E, BM, BN, RX, CX>(a, pid.0, pid.2);
        let b: Tile<f32, { [BM, BN] }> = load_block::<E, BM, BN, RX, CX>(b, pid.0, pid.2);
        let one: Tile<f32, { [BM, BN] }> = constant(1.0f32, shape![BM, BN]);
        let s: Tile<f32, { [BM, BN] }> = sigmoid::<BM, BN>(a);
        let dys: Tile<f32, { [BM, BN] }> = dy * s;
        let da: Tile<f32, { [BM, BN] }> = dys * b * (one + a * (one - s));
        let db: Tile<f32, { [BM, BN] }> = dys * a;
        let da: Tile<E, { [BM, 1, BN] }> = convert_tile(da.reshape(shape![BM, 1, BN]));
        let db: Tile<E, { [BM, 1, BN] }> = convert_tile(db.reshape(shape![BM, 1, BN]));
        let out: Tile<E, { [BM, 2, BN] }> = cat(da, db, 1i32);
        let mut gp = dg.partition_mut(shape![BM, 2, BN]);
        // SAFETY: dg is this CTA's [BM, 2, BN] tile, so [0, 0, 0] is its only partition index.
        unsafe {
            store_view_tko_mut(&mut gp, out, [0i32, 0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled)
        };
    }

    /// Tile (`row_block`, `col_block`) of x as float32; lanes past an unproven edge undefined.
    fn load_block<E: ElementType, const BM: i32, const BN: i32, const RX: i32, const CX: i32>(
        x: &Tensor<E, { [-1, -1] }>,
        row_block: i32,
        col_block: i32,
    ) -> Tile<f32, { [BM, BN] }> {
        let xp: Partition<E, { [BM, BN] }> =
            unsafe { make_partition_view(x, shape![BM, BN], padding::None, dim_map::Identity, x.token()) };
        // SAFETY: the grid is the output's tiles, whose shape x shares (launch.rs checks it), so
        // the block indices are in range; RX (CX) is 1 only where BM (BN) divides x's rows (columns).
        let (raw, _): (Tile<E, { [BM, BN] }>, Token) = unsafe {
            load_view_raw(&xp, [row_block, col_block], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [RX == 1i32, CX == 1i32], shape![BM, BN])
        };
        convert_tile(raw)
    }

    /// 1 / (1 + e^-a). For a -> -inf, e^-a overflows to inf and s is 0, as in torch.
    fn sigmoid<const BM: i32, const BN: i32>(a: Tile<f32, { [BM, BN] }>) -> Tile<f32, { [BM, BN] }> {
        let neg_log2e: Tile<f32, { [BM, BN] }> = constant(-1.4426950408889634f32, shape![BM, BN]);
        let one: Tile<f32, { [BM, BN] }> = constant(1.0f32, shape![BM, BN]);
        let e: Tile<f32, { [BM, BN] }> = exp2(a * neg_log2e, ftz::Enabled);
        true_div(one, one + e)
    }
}
