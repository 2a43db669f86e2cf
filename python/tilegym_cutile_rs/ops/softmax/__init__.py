"""softmax(x, dim=-1): cuTile Rust kernel, f32/f16/bf16, any shape."""

from __future__ import annotations

import functools
import threading
from time import monotonic as _monotonic
from typing import Any

from .. import _abi, _autotune, _device, _library, _progress, _toolchain

__all__ = ["softmax", "softmax_config", "softmax_candidates"]

SUPPORTED = ("float32", "float16", "bfloat16")
# The shape heuristic, fitted to benchmarks/softmax_sweep.py on the H200
# (kernel time, docs/benchmarks.md): per element size, rows up to `block_n`
# elements take one register tile of `elements` per CTA (block_m = elements //
# block_n rows) with `occupancy` CTAs per SM and `warps` worker warps per CTA
# (0: tileiras' choice); longer rows loop over LOOP tiles (two reads: online
# max/sum, then normalise).
# Eight warps (not tileiras' four) pay for wide tiles; with them one float32 tile
# holds a 32768-element row. Fitted to sweeps of the direct-store kernels
# (kernel.rs). The LOOP entries are fitted to sweeps of the software-pipelined
# loop kernels (each tile's load issued before the tile before is reduced or
# stored; docs/benchmarks.md): float32 loops over 8192-wide tiles now, as its
# 16384-wide ones spill with two tiles in flight.
SINGLE_TILE = {  # element size -> [(largest block_n, elements per CTA tile, occupancy, warps)]
    4: [
        (256, 1024, 1, 0),
        (1024, 4096, 0, 0),
        (2048, 8192, 1, 0),
        (4096, 4096, 4, 0),
        (8192, 8192, 4, 8),
        (16384, 16384, 2, 0),
        (32768, 32768, 1, 8),
    ],
    2: [
        (256, 1024, 0, 0),
        (512, 1024, 4, 0),
        (1024, 2048, 0, 0),
        (2048, 8192, 4, 0),
        (4096, 8192, 4, 0),
        (8192, 16384, 4, 8),
    ],
}
# element size -> worker warps when the rows are too few for the entry's row
# blocks (block_m cut to keep MIN_CTAS CTAs): a grid of one-row 2-byte tiles
# keeps too few loads in flight with four warps (256x1009 bf16: 278 -> 369 GB/s).
FEW_ROWS_WARPS = {2: 8}
LOOP = {4: (8192, 2, 8), 2: (8192, 4, 0)}  # element size -> (block_n, occupancy, warps)
# 2-byte rows whose N is not a multiple of 8 take the gather kernels
# (launch.rs, Kernel::for_view), which want one row per CTA from 2048 wide
# (4096x2047 float16: 2305 GB/s against 1496 with SINGLE_TILE's entry), and in
# the loop narrower tiles when rows are many (pipelined loop, 4096x50257 bfloat16:
# 4096-wide 2159 GB/s against 1948 for 2048-wide and 1926 for 8192-wide), wide ones
# with 8 warps when they are few, so each CTA keeps more loads in flight
# (256x65535 bfloat16: 1728 against 1447 for 4096-wide). Fitted to H200 sweeps of
# 8192x255, 8192x1009, 4096x2047, 2048x4095, 1024x8191, 4096x50257, 2048x16385,
# 1024x32767, 512x50257 and 256x65535 (docs/benchmarks.md); occupancy stays tileiras' up
# to 1024 wide, where 256-row grids (FEW_ROWS_WARPS) were measured so. A row
# stride that is not a multiple of 8 with N that is takes the gather kernels too,
# with the tables above.
GATHER_SINGLE_TILE = {
    2: [
        (256, 2048, 0, 0),
        (1024, 4096, 0, 0),
        (2048, 2048, 0, 0),
        (4096, 4096, 1, 8),
        (8192, 8192, 1, 8),
    ],
}
# element size -> (block_n, occupancy, warps) below GATHER_LOOP_ROWS rows, and from it
GATHER_LOOP = {2: ((8192, 2, 8), (4096, 4, 8))}
GATHER_LOOP_ROWS = 2048
MAX_N = (1 << 31) - 1  # the kernels' index type (int32) bounds a row
# Rows of exactly a power of two take the exact-width kernels (launch.rs,
# Kernel::for_view: no column bounds checks, so each thread's loads go out back
# to back), which let 2-byte rows keep one row per CTA with 8 warps from 4096
# wide and one tile up to 16384 (H200 sweep of the exact kernels: 8192x4096
# bfloat16 3870 GB/s against 3693 with SINGLE_TILE's entry, 4096x16384 4009
# against 3307 for the loop; docs/benchmarks.md). float32's single tiles measured
# within noise of SINGLE_TILE, which they keep.
EXACT_SINGLE_TILE = {
    4: SINGLE_TILE[4],
    # SINGLE_TILE's rows up to 2048 wide, refitted rows from 4096.
    2: [row for row in SINGLE_TILE[2] if row[0] <= 2048] + [(4096, 4096, 2, 8), (8192, 8192, 2, 0), (16384, 16384, 0, 8)],
}
# element size -> [(largest n, block_n, occupancy, warps)] for exact rows over one
# tile. A loop of only two exact tiles has a static trip count that tileiras
# unrolls, keeping the whole row in registers: 32768-wide 2-byte rows loop over
# four 8192-wide tiles instead (2048x32768 bfloat16: 3138 GB/s against 2889).
EXACT_LOOP = {
    4: [(MAX_N, 16384, 1, 8)],
    2: [(32768, 8192, 4, 0), (MAX_N, 16384, 2, 8)],
}
# Exact rows' row blocks shrink for MIN_CTAS only down to this many elements per
# CTA: 256x256 bfloat16 ran at 144 GB/s in 4-row blocks and 124 in 1-row ones.
EXACT_MIN_TILE_ELEMENTS = 1024
MAX_BLOCK_M = 64
# Row blocks shrink until there are this many CTAs (when there are rows enough):
# about two per SM of an H200 (132 SMs); few-row problems were fastest so.
MIN_CTAS = 256
# The widest single tile the autotuner tries (register pressure beyond it).
MAX_TILE_ELEMENTS = 32768
# Worker-warp counts tileiras before 13.5 compiles (0: its own choice); 13.5 takes
# every power of two up to 32.
WARPS_BEFORE_13_5 = (0, 4, 8)
# Worker warps per CTA the autotuner tries: tileiras' choice, or 8.
WARPS = (0, 8)

Config = tuple[int, int, int, int]  # (block_m, block_n, occupancy, warps)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _gathered(n: int, element_size: int) -> bool:
    # Rows of n the gather kernels take (launch.rs, Kernel::for_view, which also
    # sends odd row strides there); their configs are tuned and cached apart.
    return element_size in GATHER_SINGLE_TILE and n % 8 != 0


def _exact(n: int, element_size: int) -> bool:
    # Rows the heuristic sends to the exact-width kernels: a power of two (one
    # whole tile, or whole loop tiles), not a gathered row.
    return n == _next_pow2(n) and not _gathered(n, element_size)


def softmax_config(m: int, n: int, element_size: int) -> Config:
    """(block_m, block_n, occupancy, warps) for an [m, n] softmax: the shape heuristic.

    block_n >= n takes the single-tile kernel, else the row loop; occupancy or
    warps 0 would leave that choice to tileiras.
    """
    block_n = _next_pow2(n)
    gather, exact = _gathered(n, element_size), _exact(n, element_size)
    single_tile = (GATHER_SINGLE_TILE if gather else EXACT_SINGLE_TILE if exact else SINGLE_TILE)[element_size]
    for largest, elements, occupancy, warps in single_tile:
        if block_n <= largest:
            fitted = max(1, min(elements // block_n, MAX_BLOCK_M))
            enough_ctas = 1 << max(0, (m // MIN_CTAS).bit_length() - 1)  # largest power of two <= m / MIN_CTAS
            if exact:
                block_m = min(fitted, max(enough_ctas, EXACT_MIN_TILE_ELEMENTS // block_n))
            else:
                block_m = min(fitted, enough_ctas)
                if block_m < fitted:
                    warps = FEW_ROWS_WARPS.get(element_size, warps)
            return block_m, block_n, occupancy, warps
    if gather:
        loop_n, occupancy, warps = GATHER_LOOP[element_size][m >= GATHER_LOOP_ROWS]
    elif exact:
        loop_n, occupancy, warps = next(row[1:] for row in EXACT_LOOP[element_size] if n <= row[0])
    else:
        loop_n, occupancy, warps = LOOP[element_size]
    return 1, loop_n, occupancy, warps


def softmax_candidates(m: int, n: int, element_size: int) -> list[Config]:
    """The autotuner's search space around the heuristic: row blocks, tile widths, occupancy, warps."""
    base = softmax_config(m, n, element_size)
    shapes: set[tuple[int, int]] = set()
    block_n = _next_pow2(n)
    if block_n <= MAX_TILE_ELEMENTS:  # one tile per row block
        for block_m in (1, 2, 4, 8, 16, 32, 64):
            if block_m <= _next_pow2(m) and block_m * block_n <= MAX_TILE_ELEMENTS:
                shapes.add((block_m, block_n))
    if n > 1024:  # row loop over narrower tiles
        for width in (2048, 4096, 8192, 16384):
            if width < n:
                shapes.add((1, width))
    configs = {(bm, bn, occ, warps) for bm, bn in shapes for occ in (0, 1, 2, 4) for warps in WARPS}
    configs.add(base)
    return sorted(configs)


def _shape_class(index: int, dtype: Any, m: int, n: int) -> str:
    # Row counts fall in octaves (4 rows and up); a decision for one row length
    # class serves every n with the same next power of two and the same kernel
    # family: gathered rows, power-of-two rows (the exact kernels), the rest (a
    # config tuned for whole-vector rows can be 0.6x of the best on gathered
    # ones: docs/benchmarks.md, the gather sweep).
    m_class = min(_next_pow2(m), 1 << 20)
    family = "|gather" if _gathered(n, dtype.itemsize) else "|exact" if _exact(n, dtype.itemsize) else ""
    return f"softmax|{_device.name(index)}|{dtype}|n<={_next_pow2(n)}|m~{m_class}{family}"


def _launch(x2: Any, y2: Any, config: Config, index: int) -> None:
    lib = _library.library()
    stream = _device.current_stream(index)
    slot = _progress.begin(("softmax", x2.dtype, tuple(x2.shape), "config", config))
    try:
        status = lib.cutile_softmax(_abi.tensor_desc(x2), _abi.tensor_desc(y2), *config, index, stream)
    finally:
        _progress.end(slot)
    if status != 0:
        _abi.check_status(status, "softmax", hint=_progress.timed_out_message(slot))


# (device, dtype, m, n) -> (config, whether it was tuned), chosen already in this
# process: the per-call fast path.
_chosen: dict[tuple[int, Any, int, int], tuple[Config, bool]] = {}
_CHOSEN_MAX = 4096


def _choose(x2: Any, index: int, autotune: bool) -> Config:
    m, n = x2.shape
    memo = (index, x2.dtype, m, n)
    found = _chosen.get(memo)
    if found is None or (autotune and not found[1]):
        if found is not None:
            _Plan.generation += 1  # a tuned decision replaces the heuristic's: drop plans made with it
        found = _choose_uncached(x2, index, autotune)
        if len(_chosen) >= _CHOSEN_MAX:
            _chosen.clear()
        _chosen[memo] = found
    return found[0]


def _choose_uncached(x2: Any, index: int, autotune: bool) -> tuple[Config, bool]:
    m, n = x2.shape
    size = x2.element_size()
    key = _shape_class(index, x2.dtype, m, n)
    found = _autotune.lookup(key)
    if found is not None and len(found) == 4:  # decisions of other lengths predate this config form: retune
        return found, True  # type: ignore[return-value]
    import torch

    # Tuning synchronizes the device, which a CUDA graph capture forbids.
    if not (autotune or _autotune.enabled_by_env()) or torch.cuda.is_current_stream_capturing():
        return softmax_config(m, n, size), False

    scratch = torch.empty((m, n), dtype=x2.dtype, device=x2.device)  # y stays untouched until the winner runs
    return _autotune.tune(key, softmax_candidates(m, n, size), lambda c: _launch(x2, scratch, c, index)), True


class _Plan:
    """What a repeated call needs, for one (shape, strides, dtype, device, dim) whose
    softmax dim is last and whose [m, n] view needs no copy: the chosen config and
    this thread's two TensorDescs, of which only the data pointers change per call.
    The library checks every descriptor again, so a plan can cost time, never safety."""

    __slots__ = ("x_desc", "y_desc", "what", "made_in", "dense", "launch", "stream", "index", "thread", "torch")
    generation = 0  # bumped whenever a config decision changes

    def __init__(self, x: Any, x2: Any, y2: Any, config: Config, index: int, torch: Any) -> None:
        self.torch = torch  # the fast path runs without an `import torch` statement
        self.x_desc, self.y_desc = _abi.tensor_desc(x2), _abi.tensor_desc(y2)
        self.what = ("softmax", x2.dtype, tuple(x2.shape), "config", config)
        self.made_in = _Plan.generation
        # empty_like is several us cheaper than torch.empty(shape, dtype=, device=), and
        # gives the contiguous output only when x is contiguous.
        self.dense = x.is_contiguous()
        self.launch = functools.partial(_library.library().cutile_softmax, self.x_desc, self.y_desc, *config, index)
        self.stream, self.index = _device.raw_stream_getter(), index
        self.thread = threading.get_ident()


_local = threading.local()
_PLANS_MAX = 1024
_NO_PLANS: dict[tuple, _Plan] = {}  # what a thread without plans looks up; never written


def _plans() -> dict[tuple, _Plan]:
    try:
        return _local.plans
    except AttributeError:
        _local.plans = {}
        return _local.plans


def _run_plan(plan: _Plan, x: Any) -> Any:
    torch = plan.torch
    y = torch.empty_like(x) if plan.dense else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    plan.x_desc.ptr = x.data_ptr()
    plan.y_desc.ptr = y.data_ptr()
    # The watchdog's slot, set inline (the slow path that made this plan started its thread).
    slot = _progress.inflight[plan.thread] = [_monotonic(), plan.what, False, False]
    try:
        status = plan.launch(plan.stream(plan.index))
    finally:
        del _progress.inflight[plan.thread]
    if status != 0:
        _abi.check_status(status, "softmax", hint=_progress.timed_out_message(slot))
    return y


def _forward(x: Any, dim: int, config: Any, autotune: bool, plan_key: tuple | None = None) -> Any:
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
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    _device.prepare(index)
    if config is None:
        config = _choose(x2, index, autotune)
    else:
        config = _check_config(config)
    _launch(x2, y2, config, index)
    if plan_key is not None and dim == ndim - 1 and x.dim() > 0 and x2.data_ptr() == x.data_ptr():
        plans = _plans()
        if len(plans) >= _PLANS_MAX:
            plans.clear()
        plans[plan_key] = _Plan(x, x2, y2, config, index, torch)
    y = y2.view(moved.shape)
    if dim != ndim - 1:
        y = y.movedim(-1, dim).contiguous()
    return y.reshape(x.shape)


_CONFIG_FORM = "(block_m, block_n[, occupancy[, warps]])"


def _check_config(config: Any) -> Config:
    try:
        values = tuple(int(v) for v in config)
    except (TypeError, ValueError):
        raise TypeError(f"config must be {_CONFIG_FORM}, got {config!r}") from None
    if not 2 <= len(values) <= 4:
        raise TypeError(f"config must be {_CONFIG_FORM}, got {config!r}")
    values = (*values, 0, 0)[:4]
    warps = values[3]
    if warps not in WARPS_BEFORE_13_5:
        release = _toolchain.configure().release
        if release < (13, 5):
            # Said here, before a compile: cutile's own error names the hint, not the fix.
            raise ValueError(
                f"config warps = {warps}: tileiras {'.'.join(map(str, release))} "
                "takes 0 (its own choice), 4 or 8 worker warps per CTA; other powers of two up to 32 "
                "need tileiras 13.5 or newer"
            )
    return values  # type: ignore[return-value]


@functools.lru_cache(maxsize=None)
def _autograd_function() -> Any:
    import torch

    class Softmax(torch.autograd.Function):
        """Our kernel forward; backward dx = y * (dy - sum(dy * y)) in float32 by torch."""

        @staticmethod
        def forward(ctx: Any, x: Any, dim: int, config: Any, autotune: bool) -> Any:
            y = _forward(x, dim, config, autotune)
            ctx.save_for_backward(y)
            ctx.dim = dim
            return y

        @staticmethod
        def backward(ctx: Any, dy: Any) -> Any:
            (y,) = ctx.saved_tensors
            y32, dy32 = y.float(), dy.float()
            dx = y32 * (dy32 - (dy32 * y32).sum(dim=ctx.dim, keepdim=True))
            return dx.to(y.dtype), None, None, None

    return Softmax


def softmax(x: Any, dim: int = -1, *, config: Any = None, autotune: bool = False) -> Any:
    """Softmax of `x` along `dim`, computed in float32, returned as a new
    contiguous tensor of x's shape and dtype on x's device.

    The kernel runs on the current torch stream of x's device and does not
    block the host (it can be captured in a CUDA graph). A `dim` other than the
    last is handled by moving it last first (one extra copy in and out).
    Tiles: `config=(block_m, block_n[, occupancy[, warps]])` (powers of two) overrides
    the choice; otherwise a decision autotuned earlier for this device, dtype
    and shape class (kept in the kernel cache directory), else the shape
    heuristic. `autotune=True` (or TILEGYM_CUTILE_RS_AUTOTUNE=1) tunes a shape
    class on its first call. Gradients flow (backward computed by torch).
    """
    plan_key = None
    if config is None and not autotune:
        # The per-call fast path: a plain tensor of a shape seen before on this thread, no autograd.
        try:
            plan_key = (x.shape, x.stride(), x.dtype, x.get_device(), dim)
        except (AttributeError, TypeError):
            pass  # not a tensor: the checks below say what is wrong
        else:
            plan = getattr(_local, "plans", _NO_PLANS).get(plan_key)
            if (
                plan is not None
                and type(x) is plan.torch.Tensor  # a subclass takes the dispatching path
                and plan.made_in == _Plan.generation
                and not (x.requires_grad and plan.torch.is_grad_enabled())
            ):
                return _run_plan(plan, x)
    import torch

    if type(x) is not torch.Tensor:
        plan_key = None  # plans are for plain tensors only
    _device.check_cuda_tensor(x, "softmax")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"softmax supports {', '.join(SUPPORTED)}; x is {x.dtype}. Cast it, e.g. x.float()")
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    ndim = max(x.dim(), 1)
    if not -ndim <= dim < ndim:
        raise IndexError(f"dim {dim} is out of range for a tensor with {x.dim()} dims")
    if x.requires_grad and torch.is_grad_enabled():
        return _autograd_function().apply(x, dim % ndim, config, autotune)
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
_warned_kwargs: set[str] = set()


def _tilegym_softmax(x: Any, use_tma: bool = False, **kwargs: Any) -> Any:
    """TileGym's `softmax(x, use_tma=False, **kwargs)` on our kernel, over the last dim.

    use_tma, use_chunked and use_multi_wave are accepted and do not change the
    result: see _TILEGYM_KWARGS. Other keywords are ignored with a one-time warning.
    """
    unknown = set(kwargs) - _TILEGYM_KWARGS
    if unknown - _warned_kwargs:
        import logging

        logging.getLogger("tilegym_cutile_rs").warning(
            "tilegym softmax on cutile-rs ignores keyword(s) %s", ", ".join(sorted(unknown))
        )
        _warned_kwargs.update(unknown)
    return softmax(x, -1)


TILEGYM_OPS = {"softmax": _tilegym_softmax}


def _warmup(shape: tuple[int, ...], dtype: Any, device: Any, autotune: bool) -> Config:
    """Compile (and optionally autotune) softmax over the last dim for `shape`; returns the config used."""
    import torch

    x = torch.randn(shape, device=device).to(dtype)
    softmax(x, autotune=autotune)
    n = x.shape[-1] if x.dim() else 1
    m = x.numel() // max(n, 1)
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    x2 = x.reshape(m, n)
    return _choose(x2, index, False)
