"""swiglu / silu_and_mul throughput against the peers a user has, forward and backward,
in one process on the same inputs.

    python benchmarks/swiglu_bench.py [--rounds R] [--shapes MxH,...] [--dtypes D,...] [--rows I,J] [--budget S]

Prints one markdown table per direction. GB/s = bytes read and written / time: forward
reads a and b and writes y (3 * M * H elements), backward reads dy, a and b and writes
da and db (5 * M * H). Times from triton.testing.do_bench (L2 flushed between runs) when
Triton is installed, else CUDA events; each column takes --rounds rounds in turn and keeps
its best. Peers, each where it runs here: eager torch (`F.silu(a) * b`, autograd's
backward), `torch.compile` of the same, cuTile Python through TileGym (backend "cutile",
`get_swiglu()`), Liger-Kernel's fused Triton SiLU-mul. "copy" is a device-to-device
copy of the same bytes (`dst.copy_(src)`), the bandwidth ceiling of the same run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import tilegym_cutile_rs
import torch
import torch.nn.functional as F
from _timing import Rows, bench_timer, table_head

# LLM MLP widths (Llama-3 8B: 14336, Llama-2 7B: 11008) at prefill and decode, and
# TileGym's silu_and_mul perf shapes (64 x 1024 tokens, hidden 512-8192).
SHAPES = [(4096, 14336), (16384, 14336), (4096, 11008), (1, 11008), (128, 14336)]
SHAPES += [(65536, h) for h in (512, 1024, 4096, 8192)]
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
Pair = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _eager(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(a) * b


def peers() -> dict[str, Pair]:
    """Each peer's swiglu(a, b), with autograd; the ones that cannot run here are left out."""
    found: dict[str, Pair] = {"torch": _eager}
    try:
        compiled = torch.compile(_eager)
        x = torch.randn(8, 64, device="cuda", requires_grad=True)
        compiled(x, x).sum().backward()
        found["torch.compile"] = compiled
    except Exception as exc:  # noqa: BLE001 - any failure means the peer is unavailable here
        print(f"(torch.compile unavailable: {type(exc).__name__}: {exc})", file=sys.stderr)
    try:
        import tilegym

        tilegym.set_backend("cutile")
        cutile = tilegym.ops.get_swiglu()
        x = torch.randn(8, 64, device="cuda", requires_grad=True)
        cutile(x, x).sum().backward()
        found["cutile-python"] = cutile
    except Exception as exc:  # noqa: BLE001
        print(f"(cuTile Python via TileGym unavailable: {type(exc).__name__}: {exc})", file=sys.stderr)
    try:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction

        found["liger"] = LigerSiLUMulFunction.apply
    except Exception as exc:  # noqa: BLE001
        print(f"(Liger-Kernel unavailable: {type(exc).__name__}: {exc})", file=sys.stderr)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", help="MxH,... (default: LLM MLP and TileGym shapes)")
    parser.add_argument("--dtypes", default="bfloat16,float16,float32")
    Rows.add_arguments(parser)
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    rows = Rows.from_args(args, [(d, m, h, dt) for d in ("forward", "backward") for m, h in shapes for dt in args.dtypes.split(",")])
    bench = bench_timer()
    fns = {**peers(), "ours": tilegym_cutile_rs.swiglu}
    names = [n for n in fns if n != "ours"]
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    heading = None
    for direction, m, h, dtype_name in rows:
        if direction != heading:
            heading = direction
            table_head(direction, ["M x H", "dtype", "copy", *names, "ours", "ours / best peer", "ours / copy"])
        dtype = DTYPES[dtype_name]
        a = torch.randn(m, h, device="cuda", dtype=dtype, requires_grad=direction == "backward")
        b = torch.randn(m, h, device="cuda", dtype=dtype, requires_grad=direction == "backward")
        dy = torch.randn(m, h, device="cuda", dtype=dtype)
        elements = (3 if direction == "forward" else 5) * m * h
        nbytes = elements * a.element_size()
        src = torch.empty(nbytes // 2, dtype=torch.int8, device="cuda")
        dst = torch.empty_like(src)
        calls: dict[str, Callable[[], Any]] = {"copy": lambda dst=dst, src=src: dst.copy_(src)}
        for name, fn in fns.items():
            if direction == "forward":
                calls[name] = lambda fn=fn, a=a, b=b: fn(a, b)
            else:
                y = fn(a, b)  # the graph once; each timed call runs only the backward
                calls[name] = lambda y=y, a=a, b=b, dy=dy: torch.autograd.grad(y, (a, b), dy, retain_graph=True)
        gbs = dict.fromkeys(calls, 0.0)
        for _ in range(args.rounds):
            for name, call in calls.items():
                with torch.set_grad_enabled(direction == "backward"):
                    ms = bench(call)
                gbs[name] = max(gbs[name], nbytes / (ms * 1e-3) / 1e9)
        best = max(gbs[n] for n in names)
        cells = " | ".join(f"{gbs[n]:.0f}" for n in names)
        print(
            f"| {m} x {h} | {dtype_name} | {gbs['copy']:.0f} | {cells} | {gbs['ours']:.0f} | "
            f"{gbs['ours'] / best:.2f}x | {gbs['ours'] / gbs['copy']:.2f} |",
            flush=True,
        )
        del a, b, dy, src, dst, calls
        torch.cuda.empty_cache()
    rows.report()


if __name__ == "__main__":
    main()
