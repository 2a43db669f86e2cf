"""Timing helpers the softmax benchmark scripts share (imported from the script's directory)."""

from __future__ import annotations

import functools
import time
from typing import Any, Callable

import torch


@functools.lru_cache(maxsize=None)
def flush_buffer() -> torch.Tensor:
    """256 MiB to zero before a timed call: more than the H200's L2, as triton.testing flushes."""
    return torch.empty(256 << 20, dtype=torch.int8, device="cuda")


def host_us_per_call(fn: Callable[[], Any], calls: int, warmup: int) -> float:
    """Host time per call of fn over `calls` calls after `warmup`, the GPU drained before and after."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def kernel_us(fn: Callable[[], Any], reps: int, flush: bool) -> float:
    """Mean duration (CUPTI, through torch.profiler) of the one softmax kernel a call of fn
    launches; with `flush`, the L2 is flushed before each call (the flush kernel is not counted)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            if flush:
                flush_buffer().zero_()
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    durations = [e.device_time for e in kernels if "softmax" in e.name.lower()]
    if len(durations) != reps:  # a kernel name without "softmax": everything but the flush
        durations = [e.device_time for e in kernels if "fill" not in e.name.lower()]
    if len(durations) != reps:
        raise RuntimeError(f"expected {reps} softmax kernels in the profile, found {len(durations)}")
    return sum(durations) / reps
