//! The rotary-embedding kernel, rotate-half layout (transformers' `apply_rotary_pos_emb`):
//! for each head, out[:H] = x1 * cos - x2 * sin and out[H:2H] = x2 * cos + x1 * sin, with
//! x1 = x[:H], x2 = x[H:2H] and H = HALF, half the rotated dims; dims past 2H (a partial
//! rotary factor) are copied. The grid is (batch x position, head block): each CTA rotates
//! one block of TQ of q's heads and one of TK of k's at one position, so the heads of a
//! position spread over several CTAs (less live state per thread, more CTAs resident per SM,
//! and a decode step more CTAs than its positions). Both outputs have the same number of
//! blocks; the last may be partial (its lanes past the heads are undefined, its stores masked).
//! Only cos[..., :HALF] and sin[..., :HALF] are read: transformers' tables repeat their first
//! half (GPT-OSS's hold only that half). The host passes the tables narrowed to those HALF
//! entries, so their rows are whole tiles: loaded with no mask. The backward is the same kernel with `sign` -1 (the
//! inverse rotation). Math is float32 (a multiply and a fused multiply-add per output), rounded once at the store.
//!
//! q and k are read as `[B, heads, S, D]` views (any strides but a unit last one); the outputs
//! are `[B * S, heads, D]`, contiguous, which the host returns transposed to `[B, heads, S, D]`.
//!
//! Every load is a raw view load that tells the compiler which axes are in bounds (the host
//! checks them): with an unproven axis tileiras wraps each load in a bounds branch and converts
//! its lanes inside it, so a CTA's loads went to memory one after another, each waiting for the
//! last; with every axis proven they issue back to back (docs/benchmarks.md, "rope"). The head
//! axis is proven where the head block divides the heads (QX, KX = 1); a partial last block
//! leaves it masked, lanes past the heads undefined and never stored.

#[cutile::module]
pub mod rope_kernels {
    use cutile::core::*;

    /// The first 2 * HALF dims rotated; with a partial rotary factor (2 * HALF < D) the
    /// HALF-wide blocks after them copied (the condition folds at compile time: tileiras
    /// refuses the copy loop where it has no iteration).
    ///
    /// # Safety
    /// Accesses are unchecked: the batch and position come from a division of the block id,
    /// which cutile cannot bound, so each load carried an in-kernel assert (about half the
    /// instructions a CTA ran, docs/benchmarks.md "rope"). The caller guarantees every index
    /// in range: a grid of B * S rows, q's and k's heads in as many blocks as the grid's
    /// second axis, tables of 1 or B batches, and QX (KX) 1 only where TQ (TK) divides q's
    /// (k's) heads (launch.rs checks each).
    #[cutile::entry(unchecked_accesses = true)]
    unsafe fn rope<E: ElementType, const TQ: i32, const TK: i32, const D: i32, const HALF: i32, const QX: i32, const KX: i32>(
        q_out: &mut Tensor<E, { [1, TQ, D] }>,
        k_out: &mut Tensor<E, { [1, TK, D] }>,
        q: &Tensor<E, { [-1, -1, -1, D] }>,
        k: &Tensor<E, { [-1, -1, -1, D] }>,
        cos: &Tensor<E, { [-1, -1, HALF] }>,
        sin: &Tensor<E, { [-1, -1, HALF] }>,
        sign: f32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let (batch, pos, c, s): (i32, i32, Tile<f32, { [1, HALF] }>, Tile<f32, { [1, HALF] }>) =
            position::<E, D, HALF>(q, cos, sin, pid.0, sign);
        rotate::<E, TQ, D, HALF, QX>(q, q_out, batch, pid.1, pos, c, s);
        rotate::<E, TK, D, HALF, KX>(k, k_out, batch, pid.1, pos, c, s);
        if 2i32 * HALF < D {
            copy_rest::<E, TQ, D, HALF, QX>(q, q_out, batch, pid.1, pos);
            copy_rest::<E, TK, D, HALF, KX>(k, k_out, batch, pid.1, pos);
        }
    }

    /// The batch and position of grid row `row`, and its cos and sin rows (sin times `sign`).
    fn position<E: ElementType, const D: i32, const HALF: i32>(
        q: &Tensor<E, { [-1, -1, -1, D] }>,
        cos: &Tensor<E, { [-1, -1, HALF] }>,
        sin: &Tensor<E, { [-1, -1, HALF] }>,
        row: i32,
        sign: f32,
    ) -> (i32, i32, Tile<f32, { [1, HALF] }>, Tile<f32, { [1, HALF] }>) {
        let s_len: i32 = get_shape_dim(q.shape(), 2i32);
        let batch: i32 = row / s_len;
        let pos: i32 = row - batch * s_len;
        // A [1, S, *] table serves every batch; a [B, S, *] one holds a row per batch.
        let table_batch: i32 = min(batch, get_shape_dim(cos.shape(), 0i32) - 1i32);
        let c: Tile<f32, { [1, HALF] }> = table_row::<E, HALF>(cos, table_batch, pos);
        let s: Tile<f32, { [1, HALF] }> = table_row::<E, HALF>(sin, table_batch, pos);
        let signs: Tile<f32, { [1, HALF] }> = broadcast_scalar(sign, shape![1, HALF]);
        (batch, pos, c, s * signs)
    }

    /// Row (`batch`, `pos`) of a cos or sin table, its first HALF entries, as float32.
    fn table_row<E: ElementType, const HALF: i32>(t: &Tensor<E, { [-1, -1, HALF] }>, batch: i32, pos: i32) -> Tile<f32, { [1, HALF] }> {
        let p: Partition<E, { [1, 1, HALF] }> =
            unsafe { make_partition_view(t, shape![1, 1, HALF], padding::None, dim_map::Identity, t.token()) };
        // SAFETY: the host checks batch < the table's batches and pos < S; HALF is its last extent.
        let (row, _): (Tile<E, { [1, 1, HALF] }>, Token) = unsafe {
            load_view_raw(&p, [batch, pos, 0i32], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true, true, true], shape![1, 1, HALF])
        };
        let row: Tile<f32, { [1, 1, HALF] }> = convert_tile(row);
        row.reshape(shape![1, HALF])
    }

    /// Half-block `j` (dims `[j * HALF, (j + 1) * HALF)`) of head block `block` of x at (`batch`,
    /// `pos`); with EXACT 1 the block lies inside x's heads (no head mask).
    fn load_block<E: ElementType, const TH: i32, const D: i32, const HALF: i32, const EXACT: i32>(
        xp: &Partition<E, { [1, TH, 1, HALF] }>,
        batch: i32,
        block: i32,
        pos: i32,
        j: i32,
    ) -> Tile<E, { [1, TH, 1, HALF] }> {
        // SAFETY: the host checks batch, pos and block against x (launch.rs, check_launch), and
        // j < D / HALF; EXACT is 1 only where the head block divides the heads.
        let (x, _): (Tile<E, { [1, TH, 1, HALF] }>, Token) = unsafe {
            load_view_raw(xp, [batch, block, pos, j], None, ordering::Weak, scope::TileBlock, tma::Disabled, None, [true, EXACT == 1i32, true, true], shape![1, TH, 1, HALF])
        };
        x
    }

    /// Head block `block` (TH heads; past x's heads, undefined lanes the store drops) of x at (`batch`, `pos`) rotated into `out`'s first two HALF-wide blocks.
    fn rotate<E: ElementType, const TH: i32, const D: i32, const HALF: i32, const EXACT: i32>(
        x: &Tensor<E, { [-1, -1, -1, D] }>,
        out: &mut Tensor<E, { [1, TH, D] }>,
        batch: i32,
        block: i32,
        pos: i32,
        c: Tile<f32, { [1, HALF] }>,
        s: Tile<f32, { [1, HALF] }>,
    ) {
        let xp: Partition<E, { [1, TH, 1, HALF] }> =
            unsafe { make_partition_view(x, shape![1, TH, 1, HALF], padding::None, dim_map::Identity, x.token()) };
        let c: Tile<f32, { [TH, HALF] }> = c.broadcast(shape![TH, HALF]);
        let s: Tile<f32, { [TH, HALF] }> = s.broadcast(shape![TH, HALF]);
        let x1: Tile<f32, { [1, TH, 1, HALF] }> = convert_tile(load_block::<E, TH, D, HALF, EXACT>(&xp, batch, block, pos, 0i32));
        let x2: Tile<f32, { [1, TH, 1, HALF] }> = convert_tile(load_block::<E, TH, D, HALF, EXACT>(&xp, batch, block, pos, 1i32));
        let x1: Tile<f32, { [TH, HALF] }> = x1.reshape(shape![TH, HALF]);
        let x2: Tile<f32, { [TH, HALF] }> = x2.reshape(shape![TH, HALF]);
        // x1 * c - x2 * s and x2 * c + x1 * s, each a multiply and a fused multiply-add.
        let o1: Tile<f32, { [TH, HALF] }> = fma(x1, c, x2 * negf(s), rounding::NearestEven, ftz::Disabled);
        let o2: Tile<f32, { [TH, HALF] }> = fma(x2, c, x1 * s, rounding::NearestEven, ftz::Disabled);
        let o1: Tile<E, { [1, TH, HALF] }> = convert_tile(o1.reshape(shape![1, TH, HALF]));
        let o2: Tile<E, { [1, TH, HALF] }> = convert_tile(o2.reshape(shape![1, TH, HALF]));
        let mut op = out.partition_mut(shape![1, TH, HALF]);
        // SAFETY: out is this CTA's [1, TH, D] tile in [1, TH, HALF] blocks, 2 * HALF <= D.
        unsafe { store_view_tko_mut(&mut op, o1, [0i32, 0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
        unsafe { store_view_tko_mut(&mut op, o2, [0i32, 0i32, 1i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
    }

    /// The HALF-wide blocks past the rotated two of head block `block` of x at (`batch`, `pos`),
    /// copied into `out`.
    fn copy_rest<E: ElementType, const TH: i32, const D: i32, const HALF: i32, const EXACT: i32>(
        x: &Tensor<E, { [-1, -1, -1, D] }>,
        out: &mut Tensor<E, { [1, TH, D] }>,
        batch: i32,
        block: i32,
        pos: i32,
    ) {
        let xp: Partition<E, { [1, TH, 1, HALF] }> =
            unsafe { make_partition_view(x, shape![1, TH, 1, HALF], padding::None, dim_map::Identity, x.token()) };
        let mut op = out.partition_mut(shape![1, TH, HALF]);
        let blocks: i32 = D / HALF;
        for j in 2i32..blocks {
            let rest: Tile<E, { [1, TH, 1, HALF] }> = load_block::<E, TH, D, HALF, EXACT>(&xp, batch, block, pos, j);
            let rest: Tile<E, { [1, TH, HALF] }> = rest.reshape(shape![1, TH, HALF]);
            // SAFETY: j < D / HALF, a block of this CTA's tile.
            unsafe { store_view_tko_mut(&mut op, rest, [0i32, 0i32, j], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
        }
    }
}
