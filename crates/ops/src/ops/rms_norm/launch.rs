//! Host side of rms_norm: checks the views and enqueues the forward, backward or dw
//! kernel on the caller's stream (crate::launch) without waiting for it.

use super::kernel::rms_norm_kernels;
use crate::abi::{CheckedTensor, DType, OpError, OpResult};
use crate::launch::{self, FirstLaunch, Generic, Launch, Param};
use crate::spec::{check_block, Hints, KernelModule};
use cutile::half::{bf16, f16};
use cutile::prelude::*;

const KERNELS: KernelModule = KernelModule {
    name: "rms_norm_kernels",
    ast: rms_norm_kernels::__module_ast_self,
    source_hash: rms_norm_kernels::_SOURCE_HASH,
};

/// x (and dy) `[M, N]` read along unit-stride rows, w `[N]` contiguous, all of one dtype;
/// returns (M, N, dtype).
fn check_rows(names: &[&str], rows: &[&CheckedTensor], w: &CheckedTensor) -> OpResult<(i32, i32, DType)> {
    let x = rows[0];
    for (name, t) in names.iter().zip(rows) {
        if t.shape.len() != 2 || t.shape != x.shape {
            return Err(OpError::invalid(format!("rms_norm takes {name} as a 2-D [rows, N] view like {}; got {:?}", names[0], t.shape)));
        }
        if t.dtype != x.dtype {
            return Err(OpError::invalid(format!("{name} dtype {:?} differs from {} dtype {:?}", t.dtype, names[0], x.dtype)));
        }
        if t.shape[1] > 1 && t.strides[1] != 1 {
            return Err(OpError::invalid(format!("{name} must have unit stride along its last dim, got {:?}", t.strides)));
        }
    }
    if w.shape != [x.shape[1]] || w.dtype != x.dtype || (w.shape[0] > 1 && w.strides[0] != 1) {
        return Err(OpError::invalid(format!(
            "w must be a contiguous [{}] of dtype {:?} (x's row length and dtype); got {:?} {:?} strides {:?}",
            x.shape[1], x.dtype, w.shape, w.dtype, w.strides
        )));
    }
    Ok((x.shape[0], x.shape[1], x.dtype))
}

/// A contiguous output of `shape` and `dtype`.
fn check_output(name: &str, t: &CheckedTensor, shape: &[i32], dtype: DType) -> OpResult<()> {
    if t.shape != shape || t.dtype != dtype || !t.is_contiguous() {
        return Err(OpError::invalid(format!(
            "{name} must be a contiguous {shape:?} of dtype {dtype:?}; got {:?} {:?} strides {:?}",
            t.shape, t.dtype, t.strides
        )));
    }
    Ok(())
}

/// BN must cover a row: the kernels hold a whole row in one tile.
fn check_row_tile(block_m: i32, block_n: i32, n: i32) -> OpResult<()> {
    check_block("block_m", block_m)?;
    check_block("block_n", block_n)?;
    if block_n < n {
        return Err(OpError::invalid(format!("block_n = {block_n} must cover a row of {n} elements")));
    }
    Ok(())
}

fn check_scalars(eps: f32, offset: f32) -> OpResult<()> {
    if !eps.is_finite() || eps < 0.0 {
        return Err(OpError::invalid(format!("eps = {eps}: must be finite and non-negative")));
    }
    if !offset.is_finite() {
        return Err(OpError::invalid(format!("offset = {offset}: must be finite")));
    }
    Ok(())
}

/// The forward's launch: y in `[block_m, block_n]` tiles of rows.
fn describe_forward<'a>(
    [y, x, w]: [&'a CheckedTensor; 3],
    [eps, offset]: [f32; 2],
    [block_m, block_n]: [i32; 2],
    hints: Hints,
) -> Launch<'a> {
    let params = vec![
        Param::Out("y", y, vec![block_m, block_n]),
        Param::In("x", x),
        Param::In("w", w),
        Param::F32("eps", eps),
        Param::F32("offset", offset),
    ];
    let generics = Generic::list(&[x.dtype], &[block_m, block_n, x.shape[1]]);
    Launch { module: KERNELS, kernel: "rms_norm_forward", generics, hints, params }
}

/// The backward's launch: dx in `[rows, block_n]` tiles (one CTA each, `block_m` rows at a
/// time), each CTA's dw partial one `[1, block_n]` row of `dw_part`.
fn describe_backward<'a>(
    [dx, dw_part, dy, x, w]: [&'a CheckedTensor; 5],
    [eps, offset]: [f32; 2],
    [block_m, block_n, rows]: [i32; 3],
    hints: Hints,
) -> Launch<'a> {
    let params = vec![
        Param::Out("dx", dx, vec![rows, block_n]),
        Param::Out("dw_part", dw_part, vec![1, block_n]),
        Param::In("dy", dy),
        Param::In("x", x),
        Param::In("w", w),
        Param::F32("eps", eps),
        Param::F32("offset", offset),
    ];
    let generics = Generic::list(&[x.dtype], &[block_m, block_n, x.shape[1], rows]);
    Launch { module: KERNELS, kernel: "rms_norm_backward", generics, hints, params }
}

/// dw's launch: column sums of `dw_part` (`part_rows` rows at a time) in `[block_n]` tiles.
fn describe_dw<'a>([dw, dw_part]: [&'a CheckedTensor; 2], [part_rows, block_n]: [i32; 2], hints: Hints) -> Launch<'a> {
    let params = vec![Param::Out("dw", dw, vec![block_n]), Param::In("dw_part", dw_part)];
    Launch { module: KERNELS, kernel: "rms_norm_dw", generics: Generic::list(&[dw.dtype], &[part_rows, block_n]), hints, params }
}

// The C export's flat scalar parameters, passed straight through.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    y: &CheckedTensor,
    x: &CheckedTensor,
    w: &CheckedTensor,
    eps: f32,
    offset: f32,
    block_m: i32,
    block_n: i32,
    occupancy: i32,
    warps: i32,
    device: i32,
    stream: u64,
) -> OpResult<()> {
    let (m, n, dtype) = check_rows(&["x"], &[x], w)?;
    check_output("y", y, &[m, n], dtype)?;
    check_scalars(eps, offset)?;
    check_row_tile(block_m, block_n, n)?;
    let hints = Hints::checked(occupancy, warps)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let launch = describe_forward([y, x, w], [eps, offset], [block_m, block_n], hints);
    launch::enqueue_launch("rms_norm", &launch, device, stream, |first| match dtype {
        DType::F32 => forward_first::<f32>(first, &launch, [y, x, w]),
        DType::F16 => forward_first::<f16>(first, &launch, [y, x, w]),
        DType::BF16 => forward_first::<bf16>(first, &launch, [y, x, w]),
    })
}

fn forward_first<T: cutile::DType>(first: &FirstLaunch, launch: &Launch, [y, x, w]: [&CheckedTensor; 3]) -> OpResult<()> {
    // SAFETY: torch owns the allocations and keeps them alive while the work it ordered on
    // the stream runs; y is an output nobody else writes meanwhile.
    let tensor = |t: &CheckedTensor| unsafe { first.borrow::<T>(t) };
    crate::typed_launch!(first, { let (mut yt, xt, wt) = (tensor(y), tensor(x), tensor(w)); }
        rms_norm_kernels::rms_norm_forward(
            (&mut yt).partition(launch.tile::<2>("y")), &xt, &wt, launch.float("eps"), launch.float("offset")))
}

/// dx and the per-CTA dw partials: `rows` rows per CTA (a multiple of `block_m`), so
/// `dw_part` is `[ceil(M / rows), N]` float32.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    dx: &CheckedTensor,
    dw_part: &CheckedTensor,
    dy: &CheckedTensor,
    x: &CheckedTensor,
    w: &CheckedTensor,
    eps: f32,
    offset: f32,
    block_m: i32,
    block_n: i32,
    rows: i32,
    occupancy: i32,
    warps: i32,
    device: i32,
    stream: u64,
) -> OpResult<()> {
    let (m, n, dtype) = check_rows(&["x", "dy"], &[x, dy], w)?;
    check_output("dx", dx, &[m, n], dtype)?;
    check_scalars(eps, offset)?;
    check_row_tile(block_m, block_n, n)?;
    check_block("rows", rows)?;
    if rows < block_m {
        return Err(OpError::invalid(format!("rows = {rows} must be at least block_m = {block_m}")));
    }
    let ctas = if m == 0 { 0 } else { (m - 1) / rows + 1 };
    check_output("dw_part", dw_part, &[ctas, n], DType::F32)?;
    let hints = Hints::checked(occupancy, warps)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let launch = describe_backward([dx, dw_part, dy, x, w], [eps, offset], [block_m, block_n, rows], hints);
    launch::enqueue_launch("rms_norm backward", &launch, device, stream, |first| match dtype {
        DType::F32 => backward_first::<f32>(first, &launch, [dx, dw_part, dy, x, w]),
        DType::F16 => backward_first::<f16>(first, &launch, [dx, dw_part, dy, x, w]),
        DType::BF16 => backward_first::<bf16>(first, &launch, [dx, dw_part, dy, x, w]),
    })
}

fn backward_first<T: cutile::DType>(
    first: &FirstLaunch,
    launch: &Launch,
    [dx, dw_part, dy, x, w]: [&CheckedTensor; 5],
) -> OpResult<()> {
    // SAFETY: as in `forward_first`; dx and dw_part are fresh buffers nobody else writes.
    let tensor = |t: &CheckedTensor| unsafe { first.borrow::<T>(t) };
    let floats = |t: &CheckedTensor| unsafe { first.borrow::<f32>(t) };
    crate::typed_launch!(first, {
        let (mut dxt, mut pt, dyt, xt, wt) = (tensor(dx), floats(dw_part), tensor(dy), tensor(x), tensor(w));
    } rms_norm_kernels::rms_norm_backward(
        (&mut dxt).partition(launch.tile::<2>("dx")), (&mut pt).partition(launch.tile::<2>("dw_part")),
        &dyt, &xt, &wt, launch.float("eps"), launch.float("offset")))
}

/// dw `[N]` (w's dtype) = the column sums of `dw_part` (`[G, N]` float32), `part_rows` rows
/// at a time, `[block_n]` columns per CTA.
#[allow(clippy::too_many_arguments)]
pub fn weight_grad(
    dw: &CheckedTensor,
    dw_part: &CheckedTensor,
    part_rows: i32,
    block_n: i32,
    occupancy: i32,
    warps: i32,
    device: i32,
    stream: u64,
) -> OpResult<()> {
    if dw_part.shape.len() != 2 || dw_part.dtype != DType::F32 || !dw_part.is_contiguous() {
        return Err(OpError::invalid(format!(
            "dw_part must be a contiguous 2-D float32 [G, N]; got {:?} {:?} strides {:?}",
            dw_part.shape, dw_part.dtype, dw_part.strides
        )));
    }
    check_output("dw", dw, &[dw_part.shape[1]], dw.dtype)?;
    check_block("part_rows", part_rows)?;
    check_block("block_n", block_n)?;
    let hints = Hints::checked(occupancy, warps)?;
    if dw.shape[0] == 0 {
        return Ok(());
    }
    let launch = describe_dw([dw, dw_part], [part_rows, block_n], hints);
    launch::enqueue_launch("rms_norm dw", &launch, device, stream, |first| match dw.dtype {
        DType::F32 => dw_first::<f32>(first, &launch, [dw, dw_part]),
        DType::F16 => dw_first::<f16>(first, &launch, [dw, dw_part]),
        DType::BF16 => dw_first::<bf16>(first, &launch, [dw, dw_part]),
    })
}

fn dw_first<T: cutile::DType>(first: &FirstLaunch, launch: &Launch, [dw, dw_part]: [&CheckedTensor; 2]) -> OpResult<()> {
    // SAFETY: as in `forward_first`; dw is a fresh gradient buffer nobody else writes.
    let tensor = |t: &CheckedTensor| unsafe { first.borrow::<T>(t) };
    let floats = |t: &CheckedTensor| unsafe { first.borrow::<f32>(t) };
    crate::typed_launch!(first, { let (mut dwt, pt) = (tensor(dw), floats(dw_part)); } rms_norm_kernels::rms_norm_dw((&mut dwt).partition(launch.tile::<1>("dw")), &pt))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(dtype: DType, shape: &[i32], strides: &[i32]) -> CheckedTensor {
        CheckedTensor { ptr: 0x1000, dtype, shape: shape.to_vec(), strides: strides.to_vec() }
    }

    #[test]
    fn every_kernel_is_described_as_its_signature_reads() {
        let (x, w) = (view(DType::BF16, &[5, 100], &[100, 1]), view(DType::BF16, &[100], &[1]));
        let part = view(DType::F32, &[2, 100], &[100, 1]);
        let hints = Hints::checked(0, 0).unwrap();
        crate::launch::signature::assert_matches_kernel(&describe_forward([&x, &x, &w], [1e-6, 0.0], [1, 128], hints));
        crate::launch::signature::assert_matches_kernel(&describe_backward([&x, &part, &x, &x, &w], [1e-6, 0.0], [1, 128, 4], hints));
        crate::launch::signature::assert_matches_kernel(&describe_dw([&w, &part], [8, 128], hints));
    }

    #[test]
    fn bad_views_are_refused_with_what_to_pass() {
        let x = view(DType::F16, &[4, 100], &[100, 1]);
        assert!(check_rows(&["x"], &[&x], &view(DType::F16, &[100], &[1])).is_ok());
        let bad_w = [view(DType::F16, &[99], &[1]), view(DType::F32, &[100], &[1]), view(DType::F16, &[100], &[2])];
        for w in bad_w {
            assert!(check_rows(&["x"], &[&x], &w).unwrap_err().message.contains("w must be a contiguous [100]"));
        }
        let strided = view(DType::F16, &[4, 100], &[1, 4]);
        assert!(check_rows(&["x"], &[&strided], &view(DType::F16, &[100], &[1])).unwrap_err().message.contains("unit stride"));
        assert!(check_row_tile(1, 64, 100).unwrap_err().message.contains("cover a row"));
        assert!(check_scalars(-1.0, 0.0).unwrap_err().message.contains("eps"));
        assert!(check_scalars(1e-6, f32::NAN).unwrap_err().message.contains("offset"));
        assert!(check_output("dw_part", &view(DType::BF16, &[2, 100], &[100, 1]), &[2, 100], DType::F32).is_err());
    }
}
