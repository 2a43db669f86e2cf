"""attention_sink(query, key, value, sinks, ...): causal flash attention with one sink
logit per head (GPT-OSS style), grouped-query heads, an optional sliding window and a
KV-cache offset read on the device. A cuTile Rust forward, bfloat16 and float16."""

from __future__ import annotations

import functools
import math
import threading
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _choice, _describe, _device, _op, _registry, _torch_ops, _tuned

if TYPE_CHECKING:
    import torch

__all__ = [
    "AttentionSinkConfig", "attention_sink", "attention_sink_backward_config", "attention_sink_candidates",
    "attention_sink_config", "attention_sink_rule",
]

EXPORT = "cutile_attention_sink"
TRAIN_FORWARD = "cutile_attention_sink_lse"
BACKWARD = "cutile_attention_sink_backward"
LOG2E = 1.4426950408889634


class AttentionSinkConfig(NamedTuple):
    """An attention_sink launch: each CTA takes `block_q` query positions of
    `heads_per_tile` query heads of one KV head (a power of two dividing the group;
    block_q * heads_per_tile rows, 16 to 256) and walks the keys in `block_n` tiles;
    with `splits` > 1 the keys of each query block are shared among that many CTAs
    and a second kernel combines them (one CTA a query head, with hints of its own).
    `occupancy` and `warps` as for softmax, for the attention kernel; `latency`
    the K/V loads' latency hint for tileiras' pipelining, 1 (light DRAM traffic) to 10
    (heavy), 0 leaving it to tileiras."""

    block_q: int
    heads_per_tile: int
    block_n: int
    splits: int = 1
    occupancy: int = 0
    warps: int = 0
    latency: int = 0


# The rule a device without a fitted table takes (docs/benchmarks.md says what is measured):
# ROWS rows per CTA, KEYS keys per tile, and split-KV when the grid would leave SMs idle
# with at least MIN_TILES_PER_SPLIT key tiles for each split.
ROWS = 128
KEYS = 64
MIN_TILES_PER_SPLIT = 4
MAX_HEADS_PER_TILE = 16


def _heads_per_tile(group: int) -> int:
    """The largest power of two dividing `group`, at most MAX_HEADS_PER_TILE."""
    return min(group & -group, MAX_HEADS_PER_TILE)


def _min_rows(head_dim: int) -> int:
    """Rows a CTA takes at least: 16, and 32 from head dim 128 up (the library says why)."""
    return 32 if head_dim >= 128 else 16


def _key_tiles(s_q: int, s_kv: int, window: int, block_q: int, block_n: int) -> int:
    """Key tiles one query block visits at most (causal: up to its last row; window: from its first)."""
    span = min(s_kv, window + block_q) if window else s_kv
    return max(1, -(-span // block_n))


def _splits(batch: int, s_q: int, s_kv: int, kv_heads: int, group: int, window: int, block_q: int, gt: int,
            block_n: int, sms: int) -> int:
    """The rule's split count for a tiling: enough CTAs for two waves when the grid alone
    would leave SMs idle, each split keeping MIN_TILES_PER_SPLIT key tiles."""
    ctas = batch * -(-s_q // block_q) * kv_heads * (group // gt)
    tiles = _key_tiles(s_q, s_kv, window, block_q, block_n)
    if 0 < ctas < sms and tiles >= 2 * MIN_TILES_PER_SPLIT:
        return min(-(-2 * sms // ctas), tiles // MIN_TILES_PER_SPLIT, 1024)
    return 1


def attention_sink_rule(
    batch: int, s_q: int, s_kv: int, kv_heads: int, group: int, head_dim: int, window: int, sms: int
) -> AttentionSinkConfig:
    """The rule's config for a call (`window` 0: none) on a GPU of `sms` SMs, where no fitted table applies."""
    gt = _heads_per_tile(group)
    block_q = max(_min_rows(head_dim) // gt, min(ROWS // gt, _op.next_pow2(s_q)), 1)
    return AttentionSinkConfig(block_q, gt, KEYS, _splits(batch, s_q, s_kv, kv_heads, group, window, block_q, gt, KEYS, sms))


def _problem(dtype: Any, batch: int, s_q: int, s_kv: int, kv_heads: int, group: int, head_dim: int, window: int) -> _tuned.Problem:
    """A call as a tuning problem; no window counts as one of S_kv + S_q positions (every key visible)."""
    return _tuned.problem(dtype, batch, s_q, s_kv, kv_heads, group, head_dim, window or s_kv + s_q)


def attention_sink_config(
    batch: int, s_q: int, s_kv: int, kv_heads: int, group: int, head_dim: int, window: int, sms: int,
    dtype: torch.dtype | str = "bfloat16", device: int | None = None,
) -> AttentionSinkConfig:
    """The heuristic's config for a call (`window` 0: none) of `dtype` on CUDA device `device`
    (default: the current one) of `sms` SMs: the nearest problem of its fitted table
    (benchmarks/tune.py attention_sink, tuned/attention_sink.json) made fit for this call;
    float16 without a fit of its own takes bfloat16's (the same kernels on 2-byte operands);
    else `attention_sink_rule`."""
    problem = _problem(dtype, batch, s_q, s_kv, kv_heads, group, head_dim, window)
    return AttentionSinkConfig(*_tuned.fitted(
        "attention_sink", problem, device,
        lambda: attention_sink_rule(batch, s_q, s_kv, kv_heads, group, head_dim, window, sms),
        lambda config, problem, fitted: _adapt(config, problem, fitted, sms),
        stand_in="bfloat16",
    ))


def _adapt(config: tuple[int, ...], problem: _tuned.Problem, fitted: _tuned.Problem, sms: int) -> tuple[int, ...] | None:
    """A fitted config for a nearby call: its rows per CTA regrouped for this group's heads per
    tile, no more query positions than the call has, and the rule's splits for that tiling
    (a split count fits only its own grid); None where the rows do not fit the head dim."""
    if problem[1:] == fitted[1:]:
        return config  # where it was measured (or its stand-in dtype was)
    _, batch, s_q, s_kv, kv_heads, group, d, window = _unpack(problem)
    c = AttentionSinkConfig(*config)
    gt = _heads_per_tile(group)
    block_q = max(1, min((c.block_q * c.heads_per_tile) // gt, _op.next_pow2(s_q)), _min_rows(d) // gt)
    if not _min_rows(d) <= block_q * gt <= 256:
        return None
    splits = _splits(batch, s_q, s_kv, kv_heads, group, window, block_q, gt, c.block_n, sms)
    return c._replace(block_q=block_q, heads_per_tile=gt, splits=splits)


def attention_sink_candidates(
    batch: int, s_q: int, s_kv: int, kv_heads: int, group: int, head_dim: int, window: int, sms: int,
    dtype: torch.dtype | str = "bfloat16", device: int | None = None,
) -> list[AttentionSinkConfig]:
    """The autotuner's search space: the rule's and the fitted config, rows per CTA, key tile,
    splits, occupancy, and the K/V loads with tileiras' latency or a hint of 4."""
    base = attention_sink_rule(batch, s_q, s_kv, kv_heads, group, head_dim, window, sms)
    fitted = attention_sink_config(batch, s_q, s_kv, kv_heads, group, head_dim, window, sms, dtype, device)
    gt = base.heads_per_tile
    configs = {base, fitted}
    for rows in (16, 32, 64, 128):
        block_q = max(1, rows // gt)
        if block_q * gt < _min_rows(head_dim) or block_q > max(_op.next_pow2(s_q) * 2, _min_rows(head_dim) // gt):
            continue
        for block_n in (32, 64, 128):
            for splits in sorted({1, base.splits, max(1, base.splits // 2), base.splits * 2}):
                for occupancy in (0, 2):
                    configs.update(AttentionSinkConfig(block_q, gt, block_n, min(splits, 1024), occupancy, 0, latency)
                                   for latency in (0, 4))
    return sorted(configs)


plans = _op.Plans("attention_sink", EXPORT)
# A plan's args: scale, window, group, head_dim, then the config's fields.
_PLAN_SPLITS = 4 + AttentionSinkConfig._fields.index("splits")
chooser = _choice.Chooser("attention_sink", AttentionSinkConfig, plans)

# Small constant device tensors the kernels read (start_q given as an int; fmha's absent
# sinks), made once per (device, length, value, dtype) outside a graph capture, so a repeated
# call launches no fill kernel.
_filled_tensors: dict[tuple[Any, ...], torch.Tensor] = {}
_filled_lock = threading.Lock()


def _filled(length: int, value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    import torch

    key = (device.index or 0, length, value, dtype)
    found = _filled_tensors.get(key)
    if found is not None:
        return found
    made = torch.full((length,), value, dtype=dtype, device=device)
    if made.is_meta or not torch.cuda.is_current_stream_capturing():  # a capture's allocation is the graph's
        with _filled_lock:
            if len(_filled_tensors) >= 4096:
                _filled_tensors.clear()
            _filled_tensors[key] = made
    return made


def _start_tensor(value: int, device: torch.device) -> torch.Tensor:
    """start_q given as an int: the one-element int32 tensor the kernels read."""
    import torch

    return _filled(1, value, torch.int32, device)


def _start_q(start_q: Any, s_kv: int, device: torch.device) -> torch.Tensor:
    """start_q as the one-element int32 device tensor the kernels read."""
    import torch

    if isinstance(start_q, torch.Tensor):
        if start_q.numel() != 1 or start_q.dtype.is_floating_point or start_q.dtype.is_complex or start_q.dtype == torch.bool:
            raise ValueError(f"start_q must be an int or a one-element integer tensor, got {start_q.dtype} {tuple(start_q.shape)}")
        if start_q.device.type == "cpu":  # read here: no device to synchronise with
            start_q = int(start_q.item())
        elif start_q.device != device:
            raise ValueError(f"start_q is on {start_q.device}, the query on {device}; put it on the query's device")
        else:
            # On the device its value is the kernel's to read: never synchronised on, so not
            # checked here (negative: every row fully masked, zeros; past S_kv: keys clamp).
            flat = start_q.reshape(1)
            return flat if flat.dtype == torch.int32 else flat.to(torch.int32)
    if isinstance(start_q, bool) or not isinstance(start_q, int):
        try:
            start_q = int(start_q)  # numpy integers and other int-likes
        except (TypeError, ValueError):
            raise TypeError(f"start_q must be an int or a one-element integer tensor, got {type(start_q).__name__}") from None
    if not 0 <= start_q <= s_kv:
        raise ValueError(f"start_q = {start_q}: must be in 0..={s_kv} (S_kv), the position of the first query in the KV cache")
    return _start_tensor(start_q, device)


def _window(sliding_window: Any) -> int:
    if sliding_window is None:
        return 0
    if isinstance(sliding_window, bool) or not isinstance(sliding_window, int) or sliding_window < 0:
        raise ValueError(f"sliding_window must be None or a non-negative int (0: none), got {sliding_window!r}")
    if sliding_window >= 2**31:
        return 0  # wider than any i32 sequence: no window
    return sliding_window


def _check(query: Any, key: Any, value: Any, sinks: Any) -> tuple[int, int, int, int, int, int]:
    """(B, S_q, S_kv, H_kv, group, D) of a valid call, else the exception that says what is wrong."""
    import torch

    for name, t in (("query", query), ("key", key), ("value", value), ("sinks", sinks)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"attention_sink: {name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in (("query", query), ("key", key), ("value", value), ("sinks", sinks)):
        _device.check_cuda_tensor(t, f"attention_sink ({name})")
    return _check_shapes(query, key, value, sinks)


def _check_shapes(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor) -> tuple[int, int, int, int, int, int]:
    """The checks of `_check` that need no data (the fake implementation makes them too)."""
    import torch

    if query.dim() != 5:
        raise ValueError(f"query must be (B, S_q, H_kv, G, D), got {query.dim()} dims {tuple(query.shape)}")
    if key.dim() != 4 or value.dim() != 4:
        raise ValueError(f"key and value must be (B, S_kv, H_kv, D), got {tuple(key.shape)} and {tuple(value.shape)}")
    b, s_q, h_kv, group, d = query.shape
    if key.shape != value.shape:
        raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} must have the same shape")
    if key.shape[0] != b or key.shape[2] != h_kv or key.shape[3] != d:
        raise ValueError(f"key/value {tuple(key.shape)} must be (B={b}, S_kv, H_kv={h_kv}, D={d}) to match query {tuple(query.shape)}")
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"attention_sink supports float16 and bfloat16; query is {query.dtype}. Cast it, e.g. q.bfloat16()")
    for name, t in (("key", key), ("value", value)):
        if t.dtype != query.dtype:
            raise TypeError(f"{name} dtype {t.dtype} differs from query's {query.dtype}")
        if t.device != query.device:
            raise ValueError(f"{name} is on {t.device}, query on {query.device}: put them on one device")
    if sinks.dim() != 1 or sinks.shape[0] != h_kv * group:
        raise ValueError(f"sinks must be (H_kv*G,) = ({h_kv * group},), one logit per query head; got {tuple(sinks.shape)}")
    if not sinks.dtype.is_floating_point:
        raise TypeError(f"sinks must be floating point, got {sinks.dtype}")
    if sinks.device != query.device:
        raise ValueError(f"sinks are on {sinks.device}, query on {query.device}: put them on one device")
    if d < 16 or d > 256 or d & (d - 1):
        raise ValueError(f"head dim D = {d} is not supported: D must be a power of two from 16 to 256 (64 and 128 are tuned)")
    if key.shape[1] == 0:
        raise ValueError("key and value hold no positions (S_kv = 0): every query needs at least one key")
    return b, s_q, key.shape[1], h_kv, group, d


def _rows(t: torch.Tensor, b: int, s: int, width: int) -> torch.Tensor:
    """`t` as the `[B, S, width]` view the kernels read (unit last stride), copied only when it must be."""
    t3 = t.reshape(b, s, width)
    return t3 if width <= 1 or t3.stride(2) == 1 else t3.contiguous()


def _sinks(sinks: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    import torch

    return sinks if sinks.dtype in (torch.float32, dtype) else sinks.float()


def _plan_key(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: torch.Tensor, sm_scale: float, window: int) -> tuple[Any, ...]:
    """What makes two calls the same launch (start_q aside: an int or tensor of any value is passed per call)."""
    return (q.shape, q.stride(), k.shape, k.stride(), v.stride(), q.dtype, s.dtype, s.stride(), q.get_device(), sm_scale, window)


def _choose(
    q3: torch.Tensor, k3: torch.Tensor, v3: torch.Tensor, sinks: torch.Tensor, dims: tuple[int, ...], window: int,
    scale: float, index: int, config: Any, autotune: bool,
) -> AttentionSinkConfig:
    if config is not None:
        return _choice.check_config(config, AttentionSinkConfig)
    b, s_q, s_kv, h_kv, group, d = dims
    sms = _device.sm_count(index)
    problem = (index, q3.dtype, b, s_q, s_kv, h_kv, group, d, window)

    def tuner() -> Any:
        import torch

        start = _start_tensor(0, q3.device)
        q, k, v = torch.randn_like(q3), torch.randn_like(k3), torch.randn_like(v3)  # the caller's tensors stay untouched
        out = torch.empty_like(q)
        return lambda c: _launch(out, q, k, v, sinks, start, scale, window, group, d, c, index)

    return chooser.choose(
        problem,
        lambda: f"attention_sink|{_device.name(index)}|{q3.dtype}|d={d}|g={group}|w={window}|b*hkv~{_op.next_pow2(b * h_kv)}"
        f"|sq~{_op.next_pow2(s_q)}|skv~{_op.next_pow2(s_kv)}",
        lambda: attention_sink_config(b, s_q, s_kv, h_kv, group, d, window, sms, q3.dtype, index),
        lambda: attention_sink_candidates(b, s_q, s_kv, h_kv, group, d, window, sms, q3.dtype, index),
        tuner,
        autotune,
    )


def _partials(out: torch.Tensor, heads: int, splits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The split kernel's float32 partials (acc, ml); with one split, `out` stands in for both (never read)."""
    import torch

    if splits <= 1:
        return out, out
    b, s_q, width = out.shape
    return out.new_empty((splits * b, s_q, width), dtype=torch.float32), out.new_empty((splits * b, s_q, 2 * heads), dtype=torch.float32)


# The backward's tiles (no fitted table yet): query tiles of BACKWARD_ROWS rows and key tiles
# of BACKWARD_KEYS keys, tileiras choosing the warps (an 8-warp hint at head dim 128 gave a
# wrong dk on the H100: docs/benchmarks.md, "Backward: the first GPU run").
BACKWARD_ROWS = 64
BACKWARD_KEYS = 64


def attention_sink_backward_config(group: int, head_dim: int) -> AttentionSinkConfig:
    """The tiles of the training forward's backward for `group` query heads per KV head."""
    gt = _heads_per_tile(group)
    block_q = max(1, BACKWARD_ROWS // gt, _min_rows(head_dim) // gt)
    return AttentionSinkConfig(block_q, gt, BACKWARD_KEYS)


def _launch_lse(
    out: torch.Tensor, lse: torch.Tensor, q3: torch.Tensor, k3: torch.Tensor, v3: torch.Tensor, sinks: torch.Tensor,
    start: torch.Tensor, scale: float, window: int, group: int, d: int, config: AttentionSinkConfig, index: int,
) -> None:
    """The one-pass forward that also saves each row's lse (a split config runs unsplit)."""
    what = ("attention_sink lse", q3.dtype, tuple(q3.shape), tuple(k3.shape), "config", config)
    tensors = {"out": out, "lse": lse, "q": q3, "k": k3, "v": v3, "sinks": sinks, "start_q": start}
    _op.launch("attention_sink lse", TRAIN_FORWARD, tensors, {**_shape_args(scale, window, group, d), **_unsplit(config)}, index, what)


def _launch_backward(
    tensors: dict[str, torch.Tensor], scale: float, window: int, group: int, d: int, config: AttentionSinkConfig, index: int,
) -> None:
    """`tensors`: the gradients written (dq, dk, dv, delta, dsink) and the tensors read, by
    the backward export's parameter names."""
    what = ("attention_sink backward", tensors["q"].dtype, tuple(tensors["q"].shape), tuple(tensors["k"].shape), "config", config)
    _op.launch("attention_sink backward", BACKWARD, tensors, {**_shape_args(scale, window, group, d), **_unsplit(config)}, index, what)


def _shape_args(scale: float, window: int, group: int, d: int) -> dict[str, Any]:
    """The scalars every attention_sink export takes before its config."""
    return {"scale": scale, "window": window, "group": group, "head_dim": d}


def _unsplit(config: AttentionSinkConfig) -> dict[str, int]:
    """A config's fields as the training kernels' exports take them: every field but splits."""
    fields = _op.named(AttentionSinkConfig, config)
    del fields["splits"]
    return fields


def _views(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor, start_q: Any, dims: tuple[int, ...]
) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A checked call's device index (its context prepared), start_q tensor, `[B, S, width]`
    views of q, k and v, and sinks as the kernels read them."""
    b, s_q, s_kv, h_kv, group, d = dims
    index = _op.device_index(query)
    _device.prepare(index)
    start = _start_q(start_q, s_kv, query.device)
    q3, k3, v3 = _rows(query, b, s_q, h_kv * group * d), _rows(key, b, s_kv, h_kv * d), _rows(value, b, s_kv, h_kv * d)
    return index, start, q3, k3, v3, _sinks(sinks, query.dtype)


def _prepared(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor, start_q: Any, dims: tuple[int, ...]
) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`_views` and a new output."""
    import torch

    b, s_q, _, h_kv, group, d = dims
    out = torch.empty((b, s_q, h_kv * group * d), dtype=query.dtype, device=query.device)
    return (*_views(query, key, value, sinks, start_q, dims), out)


def _train_forward(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor, scale: float, window: int, start_q: Any,
    dims: tuple[int, ...],
) -> tuple[torch.Tensor, torch.Tensor]:
    """The training forward of a checked call: the output and each row's log2-sum-exp
    (`[B, S_q, H]` float32), which the backward recomputes the weights from."""
    import torch

    b, s_q, _, h_kv, group, d = dims
    index, start, q3, k3, v3, s, out = _prepared(query, key, value, sinks, start_q, dims)
    lse = torch.empty((b, s_q, h_kv * group), dtype=torch.float32, device=query.device)
    chosen = _choose(q3, k3, v3, s, dims, window, scale, index, None, False)
    if b and s_q:
        _launch_lse(out, lse, q3, k3, v3, s, start, scale, window, group, d, chosen._replace(splits=1), index)
    return out, lse


def _train_backward(
    dout: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    sinks: torch.Tensor, scale: float, window: int, start_q: Any, dims: tuple[int, ...], want_dsinks: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """dq, dk, dv (query's and key's shapes) and, where wanted, dsinks (sinks' dtype) from the
    training forward's output and lse: dq on the query side, dk and dv summed over each KV
    head's query heads, the sinks' gradient summed from per-row terms."""
    import torch

    b, s_q, _, h_kv, group, d = dims
    index, start, q3, k3, v3, s = _views(query, key, value, sinks, start_q, dims)
    dout3 = _rows(dout.to(out.dtype), b, s_q, h_kv * group * d)
    dq, dk, dv = torch.empty_like(out), torch.empty_like(k3, memory_format=torch.contiguous_format), torch.empty_like(
        v3, memory_format=torch.contiguous_format)
    delta, dsink = torch.empty_like(lse), torch.empty_like(lse)
    if b and s_q:
        tensors = {"dq": dq, "dk": dk, "dv": dv, "delta": delta, "dsink": dsink, "dout": dout3, "lse": lse, "out": out, "q": q3, "k": k3,
                   "v": v3, "sinks": s, "start_q": start}
        _launch_backward(tensors, scale, window, group, d, attention_sink_backward_config(group, d), index)
    else:
        for t in (dk, dv, dsink):
            t.zero_()
    dsinks = dsink.sum((0, 1)).to(sinks.dtype) if want_dsinks else None
    return dq.view(query.shape), dk.view(key.shape), dv.view(key.shape), dsinks


@functools.cache
def _autograd_function() -> Any:
    import torch

    class AttentionSink(torch.autograd.Function):
        """Our kernels both ways (_train_forward, _train_backward)."""

        @staticmethod
        def forward(ctx: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor,
                    scale: float, window: int, start_q: Any, dims: tuple[int, ...]) -> torch.Tensor:
            out, lse = _train_forward(query, key, value, sinks, scale, window, start_q, dims)
            ctx.save_for_backward(query, key, value, sinks, out, lse)
            ctx.call = (scale, window, start_q, dims)
            return out

        @staticmethod
        def backward(ctx: Any, dout: torch.Tensor) -> tuple[Any, ...]:
            query, key, value, sinks, out, lse = ctx.saved_tensors
            scale, window, start_q, dims = ctx.call
            dq, dk, dv, dsinks = _train_backward(dout, out, lse, query, key, value, sinks, scale, window, start_q, dims,
                                                 ctx.needs_input_grad[3])
            return dq, dk, dv, dsinks, None, None, None, None

    return AttentionSink


def _arguments(
    out: torch.Tensor, q3: torch.Tensor, k3: torch.Tensor, v3: torch.Tensor, sinks: torch.Tensor, start: torch.Tensor,
    scale: float, window: int, group: int, d: int, config: AttentionSinkConfig,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The forward export's tensors (with fresh split partials) and scalars, by parameter name:
    what a launch passes and what the public call's plan binds."""
    acc, ml = _partials(out, q3.shape[2] // d, config.splits)
    tensors = {"out": out, "q": q3, "k": k3, "v": v3, "sinks": sinks, "start_q": start, "acc": acc, "ml": ml}
    return tensors, {**_shape_args(scale, window, group, d), **_op.named(AttentionSinkConfig, config)}


def _launch(
    out: torch.Tensor, q3: torch.Tensor, k3: torch.Tensor, v3: torch.Tensor, sinks: torch.Tensor, start: torch.Tensor,
    scale: float, window: int, group: int, d: int, config: AttentionSinkConfig, index: int,
) -> None:
    what = ("attention_sink", q3.dtype, tuple(q3.shape), tuple(k3.shape), "config", config)
    _op.launch("attention_sink", EXPORT, *_arguments(out, q3, k3, v3, sinks, start, scale, window, group, d, config), index, what)


def attention_sink(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    sinks: torch.Tensor,
    sm_scale: float = 0.125,
    sliding_window: int | None = None,
    start_q: int | torch.Tensor = 0,
    *,
    config: AttentionSinkConfig | tuple[int, ...] | None = None,
    autotune: bool = False,
) -> torch.Tensor:
    """Attention with sinks, returned as a new `(B, S_q, H_kv*G*D)` tensor in query's dtype.

    query `(B, S_q, H_kv, G, D)`, key and value `(B, S_kv, H_kv, D)`: float16 or bfloat16
    CUDA tensors on one device, D a power of two from 16 to 256; sinks `(H_kv*G,)`, one
    logit per query head (any float dtype). Query i sits at position `start_q + i` and
    attends the keys at positions up to its own and, with `sliding_window=W`, after its
    own minus W; each head's sink joins the softmax denominator only, so
    out = sum_j exp(s_ij) v_j / (exp(sink) + sum_j exp(s_ij)), s = sm_scale * q.k.
    A row that sees no key (start_q past a window's reach) is all zeros.

    `start_q`: an int in 0..=S_kv, or a one-element integer tensor on the query's device
    (read by the kernel: no host sync, so its value is not checked). Runs on the current
    stream without blocking the host (CUDA-graph capturable). Where query, key, value or
    sinks require grad, gradients flow to them through our backward kernels (the forward
    then saves each row's log2-sum-exp; `attention_sink_backward_config` picks the tiles).
    `config=AttentionSinkConfig(...)` or `autotune=True` as for softmax (forward only).
    Traced (torch.compile, torch.export, fake tensors): torch.ops.tilegym_cutile_rs.attention_sink,
    or where an input requires grad attention_sink_train, differentiated by attention_sink_backward.
    """
    if config is None and not autotune and not _torch_ops.is_compiling():
        window = _window(sliding_window)
        # The per-call fast path: plain tensors of a layout seen before on this thread.
        try:
            plan_key = _plan_key(query, key, value, sinks, float(sm_scale), window)
        except (AttributeError, TypeError):
            plan_key = None  # not tensors: the checks below say what is wrong
        plan = plans.reusable(plan_key, query, key, value, sinks) if plan_key is not None else None
        if plan is not None:
            b, s_q, h_kv, group, d = query.shape
            start = _start_q(start_q, key.shape[1], query.device)
            out = query.new_empty((b, s_q, h_kv * group * d))
            acc, ml = _partials(out, h_kv * group, plan.args[_PLAN_SPLITS])
            plan.run(out.data_ptr(), query.data_ptr(), key.data_ptr(), value.data_ptr(), sinks.data_ptr(),
                     start.data_ptr(), acc.data_ptr(), ml.data_ptr())  # fmt: skip
            return out
    traced = _torch_ops.traced_or_fake(query, key, value, sinks, start_q)
    if traced is not None:
        return _traced(traced, query, key, value, sinks, sm_scale, sliding_window, start_q, config)
    window = _window(sliding_window)
    scale = float(sm_scale) * LOG2E
    dims = _check(query, key, value, sinks)
    if not math.isfinite(scale):
        raise ValueError(f"sm_scale = {sm_scale}: must be finite")
    if _trains((query, key, value, sinks), config is not None or autotune):
        with_grad: torch.Tensor = _autograd_function().apply(query, key, value, sinks, scale, window, start_q, dims)
        return with_grad
    b, s_q, _, _, group, d = dims
    index, start, q3, k3, v3, s, out = _prepared(query, key, value, sinks, start_q, dims)
    chosen = _choose(q3, k3, v3, s, dims, window, scale, index, config, autotune)
    if b and s_q:
        _launch(out, q3, k3, v3, s, start, scale, window, group, d, chosen, index)
        in_place = q3.data_ptr() == query.data_ptr() and k3.data_ptr() == key.data_ptr() and v3.data_ptr() == value.data_ptr()
        if config is None and not autotune and in_place and s is sinks and all(map(_op.plain, (query, key, value, sinks))):
            tensors, args = _arguments(out, q3, k3, v3, s, start, scale, window, group, d, chosen)
            plans.make(_plan_key(query, key, value, sinks, float(sm_scale), window), tensors, args, index, dense=True)
    return out


def _tilegym_attention_sink(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    sinks: torch.Tensor,
    sm_scale: float = 0.125,
    sliding_window: int | None = None,
    start_q: int | torch.Tensor = 0,
    **kwargs: Any,
) -> torch.Tensor:
    """TileGym's `attention_sink(query, key, value, sinks, sm_scale, sliding_window, start_q, **kw)`
    on our kernels; other keywords are ignored with a one-time warning."""
    _op.ignore_kwargs("attention_sink", kwargs)
    return attention_sink(query, key, value, sinks, sm_scale, sliding_window, start_q)


def _tilegym_attention_sink_decode(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    sinks: torch.Tensor,
    sm_scale: float = 0.125,
    sliding_window: int | None = None,
    start_q: int | torch.Tensor = 0,
    kv_len_per_split: int | None = None,
    **kwargs: Any,
) -> torch.Tensor:
    """TileGym's `attention_sink_decode(query, key, value, sinks, sm_scale, sliding_window,
    start_q, kv_len_per_split=None)`, which its GPT-OSS patch calls for every decode step
    (S_q = 1): the same kernels as attention_sink, whose fitted split-KV heuristic picks the
    splits for one-query rows, so `kv_len_per_split` (a tuning hint of TileGym's kernel) is
    accepted and ignored."""
    _op.ignore_kwargs("attention_sink_decode", kwargs)
    return attention_sink(query, key, value, sinks, sm_scale, sliding_window, start_q)


# fmha without sinks on the attention-with-sinks kernel: a sink logit this low weighs
# exp(sink - max) = 0 in float32 against any real score, and, unlike -inf, keeps the running
# max finite in a split or tile where a row sees no key yet.
NO_SINK = -1e30


def _absent_sinks(heads: int, device: torch.device) -> torch.Tensor:
    import torch

    return _filled(heads, NO_SINK, torch.float32, device)


def _fmha(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None, causal: bool) -> torch.Tensor:
    """softmax(q k^T * scale) v for q `[B, H, S_q, D]` and k, v `[B, H_kv, S_kv, D]` (H a multiple
    of H_kv: grouped-query attention), causal aligned to the last key (queries at positions
    S_kv - S_q onwards, as transformers' prefill with a cache), on attention_sink's kernel with
    no sink; a `[B, H, S_q, D]` view of `[B, S_q, H, D]` memory comes back. q, k and v in
    transformers' layout (`[B, S, H, D]` memory seen transposed) are read in place; others are
    copied once."""
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"fmha takes q, k and v as [batch, heads, seq, head_dim] tensors; {name} is {getattr(t, 'shape', t)!r}")
    b, h, s_q, d = q.shape
    h_kv, s_kv = k.shape[1], k.shape[2]
    if h_kv == 0 or h % h_kv:
        raise ValueError(f"fmha: q's {h} heads must be a multiple of k's {h_kv} (grouped-query attention)")
    if causal and s_q > s_kv:
        raise ValueError(f"fmha: a causal call needs S_q <= S_kv (queries end at the last key); got {s_q} and {s_kv}")
    query = q.transpose(1, 2).reshape(b, s_q, h_kv, h // h_kv, d)
    key, value = k.transpose(1, 2), v.transpose(1, 2)
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    start = s_kv - s_q if causal else s_kv  # non-causal: every query sits past the last key
    out = attention_sink(query, key, value, _absent_sinks(h, q.device), scale, None, start)
    return out.view(b, s_q, h, d).transpose(1, 2)


def _tilegym_fmha(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float | None = None, is_causal: bool = True,
                  **kwargs: Any) -> torch.Tensor:
    """TileGym's `fmha(q, k, v, scaling=None, is_causal=True, **kwargs)` (prefill): gradients
    flow whenever q, k or v require grad, so `has_backward` (which TileGym's attention interface
    passes as False even in training, where its cutile backend's output then carries no
    gradient) changes nothing; `kernel_configs` picks among TileGym's own kernels and is ignored."""
    _op.ignore_kwargs("fmha", kwargs, documented=("has_backward", "kernel_configs"))
    return _fmha(q, k, v, scaling, is_causal)


def _tilegym_fmha_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float | None,
                         kv_len_per_split: int | None = None, **kwargs: Any) -> torch.Tensor:
    """TileGym's `fmha_decode(q, k, v, sm_scale, kv_len_per_split=None)`: q `[B, H, 1, D]`
    against every key; our split-KV heuristic picks the splits (`kv_len_per_split` is ignored)."""
    _op.ignore_kwargs("fmha_decode", kwargs)
    return _fmha(q, k, v, sm_scale, False)


def _warmup(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, autotune: bool) -> AttentionSinkConfig:
    """Compile (and optionally autotune) attention_sink for `shape` = (B, S_q, S_kv, H_kv, G, D)."""
    import torch

    if len(shape) != 6:
        raise ValueError(f"attention_sink warms up (B, S_q, S_kv, H_kv, G, D) shapes, got {shape}")
    b, s_q, s_kv, h_kv, group, d = shape
    q = torch.randn(b, s_q, h_kv, group, d, device=device, dtype=dtype)
    k = torch.randn(b, s_kv, h_kv, d, device=device, dtype=dtype)
    v = torch.randn_like(k)
    sinks = torch.randn(h_kv * group, device=device, dtype=dtype)
    start = max(0, s_kv - s_q)
    with torch.no_grad():
        attention_sink(q, k, v, sinks, 1 / math.sqrt(d), None, start, autotune=autotune)
    index = _op.device_index(q)
    return attention_sink_config(b, s_q, s_kv, h_kv, group, d, 0, _device.sm_count(index), dtype, index)


def reference(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor,
    sm_scale: float = 0.125, sliding_window: int | None = None, start_q: int = 0,
) -> torch.Tensor:
    """The float32 eager computation the kernels are checked against (tests, smoke, benchmark)."""
    import torch

    b, s_q, h_kv, group, d = query.shape
    s_kv = key.shape[1]
    k, v = key.float(), value.float()
    sink = sinks.float().view(1, h_kv, group, 1, 1)
    cols = torch.arange(s_kv, device=query.device)[None, :]
    out = torch.empty(b, s_q, h_kv, group, d, dtype=torch.float32, device=query.device)
    # Query rows a slice at a time, so the float32 logits stay near 256 MiB at any length
    # (TileGym's 10820-token prefill would otherwise need three 28 GiB temporaries).
    chunk = max(1, (256 << 20) // (4 * b * h_kv * group * max(s_kv, 1)))
    for lo in range(0, s_q, chunk):
        q = query[:, lo : lo + chunk].float()
        rows = torch.arange(lo, lo + q.shape[1], device=query.device)[:, None] + start_q
        hidden = cols > rows
        if sliding_window:
            hidden |= cols <= rows - sliding_window
        logits = torch.einsum("bqhgd,bkhd->bhgqk", q, k) * sm_scale
        logits = logits.masked_fill(hidden, float("-inf"))
        top = torch.maximum(logits.amax(-1, keepdim=True), sink)
        weights = torch.exp(logits - top)
        weights = weights / (weights.sum(-1, keepdim=True) + torch.exp(sink - top))
        out[:, lo : lo + chunk] = torch.einsum("bhgqk,bkhd->bqhgd", weights, v)
    return out.reshape(b, s_q, h_kv * group * d).to(query.dtype)


def _smoke(device: torch.device) -> str:
    import torch

    q = torch.randn(2, 33, 2, 4, 64, device=device, dtype=torch.bfloat16)
    k = torch.randn(2, 40, 2, 64, device=device, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    sinks = torch.randn(8, device=device)
    out = attention_sink(q, k, v, sinks, 0.125, 16, 7)
    err = (out.float() - reference(q, k, v, sinks, 0.125, 16, 7).float()).abs().max().item()
    assert out.shape == (2, 33, 512) and err < 5e-2, f"max abs error {err:.2e} vs float32 torch (bound 5e-2)"
    return f"attention_sink max abs error {err:.2e} vs float32 torch (bound 5e-2)"


def _trains(tensors: tuple[Any, ...], tiles_given: bool) -> bool:
    """Whether a call trains (grad enabled, an input requiring grad): it then runs the training
    kernels with their own tiles, so a config or autotuning given is refused."""
    import torch

    if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
        return False
    if tiles_given:
        raise ValueError("attention_sink with gradients takes its own tiles: pass no config and autotune=False")
    return True


def _traced(
    ops: Any, query: Any, key: Any, value: Any, sinks: Any, sm_scale: float, sliding_window: Any, start_q: Any, config: Any
) -> torch.Tensor:
    """The call as our torch operator (an int start_q and a tensor one are two overloads); where
    an input requires grad, the training operator, whose autograd formula runs our backward."""
    import torch

    args = (query, key, value, sinks, float(sm_scale), _window(sliding_window))
    overload = "start_tensor" if isinstance(start_q, torch.Tensor) else "default"
    if _trains((query, key, value, sinks), bool(config)):
        trained: torch.Tensor = getattr(ops.attention_sink_train, overload)(*args, start_q)[0]
        return trained
    if isinstance(start_q, torch.Tensor):
        out: torch.Tensor = ops.attention_sink.start_tensor(*args, start_q, list(config or ()))
    else:
        out = ops.attention_sink(*args, int(start_q), list(config or ()))
    return out


def _op_attention_sink(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor, sm_scale: float, sliding_window: int,
    start_q: Any, config: list[int],
) -> torch.Tensor:
    import torch

    with torch.no_grad():  # the operator is the forward (no autograd formula registered on it yet)
        return attention_sink(query, key, value, sinks, sm_scale, sliding_window or None, start_q, config=tuple(config) or None)


def _fake_attention_sink(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor, sm_scale: float, sliding_window: int,
    start_q: Any, config: list[int],
) -> torch.Tensor:
    import torch

    b, s_q, _, h_kv, group, d = _check_shapes(query, key, value, sinks)
    return torch.empty((b, s_q, h_kv * group * d), dtype=query.dtype, device=query.device)


def _op_attention_sink_train(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor, sm_scale: float, sliding_window: int,
    start_q: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    dims = _check(query, key, value, sinks)
    return _train_forward(query, key, value, sinks, float(sm_scale) * LOG2E, _window(sliding_window or None), start_q, dims)


def _fake_attention_sink_train(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor, sm_scale: float, sliding_window: int,
    start_q: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    b, s_q, _, h_kv, group, d = _check_shapes(query, key, value, sinks)
    return (torch.empty((b, s_q, h_kv * group * d), dtype=query.dtype, device=query.device),
            torch.empty((b, s_q, h_kv * group), dtype=torch.float32, device=query.device))


def _setup_attention_sink_train(ctx: Any, inputs: tuple[Any, ...], output: tuple[Any, ...]) -> None:
    import torch

    query, key, value, sinks, sm_scale, sliding_window, start_q = inputs
    tensors = (query, key, value, sinks, *output)
    if isinstance(start_q, torch.Tensor):
        ctx.save_for_backward(*tensors, start_q)
        ctx.start_q = None
    else:
        ctx.save_for_backward(*tensors)
        ctx.start_q = start_q
    ctx.scalars = (sm_scale, sliding_window)
    ctx.mark_non_differentiable(output[1])


def _backward_attention_sink_train(ctx: Any, dout: torch.Tensor, dlse: Any) -> tuple[Any, ...]:
    saved = ctx.saved_tensors
    start_q = saved[6] if ctx.start_q is None else ctx.start_q
    ops = _torch_ops.torch_ops().attention_sink_backward
    backward = ops.start_tensor if ctx.start_q is None else ops.default
    dq, dk, dv, dsinks = backward(dout, saved[4], saved[5], *saved[:4], *ctx.scalars, start_q)
    return dq, dk, dv, dsinks if ctx.needs_input_grad[3] else None, None, None, None


def _op_attention_sink_backward(
    dout: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    sinks: torch.Tensor, sm_scale: float, sliding_window: int, start_q: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dims = _check(query, key, value, sinks)
    dq, dk, dv, dsinks = _train_backward(dout, out, lse, query, key, value, sinks, float(sm_scale) * LOG2E,
                                         _window(sliding_window or None), start_q, dims, True)
    assert dsinks is not None
    return dq, dk, dv, dsinks


def _fake_attention_sink_backward(
    dout: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    sinks: torch.Tensor, sm_scale: float, sliding_window: int, start_q: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    import torch

    _check_shapes(query, key, value, sinks)
    return (torch.empty(query.shape, dtype=query.dtype, device=query.device), torch.empty(key.shape, dtype=key.dtype, device=key.device),
            torch.empty(key.shape, dtype=key.dtype, device=key.device), torch.empty(sinks.shape, dtype=sinks.dtype, device=sinks.device))


def _train_example(d: Any, start_tensor: bool) -> tuple[Any, ...]:
    """A GPT-OSS-like training call (inputs requiring grad; a 16-key window; start 7 or a
    device-side 0)."""
    start = _torch_ops.int32_tensor(d, 0) if start_tensor else 7
    return (_torch_ops.sample(d, 2, 33, 2, 4, 64, grad=True), _torch_ops.sample(d, 2, 40, 2, 64, grad=True),
            _torch_ops.sample(d, 2, 40, 2, 64, grad=True), _torch_ops.sample(d, 8, dtype="float32", grad=True), 0.125, 16, start)


def _backward_example(d: Any, start_tensor: bool) -> tuple[Any, ...]:
    """The backward of `_train_example`'s call, on the output and lse its training operator made."""
    import torch

    q, k, v, s, scale, window, start = (a.detach() if isinstance(a, torch.Tensor) else a for a in _train_example(d, start_tensor))
    train = _torch_ops.register_torch_ops().attention_sink_train
    out, lse = (train.start_tensor if start_tensor else train.default)(q, k, v, s, scale, window, start)
    return (torch.randn_like(out), out, lse, q, k, v, s, scale, window, start)


def _position(start_q: Any) -> int:
    """start_q as the reference takes it: an int, or a one-element tensor's value."""
    return int(start_q) if isinstance(start_q, int) else int(start_q.item())


def _reference_forward(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor, sm_scale: float, sliding_window: int,
    start_q: Any, *config: Any,
) -> torch.Tensor:
    """`reference` with the operators' arguments (start_q an int or a one-element tensor; a
    trailing config ignored)."""
    return reference(query, key, value, sinks, sm_scale, sliding_window, _position(start_q))


def _reference_backward(
    dout: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    sinks: torch.Tensor, sm_scale: float, sliding_window: int, start_q: Any,
) -> tuple[Any, ...]:
    """dq, dk, dv and dsinks of the reference at dout (out and lse are the kernel's own state)."""
    import torch

    forward = functools.partial(_reference_forward, sm_scale=sm_scale, sliding_window=sliding_window, start_q=start_q)
    grads: tuple[Any, ...] = torch.func.vjp(forward, query, key, value, sinks)[1](dout)
    return grads


# The forward's (atol 5e-2, rtol 1e-2) and the gradients' (atol 2e-2, rtol 2e-2) bounds in one, both
# 16-bit dtypes: float32 logits and accumulators, one rounding of each output.
TOLERANCES = dict.fromkeys(("float16", "bfloat16"), _registry.Tolerance(rtol=2e-2, atol=5e-2))
_SCHEMA = "(Tensor query, Tensor key, Tensor value, Tensor sinks, float sm_scale, int sliding_window, {} start_q, int[] config) -> Tensor"
_TRAIN_SCHEMA = "(Tensor query, Tensor key, Tensor value, Tensor sinks, float sm_scale, int sliding_window, {} start_q) -> (Tensor, Tensor)"
_BACKWARD_SCHEMA = ("(Tensor dout, Tensor out, Tensor lse, Tensor query, Tensor key, Tensor value, Tensor sinks, float sm_scale, "
                    "int sliding_window, {} start_q) -> (Tensor, Tensor, Tensor, Tensor)")
TORCH_OPS = (
    _registry.TorchOp(
        "attention_sink", _SCHEMA.format("int"), _op_attention_sink, _fake_attention_sink,
        example=lambda d: (_torch_ops.sample(d, 2, 33, 2, 4, 64), _torch_ops.sample(d, 2, 40, 2, 64), _torch_ops.sample(d, 2, 40, 2, 64),
                           _torch_ops.sample(d, 8, dtype="float32"), 0.125, 16, 7, []),
        reference=_reference_forward, tolerances=TOLERANCES,
    ),
    _registry.TorchOp(
        "attention_sink.start_tensor", _SCHEMA.format("Tensor"), _op_attention_sink, _fake_attention_sink,
        # decode: one query at position 49 of a 50-key cache, the position a device tensor
        example=lambda d: (_torch_ops.sample(d, 1, 1, 2, 4, 64), _torch_ops.sample(d, 1, 50, 2, 64), _torch_ops.sample(d, 1, 50, 2, 64),
                           _torch_ops.sample(d, 8), 0.125, 0, _torch_ops.int32_tensor(d, 49), []),
        reference=_reference_forward, tolerances=TOLERANCES,
    ),
    *(
        op
        for name, start in (("", "int"), (".start_tensor", "Tensor"))
        for op in (
            _registry.TorchOp(
                "attention_sink_train" + name, _TRAIN_SCHEMA.format(start), _op_attention_sink_train, _fake_attention_sink_train,
                _backward_attention_sink_train, _setup_attention_sink_train,
                example=functools.partial(_train_example, start_tensor=bool(name)),
                reference=lambda *args: (_reference_forward(*args), None),
                tolerances=TOLERANCES,
            ),
            _registry.TorchOp(
                "attention_sink_backward" + name, _BACKWARD_SCHEMA.format(start), _op_attention_sink_backward,
                _fake_attention_sink_backward, example=functools.partial(_backward_example, start_tensor=bool(name)),
                reference=_reference_backward, tolerances=TOLERANCES,
            ),
        )
    ),
)


# Shapes whose kernels the wheel ships compiled (_shipped), as (B, S_q, S_kv, H_kv, G, D, window):
# TileGym 1.5.1's tests/ops/test_attention_sink.py grid and its perf rows (also
# benchmarks/attention_sink_bench.py's), then head dim 128 for prefill and decode.
SHIPPED_SHAPES = [
    (b, s_q, s_kv, 8, 8, 64, window) for b in (1, 2) for s_q in (1, 128) for s_kv in (32, 128) for window in (None, 128)
]
SHIPPED_SHAPES += [
    (1, 128, 2048, 8, 8, 64, None), (1, 128, 4096, 8, 8, 64, None), (1, 128, 2048, 8, 8, 64, 128),
    (1, 128, 4096, 8, 8, 64, 128), (2, 128, 2048, 8, 8, 128, None), (1, 10820, 10820, 8, 8, 64, None),
    (1, 10820, 10820, 8, 8, 64, 128), (1, 1, 10919, 8, 8, 64, None),
    (1, 4096, 4096, 8, 8, 128, None), (1, 4096, 4096, 8, 8, 128, 128), (1, 1, 10919, 8, 8, 128, None),
]


def _shipped(device: torch.device) -> None:
    """Each shipped shape in bfloat16 (TileGym's dtype) and float16, with sinks of the
    query's dtype (as TileGym passes them) and of float32."""
    import torch

    for b, s_q, s_kv, h_kv, group, d, window in SHIPPED_SHAPES:
        for dtype in (torch.bfloat16, torch.float16):
            q = torch.empty(b, s_q, h_kv, group, d, dtype=dtype, device=device)
            k = torch.empty(b, s_kv, h_kv, d, dtype=dtype, device=device)
            for sinks_dtype in (dtype, torch.float32):
                sinks = torch.empty(h_kv * group, dtype=sinks_dtype, device=device)
                attention_sink(q, k, torch.empty_like(k), sinks, 1 / math.sqrt(d), window, max(0, s_kv - s_q))
    # TileGym's fmha and fmha_decode (no sinks) for Llama 3 8B (32 q heads, 8 kv heads, head dim
    # 128) in transformers' layout: a 4096-token prefill and a decode step over 4096 keys.
    for dtype in (torch.bfloat16, torch.float16):
        for s_q in (4096, 1):
            q = torch.empty(1, s_q, 32, 128, dtype=dtype, device=device).transpose(1, 2)
            k = torch.empty(1, 4096, 8, 128, dtype=dtype, device=device).transpose(1, 2)
            _fmha(q, k, torch.empty_like(k), None, s_q > 1)
    # Training: the forward that saves lse and the backward, for Llama 3 8B's 4096-token prefill
    # (fmha, no sinks) and GPT-OSS 20B's (64 heads over 8, head dim 64, a 128 window, its trained
    # sinks a parameter of the model's dtype).
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = (torch.empty(1, 4096, h, 128, dtype=dtype, device=device, requires_grad=True) for h in (32, 8, 8))
        out = _fmha(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, True)
        torch.autograd.backward([out], [torch.empty_like(out)])
        q = torch.empty(1, 4096, 8, 8, 64, dtype=dtype, device=device, requires_grad=True)
        k, v = (torch.empty(1, 4096, 8, 64, dtype=dtype, device=device, requires_grad=True) for _ in range(2))
        sinks = torch.empty(64, dtype=dtype, device=device, requires_grad=True)
        out = attention_sink(q, k, v, sinks, 0.125, 128, 0)
        torch.autograd.backward([out], [torch.empty_like(out)])
    # The smoke test's call (python -m tilegym_cutile_rs.check).
    q, k = torch.empty(2, 33, 2, 4, 64, dtype=torch.bfloat16, device=device), torch.empty(2, 40, 2, 64, dtype=torch.bfloat16, device=device)
    attention_sink(q, k, torch.empty_like(k), torch.empty(8, device=device), 0.125, 16, 7)


def visible_pairs(s_q: int, s_kv: int, window: int | None, start_q: int) -> int:
    """Query-key pairs the masks leave: query i (position start_q + i) sees keys max(0, p - W + 1)..min(p, S_kv - 1)."""
    total = 0
    for i in range(s_q):
        p = start_q + i
        hi = min(p, s_kv - 1)
        lo = max(0, p - window + 1) if window else 0
        total += max(0, hi - lo + 1)
    return total


# benchmarks/tune.py attention_sink: benchmarks/attention_sink_bench.py's rows, (dtype, B, S_q,
# S_kv, H_kv, G, D, window or S_kv + S_q), each query block ending at the cache's end
# (start_q = S_kv - S_q), as the bench and TileGym's tests call it.
TUNING_SHAPES = [
    (1, 128, 2048, 8, 8, 64, 0), (1, 128, 4096, 8, 8, 64, 0), (1, 128, 2048, 8, 8, 64, 128), (1, 128, 4096, 8, 8, 64, 128),
    (1, 10820, 10820, 8, 8, 64, 0), (1, 10820, 10820, 8, 8, 64, 128), (1, 1, 10919, 8, 8, 64, 0),
    (1, 128, 2048, 8, 8, 128, 0), (1, 128, 4096, 8, 8, 128, 0), (2, 128, 2048, 8, 8, 128, 0), (1, 1, 10919, 8, 8, 128, 0),
    (1, 4096, 4096, 8, 8, 128, 0),
]


def _unpack(problem: _tuned.Problem) -> tuple[Any, int, int, int, int, int, int, int]:
    """(dtype, B, S_q, S_kv, H_kv, G, D, window) of a tuning problem (window 0: none)."""
    dtype_name, b, s_q, s_kv, h_kv, group, d, window = problem
    return _tuned.torch_dtype(dtype_name), b, s_q, s_kv, h_kv, group, d, 0 if window >= s_kv + s_q else window


def _tuning_sms() -> int:
    """SMs of the GPU being tuned (the current CUDA device); without one (listing candidates
    on a CPU machine), an H100 SXM's."""
    import torch

    return _device.sm_count(torch.cuda.current_device()) if torch.cuda.is_available() else max(_describe.ARCHS["sm_90"])


def _tuning_candidates(problem: _tuned.Problem) -> list[AttentionSinkConfig]:
    """The rule's config; for 64 queries or more, 64 to 256 rows per CTA, key tiles of 64 and
    128, one split or the rule's count for the tiling, occupancy 0 to 2, tileiras' warps or
    8, the K/V loads with tileiras' latency or a hint of 4 (72 to 144 configs); for fewer
    queries (decode), the autotuner's space."""
    _, b, s_q, s_kv, h_kv, group, d, window = _unpack(problem)
    sms = _tuning_sms()
    rule = attention_sink_rule(b, s_q, s_kv, h_kv, group, d, window, sms)
    if s_q < 64:
        return attention_sink_candidates(b, s_q, s_kv, h_kv, group, d, window, sms, problem[0])
    gt = rule.heads_per_tile
    configs = {rule}
    for rows in (64, 128, 256):
        block_q = max(1, rows // gt)
        if block_q * gt < _min_rows(d):
            continue
        for block_n in (64, 128):
            splits = _splits(b, s_q, s_kv, h_kv, group, window, block_q, gt, block_n, sms)
            configs.update(AttentionSinkConfig(block_q, gt, block_n, split, occupancy, warps, latency)
                           for split in {1, splits} for occupancy in (0, 1, 2) for warps in (0, 8) for latency in (0, 4))
    return sorted(configs)


def _tuning_bench(problem: _tuned.Problem, device: Any) -> Any:
    """Random q, k, v and sinks, each config checked against the float32 reference at the
    benchmark's bound (atol 5e-2)."""
    import torch

    dtype, b, s_q, s_kv, h_kv, group, d, window = _unpack(problem)
    q = torch.randn(b, s_q, h_kv, group, d, device=device, dtype=dtype)
    k, v = (torch.randn(b, s_kv, h_kv, d, device=device, dtype=dtype) for _ in range(2))
    sinks = torch.randn(h_kv * group, device=device, dtype=dtype)
    sm_scale, start_q = 1 / math.sqrt(d), s_kv - s_q
    ref = reference(q, k, v, sinks, sm_scale, window or None, start_q).float()
    out = torch.empty((b, s_q, h_kv * group * d), dtype=dtype, device=device)
    q3, k3, v3 = q.view(b, s_q, -1), k.view(b, s_kv, -1), v.view(b, s_kv, -1)
    start, index = _start_tensor(start_q, q.device), _op.device_index(q)
    return _tuned.checked_runs(
        lambda config: _launch(out, q3, k3, v3, sinks, start, sm_scale * LOG2E, window, group, d,
                               AttentionSinkConfig(*config), index),
        lambda: torch.testing.assert_close(out.float(), ref, rtol=0, atol=5e-2),
        (out,),
    )


def _tuning_flops(problem: _tuned.Problem) -> int:
    _, b, s_q, s_kv, h_kv, group, d, window = _unpack(problem)
    return 4 * b * h_kv * group * d * visible_pairs(s_q, s_kv, window, s_kv - s_q)


TUNINGS = [
    _tuned.Tuning(
        name="attention_sink",
        problems=[_problem(dt, *shape) for dt in ("bfloat16", "float16") for shape in TUNING_SHAPES],
        candidates=_tuning_candidates,
        rule=lambda p: attention_sink_rule(*_unpack(p)[1:], _tuning_sms()),
        bench=_tuning_bench,
        nbytes=lambda p: p[1] * (2 * p[2] * p[5] + 2 * p[3]) * p[4] * p[6] * _tuned.torch_dtype(p[0]).itemsize,
        adapt=lambda config, problem, fitted: _adapt(config, problem, fitted, _tuning_sms()),
        flops=_tuning_flops,
    )
]

OP = _registry.OpSpec(
    "attention_sink",
    tilegym={
        "attention_sink": _tilegym_attention_sink,
        "attention_sink_decode": _tilegym_attention_sink_decode,
        "fmha": _tilegym_fmha,
        "fmha_decode": _tilegym_fmha_decode,
    },
    warmup=_warmup, smoke=_smoke, shipped=_shipped,
    torch_ops=TORCH_OPS, tunings=TUNINGS,
    warms_up=lambda shape, dtype: len(shape) == 6 and str(dtype) in ("torch.float16", "torch.bfloat16"),
)
