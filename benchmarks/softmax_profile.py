"""Where softmax time goes, ours against torch.softmax and Triton, per shape.

    python benchmarks/softmax_profile.py [--shapes 256x256,8192x256] [--dtypes float32,bfloat16] [--rows I,J] [--budget S]

Per shape and dtype, for ours, torch.softmax and (when importable) the Triton
softmax softmax_bench.py times (_peers.py), in microseconds per call:
- kernel: the GPU kernel's own duration (CUPTI, through torch.profiler; L2 warm);
- kernel flushed: the same after an L2 flush before each call, as do_bench runs it;
- events: time between CUDA events around one call after an L2 flush, as
  triton.testing.do_bench measures it (the median of 50);
- queued: 200 calls enqueued behind a 50 ms GPU sleep, timed by events around
  all 200: what the GPU does per call when the host is never the limit;
- host: the host's time per call for those 200 enqueues, while the GPU is still
  asleep. A call that waits for the GPU shows here as thousands of us.
First the host time of a 1x256 float32 call, split into its parts (before
the profiler runs: it leaves every later launch slower).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import tilegym_cutile_rs
import torch
from _peers import triton_softmax
from _timing import Rows, flush_buffer, host_us_per_call, kernel_us
from tilegym_cutile_rs import _abi, _device, _library
from tilegym_cutile_rs.ops import softmax as sm

SHAPES = "8192x256,8192x1024,8192x4096,2048x32768,256x256,256x2048,256x32768,256x9,256x1009"
CALLS = 200


def events_us(fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(50):
        flush_buffer().zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        times.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in times) * 1e3


def queued_us(fn: Callable[[], Any]) -> tuple[float, float]:
    """(GPU us per call, host us per call) for CALLS calls enqueued behind a GPU sleep."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(50_000_000)  # cycles: ~30 ms at the H200's clock
    start.record()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        fn()
    host = (time.perf_counter() - t0) / CALLS * 1e6
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / CALLS, host


def per_shape(rows: Any) -> None:
    fns: dict[str, Callable[[Any], Any]] = {"ours": tilegym_cutile_rs.softmax, "torch": lambda x: torch.softmax(x, -1)}
    triton = triton_softmax()
    if triton is not None:
        fns["triton"] = triton
    cols = ["M x N", "dtype", "config"]
    for who in fns:
        cols += [f"{who} kernel", f"{who} kernel flushed", f"{who} events", f"{who} queued", f"{who} host"]
    print("| " + " | ".join(cols) + " |")
    print("|" + " --- |" * len(cols))
    for m, n, dtype_name in rows:
        x = torch.randn(m, n, device="cuda", dtype=getattr(torch, dtype_name))
        row = [f"{m} x {n}", dtype_name, str(sm.softmax_config(m, n, x.dtype))]
        for f in fns.values():
            fn = functools.partial(f, x)
            for _ in range(3):  # compile (or load from the kernel cache) and make the plan first
                fn()
            queued, host = queued_us(fn)
            row += [
                f"{kernel_us(fn, reps=20, flush=False):.1f}",
                f"{kernel_us(fn, reps=20, flush=True):.1f}",
                f"{events_us(fn):.1f}",
                f"{queued:.1f}",
                f"{host:.1f}",
            ]
        print("| " + " | ".join(row) + " |", flush=True)


def host_split(calls: int = 20000) -> None:
    """Host us per call of each layer of our call stack, for a 1x256 float32 softmax."""
    x = torch.randn(1, 256, device="cuda")
    y = torch.empty_like(x)
    lib = _library.library()
    config = sm.softmax_config(1, 256, torch.float32)
    xd, yd = _abi.tensor_desc(x), _abi.tensor_desc(y)
    stream = _device.current_stream(0)
    parts: list[tuple[str, Callable[[], Any]]] = [
        ("torch.softmax", lambda: torch.softmax(x, -1)),
        ("tilegym_cutile_rs.softmax", lambda: tilegym_cutile_rs.softmax(x)),
        ("library call, descriptors made once", lambda: lib.cutile_softmax(xd, yd, *config, 0, stream)),
        ("library call rejected at once (block_m 3)", lambda: lib.cutile_softmax(xd, yd, 3, 256, 0, 0, 0, stream)),
        ("cffi call of an empty export", lambda: lib.cutile_abi_fingerprint()),
        ("two TensorDescs", lambda: (_abi.tensor_desc(x), _abi.tensor_desc(y))),
        ("torch.empty_like", lambda: torch.empty_like(x)),
        ("current stream handle", lambda: _device.current_stream(0)),
    ]
    print("| 1x256 float32, host per call (best of 10 rounds taken in turn) | us |")
    print("| --- | --- |")
    us = host_us_per_call(dict(parts), calls, warmup=200)
    for name, _ in parts:
        print(f"| {name} | {us[name]:.2f} |")
    print(f"| ours / torch.softmax | {us['tilegym_cutile_rs.softmax'] / us['torch.softmax']:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    Rows.add_arguments(parser)
    args = parser.parse_args()
    shape_rows = [(int(m), int(n), dt) for m, n in (s.split("x") for s in args.shapes.split(",")) for dt in args.dtypes.split(",")]
    rows = Rows.from_args(args, ["host split", *shape_rows])
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    # Host times first: once torch.profiler has run in a process, every launch in it costs more
    # (torch.softmax on the H200: 16.4 us per call timed after it, 7.8 us before).
    if "host split" in [rows.rows[i] for i in rows.selected]:
        host_split()
        print()
    per_shape(row for row in rows if row != "host split")
    rows.report()


if __name__ == "__main__":
    main()
