"""Softmax throughput against the peers a user has, in one process on the same inputs.

    python benchmarks/softmax_bench.py [--quick] [--rounds R] [--shapes MxN,...] [--dtypes D,...] [--rows I,J] [--budget S]

Prints a markdown table: GB/s = 2 * M * N * element size / kernel time (one
read, one write), timed with triton.testing.do_bench (L2 flushed between runs)
when Triton is installed, else CUDA events, the best of --rounds rounds that
the columns take in turn; our ratio to the best peer and to "copy", a device-to-device
copy of the same bytes (`dst.copy_(src)`), the bandwidth ceiling of the same run.
Default rows: the BRIEF's shapes, vocabulary-sized rows (4096 tokens x 32000 / 50257 /
128256 / 151936: what sampling runs) and TileGym's, each in float32, bfloat16 and float16.
Peers: torch.softmax, a Triton one-row-per-program softmax, and cuTile Python
through TileGym (`tilegym.ops.softmax`, backend "cutile") when importable.
Then (without --shapes) host time per call on a 1x256 tensor, and first-call
latency (JIT included) in a fresh process.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable

import tilegym_cutile_rs
import torch
from _peers import tilegym_cutile_softmax, triton_softmax
from _timing import Rows, bench_timer, copy_call, host_us_per_call

BRIEF_SHAPES = [(8192, 256), (8192, 1024), (8192, 4096), (2048, 32768)]
TILEGYM_SHAPES = [(256, 256), (256, 2048), (256, 32768), (256, 9), (256, 1009)]
VOCAB_SHAPES = [(4096, v) for v in (32000, 50257, 128256, 151936)]


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _shape_list(text: str) -> list[tuple[int, int]]:
    return [(int(m), int(n)) for m, n in (item.split("x") for item in text.split(","))]


def table_rows(shapes: list[tuple[int, int]], dtypes: list[torch.dtype]) -> list[tuple[int, int, torch.dtype]]:
    return [(m, n, dtype) for m, n in shapes for dtype in dtypes]


def throughput(rows: Rows, rounds: int) -> None:
    peers: dict[str, Callable[[torch.Tensor], torch.Tensor] | None] = {
        "torch": lambda x: torch.softmax(x, -1),
        "triton": triton_softmax(),
        "cutile-python": tilegym_cutile_softmax(),
    }
    peers = {k: v for k, v in peers.items() if v is not None}
    bench = bench_timer()
    cols = ["M x N", "dtype", "copy", *peers, "ours", "ours / best peer", "ours / copy"]
    print("| " + " | ".join(cols) + " |")
    print("|" + " --- |" * len(cols))
    for m, n, dtype in rows:
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        nbytes = 2 * x.numel() * x.element_size()
        copy = copy_call(nbytes)
        gbs = dict.fromkeys(["copy", *peers, "ours"], 0.0)
        # The columns take their rounds in turn and keep their best: the GPU's speed on
        # this machine drifts within a run (a peer's row moved 2x between runs when
        # each column was timed once), and a drift then hits every column alike.
        for _ in range(rounds):
            ms = bench(copy)
            gbs["copy"] = max(gbs["copy"], nbytes / (ms * 1e-3) / 1e9)
            for name, fn in [*peers.items(), ("ours", tilegym_cutile_rs.softmax)]:
                ms = bench(lambda fn=fn, x=x: fn(x))
                gbs[name] = max(gbs[name], nbytes / (ms * 1e-3) / 1e9)
        best = max(gbs[k] for k in peers)
        row = [f"{m} x {n}", str(dtype).replace("torch.", ""), f"{gbs['copy']:.0f}", *(f"{gbs[k]:.0f}" for k in peers),
               f"{gbs['ours']:.0f}", f"{gbs['ours'] / best:.2f}", f"{gbs['ours'] / gbs['copy']:.2f}"]
        print("| " + " | ".join(row) + " |", flush=True)
        del x, copy
        torch.cuda.empty_cache()
    rows.report()


def host_overhead(calls: int = 20000) -> None:
    x = torch.randn(1, 256, device="cuda")
    results = host_us_per_call({"torch.softmax": lambda: torch.softmax(x, -1), "ours": lambda: tilegym_cutile_rs.softmax(x)}, calls, warmup=100)
    print(f"\nhost time per call, 1x256 f32 (best of 10 rounds taken in turn, {calls} calls each): torch.softmax {results['torch.softmax']:.1f} us, "
          f"ours {results['ours']:.1f} us, ratio {results['ours'] / results['torch.softmax']:.2f}")


def first_call() -> None:
    code = textwrap.dedent(
        """
        import time, torch, tilegym_cutile_rs
        x = torch.randn(1000, 1000, device="cuda"); torch.cuda.synchronize()
        t0 = time.perf_counter(); tilegym_cutile_rs.softmax(x); torch.cuda.synchronize()
        t1 = time.perf_counter(); tilegym_cutile_rs.softmax(x); torch.cuda.synchronize()
        t2 = time.perf_counter()
        print(f"{(t1 - t0) * 1e3:.0f} {(t2 - t1) * 1e3:.2f}")
        """
    )
    with tempfile.TemporaryDirectory() as empty_cache:  # JIT included: nothing cached yet
        env = {**os.environ, "TILEGYM_CUTILE_RS_CACHE_DIR": empty_cache}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout.split()
    print(f"first call in a fresh process (1000x1000 f32, JIT included, empty kernel cache): {out[0]} ms; "
          f"second call {out[1]} ms (benchmarks/first_call_bench.py: warm cache)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="two shapes only")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per row, taken in turn; each column keeps its best (default 3)")
    parser.add_argument("--shapes", type=_shape_list, help="MxN,... instead of the BRIEF's and TileGym's shapes; the table only")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated, of " + ", ".join(DTYPES))
    Rows.add_arguments(parser)
    args = parser.parse_args()
    dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    shapes = args.shapes or (BRIEF_SHAPES[:2] if args.quick else BRIEF_SHAPES + VOCAB_SHAPES + TILEGYM_SHAPES)
    rows = Rows.from_args(args, table_rows(shapes, dtypes))
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    print(f"GB/s: the best of {args.rounds} rounds per column, the columns taking their rounds in turn\n")
    throughput(rows, args.rounds)
    if args.shapes is None and args.rows is None and not rows.unmeasured:
        host_overhead()
        first_call()


if __name__ == "__main__":
    main()
