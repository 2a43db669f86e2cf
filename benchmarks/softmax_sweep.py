"""Softmax tile-config sweep: GB/s of every config the autotuner would try, per shape.

    python benchmarks/softmax_sweep.py [--shapes 8192x256,2048x32768] [--dtypes float32,bfloat16]

For each shape and dtype prints torch.softmax, our heuristic's pick, and each
candidate (block_m, block_n, occupancy) of tilegym_cutile_rs's search space, timed
with triton.testing.do_bench (L2 flushed); the best config is marked. The
heuristic in ops/softmax.py is fitted to tables this script printed.
"""

from __future__ import annotations

import argparse

import torch
from triton.testing import do_bench

from tilegym_cutile_rs.ops import softmax as sm

BRIEF_SHAPES = "8192x256,8192x1024,8192x4096,2048x32768"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=BRIEF_SHAPES)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    args = parser.parse_args()
    print(f"device: {torch.cuda.get_device_name()}\n")
    print("| shape | dtype | torch | heuristic | best | configs (block_m, block_n, occupancy): GB/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for shape in args.shapes.split(","):
        m, n = (int(v) for v in shape.split("x"))
        for dtype_name in args.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            nbytes = 2 * x.numel() * x.element_size()

            def gbs(fn) -> float:
                return nbytes / (do_bench(fn, warmup=25, rep=100) * 1e-3) / 1e9

            ref = torch.softmax(x.float(), -1)
            results = {}
            for config in sm.softmax_candidates(m, n, x.element_size()):
                try:
                    y = sm.softmax(x, config=config)
                    torch.testing.assert_close(y.float(), ref, rtol=2e-2, atol=1e-3)
                    results[config] = gbs(lambda c=config: sm.softmax(x, config=c))
                except Exception as exc:  # noqa: BLE001 - a rejected config is data
                    results[config] = f"failed: {type(exc).__name__}: {str(exc)[:60]}"
            timed = {c: v for c, v in results.items() if isinstance(v, float)}
            best = max(timed, key=timed.__getitem__)
            heuristic = sm.softmax_config(m, n, x.element_size())
            cells = ", ".join(
                f"{'**' if c == best else ''}{c}: {v:.0f}{'**' if c == best else ''}" if isinstance(v, float) else f"{c}: {v}"
                for c, v in sorted(results.items())
            )
            print(f"| {shape} | {dtype_name} | {gbs(lambda: torch.softmax(x, -1)):.0f} | {heuristic}: "
                  f"{timed.get(heuristic, float('nan')):.0f} | {best}: {timed[best]:.0f} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
