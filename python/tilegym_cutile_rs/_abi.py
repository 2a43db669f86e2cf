"""Torch tensors to TensorDesc, and status codes to exceptions. Every constant
comes from the generated cdef manifest (cffi lib), none is typed in here."""

from __future__ import annotations

import functools
from typing import Any

from . import _library
from .errors import CutileError, DeviceError, InternalError, KernelLaunchError, ToolchainError


@functools.cache
def _dtype_codes() -> dict[Any, int]:
    import torch

    lib = _library.library()
    return {
        torch.float32: lib.CUTILE_DTYPE_F32,
        torch.float16: lib.CUTILE_DTYPE_F16,
        torch.bfloat16: lib.CUTILE_DTYPE_BF16,
        torch.int32: lib.CUTILE_DTYPE_I32,  # index tensors (attention's start_q), never data
    }


def dtype_code(dtype: Any) -> int:
    """The library's code for a torch dtype (a TypeError for one no kernel takes)."""
    code = _dtype_codes().get(dtype)
    if code is None:
        raise TypeError(f"dtype {dtype} has no kernel; use float32, float16 or bfloat16")
    return code


# Where a meta tensor's storage "starts" for the library (meta data_ptr() is its byte
# offset from 0): aligned as torch's CUDA allocator aligns blocks, so views keep the
# alignment class they would have on the device (the shipped-kernel build's describe mode).
META_BASE = 1 << 40


def tensor_desc(t: Any) -> Any:
    """A `TensorDesc *` describing `t` (kept alive by the returned cdata)."""
    code = dtype_code(t.dtype)
    lib = _library.library()
    if t.dim() > lib.CUTILE_MAX_DIMS:
        raise ValueError(f"{t.dim()} dims exceed the {lib.CUTILE_MAX_DIMS} a TensorDesc holds")
    ptr = t.data_ptr() + (META_BASE if t.is_meta else 0)
    # One initializer call: much cheaper than setting fields one by one.
    return _library.ffi().new(
        "TensorDesc *",
        {"ptr": ptr, "ndim": t.dim(), "shape": list(t.shape), "strides": list(t.stride()), "dtype": code},
    )


def check_status(status: int, op: str, hint: str | None = None) -> None:
    """Raise the exception a non-zero status stands for, with the library's message (and `hint`)."""
    lib = _library.library()
    if status == lib.CUTILE_OK:
        return
    message = f"{op}: {_library.last_error()}"
    if hint:
        message = f"{message}\n{hint}"
    exc: type[Exception]
    if status in (lib.CUTILE_ERR_INVALID_ARGUMENT, lib.CUTILE_ERR_NULL_POINTER):
        exc = ValueError
    elif status == lib.CUTILE_ERR_UNSUPPORTED_DTYPE:
        exc = TypeError
    elif status == lib.CUTILE_ERR_DEVICE_INIT:
        exc = DeviceError
    elif status in (lib.CUTILE_ERR_COMPILE_FAILED, lib.CUTILE_ERR_NO_TOOLCHAIN):
        exc = ToolchainError
    elif status == lib.CUTILE_ERR_LAUNCH_FAILED:
        exc = KernelLaunchError
    elif status == lib.CUTILE_ERR_PANIC:
        exc = InternalError
    else:
        exc = CutileError
    raise exc(message)
