"""matmul / bmm throughput against the peers a user has, in one process on the same inputs.

    python benchmarks/matmul_bench.py [--rounds R] [--dtypes D,...] [--rows I,J] [--budget S] [--list-rows]

Prints a markdown table: TFLOP/s = 2 * B * M * N * K / time, timed with
triton.testing.do_bench (L2 flushed between runs) when Triton is installed, else CUDA
events; each column takes --rounds rounds in turn and keeps its best. Rows where cuBLAS
takes under HOST_JUDGED_US of GPU time are launch-bound, and judged by the cost of a call
instead: for those the last columns give cuBLAS's and our microseconds per call, back to back
(`_timing.host_us_per_call`: the host's time, or the GPU's where it is longer), and their ratio. Peers, each where it
runs here: torch.matmul / torch.bmm (cuBLAS), cuTile Python through TileGym (backend
"cutile"), and a Triton GEMM in the style of Triton's matmul tutorial (grouped tile order).
Shapes: TileGym's matmul and bmm tests, 4096^3 and 8192^3, and LLM projections:
M in {1, 16, 128, 4096} tokens times (K, N) in {(4096, 14336), (14336, 4096), (4096, 128256)}.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import tilegym_cutile_rs
import torch
from _timing import Rows, bench_timer, host_us_per_call, table_head

MATMUL = [(1024, 1024, 1024), (1024, 1024, 1023), (8192, 8192, 8192), (8, 8, 8), (3072, 6144, 2720), (4096, 4096, 4096)]
MATMUL += [(m, n, k) for m in (1, 16, 128, 4096) for k, n in ((4096, 14336), (14336, 4096), (4096, 128256))]
BMM = [(4, m, n, k) for m in (128, 1024) for n in (256, 512) for k in (511, 1024)] + [(64, 4096, 4096, 128)]  # attention-sized
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
# Below this much cuBLAS GPU time a row is judged by the cost of a call (the GEMM issue's rule).
HOST_JUDGED_US = 10.0
Product = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def triton_matmul() -> Product | None:
    """A Triton GEMM (2-D operands), grouped tile order as Triton's tutorial teaches; None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def kernel(a, b, c, m, n, k, sam, sak, sbk, sbn, scm, scn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):  # fmt: skip
        pid = tl.program_id(0)
        tiles_m, tiles_n = tl.cdiv(m, BM), tl.cdiv(n, BN)
        group = pid // (GROUP * tiles_n)
        first_m = group * GROUP
        rows_in_group = min(tiles_m - first_m, GROUP)
        tile_m = first_m + (pid % (GROUP * tiles_n)) % rows_in_group
        tile_n = (pid % (GROUP * tiles_n)) // rows_in_group
        rm = tile_m * BM + tl.arange(0, BM)
        rn = tile_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, tl.cdiv(k, BK)):
            kk = k0 * BK + rk
            ta = tl.load(a + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < m) & (kk[None, :] < k), other=0.0)
            tb = tl.load(b + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < k) & (rn[None, :] < n), other=0.0)
            acc = tl.dot(ta, tb, acc)
        tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(c.dtype.element_ty), mask=(rm[:, None] < m) & (rn[None, :] < n))

    def run(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        m, k = a.shape
        n = b.shape[1]
        c = torch.empty(m, n, device=a.device, dtype=a.dtype)
        grid = (triton.cdiv(m, 128) * triton.cdiv(n, 128),)
        kernel[grid](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), BM=128, BN=128, BK=64, GROUP=8,
                     num_warps=8, num_stages=3)  # fmt: skip
        return c

    return run


def tilegym_cutile() -> tuple[Product, Product] | None:
    try:
        import tilegym

        tilegym.set_backend("cutile")
        mm, bmm = tilegym.ops.matmul, tilegym.ops.bmm
        x = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
        mm(x, x)
        bmm(x[None], x[None])
    except Exception as exc:  # noqa: BLE001 - any failure means the peer is unavailable here
        print(f"(cuTile Python via TileGym unavailable: {type(exc).__name__}: {exc})", file=sys.stderr)
        return None
    return mm, bmm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtypes", default="bfloat16")
    Rows.add_arguments(parser)
    args = parser.parse_args()
    rows = Rows.from_args(args, [(op, *shape, dt) for op, shapes in (("matmul", [(1, *s) for s in MATMUL]), ("bmm", BMM))
                                 for shape in shapes for dt in args.dtypes.split(",")])
    bench = bench_timer()
    cutile = tilegym_cutile()
    triton = triton_matmul()
    mm_fns: dict[str, Product] = {"cuBLAS": torch.matmul}
    bmm_fns: dict[str, Product] = {"cuBLAS": torch.bmm}
    if cutile is not None:
        mm_fns["cutile-python"], bmm_fns["cutile-python"] = cutile
    if triton is not None:
        mm_fns["triton"] = triton
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    tables = {"matmul": mm_fns, "bmm": bmm_fns}
    heading = None
    for op, batch, m, n, k, dtype_name in rows:
        fns = {**tables[op], "ours": getattr(tilegym_cutile_rs, op)}
        names = [n for n in fns if n != "ours"]
        if op != heading:
            heading = op
            table_head(op, ["B x M x N x K", "dtype", *names, "ours", "ours / best peer", "ours / cuBLAS",
                            "cuBLAS us / call", "ours us / call", "cuBLAS / ours, per call"])
        dtype = DTYPES[dtype_name]
        shape_a, shape_b = ((batch, m, k), (batch, k, n)) if op == "bmm" else ((m, k), (k, n))
        a = torch.randn(shape_a, device="cuda", dtype=dtype)
        b = torch.randn(shape_b, device="cuda", dtype=dtype)
        flops = 2 * batch * m * n * k
        tflops = dict.fromkeys(fns, 0.0)
        for _ in range(args.rounds):
            for name, fn in fns.items():
                try:
                    ms = bench(lambda fn=fn, a=a, b=b: fn(a, b))
                except Exception as exc:  # noqa: BLE001 - a peer that fails on a shape is left blank
                    print(f"({name} failed on {shape_a} x {shape_b}: {type(exc).__name__}: {exc})", file=sys.stderr)
                    continue
                tflops[name] = max(tflops[name], flops / (ms * 1e-3) / 1e12)
        best = max(tflops[n] for n in names) or float("nan")
        cells = " | ".join(f"{tflops[n]:.1f}" for n in names)
        per_call = "- | - | -"
        if tflops["cuBLAS"] and flops / tflops["cuBLAS"] / 1e6 < HOST_JUDGED_US:
            calls = {name: lambda a=a, b=b, fn=fns[name]: fn(a, b) for name in ("cuBLAS", "ours")}
            us = host_us_per_call(calls, calls=2000, warmup=50)
            per_call = f"{us['cuBLAS']:.1f} | {us['ours']:.1f} | {us['cuBLAS'] / us['ours']:.2f}x"
        print(
            f"| {batch} x {m} x {n} x {k} | {dtype_name} | {cells} | {tflops['ours']:.1f} | "
            f"{tflops['ours'] / best:.2f}x | {tflops['ours'] / tflops['cuBLAS']:.2f}x | {per_call} |",
            flush=True,
        )
        del a, b
        torch.cuda.empty_cache()
    rows.report()

if __name__ == "__main__":
    main()
