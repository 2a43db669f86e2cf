//! The attention-with-sinks device kernels: a flash-attention forward (online softmax
//! over KV tiles, float32 accumulation, exp2 with the scale folded in) where each
//! head's sink logit joins the softmax denominator only.
//!
//! Layout: q and out are `[B, S_q, H*D]` (H = H_kv * GROUP query heads, the heads of one
//! KV head adjacent), k and v `[B, S_kv, H_kv*D]`. A CTA takes `BQ` query positions of
//! `GT` adjacent heads that share one KV head (GT divides GROUP): its q tile
//! `[BQ, GT*D]` is the `[BQ*GT, D]` matrix whose row `r` is position `r / GT`, head
//! `r % GT`, so the GT heads share every K/V tile the CTA loads, and decode (S_q = 1)
//! still fills the tensor cores' rows with heads.
//!
//! The KV tiles a CTA visits are only those its causal and window bounds reach;
//! tiles wholly inside them skip the mask. With `splits` > 1 (decode, few CTAs),
//! `attention_sink_split` gives each of `splits` CTAs a share of those tiles and
//! writes unnormalised partials (acc, running max m, sum l, with the sink in m's
//! start value only); `attention_sink_combine` merges them with the sink.
//!
//! `LAT` is the K/V loads' latency hint (Tile IR `latency`, 1 to 10: how heavy their
//! DRAM traffic is, for tileiras' software pipelining); 0 leaves it to tileiras.
//!
//! Training: `attention_sink_lse` also saves each row's log2-sum-exp; the backward
//! recomputes the weights p = 2^(s - lse) from it, `attention_sink_backward_dq` per query
//! tile (dq, and each row's delta = rowsum(dO * O) and sink-gradient term) and
//! `attention_sink_backward_dkdv` per key tile over every query head of its KV head (dk, dv),
//! FlashAttention-2's two-kernel backward with no atomics. `scale` * ln 2 is sm_scale.
//!
//! Scores are kept in log2 units: `scale` is sm_scale * log2(e), the sink is
//! multiplied by log2(e). m starts at the sink (a finite value), so a fully masked
//! row never computes exp2(-inf - -inf) and its output is 0 (the sink takes all the
//! weight), as the float32 reference gives.

#[cutile::module]
pub mod attention_sink_kernels {
    use cutile::core::*;

    /// out tile (pid.0 = batch, pid.1 = query block, pid.2 = head block) in one pass.
    #[cutile::entry()]
    fn attention_sink<
        E: ElementType,
        S: ElementType,
        const BQ: i32,
        const GT: i32,
        const BM: i32,
        const D: i32,
        const GD: i32,
        const BN: i32,
        const GROUP: i32,
        const LAT: i32,
    >(
        out: &mut Tensor<E, { [1, BQ, GD] }>,
        q: &Tensor<E, { [-1, -1, -1] }>,
        k: &Tensor<E, { [-1, -1, -1] }>,
        v: &Tensor<E, { [-1, -1, -1] }>,
        sinks: &Tensor<S, { [-1] }>,
        start_q: &Tensor<i32, { [-1] }>,
        scale: f32,
        window: i32,
    ) {
        let _ = one_pass::<E, S, BQ, GT, BM, D, GD, BN, GROUP, LAT>(out, q, k, v, sinks, start_q, scale, window);
    }

    /// One split's share of the KV tiles (pid.0 = split * B + batch): its unnormalised
    /// accumulator into `acc_out` and, per row, its running max m and sum l (the sink in
    /// m's start value, not in l) into `ml_out` (`[m of GT heads, l of GT heads]` per tile).
    #[cutile::entry()]
    fn attention_sink_split<
        E: ElementType,
        S: ElementType,
        const BQ: i32,
        const GT: i32,
        const BM: i32,
        const D: i32,
        const GD: i32,
        const G2: i32,
        const BN: i32,
        const GROUP: i32,
        const LAT: i32,
    >(
        acc_out: &mut Tensor<f32, { [1, BQ, GD] }>,
        ml_out: &mut Tensor<f32, { [1, BQ, G2] }>,
        q: &Tensor<E, { [-1, -1, -1] }>,
        k: &Tensor<E, { [-1, -1, -1] }>,
        v: &Tensor<E, { [-1, -1, -1] }>,
        sinks: &Tensor<S, { [-1] }>,
        start_q: &Tensor<i32, { [-1] }>,
        scale: f32,
        window: i32,
        splits: i32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let batches: i32 = get_shape_dim(q.shape(), 0i32);
        let split: i32 = pid.0 / batches;
        let batch: i32 = pid.0 - split * batches;
        let sink: Tile<f32, { [BM, 1] }> = sink_rows::<S, BQ, GT, BM>(sinks, pid.2);
        let first: i32 = first_position(start_q);
        let s_q: i32 = get_shape_dim(q.shape(), 1i32);
        let s_kv: i32 = get_shape_dim(k.shape(), 1i32);
        let lo_all: i32 = first_tile::<BQ, BN>(first, pid.1, window);
        let hi_all: i32 = end_tile::<BQ, BN>(first, pid.1, s_q, s_kv);
        let share: i32 = ceil_div(max(hi_all - lo_all, 0i32), splits);
        let lo: i32 = lo_all + split * share;
        let hi: i32 = min(lo + share, hi_all);
        let qt: Tile<E, { [BM, D] }> = query_tile::<E, BQ, BM, D, GD>(q, batch, pid.1, pid.2);
        let zero: Tile<f32, { [BM, 1] }> = constant(0.0f32, shape![BM, 1]);
        let tile = [batch, pid.1, pid.2];
        let (m, l, acc) =
            attend::<E, BQ, GT, BM, D, BN, GROUP, LAT>(qt, k, v, tile, first, s_q, s_kv, [lo, hi], scale, window, sink, zero);
        let acc_tile: Tile<f32, { [1, BQ, GD] }> = acc.reshape(shape![1, BQ, GD]);
        let mut ap = acc_out.partition_mut(shape![1, BQ, GD]);
        // SAFETY: acc_out is this CTA's [1, BQ, GD] tile, so [0, 0, 0] is its only partition index.
        unsafe { store_view_tko_mut(&mut ap, acc_tile, [0i32, 0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
        let m3: Tile<f32, { [1, BQ, GT] }> = m.reshape(shape![1, BQ, GT]);
        let l3: Tile<f32, { [1, BQ, GT] }> = l.reshape(shape![1, BQ, GT]);
        let ml: Tile<f32, { [1, BQ, G2] }> = cat(m3, l3, 2i32);
        let mut mp = ml_out.partition_mut(shape![1, BQ, G2]);
        // SAFETY: ml_out is this CTA's [1, BQ, G2] tile, so [0, 0, 0] is its only partition index.
        unsafe { store_view_tko_mut(&mut mp, ml, [0i32, 0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
    }

    /// One query head's output row (pid.0 = batch, pid.1 = query position, pid.2 = head) from
    /// the `splits` partials of `attention_sink_split`, read as `[splits, B, S_q, *]` (row
    /// split * B + batch): out = sum acc_s 2^(m_s - m) / l, l = 2^(sink - m) + sum l_s 2^(m_s - m),
    /// m = max(sink, each m_s), kept online: `CH` splits a load (their m, l and `[CH, D]`
    /// accumulators), each chunk rescaling what came before to its new max. A CTA per head keeps
    /// the sums down the splits two-dimensional: one CTA per split kernel's tile of GT heads (a
    /// `[CH, GT, D]` sum) took 210 KB of shared memory at D 64, and the decode step's combine
    /// 47 us of its 71 under ncu on an H100 (docs/benchmarks.md, "The chunked combine on a GPU").
    /// Splits past the last read as m = -inf, l = acc = 0, which weigh nothing.
    #[cutile::entry()]
    fn attention_sink_combine<E: ElementType, S: ElementType, const GT: i32, const D: i32, const CH: i32>(
        out: &mut Tensor<E, { [1, 1, D] }>,
        acc_in: &Tensor<f32, { [-1, -1, -1, -1] }>,
        ml_in: &Tensor<f32, { [-1, -1, -1, -1] }>,
        sinks: &Tensor<S, { [-1] }>,
        splits: i32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        // The split kernel's ml columns: per tile of GT heads, their m then their l.
        let m_col: i32 = pid.2 + (pid.2 / GT) * GT;
        let l_col: i32 = m_col + GT;
        // SAFETY: each view reads the kernel's own input tensors, which nothing writes while it runs.
        let m_chunk: Partition<f32, { [CH, 1, 1, 1] }> =
            unsafe { make_partition_view(ml_in, shape![CH, 1, 1, 1], padding::NegInf, dim_map::Identity, ml_in.token()) };
        let l_chunk: Partition<f32, { [CH, 1, 1, 1] }> =
            unsafe { make_partition_view(ml_in, shape![CH, 1, 1, 1], padding::Zero, dim_map::Identity, ml_in.token()) };
        let acc_chunk: Partition<f32, { [CH, 1, 1, D] }> =
            unsafe { make_partition_view(acc_in, shape![CH, 1, 1, D], padding::Zero, dim_map::Identity, acc_in.token()) };
        // m starts at the sink (log2 units, finite), so no exp2 below sees -inf - -inf.
        let mut m: Tile<f32, { [1, 1] }> = sink_rows::<S, 1, 1, 1>(sinks, pid.2);
        let mut l: Tile<f32, { [1, 1] }> = constant(1.0f32, shape![1, 1]);
        let mut acc: Tile<f32, { [1, D] }> = constant(0.0f32, shape![1, D]);
        for c in 0i32..ceil_div(splits, CH) {
            let m_c: Tile<f32, { [CH, 1] }> = m_chunk.load([c, pid.0, pid.1, m_col]).reshape(shape![CH, 1]);
            let l_c: Tile<f32, { [CH, 1] }> = l_chunk.load([c, pid.0, pid.1, l_col]).reshape(shape![CH, 1]);
            let acc_c: Tile<f32, { [CH, D] }> = acc_chunk.load([c, pid.0, pid.1, pid.2]).reshape(shape![CH, D]);
            let chunk_max: Tile<f32, { [1] }> = reduce_max(m_c, 0i32);
            let m_new: Tile<f32, { [1, 1] }> = max_tile(m, chunk_max.reshape(shape![1, 1]));
            let alpha: Tile<f32, { [1, 1] }> = exp2(m - m_new, ftz::Enabled);
            let beta: Tile<f32, { [CH, 1] }> = exp2(m_c - m_new.broadcast(shape![CH, 1]), ftz::Enabled);
            let l_sum: Tile<f32, { [1] }> = reduce_sum(l_c * beta, 0i32);
            l = l * alpha + l_sum.reshape(shape![1, 1]);
            let acc_sum: Tile<f32, { [D] }> = reduce_sum(acc_c * beta.broadcast(shape![CH, D]), 0i32);
            acc = acc * alpha.broadcast(shape![1, D]) + acc_sum.reshape(shape![1, D]);
            m = m_new;
        }
        let result: Tile<f32, { [1, D] }> = true_div(acc, l.broadcast(shape![1, D]));
        let result: Tile<E, { [1, 1, D] }> = convert_tile(result.reshape(shape![1, 1, D]));
        let mut op = out.partition_mut(shape![1, 1, D]);
        // SAFETY: out is this CTA's [1, 1, D] tile, so [0, 0, 0] is its only partition index.
        unsafe { store_view_tko_mut(&mut op, result, [0i32, 0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
    }

    /// `attention_sink`, also writing each row's log2-sum-exp over its keys and its sink
    /// (`lse_out`, `[B, S_q, H]` float32, log2 units) for the backward.
    #[cutile::entry()]
    fn attention_sink_lse<
        E: ElementType,
        S: ElementType,
        const BQ: i32,
        const GT: i32,
        const BM: i32,
        const D: i32,
        const GD: i32,
        const BN: i32,
        const GROUP: i32,
        const LAT: i32,
    >(
        out: &mut Tensor<E, { [1, BQ, GD] }>,
        lse_out: &mut Tensor<f32, { [1, BQ, GT] }>,
        q: &Tensor<E, { [-1, -1, -1] }>,
        k: &Tensor<E, { [-1, -1, -1] }>,
        v: &Tensor<E, { [-1, -1, -1] }>,
        sinks: &Tensor<S, { [-1] }>,
        start_q: &Tensor<i32, { [-1] }>,
        scale: f32,
        window: i32,
    ) {
        let (m, l) = one_pass::<E, S, BQ, GT, BM, D, GD, BN, GROUP, LAT>(out, q, k, v, sinks, start_q, scale, window);
        let lse: Tile<f32, { [1, BQ, GT] }> = (m + log2(l)).reshape(shape![1, BQ, GT]);
        let mut lp = lse_out.partition_mut(shape![1, BQ, GT]);
        // SAFETY: lse_out is this CTA's [1, BQ, GT] tile, so [0, 0, 0] is its only partition index.
        unsafe { store_view_tko_mut(&mut lp, lse, [0i32, 0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
    }

    /// The backward's query side (the grid of `attention_sink`): with p = 2^(s - lse) the
    /// forward's weights (from its saved `lse`), each row's delta = rowsum(dO * O) into
    /// `delta_out`, its sink's gradient term -2^(sink - lse) * delta into `dsink_out` (both
    /// `[B, S_q, H]` float32), and dq = sm_scale * sum_j ds_j k_j, ds = p * (dO . v_j - delta).
    #[cutile::entry()]
    fn attention_sink_backward_dq<
        E: ElementType,
        S: ElementType,
        const BQ: i32,
        const GT: i32,
        const BM: i32,
        const D: i32,
        const GD: i32,
        const BN: i32,
        const GROUP: i32,
        const LAT: i32,
    >(
        dq: &mut Tensor<E, { [1, BQ, GD] }>,
        delta_out: &mut Tensor<f32, { [1, BQ, GT] }>,
        dsink_out: &mut Tensor<f32, { [1, BQ, GT] }>,
        q: &Tensor<E, { [-1, -1, -1] }>,
        k: &Tensor<E, { [-1, -1, -1] }>,
        v: &Tensor<E, { [-1, -1, -1] }>,
        out: &Tensor<E, { [-1, -1, -1] }>,
        dout: &Tensor<E, { [-1, -1, -1] }>,
        lse: &Tensor<f32, { [-1, -1, -1] }>,
        sinks: &Tensor<S, { [-1] }>,
        start_q: &Tensor<i32, { [-1] }>,
        scale: f32,
        window: i32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let first: i32 = first_position(start_q);
        let s_q: i32 = get_shape_dim(q.shape(), 1i32);
        let s_kv: i32 = get_shape_dim(k.shape(), 1i32);
        let lo: i32 = first_tile::<BQ, BN>(first, pid.1, window);
        let hi: i32 = end_tile::<BQ, BN>(first, pid.1, s_q, s_kv);
        let qt: Tile<E, { [BM, D] }> = query_tile::<E, BQ, BM, D, GD>(q, pid.0, pid.1, pid.2);
        let dot: Tile<E, { [BM, D] }> = query_tile::<E, BQ, BM, D, GD>(dout, pid.0, pid.1, pid.2);
        let ot: Tile<f32, { [BM, D] }> = convert_tile(query_tile::<E, BQ, BM, D, GD>(out, pid.0, pid.1, pid.2));
        let dof: Tile<f32, { [BM, D] }> = convert_tile(dot);
        let delta: Tile<f32, { [BM] }> = reduce_sum(dof * ot, 1i32);
        let delta: Tile<f32, { [BM, 1] }> = delta.reshape(shape![BM, 1]);
        let lse_rows: Tile<f32, { [BM, 1] }> = row_stats::<BQ, GT, BM>(lse, pid.0, pid.1, pid.2).reshape(shape![BM, 1]);
        let kv_head: i32 = pid.2 * GT / GROUP;
        let kp: Partition<E, { [1, BN, D] }> = k.partition(shape![1, BN, D]);
        let vp: Partition<E, { [1, BN, D] }> = v.partition(shape![1, BN, D]);
        let positions: Tile<i32, { [BM, BN] }> = row_positions::<BQ, GT, BM, BN>(first, pid.1);
        let cols: Tile<i32, { [BM, BN] }> = iota::<i32, { [BN] }>(shape![BN]).reshape(shape![1, BN]).broadcast(shape![BM, BN]);
        let scale_tile: Tile<f32, { [BM, BN] }> = broadcast_scalar(scale, shape![BM, BN]);
        let last_row: i32 = min(pid.1 * BQ + BQ, s_q) - 1i32;
        let lse_bn: Tile<f32, { [BM, BN] }> = lse_rows.broadcast(shape![BM, BN]);
        let delta_bn: Tile<f32, { [BM, BN] }> = delta.broadcast(shape![BM, BN]);
        let zero: Tile<f32, { [BM, BN] }> = constant(0.0f32, shape![BM, BN]);
        let mut acc: Tile<f32, { [BM, D] }> = constant(0.0f32, shape![BM, D]);
        for j in lo..hi {
            let kt: Tile<E, { [1, BN, D] }> =
                if LAT > 0i32 { kp.load_pipelined::<LAT>([pid.0, j, kv_head]) } else { kp.load([pid.0, j, kv_head]) };
            let kt: Tile<E, { [BN, D] }> = kt.reshape(shape![BN, D]);
            let vt: Tile<E, { [1, BN, D] }> =
                if LAT > 0i32 { vp.load_pipelined::<LAT>([pid.0, j, kv_head]) } else { vp.load([pid.0, j, kv_head]) };
            let vt: Tile<E, { [BN, D] }> = vt.reshape(shape![BN, D]);
            let s: Tile<f32, { [BM, BN] }> =
                scores::<E, BM, D, BN>(qt, kt, scale_tile, positions, cols, j * BN, first + pid.1 * BQ, first + last_row, s_kv, window);
            let p: Tile<f32, { [BM, BN] }> = exp2(s - lse_bn, ftz::Enabled);
            let dp: Tile<f32, { [BM, BN] }> = mma(dot, vt.transpose(), zero);
            let ds: Tile<E, { [BM, BN] }> = convert_tile(p * (dp - delta_bn));
            acc = mma(ds, kt, acc);
        }
        let sm_scale: Tile<f32, { [BM, D] }> = broadcast_scalar(scale * 0.6931471805599453f32, shape![BM, D]);
        let result: Tile<E, { [1, BQ, GD] }> = convert_tile((acc * sm_scale).reshape(shape![1, BQ, GD]));
        let mut dp = dq.partition_mut(shape![1, BQ, GD]);
        // SAFETY: dq is this CTA's [1, BQ, GD] tile, so [0, 0, 0] is its only partition index.
        unsafe { store_view_tko_mut(&mut dp, result, [0i32, 0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
        let sink: Tile<f32, { [BM, 1] }> = sink_rows::<S, BQ, GT, BM>(sinks, pid.2);
        let weight: Tile<f32, { [BM, 1] }> = exp2(sink - lse_rows, ftz::Enabled);
        let dsink: Tile<f32, { [BM, 1] }> = negf(weight * delta);
        let dsink: Tile<f32, { [1, BQ, GT] }> = dsink.reshape(shape![1, BQ, GT]);
        let mut sp = dsink_out.partition_mut(shape![1, BQ, GT]);
        // SAFETY: dsink_out is this CTA's [1, BQ, GT] tile, so [0, 0, 0] is its only partition index.
        unsafe { store_view_tko_mut(&mut sp, dsink, [0i32, 0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
        let delta: Tile<f32, { [1, BQ, GT] }> = delta.reshape(shape![1, BQ, GT]);
        let mut tp = delta_out.partition_mut(shape![1, BQ, GT]);
        // SAFETY: delta_out is this CTA's [1, BQ, GT] tile, so [0, 0, 0] is its only partition index.
        unsafe { store_view_tko_mut(&mut tp, delta, [0i32, 0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
    }

    /// The backward's key side: a CTA (pid.0 = batch, pid.1 = block of BN keys, pid.2 = KV
    /// head) sums over its KV head's GROUP query heads (GT at a time) and the query blocks
    /// that see any of its keys, keys as rows: dv = sum p^T dO, dk = sm_scale * sum ds^T q,
    /// with p and ds as `attention_sink_backward_dq` has them (its `delta`).
    #[cutile::entry()]
    fn attention_sink_backward_dkdv<
        E: ElementType,
        const BQ: i32,
        const GT: i32,
        const BM: i32,
        const D: i32,
        const GD: i32,
        const BN: i32,
        const GROUP: i32,
    >(
        dk: &mut Tensor<E, { [1, BN, D] }>,
        dv: &mut Tensor<E, { [1, BN, D] }>,
        q: &Tensor<E, { [-1, -1, -1] }>,
        k: &Tensor<E, { [-1, -1, -1] }>,
        v: &Tensor<E, { [-1, -1, -1] }>,
        dout: &Tensor<E, { [-1, -1, -1] }>,
        lse: &Tensor<f32, { [-1, -1, -1] }>,
        delta: &Tensor<f32, { [-1, -1, -1] }>,
        start_q: &Tensor<i32, { [-1] }>,
        scale: f32,
        window: i32,
    ) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let first: i32 = first_position(start_q);
        let s_q: i32 = get_shape_dim(q.shape(), 1i32);
        let s_kv: i32 = get_shape_dim(k.shape(), 1i32);
        let key0: i32 = pid.1 * BN;
        let kp: Partition<E, { [1, BN, D] }> = k.partition(shape![1, BN, D]);
        let vp: Partition<E, { [1, BN, D] }> = v.partition(shape![1, BN, D]);
        let kt: Tile<E, { [BN, D] }> = kp.load([pid.0, pid.1, pid.2]).reshape(shape![BN, D]);
        let vt: Tile<E, { [BN, D] }> = vp.load([pid.0, pid.1, pid.2]).reshape(shape![BN, D]);
        // Query blocks with a row at or past the first key (causal) and, with a window, a row
        // at most window - 1 positions past the last key.
        let q_lo: i32 = max(key0 - first, 0i32) / BQ;
        let mut q_hi: i32 = ceil_div(s_q, BQ);
        if window > 0i32 {
            let reach: i32 = key0 + BN + window - 2i32 - first;
            q_hi = min(q_hi, max(reach + BQ, 0i32) / BQ);
        }
        let keys: Tile<i32, { [BN, BM] }> =
            broadcast_scalar(key0, shape![BN, BM]) + iota::<i32, { [BN] }>(shape![BN]).reshape(shape![BN, 1]).broadcast(shape![BN, BM]);
        let scale_tile: Tile<f32, { [BN, BM] }> = broadcast_scalar(scale, shape![BN, BM]);
        let zero: Tile<f32, { [BN, BM] }> = constant(0.0f32, shape![BN, BM]);
        let mut dk_acc: Tile<f32, { [BN, D] }> = constant(0.0f32, shape![BN, D]);
        let mut dv_acc: Tile<f32, { [BN, D] }> = constant(0.0f32, shape![BN, D]);
        for hb in 0i32..(GROUP / GT) {
            let heads: i32 = pid.2 * (GROUP / GT) + hb;
            for i in q_lo..q_hi {
                let qt: Tile<E, { [BM, D] }> = query_tile::<E, BQ, BM, D, GD>(q, pid.0, i, heads);
                let dot: Tile<E, { [BM, D] }> = query_tile::<E, BQ, BM, D, GD>(dout, pid.0, i, heads);
                let lse_cols: Tile<f32, { [BN, BM] }> =
                    row_stats::<BQ, GT, BM>(lse, pid.0, i, heads).reshape(shape![1, BM]).broadcast(shape![BN, BM]);
                let delta_cols: Tile<f32, { [BN, BM] }> =
                    row_stats::<BQ, GT, BM>(delta, pid.0, i, heads).reshape(shape![1, BM]).broadcast(shape![BN, BM]);
                let mut s: Tile<f32, { [BN, BM] }> = mma(kt, qt.transpose(), zero) * scale_tile;
                let first_row: i32 = first + i * BQ;
                let last_row: i32 = first + min(i * BQ + BQ, s_q) - 1i32;
                let past_causal: bool = key0 + BN - 1i32 > first_row;
                let before_window: bool = window > 0i32 && key0 < last_row - window + 1i32;
                if past_causal || before_window || key0 + BN > s_kv {
                    let positions: Tile<i32, { [BN, BM] }> = column_positions::<BQ, GT, BM, BN>(first, i);
                    let s_kv_t: Tile<i32, { [BN, BM] }> = broadcast_scalar(s_kv, shape![BN, BM]);
                    let mut visible: Tile<bool, { [BN, BM] }> = le_tile(keys, positions);
                    visible = visible & lt_tile(keys, s_kv_t);
                    if window > 0i32 {
                        let oldest: Tile<i32, { [BN, BM] }> = positions - broadcast_scalar(window - 1i32, shape![BN, BM]);
                        visible = visible & ge_tile(keys, oldest);
                    }
                    let hidden: Tile<f32, { [BN, BM] }> = constant(f32::NEG_INFINITY, shape![BN, BM]);
                    s = select(visible, s, hidden);
                }
                let p: Tile<f32, { [BN, BM] }> = exp2(s - lse_cols, ftz::Enabled);
                let pe: Tile<E, { [BN, BM] }> = convert_tile(p);
                dv_acc = mma(pe, dot, dv_acc);
                let dp: Tile<f32, { [BN, BM] }> = mma(vt, dot.transpose(), zero);
                let ds: Tile<E, { [BN, BM] }> = convert_tile(p * (dp - delta_cols));
                dk_acc = mma(ds, qt, dk_acc);
            }
        }
        let sm_scale: Tile<f32, { [BN, D] }> = broadcast_scalar(scale * 0.6931471805599453f32, shape![BN, D]);
        let dk_tile: Tile<E, { [1, BN, D] }> = convert_tile((dk_acc * sm_scale).reshape(shape![1, BN, D]));
        let dv_tile: Tile<E, { [1, BN, D] }> = convert_tile(dv_acc.reshape(shape![1, BN, D]));
        let mut kpart = dk.partition_mut(shape![1, BN, D]);
        // SAFETY: dk is this CTA's [1, BN, D] tile, so [0, 0, 0] is its only partition index.
        unsafe { store_view_tko_mut(&mut kpart, dk_tile, [0i32, 0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
        let mut vpart = dv.partition_mut(shape![1, BN, D]);
        // SAFETY: dv is this CTA's [1, BN, D] tile, so [0, 0, 0] is its only partition index.
        unsafe { store_view_tko_mut(&mut vpart, dv_tile, [0i32, 0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
    }

    /// Each column's query position (the transposed `row_positions`), across `BN` rows.
    fn column_positions<const BQ: i32, const GT: i32, const BM: i32, const BN: i32>(first: i32, block: i32) -> Tile<i32, { [BN, BM] }> {
        let cols: Tile<i32, { [BM] }> = iota(shape![BM]);
        let gt: Tile<i32, { [BM] }> = broadcast_scalar(GT, shape![BM]);
        let base: Tile<i32, { [BM] }> = broadcast_scalar(first + block * BQ, shape![BM]);
        let positions: Tile<i32, { [BM] }> = base + cols / gt;
        positions.reshape(shape![1, BM]).broadcast(shape![BN, BM])
    }

    /// A `[B, S_q, H]` float32 per-row statistic (lse, delta) of query tile (batch, block,
    /// head block), one per row of its `[BQ*GT, D]` matrix.
    fn row_stats<const BQ: i32, const GT: i32, const BM: i32>(t: &Tensor<f32, { [-1, -1, -1] }>, batch: i32, block: i32, heads: i32) -> Tile<f32, { [BM] }> {
        let part: Partition<f32, { [1, BQ, GT] }> = t.partition(shape![1, BQ, GT]);
        let raw: Tile<f32, { [1, BQ, GT] }> = part.load([batch, block, heads]);
        raw.reshape(shape![BM])
    }

    /// The one-pass forward of this CTA's out tile (pid.0 = batch, pid.1 = query block, pid.2 =
    /// head block), stored; returns each row's final running max and sum (the sink in both).
    fn one_pass<
        E: ElementType,
        S: ElementType,
        const BQ: i32,
        const GT: i32,
        const BM: i32,
        const D: i32,
        const GD: i32,
        const BN: i32,
        const GROUP: i32,
        const LAT: i32,
    >(
        out: &mut Tensor<E, { [1, BQ, GD] }>,
        q: &Tensor<E, { [-1, -1, -1] }>,
        k: &Tensor<E, { [-1, -1, -1] }>,
        v: &Tensor<E, { [-1, -1, -1] }>,
        sinks: &Tensor<S, { [-1] }>,
        start_q: &Tensor<i32, { [-1] }>,
        scale: f32,
        window: i32,
    ) -> (Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, 1] }>) {
        let pid: (i32, i32, i32) = get_tile_block_id();
        let sink: Tile<f32, { [BM, 1] }> = sink_rows::<S, BQ, GT, BM>(sinks, pid.2);
        let first: i32 = first_position(start_q);
        let s_q: i32 = get_shape_dim(q.shape(), 1i32);
        let s_kv: i32 = get_shape_dim(k.shape(), 1i32);
        let lo: i32 = first_tile::<BQ, BN>(first, pid.1, window);
        let hi: i32 = end_tile::<BQ, BN>(first, pid.1, s_q, s_kv);
        let qt: Tile<E, { [BM, D] }> = query_tile::<E, BQ, BM, D, GD>(q, pid.0, pid.1, pid.2);
        let one: Tile<f32, { [BM, 1] }> = constant(1.0f32, shape![BM, 1]);
        let tile = [pid.0, pid.1, pid.2];
        let (m, l, acc) =
            attend::<E, BQ, GT, BM, D, BN, GROUP, LAT>(qt, k, v, tile, first, s_q, s_kv, [lo, hi], scale, window, sink, one);
        let result: Tile<f32, { [BM, D] }> = true_div(acc, l.broadcast(shape![BM, D]));
        let result: Tile<E, { [1, BQ, GD] }> = convert_tile(result.reshape(shape![1, BQ, GD]));
        let mut op = out.partition_mut(shape![1, BQ, GD]);
        // SAFETY: out is this CTA's [1, BQ, GD] tile, so [0, 0, 0] is its only partition index.
        unsafe { store_view_tko_mut(&mut op, result, [0i32, 0i32, 0i32], ordering::Weak, scope::TileBlock, None, tma::Disabled) };
        (m, l)
    }

    /// The online softmax of query tile `qt` (its `[batch, block, heads]` indices) over
    /// the KV tiles `keys` = [lo, hi), from running max `m0` and sum `l0`: returns the
    /// running max, sum and unnormalised accumulator after the last tile.
    fn attend<
        E: ElementType,
        const BQ: i32,
        const GT: i32,
        const BM: i32,
        const D: i32,
        const BN: i32,
        const GROUP: i32,
        const LAT: i32,
    >(
        qt: Tile<E, { [BM, D] }>,
        k: &Tensor<E, { [-1, -1, -1] }>,
        v: &Tensor<E, { [-1, -1, -1] }>,
        tile: [i32; 3],
        first: i32,
        s_q: i32,
        s_kv: i32,
        keys: [i32; 2],
        scale: f32,
        window: i32,
        m0: Tile<f32, { [BM, 1] }>,
        l0: Tile<f32, { [BM, 1] }>,
    ) -> (Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, 1] }>, Tile<f32, { [BM, D] }>) {
        let [batch, block, heads] = tile;
        let [lo, hi] = keys;
        let mut m: Tile<f32, { [BM, 1] }> = m0;
        let mut l: Tile<f32, { [BM, 1] }> = l0;
        let mut acc: Tile<f32, { [BM, D] }> = constant(0.0f32, shape![BM, D]);
        let kv_head: i32 = heads * GT / GROUP;
        let kp: Partition<E, { [1, BN, D] }> = k.partition(shape![1, BN, D]);
        let vp: Partition<E, { [1, BN, D] }> = v.partition(shape![1, BN, D]);
        let positions: Tile<i32, { [BM, BN] }> = row_positions::<BQ, GT, BM, BN>(first, block);
        let cols: Tile<i32, { [BM, BN] }> = iota::<i32, { [BN] }>(shape![BN]).reshape(shape![1, BN]).broadcast(shape![BM, BN]);
        let scale_tile: Tile<f32, { [BM, BN] }> = broadcast_scalar(scale, shape![BM, BN]);
        let last_row: i32 = min(block * BQ + BQ, s_q) - 1i32;
        for j in lo..hi {
            // With LAT 0 the K/V loads carry no latency hint (the condition folds at compile time).
            let kt: Tile<E, { [1, BN, D] }> =
                if LAT > 0i32 { kp.load_pipelined::<LAT>([batch, j, kv_head]) } else { kp.load([batch, j, kv_head]) };
            let kt: Tile<E, { [BN, D] }> = kt.reshape(shape![BN, D]);
            let s: Tile<f32, { [BM, BN] }> =
                scores::<E, BM, D, BN>(qt, kt, scale_tile, positions, cols, j * BN, first + block * BQ, first + last_row, s_kv, window);
            let row_max: Tile<f32, { [BM] }> = reduce_max(s, 1i32);
            let m_new: Tile<f32, { [BM, 1] }> = max_tile(m, row_max.reshape(shape![BM, 1]));
            let p: Tile<f32, { [BM, BN] }> = exp2(s - m_new.broadcast(shape![BM, BN]), ftz::Enabled);
            let alpha: Tile<f32, { [BM, 1] }> = exp2(m - m_new, ftz::Enabled);
            let row_sum: Tile<f32, { [BM] }> = reduce_sum(p, 1i32);
            l = l * alpha + row_sum.reshape(shape![BM, 1]);
            let vt: Tile<E, { [1, BN, D] }> =
                if LAT > 0i32 { vp.load_pipelined::<LAT>([batch, j, kv_head]) } else { vp.load([batch, j, kv_head]) };
            let vt: Tile<E, { [BN, D] }> = vt.reshape(shape![BN, D]);
            let pe: Tile<E, { [BM, BN] }> = convert_tile(p);
            acc = mma(pe, vt, acc * alpha.broadcast(shape![BM, D]));
            m = m_new;
        }
        (m, l, acc)
    }

    /// Scaled scores of the q rows against KV tile `kt` (keys from `key0`), -inf where a
    /// key is not visible: past the row's position (causal), at or past S_kv, or
    /// `window` or more before the row. A tile every row sees whole (before the first
    /// row's causal edge, past the last row's window edge, inside S_kv) skips the mask.
    fn scores<E: ElementType, const BM: i32, const D: i32, const BN: i32>(
        qt: Tile<E, { [BM, D] }>,
        kt: Tile<E, { [BN, D] }>,
        scale: Tile<f32, { [BM, BN] }>,
        positions: Tile<i32, { [BM, BN] }>,
        cols: Tile<i32, { [BM, BN] }>,
        key0: i32,
        first_row: i32,
        last_row: i32,
        s_kv: i32,
        window: i32,
    ) -> Tile<f32, { [BM, BN] }> {
        let zero: Tile<f32, { [BM, BN] }> = constant(0.0f32, shape![BM, BN]);
        let mut s: Tile<f32, { [BM, BN] }> = mma(qt, kt.transpose(), zero) * scale;
        let past_causal: bool = key0 + BN - 1i32 > first_row;
        let before_window: bool = window > 0i32 && key0 < last_row - window + 1i32;
        if past_causal || before_window || key0 + BN > s_kv {
            let keys: Tile<i32, { [BM, BN] }> = broadcast_scalar(key0, shape![BM, BN]) + cols;
            let s_kv_t: Tile<i32, { [BM, BN] }> = broadcast_scalar(s_kv, shape![BM, BN]);
            let mut visible: Tile<bool, { [BM, BN] }> = le_tile(keys, positions);
            visible = visible & lt_tile(keys, s_kv_t);
            if window > 0i32 {
                let oldest: Tile<i32, { [BM, BN] }> = positions - broadcast_scalar(window - 1i32, shape![BM, BN]);
                visible = visible & ge_tile(keys, oldest);
            }
            let hidden: Tile<f32, { [BM, BN] }> = constant(f32::NEG_INFINITY, shape![BM, BN]);
            s = select(visible, s, hidden);
        }
        s
    }

    /// start_q, read on the device from its one-element tensor.
    fn first_position(start_q: &Tensor<i32, { [-1] }>) -> i32 {
        let part: Partition<i32, { [1] }> = start_q.partition(shape![1]);
        let one: Tile<i32, { [1] }> = part.load([0i32]);
        tile_to_scalar(one.reshape(shape![]))
    }

    /// The first KV tile any row of query block `block` sees: 0, or its first row's window edge.
    fn first_tile<const BQ: i32, const BN: i32>(first: i32, block: i32, window: i32) -> i32 {
        let mut lo: i32 = 0i32;
        if window > 0i32 {
            lo = max(first + block * BQ - window + 1i32, 0i32) / BN;
        }
        lo
    }

    /// One past the last KV tile any row of query block `block` sees (its last row's
    /// causal edge, within S_kv); at most `lo` when no key is visible.
    fn end_tile<const BQ: i32, const BN: i32>(first: i32, block: i32, s_q: i32, s_kv: i32) -> i32 {
        let last: i32 = first + min(block * BQ + BQ, s_q) - 1i32;
        ceil_div(max(min(last + 1i32, s_kv), 0i32), BN)
    }

    /// Query tile (batch, block, head block) as the `[BQ*GT, D]` matrix of its rows.
    fn query_tile<E: ElementType, const BQ: i32, const BM: i32, const D: i32, const GD: i32>(
        q: &Tensor<E, { [-1, -1, -1] }>,
        batch: i32,
        block: i32,
        heads: i32,
    ) -> Tile<E, { [BM, D] }> {
        let qp: Partition<E, { [1, BQ, GD] }> = q.partition(shape![1, BQ, GD]);
        let raw: Tile<E, { [1, BQ, GD] }> = qp.load([batch, block, heads]);
        raw.reshape(shape![BM, D])
    }

    /// Each row's query position (start_q + its position in the sequence), across `BN` columns.
    fn row_positions<const BQ: i32, const GT: i32, const BM: i32, const BN: i32>(first: i32, block: i32) -> Tile<i32, { [BM, BN] }> {
        let rows: Tile<i32, { [BM] }> = iota(shape![BM]);
        let gt: Tile<i32, { [BM] }> = broadcast_scalar(GT, shape![BM]);
        let base: Tile<i32, { [BM] }> = broadcast_scalar(first + block * BQ, shape![BM]);
        let positions: Tile<i32, { [BM] }> = base + rows / gt;
        positions.reshape(shape![BM, 1]).broadcast(shape![BM, BN])
    }

    /// The sinks of head block `heads` (GT heads), in log2 units, one per row.
    fn sink_rows<S: ElementType, const BQ: i32, const GT: i32, const BM: i32>(sinks: &Tensor<S, { [-1] }>, heads: i32) -> Tile<f32, { [BM, 1] }> {
        let sp: Partition<S, { [GT] }> = sinks.partition(shape![GT]);
        let raw: Tile<S, { [GT] }> = sp.load([heads]);
        let sink: Tile<f32, { [GT] }> = convert_tile(raw);
        let log2e: Tile<f32, { [GT] }> = constant(1.4426950408889634f32, shape![GT]);
        let per_head: Tile<f32, { [1, GT] }> = (sink * log2e).reshape(shape![1, GT]);
        per_head.broadcast(shape![BQ, GT]).reshape(shape![BM, 1])
    }
}
