//! Host side of attention_sink: checks the views against one another and the config,
//! then enqueues the one-pass kernel, or the split kernel and its combine, on the
//! caller's stream (crate::launch) without waiting.

use super::kernel::attention_sink_kernels;
use crate::abi::{CheckedTensor, DType, IndexTensor, OpError, OpResult};
use crate::launch::{self, FirstLaunch, Generic, Launch, Param};
use crate::spec::{check_block, Hints, KernelModule};
use cutile::half::{bf16, f16};
use cutile::prelude::*;

/// The tensors of one call, as the C export read them.
pub struct Views {
    pub out: CheckedTensor,
    pub q: CheckedTensor,
    pub k: CheckedTensor,
    pub v: CheckedTensor,
    pub sinks: CheckedTensor,
    pub start_q: IndexTensor,
    /// The split kernel's partials, present when `splits` > 1.
    pub partials: Option<Partials>,
}

/// The split kernel's partials as the C export takes them: acc `[splits*B, S_q, H*D]` and ml
/// `[splits*B, S_q, 2H]` float32 (row split * B + batch), and the same buffers as
/// `[splits, B, S_q, *]`, which the combine reads a chunk of splits at a time.
pub struct Partials {
    pub acc: CheckedTensor,
    pub ml: CheckedTensor,
    /// None where the 4-D view's strides overflow int32 (`check` refuses the call).
    by_split: Option<(CheckedTensor, CheckedTensor)>,
}

impl Partials {
    pub fn new(acc: CheckedTensor, ml: CheckedTensor, splits: i32) -> Self {
        let by_split = by_split(&acc, splits).zip(by_split(&ml, splits));
        Self { acc, ml, by_split }
    }
}

/// `[splits*B, S, X]` as `[splits, B, S, X]`; None where that is not its shape or a stride overflows.
fn by_split(t: &CheckedTensor, splits: i32) -> Option<CheckedTensor> {
    let (&[rows, s, x], &[row, s_stride, x_stride]) = (t.shape.as_slice(), t.strides.as_slice()) else {
        return None;
    };
    if splits < 1 || rows % splits != 0 {
        return None;
    }
    let batch = rows / splits;
    let strides = vec![batch.checked_mul(row)?, row, s_stride, x_stride];
    Some(CheckedTensor { ptr: t.ptr, dtype: t.dtype, shape: vec![splits, batch, s, x], strides })
}

/// What one load of the combine holds at most, in float32: a chunk of splits' `[D]` accumulators
/// (4 KB: a `[64, 64]` chunk took 255 registers and 100 KB of shared memory for its sum down the
/// splits in tileiras 13.4's sm_90 SASS, a `[16, 64]` one 128).
const COMBINE_ACC_FLOATS: i32 = 1024;

/// The combine's splits a load: a power of two of at most `splits` rounded up, its accumulators
/// within `COMBINE_ACC_FLOATS` (at least one split).
fn combine_chunk(splits: i32, head_dim: i32) -> i32 {
    let cap = u32::try_from(splits.max(1)).unwrap_or(1).next_power_of_two() as i32;
    let most = (COMBINE_ACC_FLOATS / head_dim.max(1)).max(1);
    (1i32 << (31 - most.leading_zeros())).min(cap)
}

/// The C export's layout and tiling scalars.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub group: i32,
    pub head_dim: i32,
    pub block_q: i32,
    pub heads_per_tile: i32,
    pub block_n: i32,
    pub splits: i32,
    pub occupancy: i32,
    pub warps: i32,
    /// The K/V loads' latency hint, 1 to [`MAX_LATENCY`] (0: tileiras' choice).
    pub latency: i32,
}

/// Rows of a CTA (`block_q * heads_per_tile`) and keys of a tile: the tensor cores'
/// smallest useful tile up to what one CTA's registers hold.
const MIN_ROWS: i32 = 16;
/// Rows of a CTA at least, from head dim 128 up: 16-row tiles of head dim 128 faulted with
/// a misaligned address on the H200 (their SASS alone stores through STSM.16.M88.4;
/// docs/benchmarks.md, "attention_sink").
const MIN_ROWS_WIDE_HEADS: i32 = 32;
const MAX_ROWS: i32 = 256;
/// Tile IR's largest latency hint.
pub const MAX_LATENCY: i32 = 10;
/// Splits of one query block's keys at most (the partials' memory grows with them).
pub const MAX_SPLITS: i32 = 1024;

/// Extents of a checked call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dims {
    batch: i32,
    s_q: i32,
    s_kv: i32,
    heads: i32,
}

fn check(views: &Views, config: Config, window: i32, scale: f32) -> OpResult<(Dims, Hints)> {
    let Views { out, q, k, v, sinks, start_q, partials } = views;
    if !matches!(q.dtype, DType::F16 | DType::BF16) {
        return Err(OpError::invalid(format!("attention_sink takes float16 or bfloat16 q, k and v; q is {:?}", q.dtype)));
    }
    for (name, t) in [("q", q), ("k", k), ("v", v), ("out", out)] {
        if t.shape.len() != 3 {
            return Err(OpError::invalid(format!("{name} must be a 3-D [B, S, heads*D] view, got {} dims", t.shape.len())));
        }
        if t.dtype != q.dtype {
            return Err(OpError::invalid(format!("{name} dtype {:?} differs from q's {:?}", t.dtype, q.dtype)));
        }
        if t.shape[2] > 1 && t.strides[2] != 1 {
            return Err(OpError::invalid(format!("{name} must have unit stride along its last dim, got {:?}", t.strides)));
        }
    }
    let d = config.head_dim;
    if !(16..=256).contains(&d) || d & (d - 1) != 0 {
        return Err(OpError::invalid(format!("head_dim = {d}: must be a power of two from 16 to 256")));
    }
    if config.group < 1 {
        return Err(OpError::invalid(format!("group = {}: must be at least 1", config.group)));
    }
    if k.shape != v.shape || k.shape[0] != q.shape[0] || k.shape[2] % d != 0 || k.shape[2] == 0 {
        return Err(OpError::invalid(format!(
            "k {:?} and v {:?} must both be [B, S_kv, H_kv*{d}] with q's B ({})",
            k.shape, v.shape, q.shape[0]
        )));
    }
    let kv_heads = k.shape[2] / d;
    let heads = i64::from(kv_heads) * i64::from(config.group);
    if i64::from(q.shape[2]) != heads * i64::from(d) {
        return Err(OpError::invalid(format!(
            "q's last dim {} is not H_kv ({kv_heads}) * group ({}) * head_dim ({d})",
            q.shape[2], config.group
        )));
    }
    if out.shape != q.shape || !out.is_contiguous() {
        return Err(OpError::invalid(format!("out must be a contiguous {:?} view, got {:?} strides {:?}", q.shape, out.shape, out.strides)));
    }
    let heads = heads as i32; // q's last dim fits i32, so does heads
    if sinks.shape != [heads] {
        return Err(OpError::invalid(format!("sinks must hold {heads} logits (one per query head), got shape {:?}", sinks.shape)));
    }
    if start_q.shape != [1] {
        return Err(OpError::invalid(format!("start_q must be a one-element int32 tensor, got shape {:?}", start_q.shape)));
    }
    if k.shape[1] == 0 {
        return Err(OpError::invalid("k and v hold no positions (S_kv = 0): every query needs at least one key"));
    }
    if window < 0 {
        return Err(OpError::invalid(format!("window = {window}: must be 0 (none) or a positive number of positions")));
    }
    if !scale.is_finite() {
        return Err(OpError::invalid(format!("scale = {scale}: must be finite")));
    }
    let gt = config.heads_per_tile;
    if gt < 1 || gt & (gt - 1) != 0 || config.group % gt != 0 {
        return Err(OpError::invalid(format!("heads_per_tile = {gt}: must be a power of two dividing group ({})", config.group)));
    }
    check_block("block_q", config.block_q)?;
    check_block("block_n", config.block_n)?;
    let rows = i64::from(config.block_q) * i64::from(gt);
    let min_rows = if d >= 128 { MIN_ROWS_WIDE_HEADS } else { MIN_ROWS };
    if !(i64::from(min_rows)..=i64::from(MAX_ROWS)).contains(&rows) || !(MIN_ROWS..=MAX_ROWS).contains(&config.block_n) {
        return Err(OpError::invalid(format!(
            "block_q * heads_per_tile = {rows} must be in {min_rows}..={MAX_ROWS} (head_dim {d}) and block_n = {} in {MIN_ROWS}..={MAX_ROWS}",
            config.block_n
        )));
    }
    let dims = Dims { batch: q.shape[0], s_q: q.shape[1], s_kv: k.shape[1], heads };
    if !(0..=MAX_LATENCY).contains(&config.latency) {
        return Err(OpError::invalid(format!("latency = {}: must be 0 (tileiras' choice) to {MAX_LATENCY}", config.latency)));
    }
    if !(1..=MAX_SPLITS).contains(&config.splits) {
        return Err(OpError::invalid(format!("splits = {}: must be in 1..={MAX_SPLITS}", config.splits)));
    }
    if config.splits > 1 {
        let Some(Partials { acc, ml, by_split }) = partials else {
            return Err(OpError::invalid("splits > 1 needs the acc and ml partial buffers"));
        };
        let rows = i64::from(config.splits) * i64::from(dims.batch);
        let want_acc = [rows, i64::from(dims.s_q), i64::from(q.shape[2])];
        let want_ml = [rows, i64::from(dims.s_q), 2 * i64::from(heads)];
        let shape = |t: &CheckedTensor| t.shape.iter().map(|&s| i64::from(s)).collect::<Vec<_>>();
        for (name, t, want) in [("acc", acc, want_acc), ("ml", ml, want_ml)] {
            if t.dtype != DType::F32 || shape(t) != want || !t.is_contiguous() {
                return Err(OpError::invalid(format!(
                    "{name} must be a contiguous float32 {want:?} buffer, got {:?} {:?} strides {:?}",
                    t.dtype, t.shape, t.strides
                )));
            }
        }
        if by_split.is_none() {
            return Err(OpError::invalid(format!(
                "the partials of {} splits are too large for int32 strides: use fewer splits",
                config.splits
            )));
        }
    }
    Ok((dims, Hints::checked(config.occupancy, config.warps)?))
}

pub fn attention_sink(views: &Views, scale: f32, window: i32, config: Config, device: i32, stream: u64) -> OpResult<()> {
    let (dims, hints) = check(views, config, window, scale)?;
    if dims.batch == 0 || dims.s_q == 0 {
        return Ok(());
    }
    let stages: &[Stage] = if views.partials.is_some() { &[Stage::Split, Stage::Combine] } else { &[Stage::OnePass] };
    for &stage in stages {
        let launch = describe(views, config, hints, scale, window, stage);
        launch::enqueue_launch("attention_sink", &launch, device, stream, |first| {
            dispatch(views.q.dtype, views.sinks.dtype, first, &launch, views, Work::Forward(stage))
        })?;
    }
    Ok(())
}

/// The training forward: the one-pass kernel that also writes each row's log2-sum-exp into
/// `lse` (`[B, S_q, H]` float32, contiguous), which the backward reads.
pub fn attention_sink_lse(views: &Views, lse: &CheckedTensor, scale: f32, window: i32, config: Config, device: i32, stream: u64) -> OpResult<()> {
    if config.splits != 1 || views.partials.is_some() {
        return Err(OpError::invalid(format!("the forward that saves lse is one pass: splits must be 1, got {}", config.splits)));
    }
    let (dims, hints) = check(views, config, window, scale)?;
    check_row_stats("lse", lse, dims)?;
    if dims.batch == 0 || dims.s_q == 0 {
        return Ok(());
    }
    let training = Training::Lse(lse);
    let launch = describe_training(views, &training, config, hints, scale, window);
    launch::enqueue_launch("attention_sink", &launch, device, stream, |first| {
        dispatch(views.q.dtype, views.sinks.dtype, first, &launch, views, Work::Training(&training))
    })
}

/// The backward's tensors besides the forward's (whose `out` is the forward's output O).
pub struct Gradients {
    /// Outputs: dq like q, dk and dv like k (each contiguous), and the float32 `[B, S_q, H]`
    /// per-row delta (rowsum(dO * O), read back by the key side) and sink-gradient terms.
    pub dq: CheckedTensor,
    pub dk: CheckedTensor,
    pub dv: CheckedTensor,
    pub delta: CheckedTensor,
    pub dsink: CheckedTensor,
    /// Inputs: the output's gradient (like q) and the forward's saved lse.
    pub dout: CheckedTensor,
    pub lse: CheckedTensor,
}

/// The backward of `attention_sink_lse`: the query-side kernel (dq, delta, dsink terms), then
/// the key-side kernel (dk, dv), which reads the query side's delta.
pub fn attention_sink_backward(views: &Views, grads: &Gradients, scale: f32, window: i32, config: Config, device: i32, stream: u64) -> OpResult<()> {
    let (dims, hints) = check(views, config, window, scale)?;
    let Gradients { dq, dk, dv, delta, dsink, dout, lse } = grads;
    for (name, t, like) in [("dq", dq, &views.q), ("dout", dout, &views.q), ("dk", dk, &views.k), ("dv", dv, &views.k)] {
        let contiguous = name == "dout" || t.is_contiguous();
        if t.dtype != like.dtype || t.shape != like.shape || !contiguous || (t.shape[2] > 1 && t.strides[2] != 1) {
            return Err(OpError::invalid(format!(
                "{name} must be a {:?} {:?} view{}, got {:?} {:?} strides {:?}",
                like.dtype,
                like.shape,
                if name == "dout" { " with unit stride along its last dim" } else { ", contiguous" },
                t.dtype,
                t.shape,
                t.strides
            )));
        }
    }
    for (name, t) in [("lse", lse), ("delta", delta), ("dsink", dsink)] {
        check_row_stats(name, t, dims)?;
    }
    if dims.batch == 0 || dims.s_q == 0 {
        return Ok(());
    }
    for training in [Training::Dq(grads), Training::Dkdv(grads)] {
        let launch = describe_training(views, &training, config, hints, scale, window);
        launch::enqueue_launch("attention_sink", &launch, device, stream, |first| {
            dispatch(views.q.dtype, views.sinks.dtype, first, &launch, views, Work::Training(&training))
        })?;
    }
    Ok(())
}

/// A per-row float32 statistic must be a contiguous `[B, S_q, H]` buffer.
fn check_row_stats(name: &str, t: &CheckedTensor, dims: Dims) -> OpResult<()> {
    let want = [dims.batch, dims.s_q, dims.heads];
    if t.dtype != DType::F32 || t.shape != want || !t.is_contiguous() {
        return Err(OpError::invalid(format!(
            "{name} must be a contiguous float32 {want:?} buffer (one value per query row and head), got {:?} {:?} strides {:?}",
            t.dtype, t.shape, t.strides
        )));
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    OnePass,
    Split,
    Combine,
}

/// A training kernel's launch and the tensors it needs besides the forward's views.
enum Training<'a> {
    Lse(&'a CheckedTensor),
    Dq(&'a Gradients),
    Dkdv(&'a Gradients),
}

/// A training kernel's launch: its kernel, generics and parameters in the kernel's order.
fn describe_training<'a>(views: &'a Views, training: &Training<'a>, config: Config, hints: Hints, scale: f32, window: i32) -> Launch<'a> {
    let Views { out, q, k, v, sinks, start_q, .. } = views;
    let Config { group, head_dim: d, block_q: bq, heads_per_tile: gt, block_n: bn, latency, .. } = config;
    let (bm, gd) = (bq * gt, gt * d);
    let scalars = [Param::F32("scale", scale), Param::Int("window", window)];
    let (kernel, generics, params) = match training {
        Training::Lse(lse) => {
            let outs = [Param::Out("out", out, vec![1, bq, gd]), Param::Out("lse_out", lse, vec![1, bq, gt])];
            let inputs = [Param::In("q", q), Param::In("k", k), Param::In("v", v), Param::In("sinks", sinks), Param::Index("start_q", start_q)];
            let generics = Generic::list(&[q.dtype, sinks.dtype], &[bq, gt, bm, d, gd, bn, group, latency]);
            ("attention_sink_lse", generics, [&outs[..], &inputs, &scalars].concat())
        }
        Training::Dq(g) => {
            let outs = [
                Param::Out("dq", &g.dq, vec![1, bq, gd]),
                Param::Out("delta_out", &g.delta, vec![1, bq, gt]),
                Param::Out("dsink_out", &g.dsink, vec![1, bq, gt]),
            ];
            let inputs = [
                Param::In("q", q),
                Param::In("k", k),
                Param::In("v", v),
                Param::In("out", out),
                Param::In("dout", &g.dout),
                Param::In("lse", &g.lse),
                Param::In("sinks", sinks),
                Param::Index("start_q", start_q),
            ];
            let generics = Generic::list(&[q.dtype, sinks.dtype], &[bq, gt, bm, d, gd, bn, group, latency]);
            ("attention_sink_backward_dq", generics, [&outs[..], &inputs, &scalars].concat())
        }
        Training::Dkdv(g) => {
            let outs = [Param::Out("dk", &g.dk, vec![1, bn, d]), Param::Out("dv", &g.dv, vec![1, bn, d])];
            let inputs = [
                Param::In("q", q),
                Param::In("k", k),
                Param::In("v", v),
                Param::In("dout", &g.dout),
                Param::In("lse", &g.lse),
                Param::In("delta", &g.delta),
                Param::Index("start_q", start_q),
            ];
            let generics = Generic::list(&[q.dtype], &[bq, gt, bm, d, gd, bn, group]);
            ("attention_sink_backward_dkdv", generics, [&outs[..], &inputs, &scalars].concat())
        }
    };
    Launch { module: KERNELS, kernel, generics, hints, params }
}

/// cutile's typed launch of one training kernel (`describe_training`'s parameters, in order).
fn launch_training<E: cutile::DType, S: cutile::DType>(first: &FirstLaunch, launch: &Launch, views: &Views, training: &Training) -> OpResult<()> {
    let Views { out, q, k, v, sinks, start_q, .. } = views;
    // SAFETY: torch owns every allocation and keeps it alive while the work it ordered on
    // the stream runs; the outputs are buffers nobody else writes meanwhile.
    let t = |t: &CheckedTensor| unsafe { first.borrow::<E>(t) };
    let f = |t: &CheckedTensor| unsafe { first.borrow::<f32>(t) };
    let sinks_t = || unsafe { first.borrow::<S>(sinks) };
    let start_t = || unsafe {
        cutile::tensor::Tensor::<i32>::borrow_raw_parts(start_q.ptr, first.ctx.clone(), start_q.shape.clone(), start_q.strides.clone())
    };
    let tile = |name| launch.tile::<3>(name);
    let (scale, window) = (|| launch.float("scale"), || launch.int("window"));
    match training {
        Training::Lse(lse) => crate::typed_launch!(first, { let (mut ot, mut lt, qt, kt, vt, st, sq) = (t(out), f(lse), t(q), t(k), t(v), sinks_t(), start_t()); }
            attention_sink_kernels::attention_sink_lse(
                (&mut ot).partition(tile("out")), (&mut lt).partition(tile("lse_out")), &qt, &kt, &vt, &st, &sq, scale(), window(),
            )),
        Training::Dq(g) => crate::typed_launch!(first, {
                let (mut dqt, mut dt, mut dst) = (t(&g.dq), f(&g.delta), f(&g.dsink));
                let (qt, kt, vt, ot, dot, lt, st, sq) = (t(q), t(k), t(v), t(out), t(&g.dout), f(&g.lse), sinks_t(), start_t());
            }
            attention_sink_kernels::attention_sink_backward_dq(
                (&mut dqt).partition(tile("dq")),
                (&mut dt).partition(tile("delta_out")),
                (&mut dst).partition(tile("dsink_out")),
                &qt, &kt, &vt, &ot, &dot, &lt, &st, &sq, scale(), window(),
            )),
        Training::Dkdv(g) => crate::typed_launch!(first, {
                let (mut dkt, mut dvt) = (t(&g.dk), t(&g.dv));
                let (qt, kt, vt, dot, lt, dt, sq) = (t(q), t(k), t(v), t(&g.dout), f(&g.lse), f(&g.delta), start_t());
            }
            attention_sink_kernels::attention_sink_backward_dkdv(
                (&mut dkt).partition(tile("dk")),
                (&mut dvt).partition(tile("dv")),
                &qt, &kt, &vt, &dot, &lt, &dt, &sq, scale(), window(),
            )),
    }
}

const KERNELS: KernelModule = KernelModule {
    name: "attention_sink_kernels",
    ast: attention_sink_kernels::__module_ast_self,
    source_hash: attention_sink_kernels::_SOURCE_HASH,
};

/// The combine's hints, its own rather than the split kernel's: a CTA sums one head's
/// partials, a few KB of loads, and latency is hidden by CTAs resident together (the split's
/// tiles asked for one CTA an SM gave it 255 registers, docs/benchmarks.md "attention_sink").
const COMBINE_HINTS: Hints = Hints { occupancy: 4, warps: 0, cga: 0 };

/// One stage's launch: its kernel, generics and parameters in the kernel's order.
fn describe<'a>(views: &'a Views, config: Config, hints: Hints, scale: f32, window: i32, stage: Stage) -> Launch<'a> {
    let Views { out, q, k, v, sinks, start_q, partials } = views;
    let Config { group, head_dim: d, block_q: bq, heads_per_tile: gt, block_n: bn, splits, latency, .. } = config;
    let (bm, gd) = (bq * gt, gt * d);
    let generics = |tiles: &[i32]| Generic::list(&[q.dtype, sinks.dtype], tiles);
    let inputs = || [Param::In("q", q), Param::In("k", k), Param::In("v", v), Param::In("sinks", sinks), Param::Index("start_q", start_q)];
    let out_tile = vec![1, bq, gd];
    let (kernel, generics, params, hints) = match (stage, partials) {
        (Stage::Split, Some(Partials { acc, ml, .. })) => {
            let outs = [Param::Out("acc_out", acc, out_tile), Param::Out("ml_out", ml, vec![1, bq, 2 * gt])];
            let scalars = [Param::F32("scale", scale), Param::Int("window", window), Param::Int("splits", splits)];
            ("attention_sink_split", generics(&[bq, gt, bm, d, gd, 2 * gt, bn, group, latency]), [&outs[..], &inputs(), &scalars].concat(), hints)
        }
        (Stage::Combine, Some(Partials { by_split: Some((acc, ml)), .. })) => {
            // One CTA per query head and position: out's [1, 1, D] tiles.
            let params = vec![Param::Out("out", out, vec![1, 1, d]), Param::In("acc_in", acc), Param::In("ml_in", ml), Param::In("sinks", sinks), Param::Int("splits", splits)];
            ("attention_sink_combine", generics(&[gt, d, combine_chunk(splits, d)]), params, COMBINE_HINTS)
        }
        _ => {
            let params = [&[Param::Out("out", out, out_tile)][..], &inputs(), &[Param::F32("scale", scale), Param::Int("window", window)]].concat();
            ("attention_sink", generics(&[bq, gt, bm, d, gd, bn, group, latency]), params, hints)
        }
    };
    Launch { module: KERNELS, kernel, generics, hints, params }
}

/// A launch's kernel: a forward stage or a training kernel.
enum Work<'w, 'a> {
    Forward(Stage),
    Training(&'w Training<'a>),
}

/// The typed launch of `work` for q/k/v of dtype `e` and sinks of dtype `s`.
fn dispatch(e: DType, s: DType, first: &FirstLaunch, launch: &Launch, views: &Views, work: Work) -> OpResult<()> {
    fn typed<E: cutile::DType, S: cutile::DType>(first: &FirstLaunch, launch: &Launch, views: &Views, work: Work) -> OpResult<()> {
        match work {
            Work::Forward(stage) => launch_first::<E, S>(first, launch, views, stage),
            Work::Training(training) => launch_training::<E, S>(first, launch, views, training),
        }
    }
    match (e, s) {
        (DType::F16, DType::F32) => typed::<f16, f32>(first, launch, views, work),
        (DType::F16, DType::F16) => typed::<f16, f16>(first, launch, views, work),
        (DType::F16, DType::BF16) => typed::<f16, bf16>(first, launch, views, work),
        (DType::BF16, DType::F32) => typed::<bf16, f32>(first, launch, views, work),
        (DType::BF16, DType::F16) => typed::<bf16, f16>(first, launch, views, work),
        (DType::BF16, DType::BF16) => typed::<bf16, bf16>(first, launch, views, work),
        (DType::F32, _) => Err(OpError::invalid("attention_sink takes float16 or bfloat16 q, k and v")),
    }
}

/// cutile's typed launch of one stage for q/k/v of type `E` and sinks of type `S`: the
/// description's parameters (`describe`) in its order, with its generics and options.
fn launch_first<E: cutile::DType, S: cutile::DType>(first: &FirstLaunch, launch: &Launch, views: &Views, stage: Stage) -> OpResult<()> {
    let Views { out, q, k, v, sinks, start_q, partials } = views;
    // SAFETY: torch owns every allocation and keeps it alive while the work it ordered on
    // the stream runs; out and the partials are outputs nobody else writes meanwhile.
    let t = |t: &CheckedTensor| unsafe { first.borrow::<E>(t) };
    let f = |t: &CheckedTensor| unsafe { first.borrow::<f32>(t) };
    let sinks_t = || unsafe { first.borrow::<S>(sinks) };
    let start_t = || unsafe {
        cutile::tensor::Tensor::<i32>::borrow_raw_parts(start_q.ptr, first.ctx.clone(), start_q.shape.clone(), start_q.strides.clone())
    };
    let tile = |name| launch.tile::<3>(name);
    let (scale, window, splits) = (|| launch.float("scale"), || launch.int("window"), || launch.int("splits"));
    let partials = || partials.as_ref().expect("checked: splits > 1 has partials");
    let by_split = || partials().by_split.as_ref().expect("checked: the partials have their 4-D views");
    match stage {
        Stage::OnePass => crate::typed_launch!(first, { let (mut ot, qt, kt, vt, st, sq) = (t(out), t(q), t(k), t(v), sinks_t(), start_t()); }
            attention_sink_kernels::attention_sink((&mut ot).partition(tile("out")), &qt, &kt, &vt, &st, &sq, scale(), window())),
        Stage::Split => crate::typed_launch!(first, {
                let (mut at, mut mt) = (f(&partials().acc), f(&partials().ml));
                let (qt, kt, vt, st, sq) = (t(q), t(k), t(v), sinks_t(), start_t());
            }
            attention_sink_kernels::attention_sink_split(
                (&mut at).partition(tile("acc_out")),
                (&mut mt).partition(tile("ml_out")),
                &qt, &kt, &vt, &st, &sq, scale(), window(), splits(),
            )),
        Stage::Combine => crate::typed_launch!(first, { let (mut ot, at, mt, st) = (t(out), f(&by_split().0), f(&by_split().1), sinks_t()); }
            attention_sink_kernels::attention_sink_combine((&mut ot).partition(tile("out")), &at, &mt, &st, splits())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(dtype: DType, shape: [i32; 3]) -> CheckedTensor {
        let strides = vec![shape[1] * shape[2], shape[2], 1];
        CheckedTensor { ptr: 0x1000, dtype, shape: shape.to_vec(), strides }
    }

    /// B 2, S_q 5, S_kv 7, 2 KV heads of 4 query heads, D 64.
    fn views() -> Views {
        let (q, kv) = ([2, 5, 8 * 64], [2, 7, 2 * 64]);
        Views {
            out: view(DType::BF16, q),
            q: view(DType::BF16, q),
            k: view(DType::BF16, kv),
            v: view(DType::BF16, kv),
            sinks: CheckedTensor { ptr: 0x1000, dtype: DType::F32, shape: vec![8], strides: vec![1] },
            start_q: IndexTensor { ptr: 0x1000, shape: vec![1], strides: vec![1] },
            partials: None,
        }
    }

    fn config() -> Config {
        Config { group: 4, head_dim: 64, block_q: 4, heads_per_tile: 4, block_n: 64, splits: 1, occupancy: 0, warps: 0, latency: 0 }
    }

    fn refused(views: &Views, config: Config, what: &str) {
        let err = check(views, config, 0, 0.18).unwrap_err();
        assert!(err.message.contains(what), "expected {what:?} in {:?}", err.message);
    }

    #[test]
    fn a_consistent_call_passes_with_its_extents() {
        let (dims, _) = check(&views(), config(), 128, 0.18).unwrap();
        assert_eq!(dims, Dims { batch: 2, s_q: 5, s_kv: 7, heads: 8 });
    }

    #[test]
    fn layouts_that_do_not_agree_are_refused() {
        refused(&views(), Config { group: 3, ..config() }, "q's last dim");
        refused(&views(), Config { head_dim: 48, ..config() }, "head_dim = 48");
        refused(&Views { k: view(DType::BF16, [2, 7, 3 * 64]), ..views() }, config(), "k [2, 7, 192]");
        refused(&Views { v: view(DType::F16, [2, 7, 2 * 64]), ..views() }, config(), "v dtype");
        refused(&Views { q: view(DType::F32, [2, 5, 8 * 64]), ..views() }, config(), "float16 or bfloat16");
        let sinks = CheckedTensor { ptr: 0x1000, dtype: DType::F32, shape: vec![4], strides: vec![1] };
        refused(&Views { sinks, ..views() }, config(), "sinks must hold 8");
        refused(&Views { k: view(DType::BF16, [2, 0, 2 * 64]), v: view(DType::BF16, [2, 0, 2 * 64]), ..views() }, config(), "S_kv = 0");
        let mut strided = views();
        strided.out.strides = vec![5 * 1024, 1024, 1];
        refused(&strided, config(), "contiguous");
    }

    #[test]
    fn tilings_outside_the_kernels_domain_are_refused() {
        refused(&views(), Config { heads_per_tile: 3, ..config() }, "heads_per_tile = 3");
        refused(&views(), Config { heads_per_tile: 8, ..config() }, "dividing group");
        refused(&views(), Config { block_q: 2, heads_per_tile: 4, ..config() }, "block_q * heads_per_tile = 8");
        refused(&views(), Config { block_n: 512, ..config() }, "block_n = 512");
        let wide = Views { q: view(DType::BF16, [2, 5, 8 * 128]), out: view(DType::BF16, [2, 5, 8 * 128]), ..views() };
        let (k, v) = (view(DType::BF16, [2, 7, 2 * 128]), view(DType::BF16, [2, 7, 2 * 128]));
        let wide = Views { k, v, ..wide };
        refused(&wide, Config { head_dim: 128, ..config() }, "must be in 32..=256 (head_dim 128)");
        assert!(check(&wide, Config { head_dim: 128, block_q: 8, ..config() }, 0, 0.18).is_ok());
        refused(&views(), Config { splits: 2, ..config() }, "partial buffers");
        refused(&views(), Config { splits: 0, ..config() }, "splits = 0");
        refused(&views(), Config { latency: 11, ..config() }, "latency = 11");
        refused(&views(), Config { latency: -1, ..config() }, "latency = -1");
        assert!(check(&views(), config(), -1, 0.18).unwrap_err().message.contains("window = -1"));
        assert!(check(&views(), config(), 0, f32::NAN).unwrap_err().message.contains("finite"));
    }

    #[test]
    fn each_stage_describes_its_kernels_parameters() {
        let acc = CheckedTensor { ptr: 0x1000, dtype: DType::F32, shape: vec![6, 5, 512], strides: vec![2560, 512, 1] };
        let ml = CheckedTensor { ptr: 0x1000, dtype: DType::F32, shape: vec![6, 5, 16], strides: vec![80, 16, 1] };
        let split = Views { partials: Some(Partials::new(acc, ml, 3)), ..views() };
        let hints = Hints::checked(0, 0).unwrap();
        for stage in [Stage::OnePass, Stage::Split, Stage::Combine] {
            crate::launch::signature::assert_matches_kernel(&describe(&split, config(), hints, 0.18, 0, stage));
        }
    }

    fn stats(shape: [i32; 3]) -> CheckedTensor {
        view(DType::F32, shape)
    }

    fn gradients() -> Gradients {
        let (q, kv, rows) = ([2, 5, 8 * 64], [2, 7, 2 * 64], [2, 5, 8]);
        Gradients {
            dq: view(DType::BF16, q),
            dk: view(DType::BF16, kv),
            dv: view(DType::BF16, kv),
            delta: stats(rows),
            dsink: stats(rows),
            dout: view(DType::BF16, q),
            lse: stats(rows),
        }
    }

    #[test]
    fn each_training_kernel_describes_its_parameters() {
        let hints = Hints::checked(0, 0).unwrap();
        let (views, grads, lse) = (views(), gradients(), stats([2, 5, 8]));
        for training in [Training::Lse(&lse), Training::Dq(&grads), Training::Dkdv(&grads)] {
            crate::launch::signature::assert_matches_kernel(&describe_training(&views, &training, config(), hints, 0.18, 0));
        }
    }

    #[test]
    fn training_buffers_must_match_the_call() {
        let (dims, _) = check(&views(), config(), 0, 0.18).unwrap();
        assert!(check_row_stats("lse", &stats([2, 5, 8]), dims).is_ok());
        let err = check_row_stats("lse", &stats([2, 5, 4]), dims).unwrap_err();
        assert!(err.message.contains("lse must be a contiguous float32 [2, 5, 8]"), "{}", err.message);
        let err = check_row_stats("delta", &view(DType::BF16, [2, 5, 8]), dims).unwrap_err();
        assert!(err.message.contains("delta must be"), "{}", err.message);
        let split = Config { splits: 2, ..config() };
        let err = attention_sink_lse(&views(), &stats([2, 5, 8]), 0.18, 0, split, 0, 0).unwrap_err();
        assert!(err.message.contains("one pass"), "{}", err.message);
        let wrong = Gradients { dk: view(DType::BF16, [2, 5, 2 * 64]), ..gradients() };
        let err = attention_sink_backward(&views(), &wrong, 0.18, 0, config(), 0, 0).unwrap_err();
        assert!(err.message.contains("dk must be"), "{}", err.message);
    }

    #[test]
    fn split_partials_must_match_the_call() {
        let acc = CheckedTensor { ptr: 0x1000, dtype: DType::F32, shape: vec![6, 5, 512], strides: vec![2560, 512, 1] };
        let ml = CheckedTensor { ptr: 0x1000, dtype: DType::F32, shape: vec![6, 5, 16], strides: vec![80, 16, 1] };
        let split = Config { splits: 3, ..config() };
        assert!(check(&Views { partials: Some(Partials::new(acc.clone(), ml.clone(), 3)), ..views() }, split, 0, 0.18).is_ok());
        let short = CheckedTensor { shape: vec![4, 5, 16], strides: vec![80, 16, 1], ..ml.clone() };
        refused(&Views { partials: Some(Partials::new(acc.clone(), short, 3)), ..views() }, split, "ml must be");
        // The combine's view: split s of batch b at row s * B + b.
        let four = by_split(&acc, 3).unwrap();
        assert_eq!((four.shape, four.strides), (vec![3, 2, 5, 512], vec![5120, 2560, 512, 1]));
        assert!(by_split(&acc, 4).is_none());
        let huge = CheckedTensor { shape: vec![2, 1, 1 << 30], strides: vec![1 << 30, 1 << 30, 1], ..acc };
        assert!(by_split(&huge, 1).is_none());
    }

    #[test]
    fn combine_chunks_stay_within_their_loads() {
        // 66 splits: 16 splits' D 64 accumulators a load; never more splits than there are, rounded up.
        assert_eq!(combine_chunk(66, 64), 16);
        assert_eq!(combine_chunk(66, 128), 8);
        assert_eq!(combine_chunk(3, 64), 4);
        assert_eq!(combine_chunk(2, 256), 2);
        assert_eq!(combine_chunk(1024, 256), 4);
    }
}
