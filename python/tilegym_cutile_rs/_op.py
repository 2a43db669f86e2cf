"""What every op shares, written once: the call into the library, config choice, plans, discovery.

An op module (`ops/<op>.py`, or a package) keeps only what is its own: argument
validation, how its tensors map to the kernel's views, its config type and
heuristic, its TileGym adapter, warm-up, smoke test and shipped shapes, declared in an `OP = OpSpec(...)`.
Every C export takes `(TensorDesc *..., scalars..., config ints..., device, stream)`
and returns a status; this module calls it with the watchdog (_progress) and turns a
failure into the exception its status stands for (_abi.check_status).
"""

from __future__ import annotations

import functools
import importlib
import logging
import pkgutil
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from time import monotonic
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from . import _abi, _describe, _device, _library, _progress, _tuned

if TYPE_CHECKING:
    import torch

# An op's config type: a NamedTuple class of ints, some fields with defaults.
ConfigT = TypeVar("ConfigT", bound=tuple[int, ...])


def _make(config_type: type[ConfigT], values: Sequence[int]) -> ConfigT:
    made: ConfigT = config_type._make(values)  # type: ignore[attr-defined]
    return made


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1): tile edges and shape classes."""
    return 1 << max(0, (n - 1).bit_length())


def device_index(t: torch.Tensor) -> int:
    """The CUDA device index of `t` (a CUDA tensor's device always has one)."""
    return t.get_device()


def row_view(t: torch.Tensor, m: int, n: int) -> torch.Tensor:
    """`t` as the `[m, n]` view a row kernel reads in place (unit column stride, rows apart),
    else a contiguous copy."""
    t2 = t.reshape(m, n)
    if (n > 1 and t2.stride(1) != 1) or (m > 1 and t2.stride(0) < n):
        t2 = t2.contiguous()
    return t2


def tensor_descs(*tensors: torch.Tensor) -> tuple[Any, ...]:
    """A `TensorDesc *` for each tensor, in order (the cdata keeps each alive)."""
    return tuple(_abi.tensor_desc(t) for t in tensors)


def call(op: str, export: str, args: Sequence[Any], index: int, what: tuple[Any, ...]) -> None:
    """Call the C export `export` with `args`, the device and its current stream, under the
    watchdog; raise the exception a non-zero status stands for."""
    function = getattr(_library.library(), export)
    stream = _device.current_stream(index)
    slot = _progress.begin(what)
    try:
        status = function(*args, index, stream)
    finally:
        _progress.end(slot)
    if status != 0:
        _abi.check_status(status, op, hint=_hint(status, slot, what))


def _hint(status: int, slot: Any, what: tuple[Any, ...]) -> str | None:
    """What a failed call's exception adds: the watchdog's note, or for a kernel that is
    neither shipped nor compilable here, the call it was for (op, dtype, shape)."""
    if status == _library.library().CUTILE_ERR_NO_TOOLCHAIN:
        return f"The call: {what[0]} on {what[1]} of shape {tuple(what[2])}."
    return _progress.timed_out_message(slot)


class Plan:
    """A repeated call's launch, prepared once per thread: the C export bound to this
    call's descriptors and scalars (only the descriptors' data pointers change per call).
    The library checks every descriptor again, so a plan can cost time, never safety."""

    __slots__ = ("descs", "args", "launch", "stream", "index", "what", "thread", "made_in", "op", "torch", "dense")

    def __init__(
        self,
        op: str,
        export: str,
        tensors: Sequence[torch.Tensor],
        args: Sequence[Any],
        index: int,
        made_in: int,
        dense: bool,
    ) -> None:
        import torch

        self.torch = torch  # the fast path runs without an `import torch` statement
        self.op, self.index, self.made_in = op, index, made_in
        self.descs, self.args = tensor_descs(*tensors), tuple(args)
        # The descriptors first, then the op's scalars and config; device and stream are appended per call.
        self.launch = functools.partial(getattr(_library.library(), export), *self.descs, *args, index)
        self.stream = _device.raw_stream_getter()
        self.what = (op, tensors[0].dtype, tuple(tensors[0].shape), "args", self.args)
        self.thread = threading.get_ident()
        # Whether the op may allocate its output with empty_like of its input: several us
        # cheaper than torch.empty(shape, dtype=, device=), but contiguous only for a contiguous input.
        self.dense = dense

    def run(self, *pointers: int) -> None:
        """Launch with these data pointers, one per descriptor, in order."""
        for desc, ptr in zip(self.descs, pointers, strict=True):
            desc.ptr = ptr
        # The watchdog's slot, set inline (the slow path that made this plan started its thread).
        slot = _progress.inflight[self.thread] = [monotonic(), self.what, False, False]
        try:
            status = self.launch(self.stream(self.index))
        finally:
            del _progress.inflight[self.thread]
        if status != 0:
            _abi.check_status(status, self.op, hint=_hint(status, slot, self.what))


_NO_PLANS: dict[Any, Plan] = {}  # what a thread without plans looks up; never written


class Plans:
    """One op's plans, per thread (their descriptors are mutated per call), keyed by
    everything that makes two calls the same launch; dropped whenever a config decision changes."""

    MAX = 1024

    def __init__(self, op: str, export: str) -> None:
        self.op, self.export = op, export
        self.generation = 0
        self._local = threading.local()

    def _table(self) -> dict[Any, Plan]:
        try:
            table: dict[Any, Plan] = self._local.plans
        except AttributeError:
            table = self._local.plans = {}
        return table

    def get(self, key: Any) -> Plan | None:
        """This thread's plan for `key`, if it is still current (the per-call fast path)."""
        plan: Plan | None = getattr(self._local, "plans", _NO_PLANS).get(key)
        return plan if plan is not None and plan.made_in == self.generation else None

    def make(self, key: Any, tensors: Sequence[torch.Tensor], args: Sequence[Any], index: int, dense: bool) -> Plan:
        """This thread's plan for `key`: the export bound to descriptors of `tensors` (in the
        export's order) and `args`; `dense` as `Plan.dense`."""
        plan = Plan(self.op, self.export, tensors, args, index, self.generation, dense)
        if _describe.describing():
            return plan  # a plan of meta tensors is never run
        table = self._table()
        if len(table) >= self.MAX:
            table.clear()
        table[key] = plan
        return plan

    def invalidate(self) -> None:
        self.generation += 1


class Chooser(Generic[ConfigT]):
    """An op's config choice: an explicit config, else a decision autotuned earlier for
    the call's shape class (kept in the kernel cache directory), else the heuristic;
    `autotune=True` (or TILEGYM_CUTILE_RS_AUTOTUNE=1) tunes a shape class on first use.
    Decisions are memoised in process per exact problem: the per-call fast path."""

    MEMO_MAX = 4096

    def __init__(self, op: str, config_type: type[ConfigT], plans: Plans | None = None) -> None:
        self.op, self.config_type, self.plans = op, config_type, plans
        self._memo: dict[Any, tuple[ConfigT, bool]] = {}

    def choose(
        self,
        problem: Any,
        shape_class: Callable[[], str],
        heuristic: Callable[[], ConfigT],
        candidates: Callable[[], Sequence[ConfigT]],
        tuner: Callable[[], Callable[[ConfigT], object]],
        autotune: bool,
    ) -> ConfigT:
        """The config for `problem` (a hashable key: device, dtype, extents, whatever the
        heuristic reads). `tuner()` returns a function that launches one candidate.
        Describing shipped kernels takes the heuristic's choice, as a fresh install would."""
        if _describe.describing():
            return heuristic()
        found = self._memo.get(problem)
        if found is None or (autotune and not found[1]):
            if found is not None and self.plans is not None:
                self.plans.invalidate()  # a tuned decision replaces the heuristic's
            found = self._decide(shape_class(), heuristic, candidates, tuner, autotune)
            if len(self._memo) >= self.MEMO_MAX:
                self._memo.clear()
            self._memo[problem] = found
        return found[0]

    def _decide(
        self,
        key: str,
        heuristic: Callable[[], ConfigT],
        candidates: Callable[[], Sequence[ConfigT]],
        tuner: Callable[[], Callable[[ConfigT], object]],
        autotune: bool,
    ) -> tuple[ConfigT, bool]:
        from . import _autotune  # at a first call, not at import

        stored = _autotune.lookup(key)
        fields: tuple[str, ...] = self.config_type._fields  # type: ignore[attr-defined]
        if stored is not None and len(stored) == len(fields):  # other lengths: an older form, retune
            return _make(self.config_type, stored), True
        import torch

        # Tuning synchronizes the device, which a CUDA graph capture forbids.
        if not (autotune or _autotune.enabled_by_env()) or torch.cuda.is_current_stream_capturing():
            return heuristic(), False
        return _autotune.tune(key, list(candidates()), tuner()), True


def check_config(config: object, config_type: type[ConfigT]) -> ConfigT:
    """An explicit config as the op's config type: a tuple (or the type itself) of ints with at
    least the fields that have no default. The library checks every value's range; said here
    is only what depends on the toolchain (cutile's own compile error would name no fix)."""
    fields: tuple[str, ...] = config_type._fields  # type: ignore[attr-defined]
    defaults: dict[str, int] = config_type._field_defaults  # type: ignore[attr-defined]
    required = len(fields) - len(defaults)
    form = f"{config_type.__name__}({', '.join(fields)}), or a tuple of {required} to {len(fields)} ints"
    try:
        values = tuple(int(v) for v in config)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise TypeError(f"config must be {form}, got {config!r}") from None
    if not required <= len(values) <= len(fields):
        raise TypeError(f"config must be {form}, got {config!r}")
    checked = _make(config_type, values + tuple(defaults[f] for f in fields[len(values) :]))
    warps = getattr(checked, "warps", 0)
    if warps:
        from . import _toolchain
        from .errors import ToolchainNotFoundError

        lib = _library.library()
        try:
            release = _toolchain.configure().release
        except ToolchainNotFoundError:
            return checked  # no toolchain: only shipped kernels run, and the library refuses any other
        if release < (13, 5) and not lib.CUTILE_WORKER_WARPS_BEFORE_TILEIRAS_13_5 >> warps & 1:
            taken = [w for w in range(1, lib.CUTILE_MAX_WORKER_WARPS + 1) if lib.CUTILE_WORKER_WARPS_BEFORE_TILEIRAS_13_5 >> w & 1]
            raise ValueError(
                f"config warps = {warps}: tileiras {'.'.join(map(str, release))} takes 0 (its own choice) or "
                f"{' or '.join(map(str, taken))} worker warps per CTA; other powers of two up to "
                f"{lib.CUTILE_MAX_WORKER_WARPS} need tileiras 13.5 or newer"
            )
    return checked


_warned_kwargs: set[tuple[str, str]] = set()


def ignore_kwargs(op: str, kwargs: Mapping[str, Any], documented: Collection[str] = ()) -> None:
    """A TileGym adapter's keywords that change nothing for our kernels: the `documented`
    ones (each op says why) pass silently, any other is logged once per op and name."""
    unknown = {(op, name) for name in kwargs if name not in documented} - _warned_kwargs
    if unknown:
        logging.getLogger("tilegym_cutile_rs").warning(
            "tilegym %s on cutile-rs ignores keyword(s) %s", op, ", ".join(sorted(name for _, name in unknown))
        )
        _warned_kwargs.update(unknown)


@dataclass(frozen=True)
class OpSpec:
    """What an op module declares as `OP`; registration, warm-up and the check find it there.

    name: the op's name, as the library lists it (`cutile_ops_list`).
    tilegym: TileGym op name -> our implementation with TileGym's signature.
    warmup(shape, dtype, device, autotune): run the op once on an input of `shape`
        (compiling, and with autotune tuning, its kernels); returns the config it used.
    smoke(device): run the op on a small input, compare with torch; returns a one-line
        result, raises AssertionError when the result is wrong.
    shipped(device): run the op (forward, and backward where it trains) for each shape whose
        kernels the wheel ships compiled (_shipped, built by _ship_build): TileGym's test and benchmark shapes, powers
        of two and common LLM widths. The build runs it on meta tensors in describe mode; the
        GPU tests run it on the device with no toolchain.
    torch_ops: its torch operators (TorchOp, below), registered by register_torch_ops().
    tunings: what benchmarks/tune.py sweeps to fit its heuristics (_tuned.Tuning, one per
        table), if any.
    warms_up(shape, dtype): whether `warmup` takes a shape of that rank and that dtype (the
        ops' shape conventions differ); `tilegym_cutile_rs.warmup()` with no `ops` warms only
        the ops that do. Default: every shape and dtype.
    """

    name: str
    tilegym: Mapping[str, Callable[..., Any]]
    warmup: Callable[[tuple[int, ...], torch.dtype, torch.device, bool], object]
    smoke: Callable[[torch.device], str]
    shipped: Callable[[torch.device], None]
    torch_ops: Sequence[TorchOp] = ()
    tunings: Sequence[_tuned.Tuning] = ()
    warms_up: Callable[[tuple[int, ...], torch.dtype], bool] = lambda shape, dtype: True


def tunings() -> dict[str, _tuned.Tuning]:
    """Every op's tunings, by table name."""
    return {t.name: t for spec in ops().values() for t in spec.tunings}


@functools.cache
def ops() -> dict[str, OpSpec]:
    """Every op this package has: the `OP` of each module under tilegym_cutile_rs.ops."""
    package = importlib.import_module(f"{__package__}.ops")
    found: dict[str, OpSpec] = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        spec = getattr(importlib.import_module(f"{package.__name__}.{info.name}"), "OP", None)
        if isinstance(spec, OpSpec):
            found[spec.name] = spec
    return dict(sorted(found.items()))


# ---- torch operators ------------------------------------------------------------------------
# Every public op is also a torch operator, torch.ops.tilegym_cutile_rs.<name>, so that
# torch.compile, torch.export and make_fx trace it into their graphs instead of breaking on
# our cffi call. Eager calls keep their own fast path (plans, replayed launches) and never go
# through the dispatcher; traced calls (dynamo, export, fake or meta tensors) do.
NAMESPACE = "tilegym_cutile_rs"


@dataclass(frozen=True)
class TorchOp:
    """A torch operator an op module declares in its `OpSpec.torch_ops`.

    name, schema: `torch.ops.tilegym_cutile_rs.<name>` with this schema's arguments and
        returns, e.g. "(Tensor x, int dim) -> Tensor"; a written argument is `Tensor(a!)`.
    impl: what runs on CUDA tensors (the op's eager function).
    fake: the outputs' metadata from the inputs' (shape, dtype, strides, device), no data.
    backward, setup_context: the autograd formula, as torch.library.register_autograd takes
        them; None for an op without gradients.
    example(device): arguments to call the operator with on `device` (CUDA, or meta for
        tracing), inputs that have gradients requiring them: the generic operator tests
        (opcheck, tracing, compiled against eager) run every operator on its example.
    torch_gradient: its backward is torch arithmetic (softmax's formula), which Inductor
        compiles into kernels of its own: compiled gradients equal eager ones to rounding,
        not bit for bit.
    """

    name: str
    schema: str
    impl: Callable[..., Any]
    fake: Callable[..., Any]
    backward: Callable[..., Any] | None = None
    setup_context: Callable[..., Any] | None = None
    example: Callable[[torch.device], tuple[Any, ...]] | None = None
    torch_gradient: bool = False


def sample(device: torch.device, *shape: int, dtype: str = "bfloat16", grad: bool = False) -> torch.Tensor:
    """A random `shape` tensor of dtype `dtype` (a torch dtype's name) on `device`, a leaf
    requiring gradients if `grad`: what `TorchOp.example` builds its arguments from."""
    import torch

    return torch.randn(*shape, device=device, dtype=getattr(torch, dtype)).requires_grad_(grad)


def int32_tensor(device: torch.device, *values: int) -> torch.Tensor:
    """An int32 tensor of `values` on `device` (an example's device-side position)."""
    import torch

    return torch.tensor(values, dtype=torch.int32, device=device)


# Kept across importlib.reload (which re-runs this module in the same namespace): a dropped
# torch.library.Library takes its kernels with it, while the schemas it defined stay.
_torch_lock: threading.Lock = globals().get("_torch_lock") or threading.Lock()
_torch_library: Any = globals().get("_torch_library")
_torch_registered: set[str] = globals().get("_torch_registered") or set()


def register_torch_ops() -> Any:
    """Register every op's torch operators (idempotent: a second call, a reloaded module or
    another import registers nothing twice) and return `torch.ops.tilegym_cutile_rs`."""
    import torch

    global _torch_library, is_compiling
    is_compiling = torch.compiler.is_compiling
    namespace = torch_ops()
    with _torch_lock:
        for spec in ops().values():
            for op in spec.torch_ops:
                if op.name in _torch_registered:
                    continue
                base, _, overload = op.name.partition(".")
                defined = hasattr(namespace, base) and (overload or "default") in getattr(namespace, base).overloads()
                if not defined:  # else defined by an earlier copy of this module: keep it
                    if _torch_library is None:
                        _torch_library = torch.library.Library(NAMESPACE, "FRAGMENT")  # type: ignore[no-untyped-call]
                    _torch_library.define(op.name + op.schema)
                    _torch_library.impl(op.name, op.impl, "CUDA")
                    qualname = f"{NAMESPACE}::{op.name}"
                    torch.library.register_fake(qualname, op.fake, lib=_torch_library)
                    if op.backward is not None:
                        torch.library.register_autograd(qualname, op.backward, setup_context=op.setup_context, lib=_torch_library)
                _torch_registered.add(op.name)
    return namespace


_fake_types: tuple[type, ...] = ()  # FakeTensor, FunctionalTensor, imported at the first check


def fake(*tensors: Any) -> bool:
    """Whether any argument is a tensor without data for our kernels (a fake or functional
    tensor of a trace, or a meta tensor): such a call is traced as our torch operator. The
    shipped-kernel build's meta tensors are the exception (_describe.describe)."""
    global _fake_types
    if not _fake_types:
        from torch._subclasses.fake_tensor import FakeTensor
        from torch._subclasses.functional_tensor import FunctionalTensor

        _fake_types = (FakeTensor, FunctionalTensor)
    if _describe.describing():
        return False
    return any(isinstance(t, _fake_types) or getattr(t, "is_meta", False) is True for t in tensors)


def traced_or_fake(*tensors: Any) -> Any:
    """The torch operators when this call is traced or has fake tensors, else None."""
    found = traced()
    if found is None and fake(*tensors):
        found = register_torch_ops()
    return found


class _AfterDynamo:
    """A one-shot import hook: registers our operators right after torch._dynamo is loaded,
    i.e. before torch.compile traces anything, where torch came after our import."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch._dynamo":
            return None
        import importlib.util
        import sys

        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        load = loader.exec_module

        def exec_module(module: Any) -> None:
            load(module)
            register_torch_ops()

        loader.exec_module = exec_module
        return spec


def register_after_torch() -> None:
    """Register our operators once torch._dynamo is imported (torch.compile imports it first)."""
    import sys

    if not any(isinstance(f, _AfterDynamo) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamo())


def _is_compiling_first() -> bool:
    import torch

    global is_compiling
    is_compiling = torch.compiler.is_compiling
    return is_compiling()


# torch.compiler.is_compiling once torch is imported (bound here, not imported per call): the one
# check an eager call pays, about 0.1 us. Under dynamo and torch.export it is a constant True.
is_compiling: Callable[[], bool] = _is_compiling_first


def torch_ops() -> Any:
    """torch.ops.tilegym_cutile_rs (its operators are registered at import or first call)."""
    import torch

    return getattr(torch.ops, NAMESPACE)


def traced() -> Any:
    """The torch operators when this call is being traced (torch.compile, torch.export), else None."""
    return torch_ops() if is_compiling() else None


_device.FIRST_USE["torch operators"] = register_torch_ops
