"""Every public op as a torch operator, torch.ops.tilegym_cutile_rs.<name>: each op declares
its TorchOps (schema, eager implementation, fake, autograd formula, example); this module
registers them and tells an eager call whether it is being traced."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _describe, _device, _registry

if TYPE_CHECKING:
    import torch

# Every public op is also a torch operator, torch.ops.tilegym_cutile_rs.<name>, so that
# torch.compile, torch.export and make_fx trace it into their graphs instead of breaking on
# our cffi call. Eager calls keep their own fast path (plans, replayed launches) and never go
# through the dispatcher; traced calls (dynamo, export, fake or meta tensors) do.
NAMESPACE = "tilegym_cutile_rs"


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
        for spec in _registry.ops().values():
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
