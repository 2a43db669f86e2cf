//! The rotary-embedding kernel, rotate-half layout (transformers' `apply_rotary_pos_emb`):
//! for each head, out[:H] = x1 * cos - x2 * sin and out[H:2H] = x2 * cos + x1 * sin, with
//! x1 = x[:H], x2 = x[H:2H] and H = HALF, half the rotated dims; dims past 2H (a partial
//! rotary factor) are copied. One CTA per (batch, position) rotates every head of q and of k,
//! HBQ (HBK) heads of q (k) a step: the whole head tile THQ (THK) in one step, or fewer for less
//! live state per thread, so more CTAs stay resident per SM.
//! Only cos[..., :HALF] and sin[..., :HALF] are read: transformers' tables repeat their first
//! half (GPT-OSS's hold only that half). The host passes the tables narrowed to those HALF
//! entries, so their rows are whole tiles: loaded with no mask. The backward is the same kernel with `sign` -1 (the
//! inverse rotation). Math is float32 (a multiply and a fused multiply-add per output), rounded once at the store.
//!
//! q and k are read as `[B, heads, S, D]` views (any strides but a unit last one); the outputs
//! are `[B * S, heads, D]`, contiguous, which the host returns transposed to `[B, heads, S, D]`.

#[cutile::module]
pub mod rope_kernels {
    use cutile::core::*;

    /// The first 2 * HALF dims rotated; with a partial rotary factor (2 * HALF < D) the
    /// HALF-wide blocks after them copied (the condition folds at compile time: tileiras
    /// refuses the copy loop where it has no iteration).
    #[cutile::entry()]
    fn rope<E: ElementType, const THQ: i32, const THK: i32, const HBQ: i32, const HBK: i32, const D: i32, const HALF: i32>(
        q_out: &mut Tensor<E, { [1, THQ, D] }>,
        k_out: &mut Tensor<E, { [1, THK, D] }>,
        q: &Tensor<E, { [-1, -1, -1, D] }>,
        k: &Tensor<E, { [-1, -1, -1, D] }>,
        cos: &Tensor<E, { [-1, -1, HALF] }>,
        sin: &Tensor<E, { [-1, -1, HALF] }>,
        sign: f32,
    ) {
        let (batch, pos, c, s): (i32, i32, Tile<f32, { [1, HALF] }>, Tile<f32, { [1, HALF] }>) =
            position::<E, D, HALF>(q, cos, sin, sign);
        rotate::<E, THQ, HBQ, D, HALF>(q, q_out, batch, pos, c, s);
        rotate::<E, THK, HBK, D, HALF>(k, k_out, batch, pos, c, s);
        if 2i32 * HALF < D {
            copy_rest::<E, THQ, D, HALF>(q, q_out, batch, pos);
            copy_rest::<E, THK, D, HALF>(k, k_out, batch, pos);
        }
    }

    /// This CTA's batch and position, and its cos and sin rows (sin times `sign`).
    fn position<E: ElementType, const D: i32, const HALF: i32>(
        q: &Tensor<E, { [-1, -1, -1, D] }>,
        cos: &Tensor<E, { [-1, -1, HALF] }>,
        sin: &Tensor<E, { [-1, -1, HALF] }>,
        sign: f32,
    ) -> (i32, i32, Tile<f32, { [1, HALF] }>, Tile<f32, { [1, HALF] }>) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let s_len: i32 = get_shape_dim(q.shape(), 2i32);
        let batch: i32 = pid.0 / s_len;
        let pos: i32 = pid.0 - batch * s_len;
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
            unsafe { make_partition_view(t, shape![1, 1, HALF], padding::Zero, dim_map::Identity, t.token()) };
        let row: Tile<f32, { [1, 1, HALF] }> = convert_tile(p.load([batch, pos, 0i32]));
        row.reshape(shape![1, HALF])
    }

    /// Every head of x at (`batch`, `pos`) rotated into `out`'s first two HALF-wide blocks, HB
    /// heads a step (HB divides TH; below TH it divides x's heads).
    fn rotate<E: ElementType, const TH: i32, const HB: i32, const D: i32, const HALF: i32>(
        x: &Tensor<E, { [-1, -1, -1, D] }>,
        out: &mut Tensor<E, { [1, TH, D] }>,
        batch: i32,
        pos: i32,
        c: Tile<f32, { [1, HALF] }>,
        s: Tile<f32, { [1, HALF] }>,
    ) {
        let xp: Partition<E, { [1, HB, 1, HALF] }> =
            unsafe { make_partition_view(x, shape![1, HB, 1, HALF], padding::Zero, dim_map::Identity, x.token()) };
        let c: Tile<f32, { [HB, HALF] }> = c.broadcast(shape![HB, HALF]);
        let s: Tile<f32, { [HB, HALF] }> = s.broadcast(shape![HB, HALF]);
        let ns: Tile<f32, { [HB, HALF] }> = negf(s);
        let mut op = out.partition_mut(shape![1, HB, HALF]);
        // Blocks wholly past x's heads are skipped: a store there is not masked by out's extent
        // (the host passes HB < TH only where it divides the heads, so no block straddles it).
        let heads: i32 = get_shape_dim(x.shape(), 1i32);
        let steps: i32 = (heads + HB - 1i32) / HB;
        for h in 0i32..steps {
            let x1: Tile<f32, { [1, HB, 1, HALF] }> = convert_tile(xp.load([batch, h, pos, 0i32]));
            let x2: Tile<f32, { [1, HB, 1, HALF] }> = convert_tile(xp.load([batch, h, pos, 1i32]));
            let x1: Tile<f32, { [HB, HALF] }> = x1.reshape(shape![HB, HALF]);
            let x2: Tile<f32, { [HB, HALF] }> = x2.reshape(shape![HB, HALF]);
            // x1 * c - x2 * s and x2 * c + x1 * s, each a multiply and a fused multiply-add.
            let o1: Tile<f32, { [HB, HALF] }> = fma(x1, c, x2 * ns, rounding::NearestEven, ftz::Disabled);
            let o2: Tile<f32, { [HB, HALF] }> = fma(x2, c, x1 * s, rounding::NearestEven, ftz::Disabled);
            let o1: Tile<E, { [1, HB, HALF] }> = convert_tile(o1.reshape(shape![1, HB, HALF]));
            let o2: Tile<E, { [1, HB, HALF] }> = convert_tile(o2.reshape(shape![1, HB, HALF]));
            // SAFETY: out is this CTA's [1, TH, D] tile in [1, HB, HALF] blocks; h * HB < heads <= TH and 2 * HALF <= D.
            unsafe { store_view_tko_mut(&mut op, o1, [0i32, h, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
            unsafe { store_view_tko_mut(&mut op, o2, [0i32, h, 1i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
        }
    }

    /// The HALF-wide blocks of every head of x at (`batch`, `pos`) past the rotated two,
    /// copied into `out`.
    fn copy_rest<E: ElementType, const TH: i32, const D: i32, const HALF: i32>(
        x: &Tensor<E, { [-1, -1, -1, D] }>,
        out: &mut Tensor<E, { [1, TH, D] }>,
        batch: i32,
        pos: i32,
    ) {
        let xp: Partition<E, { [1, TH, 1, HALF] }> =
            unsafe { make_partition_view(x, shape![1, TH, 1, HALF], padding::Zero, dim_map::Identity, x.token()) };
        let mut op = out.partition_mut(shape![1, TH, HALF]);
        let blocks: i32 = D / HALF;
        for j in 2i32..blocks {
            let rest: Tile<E, { [1, TH, 1, HALF] }> = xp.load([batch, 0i32, pos, j]);
            let rest: Tile<E, { [1, TH, HALF] }> = rest.reshape(shape![1, TH, HALF]);
            // SAFETY: j < D / HALF, a block of this CTA's tile.
            unsafe { store_view_tko_mut(&mut op, rest, [0i32, 0i32, j], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
        }
    }
}
