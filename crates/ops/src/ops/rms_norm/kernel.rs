//! The RMSNorm device kernels. A row is one tile (the host picks BN >= its length;
//! lanes past it load as zero and add nothing to the sum of squares), so each
//! element is read once and written once. Math is float32 whatever the storage
//! type, rounded once at the store: y = x * rstd * (w + offset), rstd =
//! 1 / sqrt(mean(x^2) + eps) (`offset` 1 is Gemma's `1 + weight`).
//!
//! The backward recomputes each row's rstd from the x it reads anyway (no [M] buffer
//! written by the forward and read back): dx = rstd * (g - xhat * mean(g * xhat)) with
//! g = dy * (w + offset) and xhat = x * rstd, and dw = sum over rows of dy * xhat.
//! dw is a reduction across rows: each CTA walks R rows (BM at a time), keeps its
//! partial sum in registers and writes it as one row of `dw_part`; `rms_norm_dw` then
//! sums those rows per column. Rows past M load as zero (x and dy) and take rstd 0
//! (with eps 0 a zero row's would be inf, and 0 * inf a NaN in dw), so they add nothing
//! to dw; their dx lands outside the tensor, where the store drops it.
//!
//! The row length N is a generic: x is `[-1, N]` and w `[N]`, so tileiras knows which lanes
//! of a tile lie past a row's end when it compiles the loads (as softmax's exact-width
//! kernels: with N a runtime value each 16-byte load sat in its own bounds-check branch).
//!
//! Stores go straight to global memory (`tma::Disabled`), as in softmax and swiglu.

#[cutile::module]
pub mod rms_norm_kernels {
    use cutile::core::*;

    /// y for this CTA's `[BM, BN]` rows of x.
    #[cutile::entry()]
    fn rms_norm_forward<E: ElementType, const BM: i32, const BN: i32, const N: i32>(
        y: &mut Tensor<E, { [BM, BN] }>,
        x: &Tensor<E, { [-1, N] }>,
        w: &Tensor<E, { [N] }>,
        eps: f32,
        offset: f32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let xp: Partition<E, { [BM, BN] }> =
            unsafe { make_partition_view(x, shape![BM, BN], padding::Zero, dim_map::Identity, x.token()) };
        let t: Tile<f32, { [BM, BN] }> = convert_tile(xp.load([pid.0, 0i32]));
        let r: Tile<f32, { [BM, BN] }> = row_rstd::<BM, BN>(t, N, eps);
        let wt: Tile<f32, { [BM, BN] }> = weight_rows::<E, BM, BN, N>(w, offset);
        let out: Tile<E, { [BM, BN] }> = convert_tile(t * r * wt);
        let mut yp = y.partition_mut(shape![BM, BN]);
        // SAFETY: y is this CTA's [BM, BN] tile, so [0, 0] is its only partition index.
        unsafe { store_view_tko_mut(&mut yp, out, [0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
    }

    /// dx for this CTA's R rows (BM at a time) and their part of dw, one row of `dw_part`.
    #[cutile::entry()]
    fn rms_norm_backward<E: ElementType, const BM: i32, const BN: i32, const N: i32, const R: i32>(
        dx: &mut Tensor<E, { [R, BN] }>,
        dw_part: &mut Tensor<f32, { [1, BN] }>,
        dy: &Tensor<E, { [-1, N] }>,
        x: &Tensor<E, { [-1, N] }>,
        w: &Tensor<E, { [N] }>,
        eps: f32,
        offset: f32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let xp: Partition<E, { [BM, BN] }> =
            unsafe { make_partition_view(x, shape![BM, BN], padding::Zero, dim_map::Identity, x.token()) };
        let dyp: Partition<E, { [BM, BN] }> =
            unsafe { make_partition_view(dy, shape![BM, BN], padding::Zero, dim_map::Identity, dy.token()) };
        let wt: Tile<f32, { [BM, BN] }> = weight_rows::<E, BM, BN, N>(w, offset);
        let m: i32 = get_shape_dim(x.shape(), 0i32);
        let n: i32 = N;
        let zero: Tile<f32, { [BM, BN] }> = constant(0.0f32, shape![BM, BN]);
        let n_t: Tile<f32, { [BM] }> = broadcast_scalar(convert_scalar::<f32>(n), shape![BM]);
        let mut dxp = dx.partition_mut(shape![BM, BN]);
        let mut acc: Tile<f32, { [BM, BN] }> = constant(0.0f32, shape![BM, BN]);
        let steps: i32 = R / BM;
        for i in 0i32..steps {
            let block: i32 = pid.0 * steps + i;
            let xt: Tile<f32, { [BM, BN] }> = convert_tile(xp.load([block, 0i32]));
            let dyt: Tile<f32, { [BM, BN] }> = convert_tile(dyp.load([block, 0i32]));
            let rows: Tile<i32, { [BM] }> = broadcast_scalar(block * BM, shape![BM]) + iota(shape![BM]);
            let row_ok: Tile<bool, { [BM, 1] }> = lt_tile(rows, broadcast_scalar(m, shape![BM])).reshape(shape![BM, 1]);
            let r: Tile<f32, { [BM, BN] }> = select(row_ok.broadcast(shape![BM, BN]), row_rstd::<BM, BN>(xt, n, eps), zero);
            let xhat: Tile<f32, { [BM, BN] }> = xt * r;
            let g: Tile<f32, { [BM, BN] }> = dyt * wt;
            let c: Tile<f32, { [BM] }> = true_div(reduce_sum(g * xhat, 1i32), n_t);
            let c: Tile<f32, { [BM, BN] }> = c.reshape(shape![BM, 1]).broadcast(shape![BM, BN]);
            let out: Tile<E, { [BM, BN] }> = convert_tile(r * (g - xhat * c));
            // SAFETY: i < R / BM, so [i, 0] is inside this CTA's [R, BN] tile.
            unsafe { store_view_tko_mut(&mut dxp, out, [i, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
            acc = acc + dyt * xhat;
        }
        let part: Tile<f32, { [BN] }> = reduce_sum(acc, 0i32);
        let part: Tile<f32, { [1, BN] }> = part.reshape(shape![1, BN]);
        let mut pp = dw_part.partition_mut(shape![1, BN]);
        // SAFETY: dw_part is this CTA's [1, BN] tile.
        unsafe { store_view_tko_mut(&mut pp, part, [0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
    }

    /// dw's `[BN]` columns of this CTA: the column sums of `dw_part`, GB rows at a time.
    #[cutile::entry()]
    fn rms_norm_dw<E: ElementType, const GB: i32, const BN: i32>(dw: &mut Tensor<E, { [BN] }>, dw_part: &Tensor<f32, { [-1, -1] }>) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let pp: Partition<f32, { [GB, BN] }> =
            unsafe { make_partition_view(dw_part, shape![GB, BN], padding::Zero, dim_map::Identity, dw_part.token()) };
        let tiles: i32 = num_tiles(&pp, 0i32);
        let mut acc: Tile<f32, { [BN] }> = constant(0.0f32, shape![BN]);
        for i in 0i32..tiles {
            let sums: Tile<f32, { [BN] }> = reduce_sum(pp.load([i, pid.0]), 0i32);
            acc = acc + sums;
        }
        let out: Tile<E, { [BN] }> = convert_tile(acc);
        let mut dp = dw.partition_mut(shape![BN]);
        // SAFETY: dw is this CTA's [BN] tile.
        unsafe { store_view_tko_mut(&mut dp, out, [0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
    }

    /// 1 / sqrt(mean(x^2) + eps) of each row of `t` (lanes past the row's `n` zero),
    /// broadcast across the row.
    fn row_rstd<const BM: i32, const BN: i32>(t: Tile<f32, { [BM, BN] }>, n: i32, eps: f32) -> Tile<f32, { [BM, BN] }> {
        let sum: Tile<f32, { [BM] }> = reduce_sum(t * t, 1i32);
        let n_t: Tile<f32, { [BM] }> = broadcast_scalar(convert_scalar::<f32>(n), shape![BM]);
        let eps_t: Tile<f32, { [BM] }> = broadcast_scalar(eps, shape![BM]);
        let r: Tile<f32, { [BM] }> = rsqrt(true_div(sum, n_t) + eps_t, ftz::Enabled);
        r.reshape(shape![BM, 1]).broadcast(shape![BM, BN])
    }

    /// (w + offset) as float32, broadcast over BM rows (lanes past w's end: offset, where
    /// x and dy are zero).
    fn weight_rows<E: ElementType, const BM: i32, const BN: i32, const N: i32>(w: &Tensor<E, { [N] }>, offset: f32) -> Tile<f32, { [BM, BN] }> {
        let wp: Partition<E, { [BN] }> = unsafe { make_partition_view(w, shape![BN], padding::Zero, dim_map::Identity, w.token()) };
        let wt: Tile<f32, { [BN] }> = convert_tile(wp.load([0i32]));
        let off: Tile<f32, { [BN] }> = broadcast_scalar(offset, shape![BN]);
        (wt + off).reshape(shape![1, BN]).broadcast(shape![BM, BN])
    }
}
