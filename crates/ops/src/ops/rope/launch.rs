//! Host side of rope: checks the views and enqueues the kernel on the caller's stream
//! (crate::launch) without waiting for it.

use super::kernel::rope_kernels;
use crate::abi::{CheckedTensor, DType, OpError, OpResult};
use crate::launch::{self, FirstLaunch, Generic, Launch, Param};
use crate::spec::{check_block, Hints, KernelModule};
use cutile::half::{bf16, f16};
use cutile::prelude::*;

const KERNELS: KernelModule =
    KernelModule { name: "rope_kernels", ast: rope_kernels::__module_ast_self, source_hash: rope_kernels::_SOURCE_HASH };

/// q and k of one batch, length, head dim and dtype, unit last stride; returns (B, S, D).
fn check_inputs(q: &CheckedTensor, k: &CheckedTensor) -> OpResult<(i32, i32, i32)> {
    for (name, t) in [("q", q), ("k", k)] {
        if t.shape.len() != 4 {
            return Err(OpError::invalid(format!("rope takes {name} as a 4-D [batch, heads, seq, head_dim] view; got {:?}", t.shape)));
        }
        if t.shape[3] > 1 && t.strides[3] != 1 {
            return Err(OpError::invalid(format!("{name} must have unit stride along head_dim, got strides {:?}", t.strides)));
        }
    }
    let (b, s, d) = (q.shape[0], q.shape[2], q.shape[3]);
    if k.shape[0] != b || k.shape[2] != s || k.shape[3] != d || k.dtype != q.dtype {
        return Err(OpError::invalid(format!(
            "q {:?} {:?} and k {:?} {:?} must share batch, seq, head_dim and dtype",
            q.shape, q.dtype, k.shape, k.dtype
        )));
    }
    Ok((b, s, d))
}

/// cos and sin: `[1 or B, S, >= half]` of q's dtype, unit last stride.
fn check_tables(cos: &CheckedTensor, sin: &CheckedTensor, b: i32, s: i32, half: i32, dtype: DType) -> OpResult<()> {
    for (name, t) in [("cos", cos), ("sin", sin)] {
        let fits = t.shape.len() == 3 && (t.shape[0] == 1 || t.shape[0] == b) && t.shape[1] == s && t.shape[2] >= half;
        if !fits || t.dtype != dtype || (t.shape[2] > 1 && t.strides[2] != 1) {
            return Err(OpError::invalid(format!(
                "{name} must be a [1 or {b}, {s}, >= {half}] view of dtype {dtype:?} with unit last stride; got {:?} {:?} strides {:?}",
                t.shape, t.dtype, t.strides
            )));
        }
    }
    Ok(())
}

/// The launch: q_out in `[1, tile_q, D]` tiles and k_out in `[1, tile_k, D]`, one CTA per
/// (batch x position, head block); both have the same number of head blocks. The last two
/// generics say whether tile_q (tile_k) divides q's (k's) heads: the kernel then loads with
/// the head axis proven in bounds.
fn describe<'a>(
    [q_out, k_out, q, k, cos, sin]: [&'a CheckedTensor; 6],
    sign: f32,
    [half, tile_q, tile_k]: [i32; 3],
    hints: Hints,
) -> Launch<'a> {
    let d = q.shape[3];
    let params = vec![
        Param::Out("q_out", q_out, vec![1, tile_q, d]),
        Param::Out("k_out", k_out, vec![1, tile_k, d]),
        Param::In("q", q),
        Param::In("k", k),
        Param::In("cos", cos),
        Param::In("sin", sin),
        Param::F32("sign", sign),
    ];
    let exact = |x: &CheckedTensor, tile: i32| i32::from(x.shape[1] % tile == 0);
    let generics = Generic::list(&[q.dtype], &[tile_q, tile_k, d, half, exact(q, tile_q), exact(k, tile_k)]);
    Launch { module: KERNELS, kernel: "rope", generics, hints, params }
}

/// The head blocks of `heads` heads in tiles of `tile`.
fn blocks(heads: i32, tile: i32) -> i32 {
    (heads + tile - 1) / tile
}

/// Every check the unchecked kernel's indices rely on (its entry is `unchecked_accesses`):
/// returns (B, S, D).
fn check_launch(
    [q_out, k_out, q, k, cos, sin]: [&CheckedTensor; 6],
    half: i32,
    [tile_q, tile_k]: [i32; 2],
) -> OpResult<(i32, i32, i32)> {
    let (b, s, d) = check_inputs(q, k)?;
    check_block("half", half)?;
    if 2 * half > d || d % half != 0 {
        return Err(OpError::invalid(format!(
            "half = {half}: the rotated dims (2 * half) must fit head_dim {d}, which must be a multiple of half"
        )));
    }
    check_tables(cos, sin, b, s, half, q.dtype)?;
    for (name, out, x, tile_name, tile) in [("q_out", q_out, q, "tile_q", tile_q), ("k_out", k_out, k, "tile_k", tile_k)] {
        check_block(tile_name, tile)?;
        if out.shape != [b * s, x.shape[1], d] || out.dtype != x.dtype || !out.is_contiguous() {
            return Err(OpError::invalid(format!(
                "{name} must be a contiguous [{}, {}, {d}] of dtype {:?}; got {:?} {:?} strides {:?}",
                b * s,
                x.shape[1],
                x.dtype,
                out.shape,
                out.dtype,
                out.strides
            )));
        }
    }
    if (q.shape[1] == 0) != (k.shape[1] == 0) {
        return Err(OpError::invalid(format!(
            "rope rotates q and k together: both need heads, or neither; got {} q heads and {} k heads",
            q.shape[1],
            k.shape[1]
        )));
    }
    // One grid serves both: q's and k's heads in as many blocks (each block holds a head, so
    // no store lands wholly past a tensor's heads).
    let (blocks_q, blocks_k) = (blocks(q.shape[1], tile_q), blocks(k.shape[1], tile_k));
    if blocks_q != blocks_k {
        return Err(OpError::invalid(format!(
            "tile_q = {tile_q}, tile_k = {tile_k}: {} q heads and {} k heads must fall in as many blocks; got {blocks_q} and {blocks_k}",
            q.shape[1],
            k.shape[1]
        )));
    }
    Ok((b, s, d))
}

// The C export's flat scalar parameters, passed straight through.
#[allow(clippy::too_many_arguments)]
pub fn rope(
    q_out: &CheckedTensor,
    k_out: &CheckedTensor,
    q: &CheckedTensor,
    k: &CheckedTensor,
    cos: &CheckedTensor,
    sin: &CheckedTensor,
    sign: f32,
    half: i32,
    [tile_q, tile_k]: [i32; 2],
    occupancy: i32,
    warps: i32,
    device: i32,
    stream: u64,
) -> OpResult<()> {
    let (b, s, d) = check_launch([q_out, k_out, q, k, cos, sin], half, [tile_q, tile_k])?;
    if !sign.is_finite() {
        return Err(OpError::invalid(format!("sign = {sign}: must be finite (1 forward, -1 backward)")));
    }
    let hints = Hints::checked(occupancy, warps)?;
    if b == 0 || s == 0 || d == 0 || q.shape[1] == 0 || k.shape[1] == 0 {
        return Ok(());
    }
    // The kernel reads each table row's first `half` entries: narrowed to them, the tables' rows
    // are whole tiles (a static extent, so no per-lane mask).
    let narrowed = |t: &CheckedTensor| CheckedTensor { shape: vec![t.shape[0], t.shape[1], half], ..t.clone() };
    let (cos, sin) = (&narrowed(cos), &narrowed(sin));
    let launch = describe([q_out, k_out, q, k, cos, sin], sign, [half, tile_q, tile_k], hints);
    let all = [q_out, k_out, q, k, cos, sin];
    launch::enqueue_launch("rope", &launch, device, stream, |first| match q.dtype {
        DType::F32 => launch_first::<f32>(first, &launch, all),
        DType::F16 => launch_first::<f16>(first, &launch, all),
        DType::BF16 => launch_first::<bf16>(first, &launch, all),
    })
}

fn launch_first<T: cutile::DType>(first: &FirstLaunch, launch: &Launch, [q_out, k_out, q, k, cos, sin]: [&CheckedTensor; 6]) -> OpResult<()> {
    // SAFETY: torch owns the allocations and keeps them alive while the work it ordered on
    // the stream runs; q_out and k_out are fresh outputs nobody else writes meanwhile.
    let tensor = |t: &CheckedTensor| unsafe { first.borrow::<T>(t) };
    crate::typed_launch!(first, {
        let (mut qo, mut ko, qt, kt, ct, st) = (tensor(q_out), tensor(k_out), tensor(q), tensor(k), tensor(cos), tensor(sin));
    } unsafe {
        // SAFETY: the kernel's loads are unchecked; `check_launch` checked every index it takes
        // on the host: batch x position < the grid's rows, head blocks ceil(heads / tile) for q
        // and k alike, the table batch clamped to cos's, and every view's extents against q's
        // (the test every_launch_the_checks_accept_keeps_the_kernels_indices_in_range).
        rope_kernels::rope(
            (&mut qo).partition(launch.tile::<3>("q_out")), (&mut ko).partition(launch.tile::<3>("k_out")),
            &qt, &kt, &ct, &st, launch.float("sign"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(shape: &[i32], strides: &[i32]) -> CheckedTensor {
        CheckedTensor { ptr: 0x1000, dtype: DType::BF16, shape: shape.to_vec(), strides: strides.to_vec() }
    }

    #[test]
    fn the_launch_is_described_as_the_kernel_reads() {
        // HF's layout: [B, S, H, D] memory seen as [B, H, S, D].
        let (q, k) = (view(&[2, 32, 7, 128], &[28672, 128, 4096, 1]), view(&[2, 8, 7, 128], &[7168, 128, 1024, 1]));
        let (qo, ko) = (view(&[14, 32, 128], &[4096, 128, 1]), view(&[14, 8, 128], &[1024, 128, 1]));
        let cos = view(&[2, 7, 64], &[896, 128, 1]);
        let hints = Hints::checked(0, 0).unwrap();
        crate::launch::signature::assert_matches_kernel(&describe([&qo, &ko, &q, &k, &cos, &cos], 1.0, [64, 8, 2], hints));
    }

    #[test]
    fn every_launch_the_checks_accept_keeps_the_kernels_indices_in_range() {
        // The kernel reads unchecked: for each accepted launch, the indices it computes from
        // its grid (B * S rows, blocks head blocks) must land inside q, k, the tables and the outputs.
        let (d, half) = (8, 4);
        let mut accepted = 0;
        for (b, s) in [(1, 1), (1, 5), (3, 1), (2, 7)] {
            for (hq, hk) in [(1, 1), (4, 1), (5, 3), (8, 2), (28, 4), (3, 6)] {
                for (tq, tk) in [(1, 1), (2, 1), (4, 1), (8, 2), (4, 2), (8, 8), (32, 4), (16, 2), (2, 4)] {
                    for bc in [1, b] {
                        let q = view(&[b, hq, s, d], &[s * hq * d, d, hq * d, 1]);
                        let k = view(&[b, hk, s, d], &[s * hk * d, d, hk * d, 1]);
                        let (qo, ko) = (view(&[b * s, hq, d], &[hq * d, d, 1]), view(&[b * s, hk, d], &[hk * d, d, 1]));
                        let t = view(&[bc, s, 2 * half], &[s * 2 * half, 2 * half, 1]);
                        if check_launch([&qo, &ko, &q, &k, &t, &t], half, [tq, tk]).is_err() {
                            continue;
                        }
                        accepted += 1;
                        let grid_blocks = blocks(hq, tq);
                        for row in 0..b * s {
                            let (batch, pos) = (row / s, row % s);
                            assert!(batch < b && pos < s && batch.min(bc - 1) < bc);
                        }
                        for block in 0..grid_blocks {
                            // each block starts inside both tensors' heads (a partial last block is masked)
                            assert!(block * tq < hq && block * tk < hk, "b{b} s{s} {hq}/{hk} tiles {tq}/{tk} block {block}");
                        }
                        // A head axis the kernel loads as proven in bounds holds every block whole.
                        let launch = describe([&qo, &ko, &q, &k, &t, &t], 1.0, [half, tq, tk], Hints::checked(0, 0).unwrap());
                        for (exact, heads, tile) in [(&launch.generics[5], hq, tq), (&launch.generics[6], hk, tk)] {
                            if *exact == Generic::Int(1) {
                                assert!(grid_blocks * tile <= heads, "{heads} heads in {grid_blocks} blocks of {tile}");
                            }
                        }
                    }
                }
            }
        }
        assert!(accepted > 50, "{accepted}");
    }

    #[test]
    fn bad_views_are_refused_with_what_to_pass() {
        let q = view(&[2, 4, 7, 64], &[1792, 448, 64, 1]);
        assert!(check_inputs(&q, &view(&[2, 4, 7, 32], &[896, 224, 32, 1])).unwrap_err().message.contains("share"));
        assert!(check_inputs(&view(&[2, 4, 7, 64], &[1792, 448, 1, 7]), &q).unwrap_err().message.contains("unit stride"));
        assert!(check_tables(&view(&[3, 7, 64], &[448, 64, 1]), &view(&[1, 7, 64], &[448, 64, 1]), 2, 7, 32, DType::BF16).is_err());
        assert!(check_tables(&view(&[1, 7, 16], &[112, 16, 1]), &view(&[1, 7, 16], &[112, 16, 1]), 2, 7, 32, DType::BF16).is_err());
        assert!(check_tables(&view(&[2, 7, 32], &[224, 32, 1]), &view(&[1, 7, 64], &[448, 64, 1]), 2, 7, 32, DType::BF16).is_ok());
    }
}
