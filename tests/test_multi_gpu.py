"""Kernels run on the tensor's own device. The `gpu2` tests need two GPUs
(scripts/gpu-tests.sh runs them where there are two or more); the `gpu` and CPU
tests check, on one GPU or none, that the device index reaches the library."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest
import tilegym_cutile_rs
import torch
from tilegym_cutile_rs import _abi
from tilegym_cutile_rs.errors import DeviceError

from .conftest import HAS_GPU
from .test_abi import call, desc
from .test_softmax_gpu import check

SHAPES = [(7, 9), (64, 1000), (33, 4096), (5, 20000), (1, 1)]


@pytest.mark.skipif(HAS_GPU, reason="needs a machine without an NVIDIA driver")
def test_device_index_reaches_the_library(lib) -> None:  # type: ignore[no-untyped-def]
    status, msg = call(lib, desc(lib, [2, 3]), desc(lib, [2, 3]), 1, 4, 0, device=3)
    assert status == lib.CUTILE_ERR_DEVICE_INIT and "CUDA device 3" in msg, msg


def test_negative_device_index_is_refused(lib) -> None:  # type: ignore[no-untyped-def]
    status, msg = call(lib, desc(lib, [2, 3]), desc(lib, [2, 3]), 1, 4, 0, device=-1)
    assert status == lib.CUTILE_ERR_INVALID_ARGUMENT and "negative" in msg, msg


@pytest.mark.gpu
def test_device_past_the_last_gpu_is_a_device_error(lib) -> None:  # type: ignore[no-untyped-def]
    count = torch.cuda.device_count()
    x = torch.randn(2, 3, device="cuda")
    d = desc(lib, [2, 3], ptr=x.data_ptr())
    status, msg = call(lib, d, desc(lib, [2, 3], ptr=x.data_ptr()), 1, 4, 0, device=count)
    assert status == lib.CUTILE_ERR_DEVICE_INIT and f"CUDA device {count}" in msg, msg
    with pytest.raises(DeviceError):
        _abi.check_status(status, "softmax")
    check(x)  # the process keeps working on the real device


@pytest.mark.gpu
def test_current_device_does_not_pick_the_kernel_device() -> None:
    # The tensor's device decides, under a device guard for another index when one exists.
    last = torch.cuda.device_count() - 1
    x = torch.randn(64, 1000, device=f"cuda:{last}")
    with torch.cuda.device(0):
        check(x)


@pytest.mark.gpu2
def test_alternating_devices_in_one_process() -> None:
    for round_ in range(3):
        for index in (0, 1, 1, 0):
            for m, n in SHAPES:
                check(torch.randn(m, n, device=f"cuda:{index}") * (round_ + 1))


@pytest.mark.gpu2
def test_tensor_on_gpu1_runs_on_gpu1_stream() -> None:
    x = torch.randn(256, 4096, device="cuda:1")
    side = torch.cuda.Stream(device=1)
    side.wait_stream(torch.cuda.current_stream(1))
    with torch.cuda.device(0), torch.cuda.stream(side):
        y = tilegym_cutile_rs.softmax(x)
        # Enqueued on the side stream of device 1: queued work there must include ours.
        assert y.device == x.device
    side.synchronize()
    torch.testing.assert_close(y, torch.softmax(x, dim=-1))


@pytest.mark.gpu2
def test_two_threads_two_gpus_at_once() -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def work(index: int) -> None:
        try:
            torch.cuda.set_device(index)
            stream = torch.cuda.Stream(device=index)
            barrier.wait()
            with torch.cuda.stream(stream):
                for i in range(300):
                    m, n = SHAPES[i % len(SHAPES)]
                    x = torch.randn(m, n, device=f"cuda:{index}")
                    check(x)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.gpu2
def test_check_lists_both_gpus_and_their_smoke_runs() -> None:
    p = subprocess.run([sys.executable, "-m", "tilegym_cutile_rs.check", "--json"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    names = [c["name"] for c in json.loads(p.stdout)["checks"] if c["status"] == "ok"]
    for index in (0, 1):
        assert f"gpu {index}" in names and f"softmax gpu {index}" in names, names
