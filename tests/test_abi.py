"""The C boundary on CPU: every bad call returns a status and a message, never a crash."""

from __future__ import annotations

import pytest
import tilegym_cutile_rs
import torch
from tilegym_cutile_rs import _abi, _library
from tilegym_cutile_rs.errors import DeviceError

from .conftest import HAS_GPU


def desc(lib, shape, strides=None, dtype=None, ptr=0x1000):  # type: ignore[no-untyped-def]
    d = _library.ffi().new("TensorDesc *")
    d.ptr = ptr
    d.ndim = len(shape)
    strides = strides or [int(torch.tensor(shape[i + 1 :]).prod()) for i in range(len(shape))]
    for i, (s, st) in enumerate(zip(shape, strides, strict=True)):
        d.shape[i] = s
        d.strides[i] = st
    d.dtype = lib.CUTILE_DTYPE_F32 if dtype is None else dtype
    return d


def call(lib, x, y, block_m=1, block_n=256, occupancy=0, warps=0, cga=0, device=0):  # type: ignore[no-untyped-def]
    status = lib.cutile_softmax(x, y, block_m, block_n, occupancy, warps, cga, device, 0)
    return status, _library.last_error()


def test_null_descriptor(lib) -> None:  # type: ignore[no-untyped-def]
    status, msg = call(lib, _library.ffi().NULL, desc(lib, [2, 3]))
    assert status == lib.CUTILE_ERR_NULL_POINTER and "x" in msg and "null" in msg


@pytest.mark.parametrize(
    "x_kw, y_kw, block, fragment",
    [
        ({"shape": [2, 3], "dtype": 3}, {"shape": [2, 3]}, (1, 4), "unsupported dtype code 3"),
        ({"shape": [2, 3], "dtype": 99}, {"shape": [2, 3]}, (1, 4), "unsupported dtype code 99"),
        ({"shape": [2, 3]}, {"shape": [2, 4]}, (1, 4), "differs"),
        ({"shape": [2, 3]}, {"shape": [2, 3], "dtype": 1}, (1, 4), "dtype"),
        ({"shape": [2, 3, 4]}, {"shape": [2, 3, 4]}, (1, 4), "2-D"),
        ({"shape": [2, 3]}, {"shape": [2, 3], "strides": [1, 2]}, (1, 4), "contiguous"),
        ({"shape": [2, 3], "strides": [3, 2]}, {"shape": [2, 3]}, (1, 4), "unit stride"),
        ({"shape": [2, 3], "strides": [1, 1]}, {"shape": [2, 3]}, (1, 4), "overlap"),
        ({"shape": [2, 3], "strides": [-3, 1]}, {"shape": [2, 3]}, (1, 4), "negative stride"),
        ({"shape": [2, -3], "strides": [3, 1]}, {"shape": [2, 3]}, (1, 4), "negative size"),
        ({"shape": [2, 1 << 31]}, {"shape": [2, 1 << 31]}, (1, 4), "32-bit index"),
        ({"shape": [1 << 20, 1 << 12]}, {"shape": [1 << 20, 1 << 12]}, (1, 4), "largest element offset"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, (3, 4), "power of two"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, (1, 0), "power of two"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, (1, 1 << 20), "power of two"),
        ({"shape": [2, 3], "ptr": 0}, {"shape": [2, 3]}, (1, 4), "null"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, (1, 4, -1), "occupancy"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, (1, 4, 33), "occupancy"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, (1, 4, 0, 3), "warps = 3"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, (1, 4, 0, -4), "warps"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, (1, 4, 0, 64), "warps"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, (1, 4, 0, 0, 3), "cga = 3"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, (1, 1 << 18, 0, 0, 2), "1..=131072 with a cluster of 2"),
    ],
)
def test_bad_descriptors_are_refused(lib, x_kw, y_kw, block, fragment) -> None:  # type: ignore[no-untyped-def]
    status, msg = call(lib, desc(lib, **x_kw), desc(lib, **y_kw), *block)
    assert status < 0
    assert fragment in msg, msg


def test_too_many_dims(lib) -> None:  # type: ignore[no-untyped-def]
    d = desc(lib, [2, 3])
    d.ndim = 6
    status, msg = call(lib, d, desc(lib, [2, 3]))
    assert status == lib.CUTILE_ERR_INVALID_ARGUMENT and "ndim 6" in msg


def test_empty_views_launch_nothing(lib) -> None:  # type: ignore[no-untyped-def]
    # No device is touched for an empty problem, even with no driver present.
    status, msg = call(lib, desc(lib, [0, 3]), desc(lib, [0, 3]))
    assert (status, msg) == (lib.CUTILE_OK, "")


def test_status_codes_become_exceptions(lib) -> None:  # type: ignore[no-untyped-def]
    status, _ = call(lib, desc(lib, [2, 3], dtype=3), desc(lib, [2, 3]))
    with pytest.raises(TypeError, match="unsupported dtype"):
        _abi.check_status(status, "softmax")
    status, _ = call(lib, desc(lib, [2, 3]), desc(lib, [2, 4]))
    with pytest.raises(ValueError, match="softmax: .*differs"):
        _abi.check_status(status, "softmax")


@pytest.mark.skipif(HAS_GPU, reason="needs a machine without an NVIDIA driver")
def test_no_driver_is_a_clear_error_at_first_launch(lib) -> None:  # type: ignore[no-untyped-def]
    status, msg = call(lib, desc(lib, [2, 3]), desc(lib, [2, 3]), 2, 4)
    assert status == lib.CUTILE_ERR_DEVICE_INIT, msg
    assert "could not initialise CUDA device 0" in msg and "check" in msg
    with pytest.raises(DeviceError, match="CUDA 13"):
        _abi.check_status(status, "softmax")
    # The same thread keeps working afterwards.
    assert call(lib, desc(lib, [0, 3]), desc(lib, [0, 3])) == (lib.CUTILE_OK, "")


@pytest.mark.parametrize(
    "make, exc, fragment",
    [
        (lambda: torch.randn(4, 8), ValueError, "CUDA tensors"),
        (lambda: [1.0, 2.0], TypeError, "torch.Tensor"),
        (lambda: torch.randn(4, 8, dtype=torch.float64), ValueError, "CUDA tensors"),
        (lambda: torch.randn(4, 8).numpy(), TypeError, "torch.Tensor"),
        (lambda: None, TypeError, "torch.Tensor"),
    ],
)
def test_softmax_rejects_bad_input_on_cpu(make, exc, fragment) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match=fragment):
        tilegym_cutile_rs.softmax(make())


def test_a_meta_tensor_is_traced_not_launched() -> None:
    # Meta tensors have no data: the call is our torch operator, whose fake implementation
    # gives the result's metadata (tests/test_torch_ops.py).
    y = tilegym_cutile_rs.softmax(torch.empty(4, 8, device="meta", dtype=torch.bfloat16))
    assert y.device.type == "meta" and y.shape == (4, 8) and y.dtype == torch.bfloat16
    assert tilegym_cutile_rs.silu_and_mul(torch.empty(4, 8, device="meta")).shape == (4, 4)
    q, k = torch.empty(1, 2, 1, 1, 64, device="meta", dtype=torch.bfloat16), torch.empty(1, 2, 1, 64, device="meta", dtype=torch.bfloat16)
    assert tilegym_cutile_rs.attention_sink(q, k, k, torch.empty(1, device="meta")).shape == (1, 2, 64)
    with pytest.raises(TypeError, match="supports float16 and bfloat16"):  # the fake implementation's checks still apply
        tilegym_cutile_rs.attention_sink(q.float(), k.float(), k.float(), torch.empty(1, device="meta"))
