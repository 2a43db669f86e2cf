"""Per-device facts the ops need, computed once per device.

Device index -1 is what meta tensors report: the shipped-kernel build runs the ops on
meta tensors in describe mode (_describe), and these functions then answer for the
architecture being described.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from . import _describe, _library, _shipped
from .errors import ToolchainNotFoundError

# Run once at the first use of a device, by name (_op adds the torch operators' registration,
# for a later torch.compile where torch came after our import): this module knows no op.
FIRST_USE: dict[str, Callable[[], object]] = {}


def prepare(index: int) -> tuple[int, int]:
    """Check device `index` can run the kernels (shipped for its architecture, or a
    toolchain that targets it) and install the kernel cache; return its capability."""
    if index < 0:
        return _describe.target().capability
    return _prepare(index)


@functools.cache
def _prepare(index: int) -> tuple[int, int]:
    import torch

    from . import _cache, _toolchain  # imported at the first call: the toolchain lookup reads package metadata

    for hook in FIRST_USE.values():
        hook()
    capability = torch.cuda.get_device_capability(index)
    arch = f"sm_{capability[0]}{capability[1]}"
    lib = _library.library()
    try:
        toolchain = _toolchain.configure()
    except ToolchainNotFoundError as exc:  # none installed; a broken one is still an error
        if not _shipped.count(arch):
            raise ToolchainNotFoundError(f"{exc}. This build ships no compiled kernels for {arch}, so every kernel needs it") from None
        _shipped.enable(lib, jit=False)  # shipped kernels only; any other shape raises a ToolchainError
        return capability
    _toolchain.require_arch(toolchain, capability)
    _cache.enable(lib, toolchain)
    _shipped.enable(lib, jit=True)
    return capability


def arch(index: int) -> str:
    """Device `index`'s architecture, e.g. "sm_90" (prepared as by `prepare`)."""
    major, minor = prepare(index)
    return f"sm_{major}{minor}"


def has_clusters(arch: str) -> bool:
    """Whether GPUs of `arch` ("sm_90") run thread-block clusters: Hopper and later."""
    return int(arch.removeprefix("sm_")[:-1] or 0) >= 9


def name(index: int) -> str:
    """Device model and architecture, e.g. "NVIDIA H200 sm_90" (autotuning decisions key on it)."""
    if index < 0:
        return f"shipped {_describe.target().arch}"
    return _name(index)


@functools.cache
def _name(index: int) -> str:
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    return f"{torch.cuda.get_device_name(index)} sm_{major}{minor}"


def sm_count(index: int) -> int:
    """Streaming multiprocessors of device `index` (persistent kernels launch a multiple of it)."""
    if index < 0:
        return _describe.target().sms
    return _sm_count(index)


@functools.cache
def _sm_count(index: int) -> int:
    import torch

    return int(torch.cuda.get_device_properties(index).multi_processor_count)


@functools.cache
def raw_stream_getter() -> Any:
    """torch's function from a device index to its current CUstream handle."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # no Stream object: ~10x cheaper
    return raw if raw is not None else (lambda index: torch.cuda.current_stream(index).cuda_stream)


def current_stream(index: int) -> int:
    """The CUstream handle of torch's current stream on device `index` (0 when describing)."""
    return int(raw_stream_getter()(index)) if index >= 0 else 0


def check_cuda_tensor(x: Any, op: str) -> None:
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op} takes a torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cuda" and not (x.is_meta and _describe.describing()):
        raise ValueError(f"{op} runs on CUDA tensors; x is on {x.device}. Move it first: x.cuda()")
