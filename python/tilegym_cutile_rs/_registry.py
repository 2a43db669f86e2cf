"""The op registry: each op module's `OP`, an OpSpec (with its TorchOps), found by discovery (`ops()`); TileGym
registration, warm-up, the check, the shipped-kernel build, the tuner and the generic tests
iterate it."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from . import _tuned

if TYPE_CHECKING:
    import torch


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


class Tolerance(NamedTuple):
    """How close an op's result must be to its float32 reference (torch.testing.assert_close's
    rtol and atol), the reference rounded to the result's dtype first."""

    rtol: float
    atol: float


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
    reference: the operator's outputs computed by torch in float32 from the same arguments
        (floating tensors upcast, detached): a tensor or a tuple, None in a tuple for an
        output it does not define (attention_sink_train's lse); for an operator that writes
        an argument, that argument's expected value. Where the operator has a backward,
        differentiable, so the generic GPU test also compares its gradients with the
        reference's; a backward operator's reference is the forward reference's
        vector-Jacobian product (torch.func.vjp).
    tolerances: by the dtype name of the operator's first tensor argument (`tolerance(args)`),
        how close its outputs and gradients must be to the reference's; an op's own tests
        may read their bounds from the same table.
    """

    name: str
    schema: str
    impl: Callable[..., Any]
    fake: Callable[..., Any]
    backward: Callable[..., Any] | None = None
    setup_context: Callable[..., Any] | None = None
    example: Callable[[torch.device], tuple[Any, ...]] | None = None
    torch_gradient: bool = False
    reference: Callable[..., Any] | None = None
    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)

    def tolerance(self, args: Sequence[Any]) -> Tolerance:
        """The declared tolerance for a call with `args`: by its first tensor argument's dtype."""
        first = next(a for a in args if hasattr(a, "dtype") and hasattr(a, "shape"))
        return self.tolerances[str(first.dtype).removeprefix("torch.")]
