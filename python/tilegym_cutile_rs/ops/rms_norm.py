"""rms_norm(x, weight, eps, offset) = x / sqrt(mean(x^2, -1) + eps) * (weight + offset):
cuTile Rust kernels, forward and backward (dx and dweight), float32/float16/bfloat16; and
the RMSNorm modules TileGym's model patches put in place of a model's own."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _choice, _device, _op, _registry, _torch_ops, _tuned

if TYPE_CHECKING:
    import torch

__all__ = ["RmsNormConfig", "rms_norm", "rms_norm_config", "rms_norm_rule"]

SUPPORTED = ("float32", "float16", "bfloat16")
FORWARD, BACKWARD, WEIGHT_GRAD = "cutile_rms_norm_forward", "cutile_rms_norm_backward", "cutile_rms_norm_dw"
# A row is one tile in registers (forward: x and the weight; backward: x, dy, the weight
# and the dweight partial), so rows stop here; LLM hidden sizes reach 16384 (Llama 3 405B).
MAX_N = 16384


class RmsNormConfig(NamedTuple):
    """An rms_norm launch: `block_m` rows per tile (a power of two; a tile spans a whole row),
    with `occupancy` CTAs per SM and `warps` worker warps per CTA (0: tileiras' choice)."""

    block_m: int
    occupancy: int = 0
    warps: int = 0


# The rule a device without a fitted table takes: tiles of about TILE_ELEMENTS elements.
TILE_ELEMENTS = 4096
# The backward's CTAs each walk rows (a power of two) to keep about this many CTAs per SM,
# then write one float32 dweight partial row each.
BACKWARD_CTAS_PER_SM = 2
# The dweight reduction: PART_ROWS partial rows by DW_COLUMNS columns a step.
PART_ROWS, DW_COLUMNS = 32, 64


def rms_norm_rule(m: int, n: int, dtype: torch.dtype | str) -> RmsNormConfig:
    """The config for `[m, n]` rows of `dtype`: rows per tile filling TILE_ELEMENTS."""
    return RmsNormConfig(min(max(1, TILE_ELEMENTS // _op.next_pow2(n)), _op.next_pow2(m)))


def rms_norm_config(m: int, n: int, dtype: torch.dtype | str, device: int | None = None, *, backward: bool = False) -> RmsNormConfig:
    """The heuristic's config for `[m, n]` rows of `dtype` on CUDA device `device` (default:
    the current one), for the forward kernel or with `backward` the backward one: the nearest
    problem of its fitted table (benchmarks/tune.py, tuned/rms_norm.json or
    tuned/rms_norm_backward.json; float16 without a fit of its own takes bfloat16's) with the
    same tile width, else `rms_norm_rule`."""
    problem = _tuned.problem(dtype, m, n)
    stand_in = "bfloat16" if problem[0] == "float16" else None
    table = "rms_norm_backward" if backward else "rms_norm"
    return RmsNormConfig(*_tuned.fitted(table, problem, device, lambda: rms_norm_rule(m, n, dtype), _adapt, stand_in))


def _adapt(config: tuple[int, ...], problem: _tuned.Problem, fitted: _tuned.Problem) -> tuple[int, ...] | None:
    """A fitted config for a nearby problem of the same tile width (else the rule's): a row
    block no taller than the problem's rows."""
    _, m, n = problem
    if _op.next_pow2(n) != _op.next_pow2(fitted[2]):
        return None
    return (min(config[0], _op.next_pow2(m)), *config[1:])


def _backward_rows(m: int, block_m: int, sms: int) -> int:
    """Rows each backward CTA walks: a power of two, at least block_m, for about
    BACKWARD_CTAS_PER_SM CTAs per SM."""
    return max(block_m, _op.next_pow2(-(-m // (BACKWARD_CTAS_PER_SM * sms))))


def _check_alike(x: torch.Tensor, weight: torch.Tensor) -> None:
    """The checks that need no data (the fake implementations make them too)."""
    import torch

    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"rms_norm supports {', '.join(SUPPORTED)}; got {x.dtype}. Cast it, e.g. x.float()")
    if weight.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"rms_norm: weight must be float32, float16 or bfloat16, got {weight.dtype}")
    n = x.shape[-1] if x.dim() else 0
    if x.dim() == 0 or tuple(weight.shape) != (n,):
        raise ValueError(f"rms_norm: weight must have shape [N] for x of shape [..., N]; got x {tuple(x.shape)}, weight {tuple(weight.shape)}")
    if n > MAX_N:
        raise ValueError(f"rms_norm normalizes rows of up to {MAX_N} elements; x's last dim is {n}")
    if x.device != weight.device:
        raise ValueError(f"rms_norm: x and weight must be on one device, got {x.device} and {weight.device}")


def _check_scalars(eps: float, offset: float) -> None:
    import math

    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"rms_norm: eps must be finite and >= 0, got {eps}")
    if not math.isfinite(offset):
        raise ValueError(f"rms_norm: offset must be finite, got {offset}")


def _check_inputs(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float) -> None:
    import torch

    for name, t in (("x", x), ("weight", weight)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"rms_norm takes torch.Tensor x and weight; {name} is {type(t).__name__}")
    _device.check_cuda_tensor(x, "rms_norm")
    _check_alike(x, weight)
    _check_scalars(eps, offset)


# The forward's plans kept by the public call's key (`_plan_key`): its per-call fast path.
forward_plans = _op.Plans("rms_norm", FORWARD)
forward_chooser = _choice.Chooser("rms_norm", RmsNormConfig, forward_plans)
# The kept backwards by `_backward`'s key: both launches' plans and the partials' shape; dropped
# when a tuned decision replaces the heuristic's.
backward_plans: _op.KeptLaunches[tuple[_op.Plan, _op.Plan, tuple[int, int]]] = _op.KeptLaunches("rms_norm backward")
backward_chooser = _choice.Chooser("rms_norm backward", RmsNormConfig, backward_plans)


def _config(x2: torch.Tensor, config: Any, index: int, backward: bool = False, autotune: bool = False) -> RmsNormConfig:
    """The forward kernel's config (or with `backward` the backward kernel's): an explicit one,
    else the chooser's (autotuned where asked), memoised per problem (a table lookup reads the
    device's name and searches the entries, too slow for every call of a launch-bound row)."""
    if config is not None:
        return _choice.check_config(config, RmsNormConfig)
    m, n = x2.shape
    problem = _tuned.problem(x2.dtype, m, n)
    kernel = "rms_norm_backward" if backward else "rms_norm"
    return (backward_chooser if backward else forward_chooser).choose(
        (index, x2.dtype, m, n),
        lambda: f"{kernel}|{_device.name(index)}|{x2.dtype}|n={n}|m~{min(_op.next_pow2(m), 1 << 20)}",
        lambda: rms_norm_config(m, n, x2.dtype, index, backward=backward),
        lambda: _tuning_candidates(problem),
        lambda: (_tuning_bench_backward if backward else _tuning_bench)(problem, x2.device),
        autotune,
    )


def _launch_forward(y2: torch.Tensor, x2: torch.Tensor, w: torch.Tensor, eps: float, offset: float, config: tuple[int, ...],
                    index: int) -> _op.Plan:
    block_m, occupancy, warps = config
    args = {"eps": eps, "offset": offset, "block_m": block_m, "block_n": _op.next_pow2(x2.shape[1]), "occupancy": occupancy, "warps": warps}
    return _op.launch("rms_norm", FORWARD, {"y": y2, "x": x2, "w": w}, args, index,
                      ("rms_norm", x2.dtype, tuple(x2.shape), "config", tuple(config)))


def _launch_backward(dx: torch.Tensor, dw: torch.Tensor, dy2: torch.Tensor, x2: torch.Tensor, w: torch.Tensor, eps: float,
                     offset: float, config: tuple[int, ...], index: int) -> tuple[_op.Plan, _op.Plan, tuple[int, int]]:
    """dx and dw: the backward kernel's dx and dweight partials, then dw's column sums.
    Returns both launches' plans and the partials' shape (what a kept backward replays)."""
    import torch

    block_m, occupancy, warps = config
    m, n = x2.shape
    rows = _backward_rows(m, block_m, _device.sm_count(index))
    part = torch.empty((-(-m // rows), n), dtype=torch.float32, device=x2.device)
    args = {"eps": eps, "offset": offset, "block_m": block_m, "block_n": _op.next_pow2(n), "rows": rows, "occupancy": occupancy,
            "warps": warps}
    rows_plan = _op.launch("rms_norm backward", BACKWARD, {"dx": dx, "dw_part": part, "dy": dy2, "x": x2, "w": w}, args, index,
                           ("rms_norm backward", x2.dtype, (m, n), "config", (*config, rows)))
    part_rows, columns = min(PART_ROWS, _op.next_pow2(part.shape[0])), min(DW_COLUMNS, _op.next_pow2(n))
    sum_plan = _op.launch("rms_norm dw", WEIGHT_GRAD, {"dw": dw, "dw_part": part},
                          {"part_rows": part_rows, "block_n": columns, "occupancy": 0, "warps": 0},
                          index, ("rms_norm dw", w.dtype, tuple(part.shape), "config", (part_rows, columns)))
    return rows_plan, sum_plan, (part.shape[0], part.shape[1])


def _forward(x: torch.Tensor, w: torch.Tensor, eps: float, offset: float, config: Any, keep_as: Any = None) -> torch.Tensor:
    """y of x's shape (contiguous) from the forward kernel; w of x's dtype. The launch's plan
    is kept under `keep_as` (not None) where the kernel read x and w in place."""
    n = x.shape[-1]
    m = x.numel() // max(n, 1)
    x2 = _op.row_view(x, m, n)
    y2 = x.new_empty((m, n))
    if m and n:
        index = _op.device_index(x)
        _device.prepare(index)
        wc = w.contiguous()
        plan = _launch_forward(y2, x2, wc, float(eps), float(offset), _config(x2, config, index), index)
        if keep_as is not None and (x2.data_ptr(), wc.data_ptr()) == (x.data_ptr(), w.data_ptr()):
            forward_plans.keep(keep_as, plan)
    return y2.view(x.shape)


def _plan_key(x: torch.Tensor, weight: torch.Tensor, eps: Any, offset: Any) -> tuple[Any, ...]:
    """What makes two public calls the same launch: both layouts, dtypes and devices, eps and offset."""
    return (x.shape, x.stride(), weight.shape, weight.stride(), x.dtype, weight.dtype, x.get_device(), weight.get_device(), eps, offset)


def _backward(
    dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, eps: float, offset: float, config: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """dx (x's shape) and dweight (w's shape and dtype) from the backward and dweight kernels.
    A backward of the heuristic's config whose dy, x and w are read in place keeps both
    launches' plans: a training step's later backwards only allocate and swap pointers."""
    import torch

    n = x.shape[-1]
    m = x.numel() // max(n, 1)
    if m == 0 or n == 0:
        return torch.zeros_like(x), torch.zeros_like(w)
    key = None
    if config is None:
        key = (dy.shape, dy.stride(), x.shape, x.stride(), w.shape, w.stride(), x.dtype, w.dtype, x.get_device(), eps, offset)
        kept = backward_plans.get(key)
        if kept is not None:
            rows_plan, sum_plan, part_shape = kept
            # Allocated through the tensors (new_empty): a third less host time than torch.empty's
            # keyword form (docs/benchmarks.md, "The fast paths' host time").
            dx, dw, part = x.new_empty((m, n)), w.new_empty((n,)), x.new_empty(part_shape, dtype=torch.float32)
            rows_plan.run(dx.data_ptr(), part.data_ptr(), dy.data_ptr(), x.data_ptr(), w.data_ptr())
            sum_plan.run(dw.data_ptr(), part.data_ptr())
            return dx.view(x.shape), dw
    x2, dy2, wc = _op.row_view(x, m, n), _op.row_view(dy, m, n), w.contiguous()
    index = _op.device_index(x)
    _device.prepare(index)
    dx, dw = x.new_empty((m, n)), w.new_empty((n,))
    plans = _launch_backward(dx, dw, dy2, x2, wc, float(eps), float(offset), _config(x2, config, index, backward=True), index)
    in_place = (x2.data_ptr(), dy2.data_ptr(), wc.data_ptr()) == (x.data_ptr(), dy.data_ptr(), w.data_ptr())
    if key is not None and in_place:
        backward_plans.keep(key, plans)
    return dx.view(x.shape), dw


@functools.cache
def _autograd_function() -> Any:
    import torch

    class RmsNorm(torch.autograd.Function):
        """Our kernels both ways; rstd is recomputed in the backward from the x it reads."""

        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, eps: float, offset: float, config: Any) -> torch.Tensor:
            ctx.eps, ctx.offset, ctx.config = eps, offset, config
            ctx.save_for_backward(x, w)
            return _forward(x, w, eps, offset, config)

        @staticmethod
        def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None, None]:
            x, w = ctx.saved_tensors
            dx, dw = _backward(dy, x, w, ctx.eps, ctx.offset, ctx.config)
            return dx, dw, None, None, None

    return RmsNorm


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    offset: float = 0.0,
    *,
    config: RmsNormConfig | tuple[int, ...] | None = None,
) -> torch.Tensor:
    """x / sqrt(mean(x^2, -1) + eps) * (weight + offset) over x's last dim (up to 16384
    elements), computed in float32 and rounded once, returned as a new contiguous tensor of
    x's shape and dtype (float32, float16, bfloat16). `offset=1.0` is Gemma's `1 + weight`.

    weight: `[N]` on x's device; another float dtype than x's is cast to x's first (the
    gradient flows back through the cast). Rows with a unit last-dim stride are read in
    place. Runs on the current stream without blocking the host (CUDA-graph capturable).
    Gradients flow to x and weight through our backward kernels (rstd recomputed, not
    saved). `config=RmsNormConfig(block_m, occupancy, warps)` overrides the rule.
    Traced (torch.compile, torch.export, fake tensors): torch.ops.tilegym_cutile_rs.rms_norm.
    """
    key = None
    if config is None and not _torch_ops.is_compiling() and type(eps) in (float, int) and type(offset) in (float, int):
        # The per-call fast path: plain x and weight of a layout seen before on this thread (the
        # same eps and offset), no autograd: the kept plan on this call's pointers.
        try:
            key = _plan_key(x, weight, eps, offset)
        except (AttributeError, TypeError):
            pass  # not tensors: the checks below say what is wrong
        else:
            plan = forward_plans.reusable(key, x, weight)
            if plan is not None:
                y: torch.Tensor = x.new_empty(x.shape)
                plan.run(y.data_ptr(), x.data_ptr(), weight.data_ptr())
                return y
    traced = _torch_ops.traced_or_fake(x, weight)
    if traced is not None:
        result: torch.Tensor = traced.rms_norm(x, weight, float(eps), float(offset), list(config or ()))
        return result
    import torch

    _check_inputs(x, weight, eps, offset)
    w = weight if weight.dtype == x.dtype else weight.to(x.dtype)
    if (x.requires_grad or w.requires_grad) and torch.is_grad_enabled():
        with_grad: torch.Tensor = _autograd_function().apply(x, w, float(eps), float(offset), config)
        return with_grad
    # Kept for the fast path where the kernel reads the call's own tensors (no cast of weight).
    own = key is not None and w is weight and _op.plain(x) and _op.plain(weight)
    return _forward(x, w, float(eps), float(offset), config, key if own else None)


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, offset: float = 0.0) -> torch.Tensor:
    """The float32 computation the kernels are checked against, rounded to x's dtype."""
    import torch

    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (weight.float() + offset)).to(x.dtype)


# ---- TileGym: rms_norm and the RMSNorm modules its model patches install ----------------------


def _tilegym_rms_norm(
    input: torch.Tensor, normalized_shape: Any, weight: torch.Tensor, eps: float, bias: torch.Tensor | None = None,
    mode: str | None = None, offset: float = 0.0, **kwargs: Any,
) -> torch.Tensor:
    """TileGym's `rms_norm(input, normalized_shape, weight, eps, bias=None, mode=None,
    offset=0.0)`. `normalized_shape` is unused there too (the last dim is normalized);
    `mode` picks among TileGym's own kernel variants and means nothing for ours."""
    if bias is not None:
        raise NotImplementedError("rms_norm on cutile-rs takes no bias (TileGym's cutile backend neither); pass bias=None")
    _op.ignore_kwargs("rms_norm", {**kwargs, **({"mode": mode} if mode is not None else {})})
    return rms_norm(input, weight, eps, offset)


@functools.cache
def _modules() -> tuple[type, type]:
    import torch

    class RMSNorm(torch.nn.Module):
        """RMSNorm on our kernels, in place of a model's (Llama's `LlamaRMSNorm(hidden_size,
        eps)` and the like): weight initialised to ones, `offset` added to it."""

        def __init__(self, hidden_size: int, eps: float = 1e-6, offset: float = 0.0) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon, self.hidden_size, self.offset = eps, hidden_size, offset

        def forward(self, hidden_states: torch.Tensor, mode: str | None = None) -> torch.Tensor:
            return _tilegym_rms_norm(hidden_states, None, self.weight, self.variance_epsilon, mode=mode, offset=self.offset)

        def extra_repr(self) -> str:
            return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}, offset={self.offset}"

    class GemmaRMSNorm(RMSNorm):
        """Gemma 3's `Gemma3RMSNorm(dim, eps)`: weight initialised to zeros, scaled by
        `1 + weight` (offset 1). The other keywords TileGym's class takes are accepted;
        the computation is Gemma's (float32, one rounding) whatever they say."""

        def __init__(self, dim: int, eps: float = 1e-6, offset: float = 1.0, **kwargs: Any) -> None:
            super().__init__(dim, eps, offset)
            self.weight = torch.nn.Parameter(torch.zeros(dim))

    return RMSNorm, GemmaRMSNorm


def _tilegym_get_rms_norm_module(model: str = "llama") -> type:
    """TileGym's `get_rms_norm_module(model)`: Gemma 3's class for "gemma3", else the plain one."""
    plain, gemma = _modules()
    return gemma if model == "gemma3" else plain


# ---- torch operators ----------------------------------------------------------------------------


def _op_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float, config: list[int]) -> torch.Tensor:
    import torch

    with torch.no_grad():  # the operator's autograd formula is registered on it
        return rms_norm(x, weight, eps, offset, config=tuple(config) or None)


def _fake_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float, config: list[int]) -> torch.Tensor:
    import torch

    _check_alike(x, weight)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _setup_rms_norm(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, weight, eps, offset, _ = inputs
    ctx.eps, ctx.offset = eps, offset
    ctx.save_for_backward(x, weight)


def _backward_rms_norm(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None, None]:
    x, weight = ctx.saved_tensors
    dx, dw = _torch_ops.torch_ops().rms_norm_backward(dy, x, weight, ctx.eps, ctx.offset)
    return dx, dw, None, None, None


def _op_rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float) -> tuple[torch.Tensor, torch.Tensor]:
    dx, dw = _backward(dy, x, weight.to(x.dtype), eps, offset, None)
    return dx, dw.to(weight.dtype)


def _fake_rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    _check_alike(x, weight)
    if dy.shape != x.shape:
        raise ValueError(f"rms_norm backward: dy has shape {tuple(dy.shape)}, x {tuple(x.shape)}")
    return torch.empty(x.shape, dtype=x.dtype, device=x.device), torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)


def _reference_backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float) -> tuple[Any, ...]:
    import torch

    grads: tuple[Any, ...] = torch.func.vjp(lambda x, w: reference(x, w, eps, offset), x, weight)[1](dy)
    return grads


TOLERANCES = {
    "float32": _registry.Tolerance(rtol=1e-5, atol=1e-5),
    "float16": _registry.Tolerance(rtol=1e-3, atol=2e-3),
    "bfloat16": _registry.Tolerance(rtol=1e-2, atol=2e-2),
}
TORCH_OPS = (
    _registry.TorchOp(
        "rms_norm", "(Tensor x, Tensor weight, float eps, float offset, int[] config) -> Tensor", _op_rms_norm,
        _fake_rms_norm, _backward_rms_norm, _setup_rms_norm,
        example=lambda d: (_torch_ops.sample(d, 4, 8, 1000, grad=True), _torch_ops.sample(d, 1000, grad=True), 1e-6, 0.0, []),
        reference=lambda x, weight, eps, offset, config: reference(x, weight, eps, offset), tolerances=TOLERANCES,
    ),
    _registry.TorchOp(
        "rms_norm_backward", "(Tensor dy, Tensor x, Tensor weight, float eps, float offset) -> (Tensor, Tensor)",
        _op_rms_norm_backward, _fake_rms_norm_backward,
        example=lambda d: (_torch_ops.sample(d, 32, 4096), _torch_ops.sample(d, 32, 4096), _torch_ops.sample(d, 4096, dtype="float32"), 1e-5, 1.0),
        reference=_reference_backward, tolerances=TOLERANCES,
    ),
)


def _warmup(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, autotune: bool) -> RmsNormConfig:
    """Compile (and with `autotune` tune) rms_norm's forward and backward kernels for x of `shape`;
    returns the forward's config."""
    import torch

    x = torch.randn(shape, device=device).to(dtype).requires_grad_(True)
    w = torch.randn(shape[-1], device=device).to(dtype).requires_grad_(True)
    x2, index = x.detach().reshape(-1, shape[-1]), _op.device_index(x)
    _config(x2, None, index, backward=True, autotune=autotune)
    chosen = _config(x2, None, index, autotune=autotune)
    y = rms_norm(x, w)
    torch.autograd.backward([y], [torch.ones_like(y)])
    return chosen


def _smoke(device: torch.device) -> str:
    import torch

    x = torch.randn(64, 1000, device=device, requires_grad=True)
    w = torch.randn(1000, device=device, requires_grad=True)
    xr, wr = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    y, ref = rms_norm(x, w), reference(xr, wr)
    dy = torch.randn_like(y)
    torch.autograd.backward([y, ref], [dy, dy])
    assert x.grad is not None and w.grad is not None and xr.grad is not None and wr.grad is not None
    err = (y - ref).abs().max().item()
    grad_err = max((x.grad - xr.grad).abs().max().item(), (w.grad - wr.grad).abs().max().item() / 64)
    assert err < 1e-4 and grad_err < 1e-4, f"max abs error {err:.2e} (bound 1e-4), gradient {grad_err:.2e} (bound 1e-4) vs torch"
    return f"rms_norm max abs error {err:.2e}, gradient {grad_err:.2e} vs torch"


# Shapes whose kernels the wheel ships compiled: LLM hidden sizes (Llama 3 8B/70B, Qwen 2 7B,
# Mistral, Gemma 3, GPT-OSS) in the serving and training dtypes: a decode step (forward only) and
# prefill or training batches, forward and backward (the backward's rows per CTA follow M).
SHIPPED_HIDDEN = (2048, 2880, 3072, 3584, 4096, 5120, 8192)
SHIPPED_ROWS = (4096, 16384)


def _shipped(device: torch.device) -> None:
    import torch

    for n in SHIPPED_HIDDEN:
        for dtype in (torch.bfloat16, torch.float16):
            w = torch.empty(n, dtype=dtype, device=device, requires_grad=True)
            with torch.no_grad():
                rms_norm(torch.empty(1, n, dtype=dtype, device=device), w)
            for m in SHIPPED_ROWS:
                x = torch.empty(m, n, dtype=dtype, device=device, requires_grad=True)
                y = rms_norm(x, w)
                torch.autograd.backward([y], [torch.empty_like(y)])
    x = torch.empty(64, 1000, device=device, requires_grad=True)  # the smoke test's
    y = rms_norm(x, torch.empty(1000, device=device, requires_grad=True))
    torch.autograd.backward([y], [torch.empty_like(y)])


# benchmarks/tune.py's sweeps, one table per direction: benchmarks/rms_norm_bench.py's rows, each dtype.
TUNING_SHAPES = [(4096, 4096), (16384, 4096), (4096, 8192), (16384, 8192), (4096, 2880), (4096, 3584), (1, 4096), (128, 4096),
                 (65536, 128)]


def _tuning_candidates(problem: _tuned.Problem) -> list[RmsNormConfig]:
    """Row blocks from 1 to 16 rows (tiles up to 16384 elements), tileiras' warps or 4 or 8,
    occupancy left to tileiras or 2 CTAs per SM."""
    _, m, n = problem
    width = _op.next_pow2(n)
    blocks = [b for b in (1, 2, 4, 8, 16) if b <= _op.next_pow2(m) and b * width <= max(16384, width)]
    rule = rms_norm_rule(m, n, problem[0])
    return sorted({rule, *(RmsNormConfig(b, occupancy, warps) for b in blocks for occupancy in (0, 2) for warps in (0, 4, 8))})


def _tuning_inputs(problem: _tuned.Problem, device: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    import torch

    dtype_name, m, n = problem
    dtype = _tuned.torch_dtype(dtype_name)
    x = torch.randn(m, n, device=device, dtype=dtype)
    return x, (1 + 0.1 * torch.randn(n, device=device)).to(dtype), torch.randn(m, n, device=device, dtype=dtype)


def _tuning_bench(problem: _tuned.Problem, device: Any) -> Any:
    import torch

    x, w, _ = _tuning_inputs(problem, device)
    y, ref = torch.empty_like(x), reference(x, w)
    index = _op.device_index(x)
    return _tuned.checked_runs(
        lambda config: _launch_forward(y, x, w, 1e-6, 0.0, config, index),
        lambda: torch.testing.assert_close(y, ref, rtol=2e-2, atol=2e-2),
        (y,),
    )


def _tuning_bench_backward(problem: _tuned.Problem, device: Any) -> Any:
    import torch

    x, w, dy = _tuning_inputs(problem, device)
    xr, wr = x.float().requires_grad_(True), w.float().requires_grad_(True)
    torch.autograd.backward([xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + 1e-6) * wr], [dy.float()])
    assert xr.grad is not None and wr.grad is not None
    dx_ref, dw_ref = xr.grad.to(x.dtype), wr.grad
    dx, dw = torch.empty_like(x), torch.empty_like(w)
    index = _op.device_index(x)

    def check() -> None:
        torch.testing.assert_close(dx, dx_ref, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(dw.float(), dw_ref, rtol=2e-2, atol=2e-2 * max(1.0, dw_ref.abs().max().item()))

    return _tuned.checked_runs(lambda config: _launch_backward(dx, dw, dy, x, w, 1e-6, 0.0, config, index), check, (dx, dw))


def _tuning(name: str, bench: Any, planes: int) -> _tuned.Tuning:
    """An rms_norm kernel's tuning over TUNING_SHAPES in every dtype; `planes`: [M, N] tensors
    a call reads and writes (forward: x, y; backward: dy, x, dx)."""
    return _tuned.Tuning(
        name=name,
        problems=[(dt, m, n) for dt in SUPPORTED for m, n in TUNING_SHAPES],
        candidates=_tuning_candidates,
        rule=lambda p: rms_norm_rule(p[1], p[2], p[0]),
        bench=bench,
        nbytes=lambda p: planes * p[1] * p[2] * _tuned.torch_dtype(p[0]).itemsize,
        adapt=_adapt,
    )


TUNINGS = [_tuning("rms_norm", _tuning_bench, 2), _tuning("rms_norm_backward", _tuning_bench_backward, 3)]

OP = _registry.OpSpec(
    "rms_norm",
    tilegym={"rms_norm": _tilegym_rms_norm, "get_rms_norm_module": _tilegym_get_rms_norm_module},
    warmup=_warmup,
    smoke=_smoke,
    shipped=_shipped,
    torch_ops=TORCH_OPS,
    tunings=TUNINGS,
    warms_up=lambda shape, dtype: 1 <= len(shape) and shape[-1] <= MAX_N,
)
