//! Host side of attention_sink: checks the views against one another and the config,
//! then enqueues the one-pass kernel, or the split kernel and its combine, on the
//! caller's stream (crate::launch) without waiting.

use super::kernel::attention_sink_kernels;
use crate::abi::{CheckedTensor, DType, IndexTensor, OpError, OpResult};
use crate::launch::{self, FirstLaunch, Key};
use crate::replay::{Args, Value};
use crate::spec::{check_block, Hints, KernelModule, KernelSpec};
use cutile::cutile_compiler::specialization::DivHint;
use cutile::half::{bf16, f16};
use cutile::prelude::*;
use cutile::tensor::KernelOutputStored;

/// The tensors of one call, as the C export read them.
pub struct Views {
    pub out: CheckedTensor,
    pub q: CheckedTensor,
    pub k: CheckedTensor,
    pub v: CheckedTensor,
    pub sinks: CheckedTensor,
    pub start_q: IndexTensor,
    /// The split kernel's partials (acc, ml), present when `splits` > 1.
    pub partials: Option<(CheckedTensor, CheckedTensor)>,
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
}

/// Rows of a CTA (`block_q * heads_per_tile`) and keys of a tile: the tensor cores'
/// smallest useful tile up to what one CTA's registers hold.
const MIN_ROWS: i32 = 16;
/// Rows of a CTA at least, from head dim 128 up: 16-row tiles of head dim 128 faulted with
/// a misaligned address on the H200 (their SASS alone stores through STSM.16.M88.4;
/// docs/benchmarks.md, "attention_sink").
const MIN_ROWS_WIDE_HEADS: i32 = 32;
const MAX_ROWS: i32 = 256;
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
    if !(1..=MAX_SPLITS).contains(&config.splits) {
        return Err(OpError::invalid(format!("splits = {}: must be in 1..={MAX_SPLITS}", config.splits)));
    }
    if config.splits > 1 {
        let Some((acc, ml)) = partials else {
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
    }
    Ok((dims, Hints::checked(config.occupancy, config.warps)?))
}

/// Adds an int32 index tensor to a replay key, as `Key::tensor` does a float one.
fn with_index(key: Key, t: &IndexTensor) -> Key {
    key.with(t.shape[0]).with(t.strides[0]).with(DivHint::from_ptr(t.ptr).divisor)
}

pub fn attention_sink(views: &Views, scale: f32, window: i32, config: Config, device: i32, stream: u64) -> OpResult<()> {
    let (dims, hints) = check(views, config, window, scale)?;
    if dims.batch == 0 || dims.s_q == 0 {
        return Ok(());
    }
    let Views { out, q, k, v, sinks, start_q, partials } = views;
    let tiles = [config.block_q, config.heads_per_tile, config.head_dim, config.block_n, config.group];
    let base = |kernel| {
        let key = Key::new(KERNELS.name, kernel, device).with(window).hints(hints).tensor(q).tensor(k).tensor(v).tensor(sinks);
        with_index(tiles.iter().fold(key, |key, &t| key.with(t)), start_q)
    };
    let inputs = [Value::Ptr(q.ptr), Value::Ptr(k.ptr), Value::Ptr(v.ptr), Value::Ptr(sinks.ptr), Value::Ptr(start_q.ptr)];
    let launch = Launch { views, tiles, hints, window, scale, splits: config.splits };
    match partials {
        None => {
            let key = base("attention_sink").tensor(out);
            let values = [&[Value::Ptr(out.ptr)][..], &inputs, &[Value::F32(scale)]].concat();
            launch::enqueue("attention_sink", key, device, stream, &values, || spec(&launch, Stage::OnePass), |first| {
                dispatch(q.dtype, sinks.dtype, first, &launch, Stage::OnePass)
            })
        }
        Some((acc, ml)) => {
            let key = base("attention_sink_split").with(config.splits).tensor(acc).tensor(ml);
            let values = [&[Value::Ptr(acc.ptr), Value::Ptr(ml.ptr)][..], &inputs, &[Value::F32(scale)]].concat();
            launch::enqueue("attention_sink", key, device, stream, &values, || spec(&launch, Stage::Split), |first| {
                dispatch(q.dtype, sinks.dtype, first, &launch, Stage::Split)
            })?;
            let key = Key::new(KERNELS.name, "attention_sink_combine", device).with(config.splits).hints(hints).tensor(out).tensor(acc).tensor(ml).tensor(sinks);
            let key = tiles.iter().fold(key, |key, &t| key.with(t));
            let values = [Value::Ptr(out.ptr), Value::Ptr(acc.ptr), Value::Ptr(ml.ptr), Value::Ptr(sinks.ptr)];
            launch::enqueue("attention_sink", key, device, stream, &values, || spec(&launch, Stage::Combine), |first| {
                dispatch(q.dtype, sinks.dtype, first, &launch, Stage::Combine)
            })
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    OnePass,
    Split,
    Combine,
}

/// What a first launch needs besides its element types.
struct Launch<'a> {
    views: &'a Views,
    /// block_q, heads_per_tile, head_dim, block_n, group.
    tiles: [i32; 5],
    hints: Hints,
    window: i32,
    scale: f32,
    splits: i32,
}

const KERNELS: KernelModule = KernelModule {
    name: "attention_sink_kernels",
    ast: attention_sink_kernels::__module_ast_self,
    source_hash: attention_sink_kernels::_SOURCE_HASH,
};

/// One stage's launch as cutile specializes it: kernel, generics, hints, then the
/// kernel's parameters in order.
fn spec(launch: &Launch, stage: Stage) -> KernelSpec {
    let Views { out, q, k, v, sinks, start_q, partials } = launch.views;
    let [bq, gt, d, bn, group] = launch.tiles;
    let (bm, gd) = (bq * gt, gt * d);
    let generics = |kernel_tiles: &[i32]| {
        let types = [q.dtype.jit_name().to_string(), sinks.dtype.jit_name().to_string()];
        types.into_iter().chain(kernel_tiles.iter().map(|t| t.to_string())).collect::<Vec<_>>()
    };
    let inputs = |spec: KernelSpec| {
        spec.tensor("q", q)
            .tensor("k", k)
            .tensor("v", v)
            .tensor("sinks", sinks)
            .raw_tensor("start_q", start_q.ptr, &start_q.shape, &start_q.strides)
            .int("window", launch.window)
    };
    let new = |kernel, tiles: &[i32]| KernelSpec::new(KERNELS, kernel, generics(tiles), launch.hints);
    match (stage, partials) {
        (Stage::OnePass, _) | (_, None) => inputs(new("attention_sink", &[bq, gt, bm, d, gd, bn, group]).tensor("out", out)),
        (Stage::Split, Some((acc, ml))) => {
            let spec = new("attention_sink_split", &[bq, gt, bm, d, gd, 2 * gt, bn, group]).tensor("acc_out", acc).tensor("ml_out", ml);
            inputs(spec).int("splits", launch.splits)
        }
        (Stage::Combine, Some((acc, ml))) => new("attention_sink_combine", &[bq, gt, bm, d, gd])
            .tensor("out", out)
            .tensor("acc_in", acc)
            .tensor("ml_in", ml)
            .tensor("sinks", sinks)
            .int("splits", launch.splits),
    }
}

fn dispatch(e: DType, s: DType, first: &FirstLaunch, launch: &Launch, stage: Stage) -> OpResult<()> {
    match (e, s) {
        (DType::F16, DType::F32) => launch_first::<f16, f32>(first, launch, stage),
        (DType::F16, DType::F16) => launch_first::<f16, f16>(first, launch, stage),
        (DType::F16, DType::BF16) => launch_first::<f16, bf16>(first, launch, stage),
        (DType::BF16, DType::F32) => launch_first::<bf16, f32>(first, launch, stage),
        (DType::BF16, DType::F16) => launch_first::<bf16, f16>(first, launch, stage),
        (DType::BF16, DType::BF16) => launch_first::<bf16, bf16>(first, launch, stage),
        (DType::F32, _) => Err(OpError::invalid("attention_sink takes float16 or bfloat16 q, k and v")),
    }
}

/// cutile's launch of one stage for q/k/v of type `E` and sinks of type `S`.
fn launch_first<E: cutile::DType, S: cutile::DType>(first: &FirstLaunch, launch: &Launch, stage: Stage) -> OpResult<()> {
    let Views { out, q, k, v, sinks, start_q, partials } = launch.views;
    let [bq, gt, d, _, _] = launch.tiles;
    let gd = gt * d;
    let (window, scale, splits) = (launch.window, launch.scale, launch.splits);
    // SAFETY: torch owns every allocation and keeps it alive while the work it ordered on
    // the stream runs; out and the partials are outputs nobody else writes meanwhile.
    let t = |t: &CheckedTensor| unsafe { first.borrow::<E>(t) };
    let f = |t: &CheckedTensor| unsafe { first.borrow::<f32>(t) };
    let sinks_t = || unsafe { first.borrow::<S>(sinks) };
    let start_t = || unsafe {
        cutile::tensor::Tensor::<i32>::borrow_raw_parts(start_q.ptr, first.ctx.clone(), start_q.shape.clone(), start_q.strides.clone())
    };
    let out_tile = [1, bq, gd];
    let ml_tile = [1, bq, 2 * gt];
    let part = |tile: [i32; 3]| tile.map(|x| x as usize);
    let (generics, options) = (|| first.spec().generics(), || first.spec().options());
    // The launcher of this stage, handed to `$finish` as `$l` (their types differ).
    macro_rules! with_launcher {
        (|$l:ident| $finish:expr) => {{
            match stage {
                Stage::OnePass => {
                    let (mut ot, qt, kt, vt, st, sq) = (t(out), t(q), t(k), t(v), sinks_t(), start_t());
                    let $l = attention_sink_kernels::attention_sink((&mut ot).partition(part(out_tile)), &qt, &kt, &vt, &st, &sq, scale, window)
                        .generics(generics())
                        .compile_options(options());
                    $finish
                }
                Stage::Split => {
                    let (acc, ml) = partials.as_ref().expect("checked: splits > 1 has partials");
                    let (mut at, mut mt) = (f(acc), f(ml));
                    let (qt, kt, vt, st, sq) = (t(q), t(k), t(v), sinks_t(), start_t());
                    let $l = attention_sink_kernels::attention_sink_split(
                        (&mut at).partition(part(out_tile)),
                        (&mut mt).partition(part(ml_tile)),
                        &qt, &kt, &vt, &st, &sq, scale, window, splits,
                    )
                    .generics(generics())
                    .compile_options(options());
                    $finish
                }
                Stage::Combine => {
                    let (acc, ml) = partials.as_ref().expect("checked: splits > 1 has partials");
                    let (mut ot, at, mt, st) = (t(out), f(acc), f(ml), sinks_t());
                    let $l = attention_sink_kernels::attention_sink_combine((&mut ot).partition(part(out_tile)), &at, &mt, &st, splits)
                        .generics(generics())
                        .compile_options(options());
                    $finish
                }
            }
        }};
    }
    first.run(
        |s| with_launcher!(|l| l.specialize_on(s).map(|k| k.into_l1_cache_key())),
        // SAFETY (async_on): completion is ordered by the caller's stream, as for any torch op.
        || with_launcher!(|l| unsafe { l.async_on(&first.stream) }.map(|_| ())),
        || {
            let grid_of = |grid: Result<(u32, u32, u32), _>| grid.map_err(|e| OpError::invalid(format!("attention_sink launch grid: {e}")));
            let inputs = |args: Args, first: usize| {
                args.tensor(first, &q.shape, &q.strides)
                    .tensor(first + 1, &k.shape, &k.strides)
                    .tensor(first + 2, &v.shape, &v.strides)
                    .tensor(first + 3, &sinks.shape, &sinks.strides)
                    .tensor(first + 4, &start_q.shape, &start_q.strides)
                    .live(first + 5, 0f32)
                    .scalar(window)
            };
            Ok(Some(match stage {
                Stage::OnePass => {
                    let mut ot = t(out);
                    let grid = grid_of(KernelOutputStored::<E>::grid(&(&mut ot).partition(part(out_tile))))?;
                    (grid, inputs(Args::default().partition(0, &out.shape, &out.strides, &out_tile), 1))
                }
                Stage::Split => {
                    let (acc, ml) = partials.as_ref().expect("checked: splits > 1 has partials");
                    let mut at = f(acc);
                    let grid = grid_of(KernelOutputStored::<f32>::grid(&(&mut at).partition(part(out_tile))))?;
                    let args = Args::default().partition(0, &acc.shape, &acc.strides, &out_tile).partition(1, &ml.shape, &ml.strides, &ml_tile);
                    (grid, inputs(args, 2).scalar(splits))
                }
                Stage::Combine => {
                    let (acc, ml) = partials.as_ref().expect("checked: splits > 1 has partials");
                    let mut ot = t(out);
                    let grid = grid_of(KernelOutputStored::<E>::grid(&(&mut ot).partition(part(out_tile))))?;
                    let args = Args::default()
                        .partition(0, &out.shape, &out.strides, &out_tile)
                        .tensor(1, &acc.shape, &acc.strides)
                        .tensor(2, &ml.shape, &ml.strides)
                        .tensor(3, &sinks.shape, &sinks.strides)
                        .scalar(splits);
                    (grid, args)
                }
            }))
        },
    )
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
        Config { group: 4, head_dim: 64, block_q: 4, heads_per_tile: 4, block_n: 64, splits: 1, occupancy: 0, warps: 0 }
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
        assert!(check(&views(), config(), -1, 0.18).unwrap_err().message.contains("window = -1"));
        assert!(check(&views(), config(), 0, f32::NAN).unwrap_err().message.contains("finite"));
    }

    #[test]
    fn split_partials_must_match_the_call() {
        let acc = CheckedTensor { ptr: 0x1000, dtype: DType::F32, shape: vec![6, 5, 512], strides: vec![2560, 512, 1] };
        let ml = CheckedTensor { ptr: 0x1000, dtype: DType::F32, shape: vec![6, 5, 16], strides: vec![80, 16, 1] };
        let split = Config { splits: 3, ..config() };
        assert!(check(&Views { partials: Some((acc.clone(), ml.clone())), ..views() }, split, 0, 0.18).is_ok());
        let short = CheckedTensor { shape: vec![4, 5, 16], strides: vec![80, 16, 1], ..ml };
        refused(&Views { partials: Some((acc, short)), ..views() }, split, "ml must be");
    }
}
