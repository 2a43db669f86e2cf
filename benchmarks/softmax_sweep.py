"""Softmax tile-config sweep: GB/s of every config the autotuner would try, per shape.

    python benchmarks/softmax_sweep.py [--shapes 8192x256,2048x32768] [--dtypes float32,bfloat16]

For each shape and dtype prints torch.softmax, our heuristic's pick, and each
candidate (block_m, block_n, occupancy, warps) of tilegym_cutile_rs's search space, as GB/s
of the kernel's own duration (CUPTI through torch.profiler, L2 flushed before each
call, host launch time excluded: it does not depend on the config); the best
config is marked. The
heuristic in ops/softmax.py is fitted to tables this script printed. Every
config is compiled (and checked against torch) first, on a thread pool: the
library call releases the GIL and tileiras runs as a child process.
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ThreadPoolExecutor

import torch
from _timing import kernel_us
from tilegym_cutile_rs.ops import softmax as sm

SHAPES = "8192x256,8192x1024,8192x4096,4096x8192,4096x16384,2048x32768,256x256,256x2048,256x32768,256x9,256x1009"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--dtypes", default="float32,bfloat16,float16")
    args = parser.parse_args()
    cases = []
    for shape in args.shapes.split(","):
        m, n = (int(v) for v in shape.split("x"))
        for dtype_name in args.dtypes.split(","):
            x = torch.randn(m, n, device="cuda", dtype=getattr(torch, dtype_name))
            cases.append((shape, dtype_name, x, torch.softmax(x.float(), -1)))

    def compile_and_check(case, config) -> str | None:
        _, _, x, ref = case
        try:
            y = sm.softmax(x, config=config)
            torch.cuda.current_stream().synchronize()
            torch.testing.assert_close(y.float(), ref, rtol=2e-2, atol=1e-3)
        except Exception as exc:  # noqa: BLE001 - a rejected config is data
            return f"failed: {type(exc).__name__}: {str(exc)[:60]}"
        return None

    jobs = [(case, c) for case in cases for c in sm.softmax_candidates(case[2].shape[0], case[2].shape[1], case[2].dtype)]
    with ThreadPoolExecutor(max_workers=max(2, (os.cpu_count() or 4) - 2)) as pool:
        failures = dict(zip([(id(case[2]), c) for case, c in jobs], pool.map(lambda job: compile_and_check(*job), jobs), strict=True))
    print(f"device: {torch.cuda.get_device_name()}; {len(jobs)} configs compiled\n")
    print("| shape | dtype | torch | heuristic | best | configs (block_m, block_n, occupancy, warps): GB/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for case in cases:
        shape, dtype_name, x, _ = case
        m, n = x.shape
        nbytes = 2 * x.numel() * x.element_size()

        def gbs(fn, nbytes: int = nbytes) -> float:
            return nbytes / (kernel_us(fn, reps=10, flush=True) * 1e-6) / 1e9

        results: dict = {}
        for config in sm.softmax_candidates(m, n, x.dtype):
            failed = failures[(id(x), config)]
            results[config] = failed if failed else gbs(lambda c=config, x=x: sm.softmax(x, config=c))
        timed = {c: v for c, v in results.items() if isinstance(v, float)}
        best = max(timed, key=timed.__getitem__)
        heuristic = sm.softmax_config(m, n, x.dtype)
        cells = ", ".join(
            f"{'**' if c == best else ''}{c}: {v:.0f}{'**' if c == best else ''}" if isinstance(v, float) else f"{c}: {v}"
            for c, v in sorted(results.items())
        )
        print(f"| {shape} | {dtype_name} | {gbs(lambda x=x: torch.softmax(x, -1)):.0f} | {heuristic}: "
              f"{timed.get(heuristic, float('nan')):.0f} | {best}: {timed[best]:.0f} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
