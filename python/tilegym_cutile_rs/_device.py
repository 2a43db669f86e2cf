"""Per-device facts the ops need, computed once per device."""

from __future__ import annotations

import functools
from typing import Any

from . import _library


@functools.cache
def prepare(index: int) -> tuple[int, int]:
    """Check the toolchain can target device `index` and install the kernel cache;
    return the device's (major, minor) capability."""
    import torch

    from . import _cache, _toolchain  # imported at the first call: the toolchain lookup reads package metadata

    capability = torch.cuda.get_device_capability(index)
    toolchain = _toolchain.configure()
    _toolchain.require_arch(toolchain, capability)
    _cache.enable(_library.library(), toolchain)
    return capability


@functools.cache
def name(index: int) -> str:
    """Device model and architecture, e.g. "NVIDIA H200 sm_90" (autotuning decisions key on it)."""
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    return f"{torch.cuda.get_device_name(index)} sm_{major}{minor}"


@functools.cache
def sm_count(index: int) -> int:
    """Streaming multiprocessors of device `index` (persistent kernels launch a multiple of it)."""
    import torch

    return int(torch.cuda.get_device_properties(index).multi_processor_count)


@functools.cache
def raw_stream_getter() -> Any:
    """torch's function from a device index to its current CUstream handle."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # no Stream object: ~10x cheaper
    return raw if raw is not None else (lambda index: torch.cuda.current_stream(index).cuda_stream)


def current_stream(index: int) -> int:
    """The CUstream handle of torch's current stream on device `index`."""
    return int(raw_stream_getter()(index))


def check_cuda_tensor(x: Any, op: str) -> None:
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op} takes a torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cuda":
        raise ValueError(f"{op} runs on CUDA tensors; x is on {x.device}. Move it first: x.cuda()")
