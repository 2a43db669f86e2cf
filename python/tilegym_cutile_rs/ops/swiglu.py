"""swiglu(a, b) = silu(a) * b and silu_and_mul(x) = silu(x[..., :H]) * x[..., H:]:
cuTile Rust kernels, forward and backward, float32/float16/bfloat16."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _choice, _device, _op, _registry, _torch_ops, _tuned

if TYPE_CHECKING:
    import torch

__all__ = ["SwigluConfig", "silu_and_mul", "swiglu", "swiglu_candidates", "swiglu_config", "swiglu_rule"]

SUPPORTED = ("float32", "float16", "bfloat16")
FORWARD, BACKWARD = "cutile_swiglu_forward", "cutile_swiglu_backward"


class SwigluConfig(NamedTuple):
    """A swiglu launch: `[block_m, block_n]` output tiles (powers of two), with `occupancy`
    CTAs per SM, `warps` worker warps per CTA (0: tileiras' choice) and `cga` CTAs per
    cluster sharing each tile (sm_90 and later; 0: no cluster)."""

    block_m: int
    block_n: int
    occupancy: int = 0
    warps: int = 0
    cga: int = 0


# The rule a device without a fitted table takes (docs/benchmarks.md says what it measured):
# tiles of TILE_ELEMENTS elements, at most MAX_BLOCK_N wide, rows filling the rest.
TILE_ELEMENTS = 4096
MAX_BLOCK_N = 1024
# Tiles at least this large are also tried split over a cluster of 2 CTAs (cuTile Python's
# silu_and_mul does so from 8 KiB tiles on sm_90: docs/benchmarks.md, "swiglu").
CLUSTER_MIN_ELEMENTS = 8192


def swiglu_rule(m: int, h: int, dtype: torch.dtype) -> SwigluConfig:
    """The rule's config for `[m, h]` operands of `dtype`, where no fitted table applies."""
    block_n = min(_op.next_pow2(h), MAX_BLOCK_N)
    return SwigluConfig(min(max(1, TILE_ELEMENTS // block_n), _op.next_pow2(m)), block_n)


def swiglu_config(m: int, h: int, dtype: torch.dtype, device: int | None = None, *, backward: bool = False) -> SwigluConfig:
    """The heuristic's config for `[m, h]` operands of `dtype` on CUDA device `device`
    (default: the current one), for the forward kernel or with `backward` the backward one:
    the nearest problem of its fitted table (benchmarks/tune.py, tuned/swiglu.json or
    tuned/swiglu_backward.json; float16 without a fit of its own takes bfloat16's: the same
    bytes per element), else `swiglu_rule`."""
    table = "swiglu_backward" if backward else "swiglu"
    problem = _tuned.problem(dtype, m, h)
    stand_in = "bfloat16" if problem[0] == "float16" else None
    return SwigluConfig(*_tuned.fitted(table, problem, device, lambda: swiglu_rule(m, h, dtype), _adapt, stand_in))


def _adapt(config: tuple[int, ...], problem: _tuned.Problem, fitted: _tuned.Problem) -> tuple[int, ...]:
    """A fitted config for a nearby problem: row and column blocks no larger than the problem's,
    and no cluster once the tile is cut (a cluster splits a tile the fit found large)."""
    _, m, h = problem
    block_m, block_n = min(config[0], _op.next_pow2(m)), min(config[1], _op.next_pow2(h))
    cut = (block_m, block_n) != tuple(config[:2])
    return (block_m, block_n, *config[2:4], 0 if cut else config[4])


def swiglu_candidates(m: int, h: int, dtype: torch.dtype, arch: str = "sm_90") -> list[SwigluConfig]:
    """The autotuner's search space on `arch`: tile widths up to a whole row, tile sizes,
    occupancy, worker warps, and from sm_90 on tiles of CLUSTER_MIN_ELEMENTS or more shared
    by a cluster of 2 CTAs."""
    configs = {swiglu_rule(m, h, dtype), swiglu_config(m, h, dtype), swiglu_config(m, h, dtype, backward=True)}
    widest = max(_op.next_pow2(h), 256)
    for block_n in (256, 512, 1024, 2048, 4096, 8192, 16384):
        if block_n <= widest:
            for elements in (2048, 4096, 8192, 16384):
                if elements < block_n:
                    continue
                block_m = min(max(1, elements // block_n), _op.next_pow2(m))
                for cga in _clusters(block_m, block_n, arch):
                    configs.update(SwigluConfig(block_m, block_n, occ, warps, cga) for occ in (0, 2, 4) for warps in (0, 4, 8))
    return sorted(configs)


def _clusters(block_m: int, block_n: int, arch: str = "sm_90") -> tuple[int, ...]:
    """The cga values a search tries for a `[block_m, block_n]` tile on `arch`: none, and a
    cluster of 2 for a tile of CLUSTER_MIN_ELEMENTS or more on an architecture with clusters."""
    return (0, 2) if block_m * block_n >= CLUSTER_MIN_ELEMENTS and _device.has_clusters(arch) else (0,)


forward_plans = _op.Plans("swiglu", FORWARD)
chooser = _choice.Chooser("swiglu", SwigluConfig, forward_plans)
# The backward kernel's plans by `_backward_key` (autograd's backward calls, the per-call fast
# path of a training step); dropped when a tuned decision replaces the heuristic's.
backward_plans = _op.Plans("swiglu backward", BACKWARD)
backward_chooser = _choice.Chooser("swiglu backward", SwigluConfig, backward_plans)


def _choose(a2: torch.Tensor, index: int, config: Any, autotune: bool, backward: bool = False) -> SwigluConfig:
    """The forward kernel's config (or with `backward` the backward kernel's own: its tiles
    hold three inputs and two outputs, so the forward's fitted tiles are not its best)."""
    if config is not None:
        return _choice.check_config(config, SwigluConfig)
    m, h = a2.shape

    def tuner() -> Any:
        import torch

        dy, a, b = (torch.randn_like(a2) for _ in range(3))  # the caller's tensors stay untouched
        if backward:
            dg = torch.empty((m, 2, h), dtype=a2.dtype, device=a2.device)
            return lambda c: _launch_backward(dg, dy, a, b, c, index)
        return lambda c: _launch_forward(dy, a, b, c, index)

    kernel = "swiglu_backward" if backward else "swiglu"
    return (backward_chooser if backward else chooser).choose(
        (index, a2.dtype, m, h),
        lambda: f"{kernel}|{_device.name(index)}|{a2.dtype}|h<={_op.next_pow2(h)}|m~{min(_op.next_pow2(m), 1 << 20)}",
        lambda: swiglu_config(m, h, a2.dtype, index, backward=backward),
        lambda: swiglu_candidates(m, h, a2.dtype, _device.arch(index)),
        tuner,
        autotune,
    )


def _forward_arguments(
    y2: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor, config: SwigluConfig
) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
    """The forward export's tensors and config by parameter name: what a launch passes and a plan binds."""
    return {"y": y2, "a": a2, "b": b2}, _op.named(SwigluConfig, config)


def _launch_forward(y2: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor, config: SwigluConfig, index: int) -> None:
    what = ("swiglu", a2.dtype, tuple(a2.shape), "config", config)
    _op.launch("swiglu", FORWARD, *_forward_arguments(y2, a2, b2, config), index, what)


def _launch_backward(
    dg: torch.Tensor, dy2: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor, config: SwigluConfig, index: int
) -> _op.Plan:
    what = ("swiglu backward", a2.dtype, tuple(a2.shape), "config", config)
    return _op.launch("swiglu backward", BACKWARD, {"dg": dg, "dy": dy2, "a": a2, "b": b2}, _op.named(SwigluConfig, config), index, what)


def _backward_key(dy: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor, dg: torch.Tensor) -> tuple[Any, ...]:
    """What makes two backward launches of the heuristic's config the same: every shape and layout, the dtype and device."""
    return (dy.shape, dy.stride(), a2.shape, a2.stride(), b2.stride(), dg.stride(), a2.dtype, a2.get_device())


def _backward(
    dy: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor, dg: torch.Tensor, config: Any, autotune: bool = False
) -> None:
    """da and db of silu(a2) * b2 into `dg`, an `[M, 2, H]` view (da at [:, 0], db at [:, 1]).
    `config`: the caller's explicit one, or None for the backward kernel's own choice
    (`autotune` as the forward call's). A backward of the heuristic's config whose dy is read
    in place runs the plan its first launch kept (a training step's later steps)."""
    m, h = a2.shape
    if not (m and h):
        return
    heuristic = config is None and not autotune
    if heuristic:
        key = _backward_key(dy, a2, b2, dg)
        plan = backward_plans.get(key)
        if plan is not None:
            plan.run(dg.data_ptr(), dy.data_ptr(), a2.data_ptr(), b2.data_ptr())
            return
    index = _op.device_index(a2)
    if config is None:
        _device.prepare(index)
    dy2 = _op.row_view(dy, m, h)
    plan = _launch_backward(dg, dy2, a2, b2, _choose(a2, index, config, autotune, backward=True), index)
    if heuristic and dy2.data_ptr() == dy.data_ptr():
        backward_plans.keep(key, plan)


def _swiglu_grad_planes(
    dy: torch.Tensor, a2: torch.Tensor, b2: torch.Tensor, config: Any, shape: torch.Size, autotune: bool = False
) -> torch.Tensor:
    """da and db stacked, `[2, *shape]`, from one backward launch into the two planes."""
    planes = a2.new_empty((2, *a2.shape))  # da, db
    _backward(dy, a2, b2, planes.permute(1, 0, 2), config, autotune)
    return planes.view(2, *shape)


def _silu_and_mul_grad(dy: torch.Tensor, x2: torch.Tensor, config: Any, shape: torch.Size, autotune: bool = False) -> torch.Tensor:
    """dx of silu_and_mul on the `[M, 2H]` rows x2, as a tensor of `shape`, written once."""
    m, h = x2.shape[0], x2.shape[1] // 2
    dx = x2.new_empty((m, 2 * h))
    _backward(dy, x2[:, :h], x2[:, h:], dx.view(m, 2, h), config, autotune)
    return dx.view(shape)


def _check_inputs(op: str, *tensors: torch.Tensor) -> None:
    import torch

    for t in tensors:  # every argument a tensor first: a TypeError says more than a device error
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op} takes torch.Tensor arguments, got {type(t).__name__}")
    for t in tensors:
        _device.check_cuda_tensor(t, op)
    _check_alike(op, *tensors)


def _check_alike(op: str, *tensors: torch.Tensor) -> None:
    """The checks that need no data (the fake implementations make them too): a supported
    dtype, and one shape, dtype and device for all."""
    import torch

    first = tensors[0]
    if first.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"{op} supports {', '.join(SUPPORTED)}; got {first.dtype}. Cast it, e.g. x.float()")
    for t in tensors[1:]:
        if t.shape != first.shape:
            raise ValueError(f"{op}: a and b must have the same shape, got {tuple(first.shape)} and {tuple(t.shape)}")
        if t.dtype != first.dtype:
            raise TypeError(f"{op}: a and b must have the same dtype, got {first.dtype} and {t.dtype}")
        if t.device != first.device:
            raise ValueError(f"{op}: a and b must be on the same device, got {first.device} and {t.device}")


def _forward(a2: torch.Tensor, b2: torch.Tensor, y2: torch.Tensor, config: Any, autotune: bool) -> SwigluConfig:
    """silu(a2) * b2 into the contiguous `y2`; returns the config used."""
    index = _op.device_index(a2)
    _device.prepare(index)
    chosen = _choose(a2, index, config, autotune)
    if a2.numel():
        _launch_forward(y2, a2, b2, chosen, index)
    return chosen


@functools.cache
def _autograd_functions() -> tuple[Any, Any]:
    import torch

    class Swiglu(torch.autograd.Function):
        """Our kernels both ways; the gradients come out of one backward launch."""

        @staticmethod
        def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, config: Any, autotune: bool) -> torch.Tensor:
            h = a.shape[-1] if a.dim() else 1
            m = a.numel() // max(h, 1)
            a2, b2 = _op.row_view(a, m, h), _op.row_view(b, m, h)
            y2 = a.new_empty((m, h))
            _forward(a2, b2, y2, config, autotune)
            ctx.config, ctx.autotune = config, autotune  # an explicit config serves both kernels
            ctx.save_for_backward(a2, b2)
            ctx.shape = a.shape
            return y2.view(a.shape)

        @staticmethod
        def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None, None]:
            a2, b2 = ctx.saved_tensors
            da, db = _swiglu_grad_planes(dy, a2, b2, ctx.config, ctx.shape, ctx.autotune)
            return da, db, None, None

    class SiluAndMul(torch.autograd.Function):
        """silu_and_mul on two views of x; the backward writes dx once, both halves."""

        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, config: Any, autotune: bool) -> torch.Tensor:
            h2 = x.shape[-1]
            m, h = x.numel() // max(h2, 1), h2 // 2
            x2 = _op.row_view(x, m, h2)
            y2 = x.new_empty((m, h))
            _forward(x2[:, :h], x2[:, h:], y2, config, autotune)
            ctx.config, ctx.autotune = config, autotune
            ctx.save_for_backward(x2)
            ctx.shape = x.shape
            return y2.view(*x.shape[:-1], h)

        @staticmethod
        def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, None, None]:
            (x2,) = ctx.saved_tensors
            return _silu_and_mul_grad(dy, x2, ctx.config, ctx.shape, ctx.autotune), None, None

    return Swiglu, SiluAndMul


def _halves_key(x: torch.Tensor) -> tuple[Any, ...]:
    """What makes two silu_and_mul calls the same launch (apart from swiglu's keys)."""
    return ("silu_and_mul", x.shape, x.stride(), x.dtype, x.get_device())


def _plan_key(a: torch.Tensor, b: torch.Tensor) -> tuple[Any, ...]:
    """What makes two swiglu calls the same launch: shape, both layouts, dtypes, devices."""
    return (a.shape, a.stride(), b.stride(), a.dtype, b.dtype, a.get_device(), b.get_device())


def swiglu(
    a: torch.Tensor, b: torch.Tensor, *, config: SwigluConfig | tuple[int, ...] | None = None, autotune: bool = False
) -> torch.Tensor:
    """silu(a) * b, elementwise, computed in float32 and returned as a new contiguous
    tensor of a's shape and dtype on a's device.

    a and b: CUDA tensors of one shape, dtype (float32, float16, bfloat16) and device.
    Rows with a unit last-dim stride are read in place; other layouts are copied once.
    The kernel runs on the current stream without blocking the host (CUDA-graph
    capturable). Gradients flow to a and b through our backward kernel.
    `config=SwigluConfig(block_m, block_n, occupancy, warps, cga)` or `autotune=True` as for softmax.
    Traced (torch.compile, torch.export, fake tensors): torch.ops.tilegym_cutile_rs.swiglu.
    """
    if config is None and not autotune and not _torch_ops.is_compiling():
        # The per-call fast path: plain tensors of a layout seen before on this thread, no autograd.
        try:
            key = _plan_key(a, b)
        except (AttributeError, TypeError):
            key = None  # not tensors: the checks below say what is wrong
        plan = forward_plans.reusable(key, a, b) if key is not None else None
        if plan is not None:
            y: torch.Tensor = plan.torch.empty_like(a) if plan.dense else a.new_empty(a.shape)
            plan.run(y.data_ptr(), a.data_ptr(), b.data_ptr())
            return y
    traced = _torch_ops.traced_or_fake(a, b)
    if traced is not None:
        result: torch.Tensor = traced.swiglu(a, b, list(config or ()))
        return result
    import torch

    _check_inputs("swiglu", a, b)
    if (a.requires_grad or b.requires_grad) and torch.is_grad_enabled():
        with_grad: torch.Tensor = _autograd_functions()[0].apply(a, b, config, autotune)
        return with_grad
    h = a.shape[-1] if a.dim() else 1
    m = a.numel() // max(h, 1)
    a2, b2 = _op.row_view(a, m, h), _op.row_view(b, m, h)
    y2 = a.new_empty((m, h))
    chosen = _forward(a2, b2, y2, config, autotune)
    if config is None and not autotune and _op.plain(a) and _op.plain(b) and a2.numel():
        if a2.data_ptr() == a.data_ptr() and b2.data_ptr() == b.data_ptr() and a.is_contiguous() == b.is_contiguous():
            forward_plans.make(_plan_key(a, b), *_forward_arguments(y2, a2, b2, chosen), _op.device_index(a2), dense=a.is_contiguous())
    return y2.view(a.shape)


def _overlaps(t: torch.Tensor, other: torch.Tensor) -> bool:
    """Whether two tensors' memory ranges intersect (a conservative test)."""
    if t.numel() == 0 or other.numel() == 0:
        return False

    def span(x: torch.Tensor) -> tuple[int, int]:
        last = sum((size - 1) * stride for size, stride in zip(x.shape, x.stride(), strict=True))
        return x.data_ptr(), x.data_ptr() + (last + 1) * x.element_size()

    (s0, e0), (s1, e1) = span(t), span(other)
    return s0 < e1 and s1 < e0


def silu_and_mul(
    x: torch.Tensor,
    out: torch.Tensor | None = None,
    *,
    config: SwigluConfig | tuple[int, ...] | None = None,
    autotune: bool = False,
) -> torch.Tensor:
    """silu(x[..., :H]) * x[..., H:] for x of shape `[..., 2H]`, computed in float32,
    returned with shape `[..., H]` and x's dtype (float32, float16, bfloat16).

    The two halves are read in place as two views of x (no split copy) when x's last dim
    has unit stride. `out=` is written in place (its shape, dtype and device must match,
    it must not overlap x; a non-contiguous `out` is filled from a contiguous result)
    and returned; it does not take gradients, as torch's `out=` functions do not.
    Gradients flow to x through our backward kernel, which writes dx once.
    Traced (torch.compile, torch.export, fake tensors): torch.ops.tilegym_cutile_rs.silu_and_mul,
    and silu_and_mul_out with out=.
    """
    if out is None and config is None and not autotune and not _torch_ops.is_compiling():
        # swiglu's fast path on the two halves: a plain x of a layout seen before on this thread.
        try:
            key = _halves_key(x)
        except (AttributeError, TypeError):
            key = None  # not a tensor: the checks below say what is wrong
        plan = forward_plans.reusable(key, x) if key is not None else None
        if plan is not None:
            y: torch.Tensor = x.new_empty((*x.shape[:-1], x.shape[-1] // 2))
            ptr = x.data_ptr()
            plan.run(y.data_ptr(), ptr, ptr + x.shape[-1] // 2 * x.element_size())
            return y
    traced = _torch_ops.traced_or_fake(x, out)
    if traced is not None:
        if out is None:
            result: torch.Tensor = traced.silu_and_mul(x, list(config or ()))
            return result
        traced.silu_and_mul_out(x, out, list(config or ()))
        return out
    import torch

    _check_inputs("silu_and_mul", x)
    shape = _halves_shape(x)
    h = shape[-1]
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
        _check_out(x, out, shape)
        if _overlaps(out, x):
            raise ValueError("out overlaps x: silu_and_mul would read what it writes. Pass a separate out tensor")
        if torch.is_grad_enabled() and (x.requires_grad or out.requires_grad):
            raise RuntimeError("silu_and_mul(out=...) does not take gradients (as torch's out= functions); call it without out=")
    elif x.requires_grad and torch.is_grad_enabled():
        with_grad: torch.Tensor = _autograd_functions()[1].apply(x, config, autotune)
        return with_grad
    m = x.numel() // max(2 * h, 1)
    x2 = _op.row_view(x, m, 2 * h)
    direct = out is not None and out.is_contiguous()
    y2 = out.view(m, h) if out is not None and direct else x.new_empty((m, h))
    chosen = _forward(x2[:, :h], x2[:, h:], y2, config, autotune)
    if out is None:
        if config is None and not autotune and _op.plain(x) and x2.numel() and x2.data_ptr() == x.data_ptr():
            # x's rows read in place (row_view made no copy): the fast path's halves are x's own.
            forward_plans.make(_halves_key(x), *_forward_arguments(y2, x2[:, :h], x2[:, h:], chosen), _op.device_index(x2), dense=False)
        return y2.view(shape)
    if not direct:
        out.copy_(y2.view(shape))
    return out


def _tilegym_silu_and_mul(input: torch.Tensor, out: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
    """TileGym's `silu_and_mul(input, out=None, **kwargs)` on our kernels. Keywords other
    than `out` (TileGym documents only backend-specific extras) have no meaning for our
    kernels and are ignored with a one-time warning."""
    _op.ignore_kwargs("silu_and_mul", kwargs)
    return silu_and_mul(input, out)


def _tilegym_get_swiglu() -> Any:
    """TileGym's `get_swiglu()`: the functional SwiGLU, `swiglu(a, b)`."""
    return swiglu


@functools.cache
def _swiglu_mlp() -> type:
    import torch

    from .matmul import matmul

    def project(x2: torch.Tensor, linear: torch.nn.Linear) -> torch.Tensor:
        """x2 · weightᵀ on our matmul (the weight read in place as a column-major view)."""
        y = matmul(x2, linear.weight.t())
        return y if linear.bias is None else y + linear.bias

    class SwiGLUMLP(torch.nn.Module):
        """A Llama-style MLP, `down_proj(silu(gate_proj(x)) * up_proj(x))`, whose three
        projections run on our matmul and the gate on our swiglu, gradients included. Built
        as transformers' `LlamaMLP(config)` is (its parameters load the same state dict);
        `hidden_act` must be SiLU. Biases (`config.mlp_bias`) are added by torch."""

        def __init__(self, config: Any, hidden_size: int | None = None, intermediate_size: int | None = None) -> None:
            super().__init__()
            self.config = config
            self.hidden_size = config.hidden_size if hidden_size is None else hidden_size
            self.intermediate_size = config.intermediate_size if intermediate_size is None else intermediate_size
            act = getattr(config, "hidden_act", "silu")
            if act not in ("silu", "swish"):
                raise ValueError(f"SwiGLUMLP computes silu(gate) * up; config.hidden_act is {act!r}. Keep the model's own MLP")
            bias = bool(getattr(config, "mlp_bias", False))
            self.gate_proj = torch.nn.Linear(self.hidden_size, self.intermediate_size, bias=bias)
            self.up_proj = torch.nn.Linear(self.hidden_size, self.intermediate_size, bias=bias)
            self.down_proj = torch.nn.Linear(self.intermediate_size, self.hidden_size, bias=bias)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x2 = x.reshape(-1, x.shape[-1])
            hidden = swiglu(project(x2, self.gate_proj), project(x2, self.up_proj))
            return project(hidden, self.down_proj).view(*x.shape[:-1], self.hidden_size)

    return SwiGLUMLP


def _tilegym_get_swiglu_module() -> type:
    """TileGym's `get_swiglu_module()`: the MLP module class its model patches install."""
    return _swiglu_mlp()


def _warmup(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, autotune: bool) -> SwigluConfig:
    """Compile (and optionally autotune) swiglu's forward and backward for operands of `shape`."""
    import torch

    a = torch.randn(shape, device=device).to(dtype).requires_grad_(True)
    b = torch.randn(shape, device=device).to(dtype).requires_grad_(True)
    y = swiglu(a, b, autotune=autotune)
    torch.autograd.backward([y], [torch.ones_like(y)])
    h = shape[-1] if shape else 1
    m = a.numel() // max(h, 1)
    return _choose(a.detach().reshape(m, h), _op.device_index(a), None, False)


def _smoke(device: torch.device) -> str:
    import torch

    x = torch.randn(64, 2 * 1000, device=device, requires_grad=True)
    y = silu_and_mul(x)
    gate, up = x.detach()[:, :1000].requires_grad_(True), x.detach()[:, 1000:].requires_grad_(True)
    ref = reference_swiglu(gate, up)
    dy = torch.randn_like(y)
    torch.autograd.backward([y, ref], [dy, dy])
    assert x.grad is not None and gate.grad is not None and up.grad is not None
    err = (y - ref).abs().max().item()
    grad_err = (x.grad - torch.cat([gate.grad, up.grad], -1)).abs().max().item()
    assert y.device == x.device and err < 1e-5 and grad_err < 1e-4, (
        f"max abs error {err:.2e} (bound 1e-5), gradient {grad_err:.2e} (bound 1e-4) vs torch"
    )
    return f"silu_and_mul max abs error {err:.2e}, gradient {grad_err:.2e} vs torch"


def _op_swiglu(a: torch.Tensor, b: torch.Tensor, config: list[int]) -> torch.Tensor:
    import torch

    with torch.no_grad():  # the operator's autograd formula is registered on it
        return swiglu(a, b, config=tuple(config) or None)


def _fake_swiglu(a: torch.Tensor, b: torch.Tensor, config: list[int]) -> torch.Tensor:
    import torch

    _check_alike("swiglu", a, b)
    return torch.empty(a.shape, dtype=a.dtype, device=a.device)


def _setup_swiglu(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[0], inputs[1])


def _backward_swiglu(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
    a, b = ctx.saved_tensors
    da, db = _torch_ops.torch_ops().swiglu_backward(dy, a, b)  # one stacked tensor: outputs may not alias
    return da, db, None


def _op_swiglu_backward(dy: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    h = a.shape[-1] if a.dim() else 1
    m = a.numel() // max(h, 1)
    return _swiglu_grad_planes(dy, _op.row_view(a, m, h), _op.row_view(b, m, h), None, a.shape)


def _fake_swiglu_backward(dy: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    import torch

    _check_alike("swiglu backward", a, b, dy)
    return torch.empty((2, *a.shape), dtype=a.dtype, device=a.device)


def _halves_shape(x: torch.Tensor) -> tuple[int, ...]:
    """silu_and_mul's output shape `[..., H]` for x `[..., 2H]`."""
    if x.dim() == 0 or x.shape[-1] % 2:
        size = x.shape[-1] if x.dim() else "a 0-d tensor"
        raise ValueError(f"silu_and_mul needs an even last dim [..., 2H]; x has {size}. Pass both halves, gate first")
    return (*x.shape[:-1], x.shape[-1] // 2)


def _check_out(x: torch.Tensor, out: torch.Tensor, shape: tuple[int, ...]) -> None:
    if tuple(out.shape) != shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(
            f"out must be a {x.dtype} tensor of shape {shape} on {x.device}; got {out.dtype} {tuple(out.shape)} on {out.device}"
        )


def _op_silu_and_mul(x: torch.Tensor, config: list[int]) -> torch.Tensor:
    import torch

    with torch.no_grad():
        return silu_and_mul(x, config=tuple(config) or None)


def _fake_silu_and_mul(x: torch.Tensor, config: list[int]) -> torch.Tensor:
    import torch

    _check_alike("silu_and_mul", x)
    return torch.empty(_halves_shape(x), dtype=x.dtype, device=x.device)


def _op_silu_and_mul_out(x: torch.Tensor, out: torch.Tensor, config: list[int]) -> None:
    silu_and_mul(x, out, config=tuple(config) or None)


def _fake_silu_and_mul_out(x: torch.Tensor, out: torch.Tensor, config: list[int]) -> None:
    _check_alike("silu_and_mul", x)
    _check_out(x, out, _halves_shape(x))


def _setup_silu_and_mul(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[0])


def _backward_silu_and_mul(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, None]:
    (x,) = ctx.saved_tensors
    return _torch_ops.torch_ops().silu_and_mul_backward(dy, x), None


def _op_silu_and_mul_backward(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    h2 = x.shape[-1]
    return _silu_and_mul_grad(dy, _op.row_view(x, x.numel() // max(h2, 1), h2), None, x.shape)


def _fake_silu_and_mul_backward(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    import torch

    if tuple(dy.shape) != _halves_shape(x):
        raise ValueError(f"silu_and_mul backward: dy has shape {tuple(dy.shape)}, x {tuple(x.shape)}")
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def reference_swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) * b in torch (float32 for float32 inputs)."""
    import torch

    return torch.nn.functional.silu(a) * b


def reference_silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """silu(x[..., :H]) * x[..., H:] in torch."""
    h = x.shape[-1] // 2
    return reference_swiglu(x[..., :h], x[..., h:])


def _reference_swiglu_backward(dy: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.stack(torch.func.vjp(reference_swiglu, a, b)[1](dy))


def _reference_silu_and_mul_backward(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    import torch

    dx: torch.Tensor = torch.func.vjp(reference_silu_and_mul, x)[1](dy)[0]
    return dx


# TileGym's tolerances, every dtype: swiglu atol = rtol = 1e-2; silu_and_mul rtol 0, atol 1e-2.
SWIGLU_TOLERANCES = dict.fromkeys(SUPPORTED, _registry.Tolerance(rtol=1e-2, atol=1e-2))
SILU_AND_MUL_TOLERANCES = dict.fromkeys(SUPPORTED, _registry.Tolerance(rtol=0.0, atol=1e-2))

TORCH_OPS = (
    _registry.TorchOp(
        "swiglu", "(Tensor a, Tensor b, int[] config) -> Tensor", _op_swiglu, _fake_swiglu, _backward_swiglu, _setup_swiglu,
        example=lambda d: (_torch_ops.sample(d, 4, 8, 256, grad=True), _torch_ops.sample(d, 4, 8, 256, grad=True), []),
        reference=lambda a, b, config: reference_swiglu(a, b), tolerances=SWIGLU_TOLERANCES,
    ),
    _registry.TorchOp(
        "swiglu_backward", "(Tensor dy, Tensor a, Tensor b) -> Tensor", _op_swiglu_backward, _fake_swiglu_backward,
        example=lambda d: (_torch_ops.sample(d, 32, 256), _torch_ops.sample(d, 32, 256), _torch_ops.sample(d, 32, 256)),
        reference=_reference_swiglu_backward, tolerances=SWIGLU_TOLERANCES,
    ),
    _registry.TorchOp(
        "silu_and_mul", "(Tensor x, int[] config) -> Tensor", _op_silu_and_mul, _fake_silu_and_mul,
        _backward_silu_and_mul, _setup_silu_and_mul,
        example=lambda d: (_torch_ops.sample(d, 64, 2000, dtype="float32", grad=True), []),
        reference=lambda x, config: reference_silu_and_mul(x), tolerances=SILU_AND_MUL_TOLERANCES,
    ),
    _registry.TorchOp(
        "silu_and_mul_out", "(Tensor x, Tensor(a!) out, int[] config) -> ()", _op_silu_and_mul_out, _fake_silu_and_mul_out,
        example=lambda d: (_torch_ops.sample(d, 64, 512), _torch_ops.sample(d, 64, 256), []),
        reference=lambda x, out, config: reference_silu_and_mul(x), tolerances=SILU_AND_MUL_TOLERANCES,
    ),
    _registry.TorchOp(
        "silu_and_mul_backward", "(Tensor dy, Tensor x) -> Tensor", _op_silu_and_mul_backward, _fake_silu_and_mul_backward,
        example=lambda d: (_torch_ops.sample(d, 64, 256), _torch_ops.sample(d, 64, 512)),
        reference=_reference_silu_and_mul_backward, tolerances=SILU_AND_MUL_TOLERANCES,
    ),
)


# Shapes whose kernels the wheel ships compiled (_shipped), as (rows, H, dtype), forward and backward.
# TileGym 1.5.1's tests/ops/test_swiglu.py (rows = batch * seq; float32 unless the test says)...
SHIPPED_SWIGLU = [
    *((b * s, h, "float32") for b, s, h in ((8, 2048, 4096), (4, 1024, 2048), (2, 512, 1024))),
    *((b * s, h, "float32") for b, s, h in ((7, 512, 1024), (13, 256, 2048), (8, 100, 1024), (8, 333, 512),
                                            (8, 256, 1000), (8, 256, 1500), (8, 256, 3000), (7, 100, 1000),
                                            (13, 333, 1500), (7, 256, 512), (13, 128, 1024), (8, 333, 256),
                                            (4, 256, 1000), (4, 256, 1500), (4, 128, 3000))),
    (4 * 512, 1024, "float32"), (8 * 256, 2048, "float32"), (2 * 1024, 512, "float32"),
    (8 * 512, 512, "float16"), (8 * 512, 1024, "float16"),
]
# ...and LLM MLP widths (Llama 2 7B/13B, Llama 3 8B and 70B, Qwen 2 7B) and our benchmark's rows,
# in the training and serving dtypes, for a prefill-sized batch and a decode step.
SHIPPED_SWIGLU += [
    (m, h, dtype)
    for h in (4096, 8192, 11008, 13824, 14336, 18944, 28672)
    for m in (1, 4096)
    for dtype in ("bfloat16", "float16")
]
SHIPPED_SWIGLU += [(m, h, "bfloat16") for m, h in ((16384, 14336), (128, 14336), (65536, 512), (65536, 1024))]
# silu_and_mul: TileGym's tests/ops/test_silu_and_mul.py (x is [rows, 2H]).
SHIPPED_SILU_AND_MUL = [
    (8 * 512, 512, "float16"), (8 * 512, 1024, "float16"), (8 * 512, 2048, "float32"), (8 * 1024, 512, "float16"),
    (8 * 1024, 1024, "float32"), (8 * 1024, 2048, "float32"), (16 * 512, 512, "float16"), (16 * 512, 1024, "float32"),
    (16 * 1024, 512, "float32"), (16 * 1024, 1024, "float16"), (16 * 1024, 2048, "float32"), (32 * 512, 512, "float32"),
    (32 * 512, 1024, "float16"), (32 * 512, 2048, "float32"), (32 * 1024, 512, "float16"), (32 * 1024, 1024, "float32"),
    (32 * 1024, 4096, "float32"), (7 * 512, 512, "float32"), (13 * 256, 1024, "float32"), (8 * 100, 512, "float32"),
    (8 * 333, 1024, "float32"), (8 * 256, 1000, "float32"), (8 * 256, 1500, "float32"), (8 * 256, 3000, "float32"),
    (7 * 100, 1000, "float32"), (13 * 333, 1500, "float32"),
    *((m, h, dtype) for h in (4096, 11008, 14336) for m in (1, 4096) for dtype in ("bfloat16", "float16")),
    (64, 1000, "float32"),  # the smoke test's (python -m tilegym_cutile_rs.check)
]


def _shipped(device: torch.device) -> None:
    import torch

    for m, h, dtype in SHIPPED_SWIGLU:
        _warmup((m, h), getattr(torch, dtype), device, False)
    for m, h, dtype in SHIPPED_SILU_AND_MUL:
        x = torch.empty(m, 2 * h, dtype=getattr(torch, dtype), device=device, requires_grad=True)
        y = silu_and_mul(x)
        torch.autograd.backward([y], [torch.empty_like(y)])


# benchmarks/tune.py's sweeps, one table per kernel (the backward's tiles hold three inputs and
# two outputs, so it fits apart): benchmarks/swiglu_bench.py's rows, each dtype.
TUNING_SHAPES = [(4096, 14336), (16384, 14336), (4096, 11008), (1, 11008), (128, 14336), (65536, 512), (65536, 8192)]


def _tuning_bench(problem: _tuned.Problem, device: Any) -> Any:
    import torch

    dtype_name, m, h = problem
    a, b = (torch.randn(m, h, device=device, dtype=_tuned.torch_dtype(dtype_name)) for _ in range(2))
    y, ref = torch.empty_like(a), reference_swiglu(a.float(), b.float()).to(a.dtype)
    return _tuned.checked_runs(
        lambda config: _launch_forward(y, a, b, config, _op.device_index(a)),  # type: ignore[arg-type]
        lambda: torch.testing.assert_close(y, ref, rtol=2e-2, atol=1e-3),
        (y,),
    )


def _tuning_bench_backward(problem: _tuned.Problem, device: Any) -> Any:
    import torch

    dtype_name, m, h = problem
    dy, a, b = (torch.randn(m, h, device=device, dtype=_tuned.torch_dtype(dtype_name)) for _ in range(3))
    dg = torch.empty((m, 2, h), dtype=a.dtype, device=device)
    s = torch.sigmoid(a.float())
    ref = torch.stack([dy.float() * b.float() * s * (1 + a.float() * (1 - s)), dy.float() * a.float() * s], 1).to(a.dtype)
    return _tuned.checked_runs(
        lambda config: _launch_backward(dg, dy, a, b, config, _op.device_index(a)),  # type: ignore[arg-type]
        lambda: torch.testing.assert_close(dg, ref, rtol=2e-2, atol=1e-2),
        (dg,),
    )


def _tuning_candidates(problem: _tuned.Problem) -> list[SwigluConfig]:
    """The sweep's configs: tiles from 256 wide (the widest that divides 11008) to a whole row
    of up to 8192 elements (or one row, when wider), each with tileiras' choice of warps, 4 or
    8; occupancy left to tileiras; tiles of CLUSTER_MIN_ELEMENTS or more also shared by a
    cluster of 2 CTAs (the sweep runs on the GPU it fits: before sm_90 those fail and lose)."""
    _, m, h = problem
    widest = max(_op.next_pow2(h), 256)
    shapes = {
        (min(max(1, elements // block_n), _op.next_pow2(m)), block_n)
        for block_n in (256, 512, 1024, 2048, 4096, 8192, 16384) if block_n <= widest
        for elements in (block_n, 2048, 4096, 8192) if elements >= block_n
    }
    rule = swiglu_rule(m, h, _tuned.torch_dtype(problem[0]))
    return sorted({rule, *(
        SwigluConfig(bm, bn, 0, warps, cga)
        for bm, bn in shapes for warps in (0, 4, 8) for cga in _clusters(bm, bn)
    )})


def _tuning(name: str, bench: Any, planes: int) -> _tuned.Tuning:
    """A swiglu kernel's tuning over TUNING_SHAPES in every dtype; `planes`: [M, H] tensors a call
    reads and writes (forward: a, b, y; backward: dy, a, b, da, db)."""
    return _tuned.Tuning(
        name=name,
        problems=[(dt, m, h) for dt in SUPPORTED for m, h in TUNING_SHAPES],
        candidates=_tuning_candidates,
        rule=lambda p: swiglu_rule(p[1], p[2], _tuned.torch_dtype(p[0])),
        bench=bench,
        nbytes=lambda p: planes * p[1] * p[2] * _tuned.torch_dtype(p[0]).itemsize,
        adapt=_adapt,
    )


TUNINGS = [_tuning("swiglu", _tuning_bench, 3), _tuning("swiglu_backward", _tuning_bench_backward, 5)]

OP = _registry.OpSpec(
    "swiglu",
    tilegym={"silu_and_mul": _tilegym_silu_and_mul, "get_swiglu": _tilegym_get_swiglu, "get_swiglu_module": _tilegym_get_swiglu_module},
    warmup=_warmup,
    smoke=_smoke,
    shipped=_shipped,
    torch_ops=TORCH_OPS,
    tunings=TUNINGS,
)
