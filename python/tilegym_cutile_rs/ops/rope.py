"""rope(q, k, cos, sin): rotary position embedding in transformers' rotate-half layout, q and
k in one launch, forward and backward, float32/float16/bfloat16; and TileGym's
`apply_rope_base` / `get_apply_rope_func` for its model patches."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _choice, _device, _op, _registry, _torch_ops, _tuned

if TYPE_CHECKING:
    import torch

__all__ = ["RopeConfig", "rope", "rope_config", "rope_rule", "rope_splits"]

EXPORT = "cutile_rope"
SUPPORTED = ("float32", "float16", "bfloat16")


class RopeConfig(NamedTuple):
    """A rope launch: `blocks` CTAs per position, each rotating a block of q's heads and one
    of k's (powers of two, in as many blocks for both: `rope_splits` lists them), `occupancy`
    CTAs per SM and `warps` worker warps per CTA (0: tileiras' choice)."""

    blocks: int
    occupancy: int = 0
    warps: int = 0


def rope_splits(heads_q: int, heads_k: int) -> dict[int, tuple[int, int]]:
    """The ways to spread a position's heads over CTAs: {blocks: (q heads, k heads) a block},
    where both tiles are powers of two falling in that many blocks (the last may be partial)."""
    splits: dict[int, tuple[int, int]] = {}
    for tile_q in (1 << i for i in range(max(heads_q, 1).bit_length() + 1)):
        blocks = -(-heads_q // tile_q)
        tile_k = _op.next_pow2(-(-heads_k // blocks))
        if -(-heads_k // tile_k) == blocks:
            splits.setdefault(blocks, (tile_q, tile_k))
    return splits


@functools.lru_cache(maxsize=256)
def _tiles(heads_q: int, heads_k: int, blocks: int) -> tuple[int, int]:
    """q's and k's heads a block for `blocks` blocks (every launch asks: memoised)."""
    splits = rope_splits(heads_q, heads_k)
    if blocks not in splits:
        raise ValueError(
            f"RopeConfig.blocks = {blocks}: {heads_q} q heads and {heads_k} k heads split into power-of-two blocks of as many "
            f"CTAs only as {sorted(splits)}; pass one of those"
        )
    return splits[blocks]


def rope_rule(rows: int, heads_q: int, heads_k: int, head_dim: int, half: int, dtype: torch.dtype | str) -> RopeConfig:
    """The config where no fitted table applies: the split whose q block holds the nearest to
    1024 elements (8 heads of 128), tileiras' hints."""
    splits = rope_splits(heads_q, heads_k)
    return RopeConfig(min(splits, key=lambda b: (abs((splits[b][0] * head_dim).bit_length() - 11), b)))


def rope_config(rows: int, heads_q: int, heads_k: int, head_dim: int, half: int, dtype: torch.dtype | str,
                device: int | None = None) -> RopeConfig:
    """The heuristic's config for `rows` (batch x seq) positions of `heads_q` and `heads_k` heads
    of `head_dim`, `2 * half` of them rotated, on CUDA device `device` (default: the current
    one), forward and backward alike (one kernel): the nearest problem of the fitted table
    (benchmarks/tune.py, tuned/rope.json; float16 without a fit of its own takes bfloat16's)
    with the same heads, else `rope_rule`."""
    problem = _tuned.problem(dtype, rows, heads_q, heads_k, head_dim, half)
    stand_in = "bfloat16" if problem[0] == "float16" else None
    return RopeConfig(*_tuned.fitted("rope", problem, device, lambda: rope_rule(rows, heads_q, heads_k, head_dim, half, dtype),
                                     _adapt, stand_in))


def _adapt(config: tuple[int, ...], problem: _tuned.Problem, fitted: _tuned.Problem) -> tuple[int, ...] | None:
    """A fit carries over between numbers of positions, not between head layouts."""
    return config if tuple(problem[2:]) == tuple(fitted[2:]) else None


chooser = _choice.Chooser("rope", RopeConfig)


def _config(q: torch.Tensor, k: torch.Tensor, half: int, config: Any, index: int) -> RopeConfig:
    """An explicit config, else the chooser's (memoised per problem: the per-call fast path)."""
    if config is not None:
        return _choice.check_config(config, RopeConfig)
    b, hq, s, d = q.shape
    problem = _tuned.problem(q.dtype, b * s, hq, k.shape[1], d, half)
    return chooser.choose(
        (index, *problem),
        lambda: f"rope|{_device.name(index)}|{q.dtype}|heads={hq}/{k.shape[1]}|d={d}|half={half}|rows~{min(_op.next_pow2(b * s), 1 << 20)}",
        lambda: rope_config(b * s, hq, k.shape[1], d, half, q.dtype, index),
        lambda: _tuning_candidates(problem),
        lambda: _tuning_bench(problem, q.device),
        False,
    )


def _half(head_dim: int, rotary_dim: int | None) -> int:
    """Half the rotated dims, checked: a power of two dividing head_dim."""
    rotated = head_dim if rotary_dim is None else rotary_dim
    half = rotated // 2
    if rotated % 2 or half < 1 or half & (half - 1) or head_dim % half or rotated > head_dim:
        raise ValueError(
            f"rope rotates an even number of dims, half of them a power of two dividing head_dim {head_dim}; "
            f"got {rotated} rotated dims. Pass rotary_dim such as {head_dim} or {head_dim // 2}"
        )
    return half


def _tables(t: torch.Tensor, name: str, q: torch.Tensor) -> torch.Tensor:
    """cos or sin as `[1 or B, S, *]` of q's dtype: a `[S, *]` table gains its batch dim."""
    t3 = t.unsqueeze(0) if t.dim() == 2 else t
    if t3.dim() != 3:
        raise ValueError(f"rope: {name} must be [S, dims] or [1 or batch, S, dims]; got shape {tuple(t.shape)}")
    if t3.dtype != q.dtype:
        t3 = t3.to(q.dtype)
    if t3.shape[-1] > 1 and t3.stride(-1) != 1:
        t3 = t3.contiguous()
    return t3


def _check(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, half: int) -> None:
    """The checks that need no data (the fake implementations make them too)."""
    import torch

    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"rope takes q and k as [batch, heads, seq, head_dim]; got {tuple(q.shape)} and {tuple(k.shape)}")
    if q.dtype not in (torch.float32, torch.float16, torch.bfloat16) or k.dtype != q.dtype:
        raise TypeError(f"rope supports q and k of one dtype among {', '.join(SUPPORTED)}; got {q.dtype} and {k.dtype}")
    b, _, s, d = q.shape
    if (k.shape[0], k.shape[2], k.shape[3]) != (b, s, d):
        raise ValueError(f"rope: q {tuple(q.shape)} and k {tuple(k.shape)} must share batch, seq and head_dim")
    for name, t in (("cos", cos), ("sin", sin)):
        t3 = t.unsqueeze(0) if t.dim() == 2 else t
        if t3.dim() != 3 or t3.shape[0] not in (1, b) or t3.shape[1] != s or t3.shape[2] < half:
            raise ValueError(f"rope: {name} must be [seq, >= {half}] or [1 or {b}, {s}, >= {half}]; got {tuple(t.shape)}")
        if t.device != q.device or k.device != q.device:
            raise ValueError(f"rope: q, k, cos and sin must be on one device; got {q.device}, {k.device} and {name} on {t.device}")


def _outputs(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh `[B, S, heads, D]` buffers, seen as `[B, heads, S, D]` (transformers' own layout
    after its projections): torch's contiguous strides of `[B, S, heads, D]` (an empty extent
    counted as 1), transposed, made at once. `torch.empty` then `transpose` took 4x the host
    time on every fast-path call (docs/benchmarks.md, "rope")."""
    b, hq, s, d = q.shape
    hk = k.shape[1]
    d1, s1 = max(d, 1), max(s, 1)
    row_q, row_k = d1 * max(hq, 1), d1 * max(hk, 1)
    return (q.new_empty_strided((b, hq, s, d), (row_q * s1, d1, row_q, 1)),
            k.new_empty_strided((b, hk, s, d), (row_k * s1, d1, row_k, 1)))


def _run_kept(plan: _op.Plan, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A kept plan on fresh outputs and these tensors' pointers (every fast path's launch:
    forward, training forward and backward)."""
    q_out, k_out = _outputs(q, k)
    plan.run(q_out.data_ptr(), k_out.data_ptr(), q.data_ptr(), k.data_ptr(), cos.data_ptr(), sin.data_ptr())
    return q_out, k_out


def _unit_last(t: torch.Tensor) -> torch.Tensor:
    return t if t.shape[-1] <= 1 or t.stride(-1) == 1 else t.contiguous()


def _launch(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, half: int, sign: float,
            config: Any = None, call_key: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel on fresh outputs; `call_key`: the public call's key, under which the launch's
    plan is also kept (rope's fast path), where q, k, cos and sin are the call's own tensors."""
    q, k = _unit_last(q), _unit_last(k)
    q_out, k_out = _outputs(q, k)
    if q.numel() or k.numel():
        index = _op.device_index(q)
        _device.prepare(index)
        _launch_into(q_out, k_out, q, k, cos, sin, half, sign, _config(q, k, half, config, index), index, call_key)
    return q_out, k_out


plans = _op.Plans("rope", EXPORT)


def _launch_into(q_out: torch.Tensor, k_out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                 half: int, sign: float, config: tuple[int, ...], index: int, call_key: Any = None) -> None:
    """The kernel on q_out and k_out (as `_outputs` makes them). A launch seen before on this
    thread (every view's shape and strides, the scalars and config) reuses its descriptors:
    a decode step's rope is launch-bound."""
    b, hq, s, d = q.shape
    blocks, occupancy, warps = config
    tensors = {"q_out": q_out.transpose(1, 2).reshape(b * s, hq, d), "k_out": k_out.transpose(1, 2).reshape(b * s, k.shape[1], d),
               "q": q, "k": k, "cos": cos, "sin": sin}
    tile_q, tile_k = _tiles(hq, k.shape[1], blocks)
    scalars = {"sign": sign, "half": half, "tile_q": tile_q, "tile_k": tile_k, "occupancy": occupancy, "warps": warps}
    plan = _op.launch("rope", EXPORT, tensors, scalars, index,
                      ("rope", q.dtype, tuple(q.shape), "half", half, "config", tuple(config)))
    if call_key is not None:
        plans.keep(call_key, plan)


def _layout_key(kind: str, extra: Any, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[Any, ...]:
    """What makes two calls (or two backwards) the same launch: each tensor's shape, strides,
    dtype and device. Spelt out: a generator over the four took twice the host time."""
    return (kind, extra, q.shape, q.stride(), q.dtype, q.get_device(), k.shape, k.stride(), k.dtype, k.get_device(),
            cos.shape, cos.stride(), cos.dtype, cos.get_device(), sin.shape, sin.stride(), sin.dtype, sin.get_device())


def _kept_for_training(call_key: Any, q: Any, k: Any, cos: Any, sin: Any) -> Any:
    """The plan kept for `call_key` where this call asks gradients of q or k (the training
    forward's fast path: a Llama layer's rope every step), its four tensors plain and the
    tables asking none; else None."""
    plan = plans.get(call_key)
    if plan is None:
        return None
    torch = plan.torch
    if not all(map(_op.plain, (q, k, cos, sin))) or not torch.is_grad_enabled():
        return None
    if cos.requires_grad or sin.requires_grad or not (q.requires_grad or k.requires_grad):
        return None
    return plan


def _backward(dq: torch.Tensor, dk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, half: int,
              config: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients' inverse rotation. A training step's later backwards (the heuristic's
    config, gradients laid out as before, read in place) run the plan the first one kept under
    its own key: only the outputs are allocated and the pointers swapped."""
    if config is not None:
        return _launch(dq, dk, cos, sin, half, -1.0, config)
    key = _layout_key("backward", half, dq, dk, cos, sin)
    plan = plans.get(key)
    if plan is not None:
        return _run_kept(plan, dq, dk, cos, sin)
    own = all(t.shape[-1] <= 1 or t.stride(-1) == 1 for t in (dq, dk))  # else _launch copies them
    return _launch(dq, dk, cos, sin, half, -1.0, None, key if own else None)


@functools.cache
def _autograd_function() -> Any:
    import torch

    class Rope(torch.autograd.Function):
        """Our kernel both ways: the backward is the inverse rotation of the gradients."""

        @staticmethod
        def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, half: int,
                    config: Any, plan: Any, keep_as: Any) -> tuple[torch.Tensor, torch.Tensor]:
            """`plan`: the call's kept plan (the training forward's fast path), else a launch,
            kept under `keep_as` where that is not None."""
            ctx.save_for_backward(cos, sin)
            ctx.half, ctx.config = half, config
            if plan is None:
                return _launch(q, k, cos, sin, half, 1.0, config, keep_as)
            return _run_kept(plan, q, k, cos, sin)

        @staticmethod
        def backward(ctx: Any, dq: torch.Tensor, dk: torch.Tensor) -> tuple[Any, ...]:
            cos, sin = ctx.saved_tensors
            dq_in, dk_in = _backward(dq, dk, cos, sin, ctx.half, ctx.config)
            return dq_in, dk_in, None, None, None, None, None, None

    return Rope


def rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, rotary_dim: int | None = None,
    config: RopeConfig | tuple[int, ...] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k rotated by the position tables cos and sin, transformers' rotate-half layout:
    for the first `rotary_dim` dims (default: all), out = x * cos + rotate_half(x) * sin;
    dims past them are copied. Computed in float32, rounded once.

    q: `[B, Hq, S, D]`, k: `[B, Hk, S, D]` (any strides with a unit last one: transformers'
    transposed projections are read in place). cos and sin: `[S, *]`, `[1, S, *]` or
    `[B, S, *]`, of which the first `rotary_dim / 2` entries per position are read (both
    transformers' repeated tables and GPT-OSS's half tables work); cast to q's dtype if
    another. Half of `rotary_dim` must be a power of two dividing D. Returns new tensors of
    q's and k's shapes, `[B, S, H, D]` memory seen as `[B, H, S, D]`. Gradients flow to q and
    k through the same kernel (the inverse rotation); cos and sin take none.
    `config=RopeConfig(blocks, occupancy, warps)` overrides the heuristic (`rope_config`),
    both ways.
    Traced (torch.compile, torch.export, fake tensors): torch.ops.tilegym_cutile_rs.rope.
    """
    call_key = None
    if config is None and not _torch_ops.is_compiling():
        # The per-call fast path: plain tensors, on their devices, of a call seen before on this
        # thread (every shape, stride and dtype), none asking for gradients: the launch's
        # descriptors are reused and only the data pointers change.
        try:
            call_key = _layout_key("call", rotary_dim, q, k, cos, sin)
        except (AttributeError, TypeError):
            pass  # not tensors: the checks below say what is wrong
        else:
            plan = plans.reusable(call_key, q, k, cos, sin)
            if plan is not None:
                return _run_kept(plan, q, k, cos, sin)
            plan = _kept_for_training(call_key, q, k, cos, sin)
            if plan is not None:
                # The same plan under autograd: the tables as the call that kept it took them
                # (its own tensors, viewed 3-D), saved for the backward.
                half = _half(q.shape[-1], rotary_dim)
                q_out, k_out = _autograd_function().apply(q, k, _tables(cos, "cos", q), _tables(sin, "sin", q), half, None, plan, None)
                return q_out, k_out
    import torch

    if not all(isinstance(t, torch.Tensor) for t in (q, k, cos, sin)):
        raise TypeError("rope takes torch.Tensor q, k, cos and sin")
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"rope takes q and k as [batch, heads, seq, head_dim]; got {tuple(q.shape)} and {tuple(k.shape)}")
    half = _half(q.shape[-1], rotary_dim)
    traced = _torch_ops.traced_or_fake(q, k, cos, sin)
    if traced is not None:
        q_out, k_out = traced.rope(q, k, cos, sin, half)
        return q_out, k_out
    for t in (q, k):
        _device.check_cuda_tensor(t, "rope")
    _check(q, k, cos, sin, half)
    cos3, sin3 = _tables(cos, "cos", q), _tables(sin, "sin", q)
    if torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad):
        raise NotImplementedError("rope computes no gradient for cos and sin; pass them detached (transformers' tables are buffers)")
    if config is not None:
        config = _choice.check_config(config, RopeConfig)
    # The fast paths may serve this call's repeats where the kernel reads the call's own tensors.
    own = all(map(_op.plain, (q, k, cos, sin))) and cos3.data_ptr() == cos.data_ptr() and sin3.data_ptr() == sin.data_ptr()
    own = own and all(t.shape[-1] <= 1 or t.stride(-1) == 1 for t in (q, k))
    keep_as = call_key if own else None
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
        q_out, k_out = _autograd_function().apply(q, k, cos3, sin3, half, config, None, keep_as)
        return q_out, k_out
    return _launch(q, k, cos3, sin3, half, 1.0, config, keep_as)


def reference(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The float32 computation the kernel is checked against, rounded to q's dtype."""
    import torch

    d = q.shape[-1]
    half = (rotary_dim or d) // 2
    c3 = (cos.unsqueeze(0) if cos.dim() == 2 else cos)[..., :half].float().unsqueeze(1)
    s3 = (sin.unsqueeze(0) if sin.dim() == 2 else sin)[..., :half].float().unsqueeze(1)

    def one(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        x1, x2, rest = xf[..., :half], xf[..., half : 2 * half], xf[..., 2 * half :]
        return torch.cat([x1 * c3 - x2 * s3, x2 * c3 + x1 * s3, rest], -1).to(x.dtype)

    return one(q), one(k)


# ---- TileGym ------------------------------------------------------------------------------------


def _tilegym_apply_rope_base(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_ids: Any = None,
    unsqueeze_dim: int = 1, partial_rotary_factor: float = 1.0, **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TileGym's `apply_rope_base(q, k, cos, sin, position_ids=None, unsqueeze_dim=1,
    partial_rotary_factor=1.0)`: q and k `[B, H, S, D]`, cos and sin already gathered per
    position (as transformers passes them), so `position_ids` and `unsqueeze_dim` change
    nothing, as in TileGym's cutile backend. Returns new tensors (TileGym's cutile backend
    rotates q and k in place and returns them)."""
    _op.ignore_kwargs("apply_rope_base", kwargs, documented=("use_tma",))
    rotary_dim = int(q.shape[-1] * partial_rotary_factor) if partial_rotary_factor < 1.0 else None
    return rope(q, k, cos, sin, rotary_dim=rotary_dim)


ROPE_MODELS = ("llama", "qwen2", "gemma3", "gpt-oss", "qwen3_5")


def _tilegym_get_apply_rope_func(model: str = "llama") -> Any:
    """TileGym's `get_apply_rope_func(model)`: `apply_rope_base` for the rotate-half models,
    a quarter of the head rotated for "qwen3_5" (as TileGym's cutile backend)."""
    if model in ("llama", "qwen2", "gemma3", "gpt-oss"):
        return _tilegym_apply_rope_base
    if model == "qwen3_5":

        def quarter(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, position_ids: Any = None,
                    unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
            return _tilegym_apply_rope_base(q, k, cos, sin, partial_rotary_factor=0.25)

        return quarter
    raise NotImplementedError(f"rope on cutile-rs serves the models {', '.join(ROPE_MODELS)}; got {model!r}")


# ---- torch operators ----------------------------------------------------------------------------


def _op_rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, half: int) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    with torch.no_grad():  # the operator's autograd formula is registered on it
        return rope(q, k, cos, sin, rotary_dim=2 * half)


def _fake_rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, half: int) -> tuple[torch.Tensor, torch.Tensor]:
    _check(q, k, cos, sin, half)
    return _outputs(q, k)


def _setup_rope(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[2], inputs[3])
    ctx.half = inputs[4]


def _backward_rope(ctx: Any, dq: torch.Tensor, dk: torch.Tensor) -> tuple[Any, ...]:
    cos, sin = ctx.saved_tensors
    dq_in, dk_in = _torch_ops.torch_ops().rope_backward(dq, dk, cos, sin, ctx.half)
    return dq_in, dk_in, None, None, None


def _op_rope_backward(dq: torch.Tensor, dk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, half: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _launch(dq, dk, _tables(cos, "cos", dq), _tables(sin, "sin", dq), half, -1.0)


TOLERANCES = {
    "float32": _registry.Tolerance(rtol=1e-5, atol=1e-5),
    "float16": _registry.Tolerance(rtol=1e-3, atol=2e-3),
    "bfloat16": _registry.Tolerance(rtol=1e-2, atol=2e-2),
}
TORCH_OPS = (
    _registry.TorchOp(
        "rope", "(Tensor q, Tensor k, Tensor cos, Tensor sin, int half) -> (Tensor, Tensor)", _op_rope, _fake_rope,
        _backward_rope, _setup_rope,
        example=lambda d: (_torch_ops.sample(d, 2, 8, 5, 64, grad=True), _torch_ops.sample(d, 2, 2, 5, 64, grad=True),
                           _torch_ops.sample(d, 1, 5, 64), _torch_ops.sample(d, 1, 5, 64), 32),
        reference=lambda q, k, cos, sin, half: reference(q, k, cos, sin, 2 * half), tolerances=TOLERANCES,
    ),
    _registry.TorchOp(
        "rope_backward", "(Tensor dq, Tensor dk, Tensor cos, Tensor sin, int half) -> (Tensor, Tensor)", _op_rope_backward, _fake_rope,
        example=lambda d: (_torch_ops.sample(d, 2, 8, 5, 64), _torch_ops.sample(d, 2, 2, 5, 64), _torch_ops.sample(d, 2, 5, 64), _torch_ops.sample(d, 2, 5, 64), 32),
        # the gradient of a rotation is the inverse rotation: sin negated
        reference=lambda dq, dk, cos, sin, half: reference(dq, dk, cos, -sin, 2 * half), tolerances=TOLERANCES,
    ),
)


def _rope_inputs(b: int, hq: int, hk: int, s: int, d: int, dtype: Any, device: Any, grad: bool) -> tuple[torch.Tensor, ...]:
    """q and k in transformers' layout ([B, S, H, D] memory seen as [B, H, S, D]) and cos, sin."""
    import torch

    q = torch.randn(b, s, hq, d, dtype=dtype, device=device).transpose(1, 2).requires_grad_(grad)
    k = torch.randn(b, s, hk, d, dtype=dtype, device=device).transpose(1, 2).requires_grad_(grad)
    angles = torch.randn(b, s, d, device=device)
    return q, k, angles.cos().to(dtype), angles.sin().to(dtype)


def _warmup(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, autotune: bool) -> tuple[int, ...]:
    """Compile rope's kernel for q and k of `shape` ([B, H, S, D]; k with H heads too)."""
    import torch

    b, h, s, d = shape
    q, k, cos, sin = _rope_inputs(b, h, h, s, d, dtype, device, True)
    q_out, k_out = rope(q, k, cos, sin)
    torch.autograd.backward([q_out, k_out], [torch.ones_like(q_out), torch.ones_like(k_out)])
    return (d // 2,)


def _smoke(device: torch.device) -> str:
    import torch

    q, k, cos, sin = _rope_inputs(2, 8, 2, 33, 64, torch.float32, device, False)
    got, want = rope(q, k, cos, sin), reference(q, k, cos, sin)
    err = max((g - w).abs().max().item() for g, w in zip(got, want, strict=True))
    assert err < 1e-5, f"max abs error {err:.2e} vs float32 torch (bound 1e-5)"
    return f"rope max abs error {err:.2e} vs float32 torch (bound 1e-5)"


# Shapes whose kernels the wheel ships compiled: (q heads, kv heads, head_dim, rotated dims) of
# Llama 3 8B / Mistral 7B, Llama 3 70B, Qwen 2 7B, GPT-OSS and Qwen 3.5 (a quarter rotated), at
# a decode step and a prefill, forward and backward, in the serving and training dtypes.
SHIPPED_HEADS = ((32, 8, 128, 128), (64, 8, 128, 128), (28, 4, 128, 128), (64, 8, 64, 64), (16, 4, 256, 64))


def _shipped(device: torch.device) -> None:
    import torch

    for hq, hk, d, rotated in SHIPPED_HEADS:
        for dtype in (torch.bfloat16, torch.float16):
            for s in (1, 4096):
                q, k, cos, sin = _rope_inputs(1, hq, hk, s, d, dtype, device, True)
                q_out, k_out = rope(q, k, cos, sin, rotary_dim=rotated)
                torch.autograd.backward([q_out, k_out], [torch.empty_like(q_out), torch.empty_like(k_out)])
    q, k, cos, sin = _rope_inputs(2, 8, 2, 33, 64, torch.float32, device, False)  # the smoke test's
    rope(q, k, cos, sin)


# The tuning problems: each shipped head layout at a prefill's positions (4096 and 4 x 2048
# rows) and a decode step's (64 sequences), in every dtype.
TUNING_ROWS = (4096, 8192, 64)


def _tuning_candidates(problem: _tuned.Problem) -> list[RopeConfig]:
    """The sweep's configs: every split of the heads (`rope_splits`), each with tileiras' choice
    of warps or 4, at its occupancy or 8 or 16 CTAs per SM (tileiras takes no fewer than 4
    warps)."""
    _, rows, hq, hk, d, half = problem
    return sorted(RopeConfig(b, occupancy, warps) for b in rope_splits(hq, hk) for occupancy in (0, 8, 16) for warps in (0, 4))


def _tuning_bench(problem: _tuned.Problem, device: Any) -> Any:
    import torch

    dtype_name, rows, hq, hk, d, half = problem
    q, k, cos, sin = _rope_inputs(1, hq, hk, rows, d, _tuned.torch_dtype(dtype_name), device, False)
    q_out, k_out = _outputs(q, k)
    want = reference(q, k, cos, sin, 2 * half)
    index = _op.device_index(q)

    def check() -> None:
        for got, ref in zip((q_out, k_out), want, strict=True):
            torch.testing.assert_close(got, ref, rtol=2e-2, atol=5e-2)

    return _tuned.checked_runs(lambda config: _launch_into(q_out, k_out, q, k, cos, sin, half, 1.0, config, index), check, (q_out, k_out))


TUNINGS = [
    _tuned.Tuning(
        name="rope",
        problems=[(dt, rows, hq, hk, d, rotated // 2) for dt in SUPPORTED for rows in TUNING_ROWS for hq, hk, d, rotated in SHIPPED_HEADS],
        candidates=_tuning_candidates,
        rule=lambda p: rope_rule(p[1], p[2], p[3], p[4], p[5], p[0]),
        bench=_tuning_bench,
        nbytes=lambda p: 2 * (p[2] + p[3]) * p[1] * p[4] * _tuned.torch_dtype(p[0]).itemsize,
        adapt=_adapt,
    )
]

OP = _registry.OpSpec(
    "rope",
    tilegym={"apply_rope_base": _tilegym_apply_rope_base, "get_apply_rope_func": _tilegym_get_apply_rope_func},
    warmup=_warmup,
    smoke=_smoke,
    shipped=_shipped,
    torch_ops=TORCH_OPS,
    warms_up=lambda shape, dtype: len(shape) == 4,
    tunings=TUNINGS,
)
