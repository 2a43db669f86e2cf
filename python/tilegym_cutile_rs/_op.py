"""The call into the library, written once: an op's C export called under the watchdog
(_progress), a failure turned into the exception its status stands for (_abi.check_status),
and plans, the per-call fast path that reuses a launch's descriptors (`launch`: any repeated
launch; `KeptLaunches.reusable`: an op's public call seen before).

An op module (`ops/<op>.py`, or a package) keeps only what is its own: argument validation,
how its tensors map to the kernel's views, its config type and heuristic (chosen through
_choice), its TileGym adapter, warm-up, smoke test and shipped shapes, declared in an
`OP = _registry.OpSpec(...)`, and its torch operators (_torch_ops). Every C export takes
`(TensorDesc *..., scalars..., config ints..., device, stream)` and returns a status; an op
passes its tensors and scalars by those parameters' names, which a new plan checks against
the header's declaration (`check_arguments`), so an argument out of place fails on its
first launch, not as a wrong result.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from collections.abc import Collection, Mapping, Sequence
from time import monotonic
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from . import _abi, _describe, _device, _library, _progress

if TYPE_CHECKING:
    import torch


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


def check_arguments(export: str, tensors: Mapping[str, Any], args: Mapping[str, Any]) -> None:
    """Raise InternalError unless `tensors` then `args` name the C export's parameters in the
    header's order (device and stream, appended per call, last): the library cannot tell one
    descriptor or int from another, so a swapped pair would run and return wrong data."""
    declared = _library.manifest().PARAMS.get(export)
    given = (*tensors, *args, "device", "stream")
    if given != declared:
        from .errors import InternalError

        raise InternalError(
            f"{export} called with parameters {given}, but the library's header declares {declared}: "
            "the op module and the C export disagree; please report this"
        )


def named(config_type: Any, config: Sequence[Any]) -> dict[str, Any]:
    """A config's values keyed by its NamedTuple type's field names (which name the C export's
    config parameters, checked by `check_arguments`)."""
    return dict(zip(config_type._fields, config, strict=True))


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

    __slots__ = ("descs", "args", "launch", "stream", "index", "what", "thread", "op", "torch", "dense")

    def __init__(
        self,
        op: str,
        export: str,
        tensors: Mapping[str, torch.Tensor],
        args: Mapping[str, Any],
        index: int,
        dense: bool,
    ) -> None:
        import torch

        check_arguments(export, tensors, args)
        self.torch = torch  # the fast path runs without an `import torch` statement
        self.op, self.index = op, index
        first = next(iter(tensors.values()))
        self.descs, self.args = tensor_descs(*tensors.values()), tuple(args.values())
        # The descriptors first, then the op's scalars and config; device and stream are appended per call.
        self.launch = functools.partial(getattr(_library.library(), export), *self.descs, *self.args, index)
        self.stream = _device.raw_stream_getter()
        self.what = (op, first.dtype, tuple(first.shape), "args", self.args)
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


def plain(t: Any) -> bool:
    """A tensor the fast paths take: torch.Tensor itself or an nn.Parameter (a model's weights,
    sinks; its torch-function handling is disabled, so it dispatches as a plain tensor). Any other
    subclass takes the full, dispatching path."""
    torch = sys.modules["torch"]
    cls = type(t)
    return cls is torch.Tensor or cls is torch.nn.Parameter


_NOTHING_KEPT: dict[Any, tuple[int, Any]] = {}  # what a thread without kept launches looks up; never written
KeptT = TypeVar("KeptT")


class KeptLaunches(Generic[KeptT]):
    """What an op keeps of its launches (plans, or a group of them), per thread (a plan's
    descriptors are mutated per call), keyed by everything that makes two calls the same
    launch; dropped whenever a config decision changes (`invalidate`, the op's Chooser)."""

    MAX = 1024

    def __init__(self, op: str) -> None:
        self.op = op
        self.generation = 0
        self._local = threading.local()

    def _table(self) -> dict[Any, tuple[int, KeptT]]:
        """This thread's kept launches, each with the generation it was kept in."""
        try:
            table: dict[Any, tuple[int, KeptT]] = self._local.plans
        except AttributeError:
            table = self._local.plans = {}
        return table

    def get(self, key: Any) -> KeptT | None:
        """This thread's kept launch for `key`, if it is still current (the per-call fast path)."""
        kept = getattr(self._local, "plans", _NOTHING_KEPT).get(key)
        return kept[1] if kept is not None and kept[0] == self.generation else None

    def keep(self, key: Any, kept: KeptT) -> None:
        """`kept` under `key` (one launch two calls reach by different keys may be kept twice)."""
        if _describe.describing():
            return  # a plan of meta tensors is never run
        table = self._table()
        if len(table) >= self.MAX:
            table.clear()
        table[key] = (self.generation, kept)

    def invalidate(self) -> None:
        self.generation += 1

    def reusable(self, key: Any, *tensors: Any) -> KeptT | None:
        """This thread's current launch for `key` where a public call may run it: its tensors
        plain (a subclass takes the dispatching path) and none asking autograd for a gradient."""
        kept = self.get(key)
        if kept is None:
            return None
        torch = sys.modules["torch"]  # imported: it made what was kept
        for t in tensors:
            # requires_grad first: the grad-mode query is a call, and almost never needed.
            if (type(t) is not torch.Tensor and not plain(t)) or (t.requires_grad and torch.is_grad_enabled()):
                return None
        return kept


class Plans(KeptLaunches[Plan]):
    """One op's plans of one export: a public call's fast path (`reusable`, `make`)."""

    def __init__(self, op: str, export: str) -> None:
        super().__init__(op)
        self.export = export

    def make(self, key: Any, tensors: Mapping[str, torch.Tensor], args: Mapping[str, Any], index: int, dense: bool) -> Plan:
        """This thread's plan for `key`: the export bound to descriptors of `tensors` and to
        `args`, each by its parameter's name in the export's order; `dense` as `Plan.dense`."""
        plan = Plan(self.op, self.export, tensors, args, index, dense)
        self.keep(key, plan)
        return plan


_launch_plans: dict[str, Plans] = {}  # per export: the plans `launch` keys by the whole launch


def launch(op: str, export: str, tensors: Mapping[str, torch.Tensor], args: Mapping[str, Any], index: int,
           what: tuple[Any, ...]) -> Plan:
    """`call` of `export` on descriptors of `tensors`, then `args`, each keyed by its
    parameter's name in the export's order: a launch repeated on this thread (every tensor's
    shape, strides and dtype, the same `args` and device) reuses the first one's descriptors,
    rebinding only the data pointers (a launch-bound call, e.g. a training step's backward,
    saves building them). Returns the plan (a public call's fast path may keep it under its
    own key too)."""
    plans = _launch_plans.get(export)
    if plans is None:
        plans = _launch_plans.setdefault(export, Plans(op, export))
    views = tensors.values()
    key = (index, *args.values(), *[(t.shape, t.stride(), t.dtype) for t in views])
    plan = plans.get(key)
    if plan is not None:
        plan.run(*[t.data_ptr() for t in views])
        return plan
    plan = Plan(op, export, tensors, args, index, dense=False)
    call(op, export, (*plan.descs, *plan.args), index, what)  # the plan's descriptors: built once per new launch
    plans.keep(key, plan)
    return plan


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
