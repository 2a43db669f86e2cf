"""matmul(a, b) and bmm(a, b): cuTile Rust GEMM kernels with float32 accumulation,
row- or column-major operands read in place, gradients by the same kernels."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _choice, _device, _op, _registry, _torch_ops, _tuned

if TYPE_CHECKING:
    import torch

__all__ = ["MatmulConfig", "bmm", "matmul", "matmul_candidates", "matmul_config", "matmul_rule"]

SUPPORTED = ("float16", "bfloat16", "float32")
EXPORT = "cutile_matmul"


class MatmulConfig(NamedTuple):
    """A GEMM launch: `[block_m, block_n]` output tiles per CTA walking K in `block_k`
    steps (powers of two), `occupancy` CTAs per SM and `warps` worker warps per CTA
    (0: tileiras' choice). `group_m` > 0 takes the persistent kernel: SMs x max(occupancy, 1)
    CTAs walk the tiles `group_m` row blocks of a column at a time; 0: one CTA per tile.
    `cga` > 0 asks for clusters of that many CTAs (sm_90 and later; 0: tileiras' choice)."""

    block_m: int
    block_n: int
    block_k: int
    occupancy: int = 0
    warps: int = 0
    group_m: int = 0
    cga: int = 0


# Per architecture and element size: the widest (block_m, block_n, block_k), cut down to
# the problem (never below MIN_BLOCK). Defaults not yet fitted on a GPU (docs/benchmarks.md):
# Hopper and Blackwell datacenter parts take 64-deep K steps for 2-byte operands.
TILES = {
    "sm_90": {2: (128, 128, 64), 4: (64, 64, 32)},
    "sm_100": {2: (128, 128, 64), 4: (64, 64, 32)},
}
DEFAULT_TILES = {2: (128, 128, 32), 4: (64, 64, 32)}
MIN_BLOCK = 16
# Row blocks per group in the persistent kernel's tile order (as Triton's tutorial's GROUP_SIZE_M).
GROUP_M = 8


def _fit(block: int, extent: int) -> int:
    """A tile edge cut down to the problem's extent, never below MIN_BLOCK."""
    return min(block, max(MIN_BLOCK, _op.next_pow2(extent)))


def matmul_rule(m: int, n: int, k: int, dtype: torch.dtype, arch: str = "sm_90") -> MatmulConfig:
    """The rule's config for an `[m, k] · [k, n]` product of `dtype` on `arch` (e.g. "sm_90"):
    what a device without a fitted table takes."""
    bm, bn, bk = TILES.get(arch, DEFAULT_TILES)[dtype.itemsize if dtype.itemsize in (2, 4) else 2]
    return MatmulConfig(_fit(bm, m), _fit(bn, n), _fit(bk, k))


def matmul_config(
    m: int, n: int, k: int, dtype: torch.dtype, arch: str = "sm_90", device: int | None = None, batch: int = 1
) -> MatmulConfig:
    """The heuristic's config for `batch` `[m, k] · [k, n]` products of `dtype` on device `device`
    (None: the current one) of architecture `arch`: this device's fitted table (tuned/matmul.json,
    benchmarks/tune.py matmul) at the nearest fitted problem, else `matmul_rule`."""
    return MatmulConfig(*_tuned.fitted(
        "matmul", _tuned.problem(dtype, batch, m, n, k), device, lambda: matmul_rule(m, n, k, dtype, arch), _adapt
    ))


def _adapt(config: tuple[int, ...], problem: _tuned.Problem, fitted: _tuned.Problem) -> tuple[int, ...]:
    """A config fitted for `fitted` cut to `problem`'s extents. Clusters carry over only on the
    persistent kernel (whose launch the library keeps to whole clusters) or to the very
    problem they were measured on."""
    bm, bn, bk, occupancy, warps, group_m, cga = MatmulConfig(*config)
    _, _, m, n, k = problem
    if group_m == 0 and problem != fitted:
        cga = 0
    return MatmulConfig(_fit(bm, m), _fit(bn, n), _fit(bk, k), occupancy, warps, group_m, cga)


def matmul_candidates(
    m: int, n: int, k: int, dtype: torch.dtype, arch: str = "sm_90", device: int | None = None, batch: int = 1
) -> list[MatmulConfig]:
    """The autotuner's search space: tile shapes (cut to the problem), occupancy, worker warps,
    and the rule's and the fitted table's configs (`matmul_config`'s arguments)."""
    configs = {matmul_rule(m, n, k, dtype, arch), matmul_config(m, n, k, dtype, arch, device, batch)}
    clusters = (0, 2) if _device.has_clusters(arch) else (0,)
    for bm in (64, 128):
        for bn in (64, 128, 256):
            for bk in (32, 64):
                for occupancy in (0, 1, 2):
                    for warps in (0, 8):
                        for group_m in (0, GROUP_M):
                            tiles = (_fit(bm, m), _fit(bn, n), _fit(bk, k))
                            configs.update(MatmulConfig(*tiles, occupancy, warps, group_m, cga) for cga in clusters)
    return sorted(configs)


# The public calls' plans (the per-call fast path), by `_plan_key`; dropped when a tuned
# decision replaces the heuristic's.
# Each plan with the copies its operands take (`_copying`: None for one read in place).
plans: _op.KeptLaunches[tuple[_op.Plan, _Padded | None, _Padded | None]] = _op.KeptLaunches("matmul")
chooser = _choice.Chooser("matmul", MatmulConfig, plans)


# Operands smaller than this many elements are read as they are: a copy would cost more than
# the slower loads it saves.
ALIGN_MIN_ELEMENTS = 64 * 64


class _Padded(NamedTuple):
    """How `_operand` copies an operand it cannot read in place: row-major (of the matrices
    as they are, or of their transposes where `column_major`), each row padded by `pad`
    elements. A function of the operand's shape and strides, so a kept plan keeps it."""

    column_major: bool
    pad: int

    def copy(self, t: torch.Tensor) -> torch.Tensor:
        rm = t.transpose(-1, -2) if self.column_major else t  # the same data, row-major
        width = rm.shape[-1]
        # The padding is left unwritten: the kernels read the view's `width` columns only (as
        # they must for an unpadded row, whose next elements are the next row's). One copy kernel
        # where F.pad launched a fill and a copy.
        padded = rm.new_empty((*rm.shape[:-1], width + self.pad))[..., :width]
        padded.copy_(rm)
        return padded.transpose(-1, -2) if self.column_major else padded


def _copying(t: torch.Tensor) -> _Padded | None:
    """None where `t` is read in place: each of its matrices row- or column-major with
    16-byte aligned strides and start (read through TMA), or too small for a copy to pay;
    else the copy `_operand` makes, its leading dimension padded to 16 bytes. Tile loads
    through TMA need those alignments: with K = 1023 2-byte elements a row-major `a` was
    read with plain loads and half the pipeline depth (docs/benchmarks.md, "matmul and bmm")."""
    rows, cols = t.shape[-2], t.shape[-1]
    if rows <= 1 or cols <= 1:
        return None  # a vector: any stride is the unit one
    unit = -1 if t.stride(-1) == 1 else -2 if t.stride(-2) == 1 else 0
    size = t.element_size()
    aligned = unit != 0 and t.storage_offset() * size % 16 == 0 and all(
        stride * size % 16 == 0 for d, stride in enumerate(t.stride()) if d != t.dim() + unit and t.shape[d] > 1
    )
    if aligned:
        return None
    if t.numel() < ALIGN_MIN_ELEMENTS:
        # Small: read as it is where the kernel can read it at all, else a plain row-major copy.
        return None if unit != 0 else _Padded(False, 0)
    column_major = unit == -2
    width = rows if column_major else cols
    return _Padded(column_major, -width % (16 // size))


def _read(t: torch.Tensor, padded: _Padded | None) -> torch.Tensor:
    """What the kernel reads of `t`: `t` itself where `padded` is None, else its copy, as a
    view of `t`'s shape (differentiable)."""
    return t if padded is None else padded.copy(t)


def _operand(t: torch.Tensor) -> torch.Tensor:
    """`t` where it is read in place, else its copy (`_copying`)."""
    return _read(t, _copying(t))


def _tf32(dtype: torch.dtype) -> bool:
    import torch

    return dtype == torch.float32 and bool(torch.backends.cuda.matmul.allow_tf32)


def _launch(c3: torch.Tensor, a3: torch.Tensor, b3: torch.Tensor, config: MatmulConfig, index: int) -> _op.Plan:
    what = ("matmul", a3.dtype, tuple(a3.shape), tuple(b3.shape), "config", config)
    # The persistent kernel's CTAs (the library keeps them within the tiles, in whole clusters).
    ctas = _device.sm_count(index) * max(config.occupancy, 1)
    return _op.launch("matmul", EXPORT, {"c": c3, "a": a3, "b": b3},
                      {"tf32": int(_tf32(a3.dtype)), "ctas": ctas, **_op.named(MatmulConfig, config)}, index, what)


def _plan_key(a: torch.Tensor, b: torch.Tensor) -> tuple[Any, ...]:
    """What makes two public calls the same launch, given 16-byte aligned data pointers:
    shapes, layouts, dtypes, devices, and for float32 whether torch allows TF32."""
    import torch

    tf32 = a.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    return (a.shape, a.stride(), b.shape, b.stride(), a.dtype, b.dtype, a.get_device(), b.get_device(), tf32)


def _aligned(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether both data pointers are 16-byte aligned: a kept plan serves only those (another
    alignment is another launch, and another `_operand` decision)."""
    return (a.data_ptr() | b.data_ptr()) % 16 == 0


def _planned(a: torch.Tensor, b: torch.Tensor, config: Any, autotune: bool) -> torch.Tensor | None:
    """The per-call fast path: a product of plain tensors laid out as one seen before on
    this thread (read in place, or copied as that one was), no autograd, the heuristic's
    config, outside tracing; None where the full path must run."""
    if config is not None or autotune or _torch_ops.is_compiling():
        return None
    try:
        key = _plan_key(a, b)
    except (AttributeError, TypeError):
        return None  # not tensors: the checks say what is wrong
    kept = plans.reusable(key, a, b)
    if kept is None or not _aligned(a, b):
        return None
    plan, copy_a, copy_b = kept
    c: torch.Tensor = a.new_empty((*a.shape[:-1], b.shape[-1]))
    # Both copies held until the launch is enqueued (a freed one could become the other), then
    # until this returns: torch's allocator orders their reuse after the launch on this stream.
    a, b = _read(a, copy_a), _read(b, copy_b)
    plan.run(c.data_ptr(), a.data_ptr(), b.data_ptr())
    return c


def _product(
    a3: torch.Tensor, b3: torch.Tensor, config: Any, autotune: bool, persistent: bool | None = None,
    keep: tuple[Any, _Padded | None, _Padded | None] | None = None,
) -> torch.Tensor:
    """c = a3 · b3 for 3-D operands (each matrix row- or column-major), as a new contiguous
    tensor. `persistent` True or False overrides the chosen config's kernel (TileGym's
    static_persistent); None keeps it. `keep`: a public call's plan key (`_public_key`: None
    for an explicit config or autotuning) and the copies that made a3 and b3 of its operands,
    under which the launch is kept for the fast path."""
    import torch

    batch, m, k = a3.shape
    n = b3.shape[-1]
    c3 = torch.empty((batch, m, n), dtype=a3.dtype, device=a3.device)
    if c3.numel() == 0:
        return c3
    if k == 0:
        return c3.zero_()
    index = _op.device_index(a3)
    arch = _device.arch(index)
    if config is not None:
        chosen = _choice.check_config(config, MatmulConfig)
    else:

        def tuner() -> Any:
            scratch = torch.empty_like(c3)  # c stays untouched until the winner runs
            return lambda cfg: _launch(scratch, a3, b3, cfg, index)

        layout = ("r" if a3.stride(-1) == 1 else "c") + ("r" if b3.stride(-1) == 1 else "c")
        chosen = chooser.choose(
            (index, a3.dtype, _tf32(a3.dtype), batch, m, n, k, layout),
            lambda: f"matmul|{_device.name(index)}|{a3.dtype}|tf32={_tf32(a3.dtype)}|{layout}"
            f"|m~{_op.next_pow2(m)}|n~{_op.next_pow2(n)}|k~{_op.next_pow2(k)}|b~{min(_op.next_pow2(batch), 1024)}",
            lambda: matmul_config(m, n, k, a3.dtype, arch, index, batch),
            lambda: matmul_candidates(m, n, k, a3.dtype, arch, index, batch),
            tuner,
            autotune,
        )
    if persistent is not None and (chosen.group_m > 0) != persistent:
        chosen = chosen._replace(group_m=GROUP_M if persistent else 0)
    plan = _launch(c3, a3, b3, chosen, index)
    if keep is not None:
        plans.keep(keep[0], (plan, keep[1], keep[2]))
    return c3


def _require_tensors(op: str, a: Any, b: Any) -> None:
    import torch

    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op} takes torch.Tensor arguments; {name} is {type(t).__name__}")


def _check(op: str, a: Any, b: Any, ndim: int) -> None:
    _require_tensors(op, a, b)
    for t in (a, b):
        _device.check_cuda_tensor(t, op)
    _check_operands(op, a, b, ndim)


def _check_operands(op: str, a: torch.Tensor, b: torch.Tensor, ndim: int) -> None:
    """The checks that need no data (the fake implementations make them too): one device,
    a supported dtype for both, `ndim`-D operands that chain."""
    import torch

    if a.device != b.device:
        raise ValueError(f"{op}: a is on {a.device} and b on {b.device}; move them to one device")
    if a.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"{op} supports {', '.join(SUPPORTED)}; a is {a.dtype}. Cast it, e.g. a.half()")
    if b.dtype != a.dtype:
        raise TypeError(f"{op}: a is {a.dtype} and b {b.dtype}; cast one to the other's dtype")
    if a.dim() != ndim or b.dim() != ndim:
        other = "bmm for batches of matrices" if op == "matmul" else "matmul for 2-D matrices"
        raise ValueError(f"{op} takes {ndim}-D tensors; got {a.dim()}-D and {b.dim()}-D (use {other})")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"{op}: a {tuple(a.shape)} and b {tuple(b.shape)} do not chain (a's last dim must equal b's {ndim - 2})")
    if ndim == 3 and a.shape[0] != b.shape[0]:
        raise ValueError(f"bmm: batch sizes differ, {a.shape[0]} and {b.shape[0]}")


@functools.cache
def _autograd_function() -> Any:
    import torch

    class Matmul(torch.autograd.Function):
        """c = a · b on 3-D operands; dA = dC · Bᵀ and dB = Aᵀ · dC by the same kernel,
        the transposes passed as column-major views (no copies)."""

        @staticmethod
        def forward(
            ctx: Any, a3: torch.Tensor, b3: torch.Tensor, config: Any, autotune: bool, persistent: bool | None
        ) -> torch.Tensor:
            ctx.save_for_backward(a3, b3)
            ctx.persistent = persistent
            return _product(a3, b3, config, autotune, persistent)

        @staticmethod
        def backward(ctx: Any, dc: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None, None]:
            a3, b3 = ctx.saved_tensors
            dc = _operand(dc)
            bt, at = _operand(b3.transpose(-1, -2)), _operand(a3.transpose(-1, -2))
            da = _product(dc, bt, None, False, ctx.persistent) if ctx.needs_input_grad[0] else None
            db = _product(at, dc, None, False, ctx.persistent) if ctx.needs_input_grad[1] else None
            return da, db, None, None, None

    return Matmul


def _run(
    a3: torch.Tensor, b3: torch.Tensor, config: Any, autotune: bool, persistent: bool | None = None, keep: Any = None
) -> torch.Tensor:
    """The product of 3-D operands; `keep` (a public call's plan key) where both are plain
    tensors: the launch is kept for that call's fast path, with the copies its operands took,
    if their data pointers are 16-byte aligned (so the copies depend on shapes and strides alone)."""
    import torch

    copies = _copying(a3), _copying(b3)
    a, b = _read(a3, copies[0]), _read(b3, copies[1])
    if (a.requires_grad or b.requires_grad) and torch.is_grad_enabled():
        with_grad: torch.Tensor = _autograd_function().apply(a, b, config, autotune, persistent)
        return with_grad
    kept = (keep, *copies) if keep is not None and _aligned(a3, b3) else None
    return _product(a, b, config, autotune, persistent, kept)


def _public_key(a: torch.Tensor, b: torch.Tensor, config: Any, autotune: bool) -> Any:
    """The plan key under which a public call's launch is kept: None for an explicit config,
    autotuning, or a tensor subclass (those take the full path every time)."""
    if config is not None or autotune or not (_op.plain(a) and _op.plain(b)):
        return None
    return _plan_key(a, b)


def matmul(
    a: torch.Tensor, b: torch.Tensor, *, config: MatmulConfig | tuple[int, ...] | None = None, autotune: bool = False
) -> torch.Tensor:
    """a · b for 2-D a `[M, K]` and b `[K, N]`: float16, bfloat16 or float32 (TF32 tensor
    cores where torch.backends.cuda.matmul.allow_tf32 is set, else full float32), float32
    accumulation, a new contiguous `[M, N]` tensor of their dtype on their device.

    Row-major and column-major operands (transposed views such as `b.t()`) are read in
    place; other strides are copied once. Any M, N, K >= 0 (K = 0 gives zeros). Runs on
    the current stream without blocking the host. Gradients flow to a and b, computed by
    the same kernels. `config=MatmulConfig(...)` or `autotune=True` as for softmax.
    Traced (torch.compile, torch.export, fake tensors): torch.ops.tilegym_cutile_rs.matmul.
    """
    planned = _planned(a, b, config, autotune)
    if planned is not None:
        return planned
    traced = _torch_ops.traced_or_fake(a, b)
    if traced is not None:
        result: torch.Tensor = traced.matmul(a, b, list(config or ()))
        return result
    _check("matmul", a, b, 2)
    return _run(a.unsqueeze(0), b.unsqueeze(0), config, autotune, keep=_public_key(a, b, config, autotune)).squeeze(0)


def bmm(
    a: torch.Tensor, b: torch.Tensor, *, config: MatmulConfig | tuple[int, ...] | None = None, autotune: bool = False
) -> torch.Tensor:
    """a[i] · b[i] for 3-D a `[B, M, K]` and b `[B, K, N]`; otherwise as `matmul`
    (traced: torch.ops.tilegym_cutile_rs.bmm)."""
    planned = _planned(a, b, config, autotune)
    if planned is not None:
        return planned
    traced = _torch_ops.traced_or_fake(a, b)
    if traced is not None:
        result: torch.Tensor = traced.bmm(a, b, list(config or ()))
        return result
    _check("bmm", a, b, 3)
    return _run(a, b, config, autotune, keep=_public_key(a, b, config, autotune))


# TileGym's keywords besides the transposes and static_persistent (which picks the persistent
# kernel, True, or one CTA per tile, False), and what they mean for our kernels.
_TILEGYM_KWARGS = {
    # tileiras decides how tiles are loaded (TMA where it pays); there is no separate TMA kernel.
    "use_tma",
}


def _tilegym_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    trans_a: bool | None = None,
    trans_b: bool | None = None,
    static_persistent: bool | None = True,
    **kwargs: Any,
) -> torch.Tensor:
    """TileGym's `matmul(a, b, trans_a=None, trans_b=None, static_persistent=True, use_tma=None, **kw)`:
    `trans_a` takes a as `[K, M]` (computes aᵀ · b), `trans_b` takes b as `[N, K]`; both are
    read in place as column-major views. `static_persistent` True takes the persistent kernel
    (grouped tile order), False one CTA per tile, None the heuristic's choice; `use_tma`
    changes nothing."""
    _op.ignore_kwargs("matmul", kwargs, _TILEGYM_KWARGS)
    _require_tensors("matmul", a, b)
    a2, b2 = (a.t() if trans_a else a), (b.t() if trans_b else b)
    traced = _torch_ops.traced_or_fake(a2, b2)
    if traced is not None:  # traced: the kernel choice is the heuristic's
        result: torch.Tensor = traced.matmul(a2, b2, [])
        return result
    _check("matmul", a2, b2, 2)
    return _run(a2.unsqueeze(0), b2.unsqueeze(0), None, False, static_persistent).squeeze(0)


def _tilegym_bmm(
    a: torch.Tensor,
    b: torch.Tensor,
    transpose_a: bool | None = None,
    transpose_b: bool | None = None,
    static_persistent: bool | None = True,
    **kwargs: Any,
) -> torch.Tensor:
    """TileGym's `bmm(a, b, transpose_a=None, transpose_b=None, static_persistent=True, **kw)`,
    the transposes read in place and static_persistent as for `_tilegym_matmul`."""
    _op.ignore_kwargs("bmm", kwargs, _TILEGYM_KWARGS)
    _require_tensors("bmm", a, b)
    a3, b3 = (a.transpose(-1, -2) if transpose_a else a), (b.transpose(-1, -2) if transpose_b else b)
    traced = _torch_ops.traced_or_fake(a3, b3)
    if traced is not None:
        result: torch.Tensor = traced.bmm(a3, b3, [])
        return result
    _check("bmm", a3, b3, 3)
    return _run(a3, b3, None, False, static_persistent)


def _warmup(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, autotune: bool) -> MatmulConfig:
    """Compile (and optionally autotune) the product of square `shape` matrices (`[M, K]` · `[K, N]`
    with N = M for a 2-D shape; a batch for 3-D), forward and the backward's transposed layouts."""
    import torch

    a = torch.randn(shape, device=device).to(dtype).requires_grad_(True)
    b = torch.randn(*shape[:-2], shape[-1], shape[-2], device=device).to(dtype).requires_grad_(True)
    c = (matmul if a.dim() == 2 else bmm)(a, b, autotune=autotune)
    torch.autograd.backward([c], [torch.ones_like(c)])
    m, k = shape[-2], shape[-1]
    index = _op.device_index(a)
    return matmul_config(m, m, k, dtype, _device.arch(index), index, shape[0] if a.dim() == 3 else 1)


def _smoke(device: torch.device) -> str:
    import torch

    a = torch.randn(100, 70, device=device, dtype=torch.bfloat16)
    b = torch.randn(90, 70, device=device, dtype=torch.bfloat16).t()  # column-major, in place
    c, ref = matmul(a, b), a.float() @ b.float()
    err = (c.float() - ref).abs().max().item()
    bound = 2.0**-7 * ref.abs().max().item()  # rounding the result to bfloat16, with a 2x margin
    assert c.shape == (100, 90) and err <= bound, f"max abs error {err:.2e} vs float32 torch (bound {bound:.2e})"
    return f"matmul max abs error {err:.2e} vs float32 torch (bound {bound:.2e})"


def _op_matmul(a: torch.Tensor, b: torch.Tensor, config: list[int]) -> torch.Tensor:
    import torch

    with torch.no_grad():  # the operator's autograd formula is registered on it
        return matmul(a, b, config=tuple(config) or None)


def _op_bmm(a: torch.Tensor, b: torch.Tensor, config: list[int]) -> torch.Tensor:
    import torch

    with torch.no_grad():
        return bmm(a, b, config=tuple(config) or None)


def _fake_product(op: str, ndim: int) -> Callable[[torch.Tensor, torch.Tensor, list[int]], torch.Tensor]:
    def fake(a: torch.Tensor, b: torch.Tensor, config: list[int]) -> torch.Tensor:
        import torch

        _check_operands(op, a, b, ndim)
        return torch.empty((*a.shape[:-1], b.shape[-1]), dtype=a.dtype, device=a.device)

    return fake


def _setup_product(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[0], inputs[1])


def _backward_product(ctx: Any, dc: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
    """dA = dC · Bᵀ and dB = Aᵀ · dC through the same operator, the transposes as views."""
    a, b = ctx.saved_tensors
    product = _torch_ops.torch_ops().matmul if a.dim() == 2 else _torch_ops.torch_ops().bmm
    da = product(dc, b.transpose(-1, -2), []) if ctx.needs_input_grad[0] else None
    db = product(a.transpose(-1, -2), dc, []) if ctx.needs_input_grad[1] else None
    return da, db, None


# TileGym's: matmul bfloat16 atol = rtol = 1e-2, bmm float16 rtol 1e-3 (atol 1e-3 here: K up to 1024
# of products accumulate in float32 and round once to float16); float32 1e-4.
TOLERANCES = {
    "bfloat16": _registry.Tolerance(rtol=1e-2, atol=1e-2),
    "float16": _registry.Tolerance(rtol=1e-3, atol=1e-3),
    "float32": _registry.Tolerance(rtol=1e-4, atol=1e-4),
}
TORCH_OPS = (
    _registry.TorchOp(
        "matmul", "(Tensor a, Tensor b, int[] config) -> Tensor", _op_matmul, _fake_product("matmul", 2),
        _backward_product, _setup_product,
        # b column-major (a transposed view), read in place
        example=lambda d: (_torch_ops.sample(d, 128, 64, grad=True), _torch_ops.sample(d, 96, 64).t().requires_grad_(), []),
        reference=lambda a, b, config: a @ b, tolerances=TOLERANCES,
    ),
    _registry.TorchOp(
        "bmm", "(Tensor a, Tensor b, int[] config) -> Tensor", _op_bmm, _fake_product("bmm", 3), _backward_product, _setup_product,
        example=lambda d: (_torch_ops.sample(d, 2, 64, 32, grad=True), _torch_ops.sample(d, 2, 32, 48, grad=True), []),
        reference=lambda a, b, config: a @ b, tolerances=TOLERANCES,
    ),
)


# Shapes whose kernels the wheel ships compiled (_shipped). TileGym 1.5.1's tests/ops/test_matmul.py:
# (m, n, k, dtype, transpose_a, transpose_b) through its adapter, each persistent and not...
SHIPPED_MATMUL = [
    (1024, 1024, 1024, "bfloat16", False, False), (1024, 1024, 1023, "bfloat16", False, False),
    (8192, 8192, 8192, "bfloat16", False, False), (8, 8, 8, "bfloat16", False, False),
    (3072, 6144, 2720, "bfloat16", False, False),
    *((1 << i, 1 << i, 1 << i, dtype, ta, tb) for i in (6, 8, 11, 12, 13, 14, 15) for dtype in ("float16", "float32")
      for ta in (False, True) for tb in (False, True)),
    *((m, n, k, "float16", False, False) for m, n, k in ((4096, 8192, 2728), (4096, 4096, 5440), (12288, 2048, 2560),
                                                         (12288, 4096, 2560), (4096, 5120, 2720), (3072, 6144, 2720))),
]
# ...tests/ops/test_bmm.py: (batch, m, n, k, transpose_a, transpose_b), float16...
SHIPPED_BMM = [
    *((4, m, n, k, ta, tb) for m in (128, 1024) for n in (256, 512) for k in (511, 512, 1023, 1024)
      for ta in (False, True) for tb in (False, True)),
    *((q, 1 << i, 1 << i, 1 << i, ta, tb) for q in (2, 8) for i in (11, 12, 13) for ta in (False, True) for tb in (False, True)),
]
# ...and square training products (forward and the backward's transposed layouts) of LLM sizes.
SHIPPED_TRAINING = [((n, n), dtype) for n in (1024, 2048, 4096, 8192) for dtype in ("bfloat16", "float16")]


def _shipped(device: torch.device) -> None:
    import torch

    for m, n, k, dtype, ta, tb in SHIPPED_MATMUL:
        t = getattr(torch, dtype)
        a = torch.empty((k, m) if ta else (m, k), dtype=t, device=device)
        b = torch.empty((n, k) if tb else (k, n), dtype=t, device=device)
        for persistent in (True, False):
            _tilegym_matmul(a, b, trans_a=ta, trans_b=tb, static_persistent=persistent)
    for batch, m, n, k, ta, tb in SHIPPED_BMM:
        a = torch.empty((batch, k, m) if ta else (batch, m, k), dtype=torch.float16, device=device)
        b = torch.empty((batch, n, k) if tb else (batch, k, n), dtype=torch.float16, device=device)
        for persistent in (True, False):
            _tilegym_bmm(a, b, transpose_a=ta, transpose_b=tb, static_persistent=persistent)
    for shape, dtype in SHIPPED_TRAINING:
        _warmup(shape, getattr(torch, dtype), device, False)
    # The smoke test's product (python -m tilegym_cutile_rs.check).
    matmul(torch.empty(100, 70, dtype=torch.bfloat16, device=device), torch.empty(90, 70, dtype=torch.bfloat16, device=device).t())


# benchmarks/tune.py matmul: benchmarks/matmul_bench.py's rows, (dtype, batch, M, N, K) in both
# 2-byte dtypes (float32 keeps the rule).
TUNING_PRODUCTS = [
    (1, 8192, 8192, 8192), (1, 4096, 4096, 4096), (1, 3072, 6144, 2720), (1, 1024, 1024, 1024), (1, 1024, 1024, 1023),
    *((1, m, n, k) for m in (4096, 128, 16, 1) for k, n in ((4096, 14336), (14336, 4096), (4096, 128256))),
    (64, 4096, 4096, 128), (4, 1024, 512, 1024), (4, 1024, 256, 1024), (4, 128, 256, 511),
]
# The sweep's tile shapes (block_m, block_n, block_k): the rule's, wider ones (two warpgroups'
# 128 x 256 and its transpose, 256 x 256 as a CTA pair splits it), and narrower ones for skinny products.
TUNING_TILES = [(128, 128, 64), (128, 256, 64), (256, 128, 64), (256, 256, 64), (128, 128, 32), (128, 64, 64),
                (64, 128, 64), (64, 64, 64)]


def _tuning_candidates(problem: _tuned.Problem) -> list[MatmulConfig]:
    """Each tuning tile shape (cut to the problem) one CTA per tile, and persistent alone or in
    clusters of 2 CTAs (4 for 256 x 256), occupancy and warps left to tileiras; on large
    products also groups of 4 and 16 row blocks, 8 worker warps, 1 or 2 CTAs per SM."""
    dtype_name, _, m, n, k = problem
    configs = {matmul_rule(m, n, k, _tuned.torch_dtype(dtype_name))}
    for bm, bn, bk in TUNING_TILES:
        tiles = (_fit(bm, m), _fit(bn, n), _fit(bk, k))
        configs.add(MatmulConfig(*tiles))
        for cga in (0, 2, 4) if (bm, bn) == (256, 256) else (0, 2):
            configs.add(MatmulConfig(*tiles, group_m=GROUP_M, cga=cga))
    if m >= 1024 and n >= 1024:  # enough tiles to fill the GPU: the persistent kernel's other knobs
        for bm, bn, bk in TUNING_TILES[:3]:
            configs.update(MatmulConfig(bm, bn, bk, group_m=group) for group in (4, 16))
            if (bm, bn) != (128, 128):
                configs.add(MatmulConfig(bm, bn, bk, warps=8, group_m=GROUP_M))
        configs.update(MatmulConfig(128, 128, 64, occupancy, group_m=GROUP_M) for occupancy in (1, 2))
    return sorted(configs)


def _tuning_bench(problem: _tuned.Problem, device: Any) -> Any:
    """Products of random operands, each config checked against cuBLAS's (float32 accumulation
    both; the bound allows the two summation orders and the result's rounding)."""
    import torch

    dtype_name, batch, m, n, k = problem
    dtype = _tuned.torch_dtype(dtype_name)
    a, b = torch.randn(batch, m, k, device=device, dtype=dtype), torch.randn(batch, k, n, device=device, dtype=dtype)
    c, ref = torch.empty(batch, m, n, device=device, dtype=dtype), torch.bmm(a, b).float()
    index = _op.device_index(a)
    return _tuned.checked_runs(
        lambda config: _launch(c, a, b, MatmulConfig(*config), index),
        lambda: torch.testing.assert_close(c.float(), ref, rtol=2e-2, atol=2e-2 * k**0.5),
        (c,),
    )


TUNINGS = [
    _tuned.Tuning(
        name="matmul",
        problems=[(dt, *p) for dt in ("bfloat16", "float16") for p in TUNING_PRODUCTS],
        candidates=_tuning_candidates,
        rule=lambda p: matmul_rule(p[2], p[3], p[4], _tuned.torch_dtype(p[0])),
        bench=_tuning_bench,
        nbytes=lambda p: p[1] * (p[2] * p[4] + p[4] * p[3] + p[2] * p[3]) * _tuned.torch_dtype(p[0]).itemsize,
        adapt=_adapt,
        flops=lambda p: 2 * p[1] * p[2] * p[3] * p[4],
    )
]

OP = _registry.OpSpec(
    "matmul", tilegym={"matmul": _tilegym_matmul, "bmm": _tilegym_bmm}, warmup=_warmup, smoke=_smoke, shipped=_shipped,
    torch_ops=TORCH_OPS, tunings=TUNINGS, warms_up=lambda shape, dtype: len(shape) in (2, 3),
)
