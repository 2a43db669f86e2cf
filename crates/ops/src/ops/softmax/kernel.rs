//! The softmax device kernels. One CTA owns `BM` rows of the output, which
//! the host partitions into `[BM, BN]` tiles (cutile needs a static output
//! tile shape, so the row length stays a runtime value).
//!
//! Loads go through a partition view padded with -inf (in `softmax_row_gather`,
//! a masked gather whose masked lanes are set to -inf), so lanes past the end
//! of a row add exp(-inf) = 0 to the sum and never win the max (the upstream
//! example padded with zero, which is wrong whenever N is not a multiple of BN).
//! Math is float32 whatever the storage type; exponentials are exp2 of
//! log2(e)-scaled differences from the row max (subtracted before scaling, as
//! torch does, so large inputs keep full precision). exp2 flushes subnormal
//! results to zero (`ftz::Enabled`): a probability below 2^-126 (1.2e-38)
//! comes out 0 where torch returns a subnormal, an absolute error under 1.2e-38;
//! without the flush ptxas wraps each MUFU.EX2 in a range test and two scaling
//! multiplies (SASS, tileiras 13.4: 48 of 408 instructions in the 2 x 1024
//! bfloat16 tile kernel).
//!
//! Stores go straight to global memory (`tma::Disabled`): by default tileiras
//! stages an output tile in shared memory and writes it with TMA (SASS: `STS.128`,
//! then `UTMASTG.2D` behind mbarrier waits; 129 KiB of shared memory for a
//! 32768-wide float32 tile). In the H200 sweeps (best config per row, TMA stores
//! against direct) direct stores were faster on 25 of 33 rows (2048x32768 f32
//! 3354 -> 3975 GB/s, 8192x4096 bf16 3100 -> 3695) and at most 2% slower on the
//! 2048-or-more-row shapes (4096x8192 bf16 3699 -> 3632; docs/benchmarks.md).

#[cutile::module]
pub mod softmax_kernels {
    use cutile::core::*;

    /// Whole row in one tile (N <= BN): one read, one write.
    #[cutile::entry()]
    fn softmax_row_tile<E: ElementType, const BM: i32, const BN: i32>(
        y: &mut Tensor<E, { [BM, BN] }>,
        x: &Tensor<E, { [-1, -1] }>,
    ) {
        let xp: Partition<E, { [BM, BN] }> = unsafe {
            make_partition_view(x, shape![BM, BN], padding::NegInf, dim_map::Identity, x.token())
        };
        store_row_softmax(y, load_row_block(&xp));
    }

    /// `softmax_row_tile` for rows of exactly BN elements (the powers of two):
    /// x's row length is a compile-time constant, so tileiras drops the column
    /// bounds checks. Without them it issues a thread's loads back to back;
    /// with them (tileiras 13.4, 1 x 4096 bfloat16, 8 warps) each 16-byte load
    /// sits in its own branch and waits for the one before.
    #[cutile::entry()]
    fn softmax_row_tile_exact<E: ElementType, const BM: i32, const BN: i32>(
        y: &mut Tensor<E, { [BM, BN] }>,
        x: &Tensor<E, { [-1, BN] }>,
    ) {
        let xp: Partition<E, { [BM, BN] }> = unsafe {
            make_partition_view(x, shape![BM, BN], padding::NegInf, dim_map::Identity, x.token())
        };
        store_row_softmax(y, load_row_block(&xp));
    }

    /// This CTA's BM rows of x's partition, as float32.
    fn load_row_block<E: ElementType, const BM: i32, const BN: i32>(xp: &Partition<E, { [BM, BN] }>) -> Tile<f32, { [BM, BN] }> {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let raw: Tile<E, { [BM, BN] }> = xp.load([pid.0, 0i32]);
        let t: Tile<f32, { [BM, BN] }> = convert_tile(raw);
        t
    }

    /// The single-tile kernels' shared tail: the softmax of each row of `t`
    /// (padded lanes -inf) into y, this CTA's [BM, BN] output tile.
    fn store_row_softmax<E: ElementType, const BM: i32, const BN: i32>(
        y: &mut Tensor<E, { [BM, BN] }>,
        t: Tile<f32, { [BM, BN] }>,
    ) {
        let log2e: Tile<f32, { [BM, BN] }> = constant(1.4426950408889634f32, shape![BM, BN]);
        let row_max: Tile<f32, { [BM] }> = reduce_max(t, 1);
        let row_max: Tile<f32, { [BM, 1] }> = row_max.reshape(shape![BM, 1]);
        // Subtract first, then scale: x - max is exact near the max, so large |x|
        // does not cost precision in the exponent (scaling first did, by |x| ulps).
        let p: Tile<f32, { [BM, BN] }> = exp2((t - row_max.broadcast(shape![BM, BN])) * log2e, ftz::Enabled);
        let row_sum: Tile<f32, { [BM] }> = reduce_sum(p, 1);
        let row_sum: Tile<f32, { [BM, 1] }> = row_sum.reshape(shape![BM, 1]);
        let inv_sum: Tile<f32, { [BM, BN] }> = reciprocal::<BM, BN>(row_sum);
        let out: Tile<E, { [BM, BN] }> = convert_tile(p * inv_sum);
        let mut yp = y.partition_mut(shape![BM, BN]);
        // SAFETY: y is this CTA's [BM, BN] tile, so [0, 0] is its only partition index.
        unsafe { store_view_tko_mut(&mut yp, out, [0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
    }

    /// 1 / sum per row, broadcast across the tile: one reciprocal per row and a
    /// multiply per element, not a division per element (far more instructions).
    /// cutile's true_div lowers to an approximate flush-to-zero divide (MUFU.RCP,
    /// at most 1 ulp off); a softmax sum is at least 1.
    fn reciprocal<const BM: i32, const BN: i32>(sum: Tile<f32, { [BM, 1] }>) -> Tile<f32, { [BM, BN] }> {
        let one: Tile<f32, { [BM, 1] }> = constant(1.0f32, shape![BM, 1]);
        true_div(one, sum).broadcast(shape![BM, BN])
    }

    /// `softmax_row_tile` for 2-byte rows that are not 16-byte multiples (N or
    /// the row stride not a multiple of 8), which a partition view cannot load
    /// as vectors: tileiras 13.4 lowers such a padded 2-byte load to a branch
    /// per element pair whose conversion waits on the load, one DRAM round trip
    /// after another (SASS: `LDG.E.U16` then `HADD2.F32`/`PRMT` in each branch).
    /// A masked gather issues every load of the tile predicated, then waits once.
    /// `x_row_stride` is x's row stride in elements (cutile's DSL has no stride
    /// accessor). Rows past the end read the last row again: their results fall
    /// outside y and the partition store drops them.
    #[cutile::entry()]
    fn softmax_row_gather<E: ElementType, const BM: i32, const BN: i32>(
        y: &mut Tensor<E, { [BM, BN] }>,
        x: &Tensor<E, { [-1, -1] }>,
        x_row_stride: i32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let row_off: Tile<i64, { [BM, 1] }> = gather_row_offsets::<E, BM>(x, x_row_stride, pid.0 * BM);
        let t: Tile<f32, { [BM, BN] }> = gather_tile::<E, BM, BN>(x, row_off, 0i32);
        store_row_softmax(y, t);
    }

    /// Element offsets in x of the BM rows from `first_row`, in i64 (row *
    /// stride can pass i32 in a large tensor). Rows past the end read the last
    /// row again: their results fall outside y and the partition store drops them.
    fn gather_row_offsets<E: ElementType, const BM: i32>(
        x: &Tensor<E, { [-1, -1] }>,
        x_row_stride: i32,
        first_row: i32,
    ) -> Tile<i64, { [BM, 1] }> {
        let m: i32 = get_shape_dim(x.shape(), 0i32);
        let first: Tile<i32, { [BM] }> = broadcast_scalar(first_row, shape![BM]);
        let last: Tile<i32, { [BM] }> = broadcast_scalar(m - 1i32, shape![BM]);
        let rows: Tile<i32, { [BM] }> = mini(first + iota(shape![BM]), last);
        let rows: Tile<i64, { [BM] }> = exti(rows);
        let stride: Tile<i32, { [BM] }> = broadcast_scalar(x_row_stride, shape![BM]);
        let stride: Tile<i64, { [BM] }> = exti(stride);
        (rows * stride).reshape(shape![BM, 1])
    }

    /// Columns `col0..col0 + BN` of the rows at `row_off` as float32, lanes at
    /// or past the row's end -inf: a masked gather, every load issued
    /// predicated before the first use.
    fn gather_tile<E: ElementType, const BM: i32, const BN: i32>(
        x: &Tensor<E, { [-1, -1] }>,
        row_off: Tile<i64, { [BM, 1] }>,
        col0: i32,
    ) -> Tile<f32, { [BM, BN] }> {
        let raw: Tile<E, { [BM, BN] }> = gather_raw::<E, BM, BN>(x, row_off, col0);
        masked_f32::<E, BM, BN>(x, raw, col0)
    }

    /// The column indices `col0..col0 + BN`.
    fn columns<const BN: i32>(col0: i32) -> Tile<i32, { [BN] }> {
        broadcast_scalar(col0, shape![BN]) + iota(shape![BN])
    }

    /// The lanes of columns `cols` that are inside x's rows.
    fn columns_in_row<E: ElementType, const BM: i32, const BN: i32>(
        x: &Tensor<E, { [-1, -1] }>,
        cols: Tile<i32, { [BN] }>,
    ) -> Tile<bool, { [BM, BN] }> {
        let n: i32 = get_shape_dim(x.shape(), 1i32);
        let col_ok: Tile<bool, { [1, BN] }> = lt_tile(cols, broadcast_scalar(n, shape![BN])).reshape(shape![1, BN]);
        col_ok.broadcast(shape![BM, BN])
    }

    /// The masked gather of `gather_tile` in the storage type; lanes past the
    /// row's end are unspecified until `masked_f32` sets them to -inf.
    fn gather_raw<E: ElementType, const BM: i32, const BN: i32>(
        x: &Tensor<E, { [-1, -1] }>,
        row_off: Tile<i64, { [BM, 1] }>,
        col0: i32,
    ) -> Tile<E, { [BM, BN] }> {
        let cols: Tile<i32, { [BN] }> = columns::<BN>(col0);
        let col_ok: Tile<bool, { [BM, BN] }> = columns_in_row::<E, BM, BN>(x, cols);
        let cols: Tile<i64, { [BN] }> = exti(cols);
        let cols: Tile<i64, { [1, BN] }> = cols.reshape(shape![1, BN]);
        let offsets: Tile<i64, { [BM, BN] }> = row_off.broadcast(shape![BM, BN]) + cols.broadcast(shape![BM, BN]);
        let x_base: *const E = x.as_ptr();
        let base: PointerTile<*const E, { [] }> = pointer_to_tile(x_base);
        let base: PointerTile<*const E, { [1, 1] }> = base.reshape(shape![1, 1]);
        let base: PointerTile<*const E, { [BM, BN] }> = base.broadcast(shape![BM, BN]);
        let ptrs: PointerTile<*const E, { [BM, BN] }> = addptr_tile(base, offsets);
        // SAFETY: row_off holds rows of x (gather_row_offsets clamps them) and
        // unmasked columns are < n, so every address read is an element of x,
        // which the caller keeps alive.
        let (raw, _token): (Tile<E, { [BM, BN] }>, Token) = unsafe {
            load_ptr_tko(ptrs, ordering::Weak, None::<scope::TileBlock>, Some(col_ok), None, None, Latency::<0>)
        };
        raw
    }

    /// A `gather_raw` tile of columns from `col0` as float32, lanes past the row's end -inf.
    fn masked_f32<E: ElementType, const BM: i32, const BN: i32>(
        x: &Tensor<E, { [-1, -1] }>,
        raw: Tile<E, { [BM, BN] }>,
        col0: i32,
    ) -> Tile<f32, { [BM, BN] }> {
        let cols: Tile<i32, { [BN] }> = columns::<BN>(col0);
        let col_ok: Tile<bool, { [BM, BN] }> = columns_in_row::<E, BM, BN>(x, cols);
        let neg_inf: Tile<f32, { [BM, BN] }> = constant(f32::NEG_INFINITY, shape![BM, BN]);
        let t: Tile<f32, { [BM, BN] }> = convert_tile(raw);
        select(col_ok, t, neg_inf)
    }

    /// Rows longer than one tile: a first pass keeps an online max and a
    /// rescaled sum over the row's tiles, a second pass writes exp2(x - max) / sum.
    /// The second pass walks the row backwards: the tiles read last are the ones
    /// most likely still in L2.
    /// The host partitions y into `[BM, NPAD]` row blocks (NPAD = N rounded up
    /// to a multiple of BN), one CTA each; the CTA stores its BN-wide tiles.
    #[cutile::entry()]
    fn softmax_row_loop<E: ElementType, const BM: i32, const BN: i32, const NPAD: i32>(
        y: &mut Tensor<E, { [BM, NPAD] }>,
        x: &Tensor<E, { [-1, -1] }>,
    ) {
        let xp: Partition<E, { [BM, BN] }> = unsafe {
            make_partition_view(x, shape![BM, BN], padding::NegInf, dim_map::Identity, x.token())
        };
        loop_row_softmax(y, &xp);
    }

    /// `softmax_row_loop` for rows of exactly NPAD elements (whole tiles): no
    /// column bounds checks, as in `softmax_row_tile_exact`.
    #[cutile::entry()]
    fn softmax_row_loop_exact<E: ElementType, const BM: i32, const BN: i32, const NPAD: i32>(
        y: &mut Tensor<E, { [BM, NPAD] }>,
        x: &Tensor<E, { [-1, NPAD] }>,
    ) {
        let xp: Partition<E, { [BM, BN] }> = unsafe {
            make_partition_view(x, shape![BM, BN], padding::NegInf, dim_map::Identity, x.token())
        };
        loop_row_softmax(y, &xp);
    }

    /// The partition-view loop kernels' body: this CTA's BM rows of `xp` into y.
    /// Both passes are software-pipelined by hand: the next tile's load is
    /// issued before the current tile is reduced or stored, so a thread's loads
    /// are in flight while it computes (tileiras keeps loads after an earlier
    /// store to y, which it cannot prove does not alias x). The first pass ends
    /// holding the row's last tile, where the second pass, walking backwards,
    /// starts: one tile per row is read once instead of twice.
    fn loop_row_softmax<E: ElementType, const BM: i32, const BN: i32, const NPAD: i32>(
        y: &mut Tensor<E, { [BM, NPAD] }>,
        xp: &Partition<E, { [BM, BN] }>,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let tiles: i32 = num_tiles(xp, 1);
        let (mut m, mut l): (Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, 1] }>) = online_start::<BM>();
        let mut cur: Tile<E, { [BM, BN] }> = xp.load([pid.0, 0i32]);
        for j in 1i32..tiles {
            let next: Tile<E, { [BM, BN] }> = xp.load([pid.0, j]);
            let t: Tile<f32, { [BM, BN] }> = convert_tile(cur);
            let (m_new, l_new): (Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, 1] }>) = online_step(m, l, t);
            m = m_new;
            l = l_new;
            cur = next;
        }
        let t: Tile<f32, { [BM, BN] }> = convert_tile(cur);
        let (m, l): (Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, 1] }>) = online_step(m, l, t);
        let inv_l: Tile<f32, { [BM, BN] }> = reciprocal::<BM, BN>(l);
        let m_b: Tile<f32, { [BM, BN] }> = m.broadcast(shape![BM, BN]);
        let mut yp = y.partition_mut(shape![BM, BN]);
        let last: i32 = tiles - 1i32;
        for j in 1i32..tiles {
            let k: i32 = last - j;
            let next: Tile<E, { [BM, BN] }> = xp.load([pid.0, k]);
            let t: Tile<f32, { [BM, BN] }> = convert_tile(cur);
            let out: Tile<E, { [BM, BN] }> = normalized(t, m_b, inv_l);
            // SAFETY: k + 1 = last - j + 1 with j in 1..tiles, so 1 <= k + 1 <= last.
            unsafe { store_view_tko_mut(&mut yp, out, [0i32, k + 1i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
            cur = next;
        }
        let t: Tile<f32, { [BM, BN] }> = convert_tile(cur);
        let out: Tile<E, { [BM, BN] }> = normalized(t, m_b, inv_l);
        // SAFETY: tile 0 is in every row block.
        unsafe { store_view_tko_mut(&mut yp, out, [0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
    }

    /// `softmax_row_loop` for 2-byte rows that are not 16-byte multiples, its
    /// tiles read by masked gathers, as `softmax_row_gather` does for one tile
    /// (through the partition view, tileiras 13.4 lowers the loop's loads to
    /// branches around `LDG.E.U16` too: SASS of the 2048 x 16385 bfloat16 kernel).
    #[cutile::entry()]
    fn softmax_row_loop_gather<E: ElementType, const BM: i32, const BN: i32, const NPAD: i32>(
        y: &mut Tensor<E, { [BM, NPAD] }>,
        x: &Tensor<E, { [-1, -1] }>,
        x_row_stride: i32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let row_off: Tile<i64, { [BM, 1] }> = gather_row_offsets::<E, BM>(x, x_row_stride, pid.0 * BM);
        let mut yp = y.partition_mut(shape![BM, BN]);
        let tiles: i32 = num_tiles(&yp, 1);
        // Pipelined as in `loop_row_softmax`: each tile's gather is issued
        // before the tile before it is reduced or stored.
        let (mut m, mut l): (Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, 1] }>) = online_start::<BM>();
        let mut cur: Tile<E, { [BM, BN] }> = gather_raw::<E, BM, BN>(x, row_off, 0i32);
        for j in 1i32..tiles {
            let next: Tile<E, { [BM, BN] }> = gather_raw::<E, BM, BN>(x, row_off, j * BN);
            let t: Tile<f32, { [BM, BN] }> = masked_f32::<E, BM, BN>(x, cur, (j - 1i32) * BN);
            let (m_new, l_new): (Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, 1] }>) = online_step(m, l, t);
            m = m_new;
            l = l_new;
            cur = next;
        }
        let last: i32 = tiles - 1i32;
        let t: Tile<f32, { [BM, BN] }> = masked_f32::<E, BM, BN>(x, cur, last * BN);
        let (m, l): (Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, 1] }>) = online_step(m, l, t);
        let inv_l: Tile<f32, { [BM, BN] }> = reciprocal::<BM, BN>(l);
        let m_b: Tile<f32, { [BM, BN] }> = m.broadcast(shape![BM, BN]);
        for j in 1i32..tiles {
            let k: i32 = last - j;
            let next: Tile<E, { [BM, BN] }> = gather_raw::<E, BM, BN>(x, row_off, k * BN);
            let t: Tile<f32, { [BM, BN] }> = masked_f32::<E, BM, BN>(x, cur, (k + 1i32) * BN);
            let out: Tile<E, { [BM, BN] }> = normalized(t, m_b, inv_l);
            // SAFETY: k + 1 = last - j + 1 with j in 1..tiles, so 1 <= k + 1 <= last.
            unsafe { store_view_tko_mut(&mut yp, out, [0i32, k + 1i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
            cur = next;
        }
        let t: Tile<f32, { [BM, BN] }> = masked_f32::<E, BM, BN>(x, cur, 0i32);
        let out: Tile<E, { [BM, BN] }> = normalized(t, m_b, inv_l);
        // SAFETY: tile 0 is in every row block.
        unsafe { store_view_tko_mut(&mut yp, out, [0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
    }

    /// The online softmax's running row max and sum before the first tile. A
    /// finite max keeps exp2(m_old - m_new) finite when a whole tile is -inf.
    fn online_start<const BM: i32>() -> (Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, 1] }>) {
        let m: Tile<f32, { [BM, 1] }> = constant(-3.4028234663852886e38f32, shape![BM, 1]);
        let l: Tile<f32, { [BM, 1] }> = constant(0.0f32, shape![BM, 1]);
        (m, l)
    }

    /// One tile's step of the online softmax: the running row max `m` and the
    /// sum `l` of exp2 relative to it, rescaled when the max grows.
    fn online_step<const BM: i32, const BN: i32>(
        m: Tile<f32, { [BM, 1] }>,
        l: Tile<f32, { [BM, 1] }>,
        t: Tile<f32, { [BM, BN] }>,
    ) -> (Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, 1] }>) {
        let log2e: Tile<f32, { [BM, BN] }> = constant(1.4426950408889634f32, shape![BM, BN]);
        let log2e_col: Tile<f32, { [BM, 1] }> = constant(1.4426950408889634f32, shape![BM, 1]);
        let tile_max: Tile<f32, { [BM] }> = reduce_max(t, 1);
        let tile_max: Tile<f32, { [BM, 1] }> = tile_max.reshape(shape![BM, 1]);
        let m_new: Tile<f32, { [BM, 1] }> = max_tile(m, tile_max);
        let p: Tile<f32, { [BM, BN] }> = exp2((t - m_new.broadcast(shape![BM, BN])) * log2e, ftz::Enabled);
        let tile_sum: Tile<f32, { [BM] }> = reduce_sum(p, 1);
        let tile_sum: Tile<f32, { [BM, 1] }> = tile_sum.reshape(shape![BM, 1]);
        let alpha: Tile<f32, { [BM, 1] }> = exp2((m - m_new) * log2e_col, ftz::Enabled);
        (m_new, l * alpha + tile_sum)
    }

    /// exp2(t - m) * inv_l in the storage type: the loop kernels' second pass.
    fn normalized<E: ElementType, const BM: i32, const BN: i32>(
        t: Tile<f32, { [BM, BN] }>,
        m_b: Tile<f32, { [BM, BN] }>,
        inv_l: Tile<f32, { [BM, BN] }>,
    ) -> Tile<E, { [BM, BN] }> {
        let log2e: Tile<f32, { [BM, BN] }> = constant(1.4426950408889634f32, shape![BM, BN]);
        convert_tile(exp2((t - m_b) * log2e, ftz::Enabled) * inv_l)
    }
}
