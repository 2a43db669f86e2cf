"""softmax(x, dim=-1): cuTile Rust kernel, float32/float16/bfloat16, any shape."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from ... import _choice, _device, _op, _registry, _torch_ops, _tuned
from .heuristic import SoftmaxConfig, adapt_fitted, row_family, shape_class, softmax_candidates, softmax_config, softmax_rule

if TYPE_CHECKING:
    import torch

__all__ = ["SoftmaxConfig", "softmax", "softmax_candidates", "softmax_config", "softmax_rule"]

SUPPORTED = ("float32", "float16", "bfloat16")
EXPORT = "cutile_softmax"

plans = _op.Plans("softmax", EXPORT)
chooser = _choice.Chooser("softmax", SoftmaxConfig, plans)


def _arguments(x2: torch.Tensor, y2: torch.Tensor, config: SoftmaxConfig) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
    """The export's tensors and config by parameter name: what a launch passes and a plan binds."""
    return {"x": x2, "y": y2}, _op.named(SoftmaxConfig, config)


def _launch(x2: torch.Tensor, y2: torch.Tensor, config: SoftmaxConfig, index: int) -> None:
    _op.launch("softmax", EXPORT, *_arguments(x2, y2, config), index, ("softmax", x2.dtype, tuple(x2.shape), "config", config))


def _choose(x2: torch.Tensor, index: int, autotune: bool) -> SoftmaxConfig:
    m, n = x2.shape
    row_stride = x2.stride(0) if m > 1 else n

    def family() -> int:
        return row_family(x2.dtype, m, n, row_stride)

    def tuner() -> Any:
        import torch

        scratch = torch.empty((m, n), dtype=x2.dtype, device=x2.device)  # y stays untouched until the winner runs
        return lambda c: _launch(x2, scratch, c, index)

    return chooser.choose(
        (index, x2.dtype, m, n, row_stride % 8),
        lambda: shape_class(_device.name(index), x2.dtype, m, n, family()),
        lambda: softmax_config(m, n, x2.dtype, family(), index),
        lambda: softmax_candidates(m, n, x2.dtype, family(), _device.arch(index)),
        tuner,
        autotune,
    )


def _forward(x: torch.Tensor, dim: int, config: Any, autotune: bool, plan_key: tuple[Any, ...] | None = None) -> torch.Tensor:
    import torch

    ndim = max(x.dim(), 1)
    dim %= ndim
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    src = x.reshape(1) if x.dim() == 0 else x
    moved = src.movedim(dim, -1) if dim != ndim - 1 else src
    n = moved.shape[-1]
    m = moved.numel() // n
    x2 = moved.reshape(m, n)
    if (n > 1 and x2.stride(1) != 1) or (m > 1 and x2.stride(0) < n):
        x2 = x2.contiguous()
    y2 = torch.empty((m, n), dtype=x.dtype, device=x.device)
    index = _op.device_index(x)
    _device.prepare(index)
    config = _choose(x2, index, autotune) if config is None else _choice.check_config(config, SoftmaxConfig)
    _launch(x2, y2, config, index)
    if plan_key is not None and dim == ndim - 1 and x.dim() > 0 and x2.data_ptr() == x.data_ptr():
        plans.make(plan_key, *_arguments(x2, y2, config), index, dense=x.is_contiguous())
    y = y2.view(moved.shape)
    if dim != ndim - 1:
        y = y.movedim(-1, dim).contiguous()
    return y.reshape(x.shape)


def _check_args(x: torch.Tensor, dim: Any) -> int:
    """The checks that need no data (the fake implementation makes them too): a supported
    dtype and an int dim within x's dims. Returns the dims softmax sees (a 0-d x has one)."""
    import torch

    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"softmax supports {', '.join(SUPPORTED)}; x is {x.dtype}. Cast it, e.g. x.float()")
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    ndim = max(x.dim(), 1)
    if not -ndim <= dim < ndim:
        raise IndexError(f"dim {dim} is out of range for a tensor with {x.dim()} dims")
    return ndim


def _grad(y: torch.Tensor, dy: torch.Tensor, dim: int) -> torch.Tensor:
    """dx = y * (dy - sum(dy * y)) along dim, in float32, in y's dtype."""
    y32, dy32 = y.float(), dy.float()
    return (y32 * (dy32 - (dy32 * y32).sum(dim=dim, keepdim=True))).to(y.dtype)


@functools.cache
def _autograd_function() -> Any:
    import torch

    class Softmax(torch.autograd.Function):
        """Our kernel forward; backward dx = y * (dy - sum(dy * y)) in float32 by torch."""

        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, dim: int, config: Any, autotune: bool) -> torch.Tensor:
            y = _forward(x, dim, config, autotune)
            ctx.save_for_backward(y)
            ctx.dim = dim
            return y

        @staticmethod
        def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
            (y,) = ctx.saved_tensors
            return _grad(y, dy, ctx.dim), None, None, None

    return Softmax


def softmax(
    x: torch.Tensor, dim: int = -1, *, config: SoftmaxConfig | tuple[int, ...] | None = None, autotune: bool = False
) -> torch.Tensor:
    """Softmax of `x` along `dim`, computed in float32, returned as a new
    contiguous tensor of x's shape and dtype on x's device.

    The kernel runs on the current torch stream of x's device and does not
    block the host (it can be captured in a CUDA graph). A `dim` other than the
    last is handled by moving it last first (one extra copy in and out).
    Tiles: `config=SoftmaxConfig(block_m, block_n, occupancy, warps)` (or a tuple of
    2 to 4 ints; powers of two) overrides the choice; otherwise a decision autotuned
    earlier for this device, dtype and shape class (kept in the kernel cache
    directory), else the shape heuristic. `autotune=True` (or
    TILEGYM_CUTILE_RS_AUTOTUNE=1) tunes a shape class on its first call.
    Gradients flow (backward computed by torch). Under torch.compile and torch.export, and
    for fake tensors, the call is the operator torch.ops.tilegym_cutile_rs.softmax.
    """
    plan_key = None
    if config is None and not autotune and not _torch_ops.is_compiling():
        # The per-call fast path: a plain tensor of a shape seen before on this thread, no autograd.
        try:
            plan_key = (x.shape, x.stride(), x.dtype, x.get_device(), dim)
        except (AttributeError, TypeError):
            pass  # not a tensor: the checks below say what is wrong
        else:
            plan = plans.reusable(plan_key, x)
            if plan is not None:
                t = plan.torch
                y: torch.Tensor = t.empty_like(x) if plan.dense else t.empty(x.shape, dtype=x.dtype, device=x.device)
                plan.run(x.data_ptr(), y.data_ptr())
                return y
    traced = _torch_ops.traced_or_fake(x)
    if traced is not None:
        result: torch.Tensor = traced.softmax(x, dim, list(config or ()))
        return result
    import torch

    if not _op.plain(x):
        plan_key = None  # plans are for plain tensors only
    _device.check_cuda_tensor(x, "softmax")
    ndim = _check_args(x, dim)
    if x.requires_grad and torch.is_grad_enabled():
        with_grad: torch.Tensor = _autograd_function().apply(x, dim % ndim, config, autotune)
        return with_grad
    return _forward(x, dim, config, autotune, plan_key)


# TileGym's softmax keywords, and what they mean for our kernel.
_TILEGYM_KWARGS = {
    # tileiras decides how the view loads are lowered (TMA where it pays); there is no separate TMA kernel.
    "use_tma",
    # Rows longer than one tile always take the row-loop kernel: "chunked" is automatic.
    "use_chunked",
    # The grid always covers every row block in one launch; there is no persistent multi-wave variant.
    "use_multi_wave",
}


def _tilegym_softmax(x: torch.Tensor, use_tma: bool = False, **kwargs: Any) -> torch.Tensor:
    """TileGym's `softmax(x, use_tma=False, **kwargs)` on our kernel, over the last dim.

    use_tma, use_chunked and use_multi_wave are accepted and do not change the
    result: see _TILEGYM_KWARGS. Other keywords are ignored with a one-time warning.
    """
    _op.ignore_kwargs("softmax", kwargs, _TILEGYM_KWARGS)
    return softmax(x, -1)


def _warmup(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, autotune: bool) -> SoftmaxConfig:
    """Compile (and optionally autotune) softmax over the last dim for `shape`; returns the config used."""
    import torch

    x = torch.randn(shape, device=device).to(dtype)
    softmax(x, autotune=autotune)
    n = x.shape[-1] if x.dim() else 1
    return _choose(x.reshape(x.numel() // max(n, 1), n), _op.device_index(x), False)


def _smoke(device: torch.device) -> str:
    import torch

    x = torch.randn(64, 1000, device=device)
    y = softmax(x)
    err = (y - torch.softmax(x, -1)).abs().max().item()
    assert y.device == x.device and err < 1e-5, f"max abs error {err:.2e} vs torch.softmax (bound 1e-5)"
    return f"max abs error {err:.2e} vs torch.softmax"


# Shapes whose kernels the wheel ships compiled (_shipped), as (rows, width, dtype):
# TileGym 1.5.1's tests/ops/test_softmax.py and our benchmark's rows (benchmarks/softmax_bench.py)...
SHIPPED_SHAPES = [
    (256, 256, "float32"), (256, 2048, "float32"), (256, 32768, "float32"), (256, 256, "float16"),
    (256, 2048, "float16"), (256, 9, "float32"), (256, 1009, "float16"),
    *((m, n, dtype) for m, n in ((8192, 256), (8192, 1024), (8192, 4096), (2048, 32768)) for dtype in SUPPORTED),
]
# ...and powers of two and LLM vocabularies (Llama 2, GPT-2, Llama 3, Qwen 2) in every dtype, on
# a short and a long grid (the heuristic's row blocks and occupancy follow the row count).
SHIPPED_SHAPES += [
    (m, n, dtype)
    for dtype in SUPPORTED
    for n in (*(1 << p for p in range(7, 16)), 32000, 50257, 128256, 151936)
    for m in (256, 8192)
]
SHIPPED_SHAPES.append((64, 1000, "float32"))  # the smoke test's (python -m tilegym_cutile_rs.check)


def _shipped(device: torch.device) -> None:
    import torch

    for m, n, dtype in SHIPPED_SHAPES:
        _warmup((m, n), getattr(torch, dtype), device, False)


def _op_softmax(x: torch.Tensor, dim: int, config: list[int]) -> torch.Tensor:
    import torch

    with torch.no_grad():  # the operator's autograd formula is registered on it
        return softmax(x, dim, config=tuple(config) or None)


def _fake_softmax(x: torch.Tensor, dim: int, config: list[int]) -> torch.Tensor:
    import torch

    _check_args(x, dim)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)  # a new contiguous tensor


def _setup_softmax(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(output)
    ctx.dim = inputs[1]


def _backward_softmax(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, None, None]:
    (y,) = ctx.saved_tensors
    return _grad(y, dy, ctx.dim), None, None


# TileGym's tolerances; bfloat16 has 3 fewer mantissa bits than float16.
TOLERANCES = {
    "float32": _registry.Tolerance(rtol=1e-5, atol=1e-7),
    "float16": _registry.Tolerance(rtol=1e-3, atol=1e-5),
    "bfloat16": _registry.Tolerance(rtol=1e-2, atol=1e-4),
}
TORCH_OPS = (
    _registry.TorchOp(
        "softmax", "(Tensor x, int dim, int[] config) -> Tensor", _op_softmax, _fake_softmax, _backward_softmax, _setup_softmax,
        example=lambda d: (_torch_ops.sample(d, 64, 1000, dtype="float32", grad=True), -1, []), torch_gradient=True,
        reference=lambda x, dim, config: x.softmax(dim), tolerances=TOLERANCES,
    ),
)

# benchmarks/tune.py softmax: the shapes of the H200 sweeps behind the rule (docs/benchmarks.md),
# the vocabulary rows sampling runs, and TileGym's test rows, in every dtype; contiguous rows.
TUNING_SHAPES = [(8192, 256), (8192, 1024), (8192, 4096), (4096, 8192), (4096, 16384), (2048, 32768),
                 (4096, 32000), (4096, 50257), (4096, 128256), (4096, 151936), (256, 256), (256, 2048), (256, 32768), (256, 9),
                 (256, 1009)]


def _tuning_bench(problem: _tuned.Problem, device: Any) -> Any:
    import torch

    dtype_name, m, n = problem
    x = torch.randn(m, n, device=device, dtype=_tuned.torch_dtype(dtype_name))
    y, ref = torch.empty_like(x), torch.softmax(x.float(), -1)
    return _tuned.checked_runs(
        lambda config: _launch(x, y, config, _op.device_index(x)),  # type: ignore[arg-type]
        lambda: torch.testing.assert_close(y.float(), ref, rtol=2e-2, atol=1e-3),
        (y,),
    )


TUNINGS = [
    _tuned.Tuning(
        name="softmax",
        problems=[(dt, m, n) for dt in SUPPORTED for m, n in TUNING_SHAPES],
        candidates=lambda p: softmax_candidates(p[1], p[2], _tuned.torch_dtype(p[0])),
        rule=lambda p: softmax_rule(p[1], p[2], _tuned.torch_dtype(p[0])),
        bench=_tuning_bench,
        nbytes=lambda p: 2 * p[1] * p[2] * _tuned.torch_dtype(p[0]).itemsize,  # x read, y written
        adapt=adapt_fitted,
    )
]

OP = _registry.OpSpec(
    "softmax", tilegym={"softmax": _tilegym_softmax}, warmup=_warmup, smoke=_smoke, shipped=_shipped, torch_ops=TORCH_OPS,
    tunings=TUNINGS,
)
