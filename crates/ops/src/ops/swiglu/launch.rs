//! Host side of swiglu: checks the views and enqueues the forward or backward
//! kernel on the caller's stream (crate::launch) without waiting for it.

use super::kernel::swiglu_kernels;
use crate::abi::{CheckedTensor, DType, OpError, OpResult};
use crate::launch::{self, FirstLaunch, Generic, Launch, Param};
use crate::spec::{check_block, Hints, KernelModule};
use cutile::half::{bf16, f16};
use cutile::prelude::*;

/// `[M, H]` inputs of one dtype, each read along unit-stride rows.
fn check_inputs(names: &[&str], inputs: &[&CheckedTensor]) -> OpResult<(i32, i32, DType)> {
    let first = inputs[0];
    for (name, t) in names.iter().zip(inputs) {
        if t.shape.len() != 2 {
            return Err(OpError::invalid(format!("swiglu takes 2-D [rows, cols] views; {name} has {} dims", t.shape.len())));
        }
        if t.shape != first.shape {
            return Err(OpError::invalid(format!("{name} shape {:?} differs from {} shape {:?}", t.shape, names[0], first.shape)));
        }
        if t.dtype != first.dtype {
            return Err(OpError::invalid(format!("{name} dtype {:?} differs from {} dtype {:?}", t.dtype, names[0], first.dtype)));
        }
        if t.shape[1] > 1 && t.strides[1] != 1 {
            return Err(OpError::invalid(format!("{name} must have unit stride along its last dim, got {:?}", t.strides)));
        }
    }
    Ok((first.shape[0], first.shape[1], first.dtype))
}

fn check_config(block_m: i32, block_n: i32, occupancy: i32, warps: i32, cga: i32) -> OpResult<Hints> {
    check_block("block_m", block_m)?;
    check_block("block_n", block_n)?;
    Hints::checked(occupancy, warps)?.with_cga(cga)
}

// The C export's flat scalar parameters, passed straight through.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    y: &CheckedTensor,
    a: &CheckedTensor,
    b: &CheckedTensor,
    block_m: i32,
    block_n: i32,
    occupancy: i32,
    warps: i32,
    cga: i32,
    device: i32,
    stream: u64,
) -> OpResult<()> {
    let (m, h, dtype) = check_inputs(&["y", "a", "b"], &[y, a, b])?;
    if !y.is_contiguous() {
        return Err(OpError::invalid(format!("y must be contiguous (strides [{h}, 1]), got {:?}", y.strides)));
    }
    let hints = check_config(block_m, block_n, occupancy, warps, cga)?;
    if m == 0 || h == 0 {
        return Ok(());
    }
    let launch = describe_forward([y, a, b], [block_m, block_n], hints);
    launch::enqueue_launch("swiglu", &launch, device, stream, |first| match dtype {
        DType::F32 => forward_first::<f32>(first, &launch, [y, a, b]),
        DType::F16 => forward_first::<f16>(first, &launch, [y, a, b]),
        DType::BF16 => forward_first::<bf16>(first, &launch, [y, a, b]),
    })
}

const KERNELS: KernelModule = KernelModule {
    name: "swiglu_kernels",
    ast: swiglu_kernels::__module_ast_self,
    source_hash: swiglu_kernels::_SOURCE_HASH,
};

/// Both kernels' generics: the element type, the tile, and whether the tile divides x's rows
/// and columns (the kernel then loads that axis as proven in bounds).
fn generics(x: &CheckedTensor, block_m: i32, block_n: i32) -> Vec<Generic> {
    let exact = |extent: i32, block: i32| i32::from(extent % block == 0);
    Generic::list(&[x.dtype], &[block_m, block_n, exact(x.shape[0], block_m), exact(x.shape[1], block_n)])
}

/// The forward's launch: y = silu(a) * b, `[block_m, block_n]` tiles of y.
fn describe_forward<'a>([y, a, b]: [&'a CheckedTensor; 3], [block_m, block_n]: [i32; 2], hints: Hints) -> Launch<'a> {
    let params = vec![Param::Out("y", y, vec![block_m, block_n]), Param::In("a", a), Param::In("b", b)];
    Launch { module: KERNELS, kernel: "swiglu_forward", generics: generics(a, block_m, block_n), hints, params }
}

/// The backward's launch: both gradients into dg, `[block_m, 2, block_n]` tiles.
fn describe_backward<'a>([dg, dy, a, b]: [&'a CheckedTensor; 4], [block_m, block_n]: [i32; 2], hints: Hints) -> Launch<'a> {
    let params = vec![Param::Out("dg", dg, vec![block_m, 2, block_n]), Param::In("dy", dy), Param::In("a", a), Param::In("b", b)];
    Launch { module: KERNELS, kernel: "swiglu_backward", generics: generics(a, block_m, block_n), hints, params }
}

/// cutile's typed launch of the forward for element type `T`, as `launch` describes it.
fn forward_first<T: cutile::DType>(first: &FirstLaunch, launch: &Launch, [y, a, b]: [&CheckedTensor; 3]) -> OpResult<()> {
    // SAFETY: torch owns the allocations and keeps them alive while the work it
    // ordered on the stream runs; y is an output nobody else writes meanwhile.
    let tensor = |t: &CheckedTensor| unsafe { first.borrow::<T>(t) };
    crate::typed_launch!(first, { let (mut yt, at, bt) = (tensor(y), tensor(a), tensor(b)); }
        swiglu_kernels::swiglu_forward((&mut yt).partition(launch.tile::<2>("y")), &at, &bt))
}

/// Checks the backward's output `dg`, an `[M, 2, H]` view with strides `[r, p, 1]`:
/// rows and the two planes (da, db) must not overlap one another.
fn check_gradients(dg: &CheckedTensor, m: i32, h: i32, dtype: DType) -> OpResult<()> {
    if dg.shape != [m, 2, h] || dg.dtype != dtype {
        return Err(OpError::invalid(format!(
            "dg must be a [{m}, 2, {h}] view of dtype {dtype:?}, got {:?} of {:?}",
            dg.shape, dg.dtype
        )));
    }
    let (r, p) = (i64::from(dg.strides[0]), i64::from(dg.strides[1]));
    let (m, h) = (i64::from(m), i64::from(h));
    let unit = h <= 1 || dg.strides[2] == 1;
    // Planes side by side in each row (silu_and_mul's dx), or one plane after the other.
    let disjoint = p >= h && (m <= 1 || r >= p + h) || r >= h && p >= (m - 1) * r + h;
    if !(unit && disjoint) {
        return Err(OpError::invalid(format!(
            "dg strides {:?} overlap: da and db need their own memory (an [M, 2H] row-major gradient or two planes)",
            dg.strides
        )));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub fn backward(
    dg: &CheckedTensor,
    dy: &CheckedTensor,
    a: &CheckedTensor,
    b: &CheckedTensor,
    block_m: i32,
    block_n: i32,
    occupancy: i32,
    warps: i32,
    cga: i32,
    device: i32,
    stream: u64,
) -> OpResult<()> {
    let (m, h, dtype) = check_inputs(&["dy", "a", "b"], &[dy, a, b])?;
    check_gradients(dg, m, h, dtype)?;
    let hints = check_config(block_m, block_n, occupancy, warps, cga)?;
    if m == 0 || h == 0 {
        return Ok(());
    }
    let launch = describe_backward([dg, dy, a, b], [block_m, block_n], hints);
    launch::enqueue_launch("swiglu backward", &launch, device, stream, |first| match dtype {
        DType::F32 => backward_first::<f32>(first, &launch, [dg, dy, a, b]),
        DType::F16 => backward_first::<f16>(first, &launch, [dg, dy, a, b]),
        DType::BF16 => backward_first::<bf16>(first, &launch, [dg, dy, a, b]),
    })
}

/// cutile's typed launch of the backward for element type `T`, as `launch` describes it.
fn backward_first<T: cutile::DType>(first: &FirstLaunch, launch: &Launch, [dg, dy, a, b]: [&CheckedTensor; 4]) -> OpResult<()> {
    // SAFETY: as in `forward_first`; dg is a fresh gradient buffer nobody else writes.
    let tensor = |t: &CheckedTensor| unsafe { first.borrow::<T>(t) };
    crate::typed_launch!(first, { let (mut gt, dyt, at, bt) = (tensor(dg), tensor(dy), tensor(a), tensor(b)); }
        swiglu_kernels::swiglu_backward((&mut gt).partition(launch.tile::<3>("dg")), &dyt, &at, &bt))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(dtype: DType, shape: &[i32], strides: &[i32]) -> CheckedTensor {
        CheckedTensor { ptr: 0x1000, dtype, shape: shape.to_vec(), strides: strides.to_vec() }
    }

    #[test]
    fn both_gradient_layouts_pass_and_overlapping_ones_are_refused() {
        let (m, h) = (5, 7);
        // silu_and_mul's dx [M, 2H] as [M, 2, H]; swiglu's [2, M, H] buffer as [M, 2, H].
        assert!(check_gradients(&view(DType::BF16, &[m, 2, h], &[2 * h, h, 1]), m, h, DType::BF16).is_ok());
        assert!(check_gradients(&view(DType::BF16, &[m, 2, h], &[h, m * h, 1]), m, h, DType::BF16).is_ok());
        for strides in [[h, h, 1], [2 * h, 1, 1], [h, (m - 1) * h, 1], [2 * h, h, 2]] {
            let err = check_gradients(&view(DType::BF16, &[m, 2, h], &strides), m, h, DType::BF16).unwrap_err();
            assert!(err.message.contains("overlap"), "{strides:?}: {}", err.message);
        }
        assert!(check_gradients(&view(DType::F32, &[m, 2, h], &[2 * h, h, 1]), m, h, DType::BF16).is_err());
        assert!(check_gradients(&view(DType::BF16, &[m, 2, h + 1], &[2 * h, h, 1]), m, h, DType::BF16).is_err());
    }

    #[test]
    fn both_kernels_are_described_as_their_signatures_read() {
        let (y, a, b) = (view(DType::BF16, &[3, 8], &[8, 1]), view(DType::BF16, &[3, 8], &[8, 1]), view(DType::BF16, &[3, 8], &[8, 1]));
        let dg = view(DType::BF16, &[3, 2, 8], &[16, 8, 1]);
        let hints = Hints::checked(0, 0).unwrap();
        crate::launch::signature::assert_matches_kernel(&describe_forward([&y, &a, &b], [1, 8], hints));
        crate::launch::signature::assert_matches_kernel(&describe_backward([&dg, &y, &a, &b], [1, 8], hints));
    }

    #[test]
    fn inputs_must_agree_and_read_unit_stride_rows() {
        let a = view(DType::F16, &[3, 8], &[16, 1]);
        assert_eq!(check_inputs(&["a", "b"], &[&a, &view(DType::F16, &[3, 8], &[8, 1])]).unwrap(), (3, 8, DType::F16));
        let bad = [
            (view(DType::F16, &[3, 9], &[16, 1]), "shape"),
            (view(DType::BF16, &[3, 8], &[16, 1]), "dtype"),
            (view(DType::F16, &[3, 8], &[1, 3]), "unit stride"),
            (view(DType::F16, &[24], &[1]), "2-D"),
        ];
        for (b, what) in bad {
            let err = check_inputs(&["a", "b"], &[&a, &b]).unwrap_err();
            assert!(err.message.contains(what), "{what}: {}", err.message);
        }
    }
}
