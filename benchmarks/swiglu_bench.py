"""swiglu / silu_and_mul throughput against the peers a user has, forward and backward,
in one process on the same inputs.

    python benchmarks/swiglu_bench.py [--ops swiglu,silu_and_mul] [--rounds R] [--shapes MxH,...]
                                      [--dtypes D,...] [--rows I,J] [--budget S] [--list-rows]

Prints one markdown table per op and direction. swiglu(a, b) takes a and b of [M, H];
silu_and_mul(x) takes x of [M, 2H] holding both halves. GB/s = bytes read and written /
time: forward reads a and b (or x) and writes y (3 * M * H elements), backward reads dy, a
and b (or x) and writes da and db (or dx) (5 * M * H). Times from triton.testing.do_bench (L2
flushed between runs) when Triton is installed, else CUDA events; each column takes --rounds
rounds in turn and keeps its best. Peers, each where it runs here: eager torch
(`F.silu(a) * b`, autograd's backward), `torch.compile` of the same, cuTile Python through
TileGym (backend "cutile": `get_swiglu()`, `silu_and_mul`), Liger-Kernel's fused Triton
SiLU-mul (`LigerSiLUMulFunction`; for silu_and_mul on x's two halves, which its
`ensure_contiguous` copies first: Liger has no packed form). "copy" is a device-to-device
copy of the same bytes (`dst.copy_(src)`), the bandwidth ceiling of the same run. Every
peer's forward is checked against a float32 reference on each row before it is timed; one
that disagrees is shown as "wrong" and not ranked. Peers that cannot run here are named
under the device line, with the reason.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import tilegym_cutile_rs
import torch
import torch.nn.functional as F
from _timing import Rows, bandwidth_row, bench_timer, best_gbs, compiled_peer, copy_call, table_head

# LLM MLP widths (Llama-3 8B: 14336, Llama-2 7B: 11008) at prefill and decode, and
# TileGym's silu_and_mul perf shapes (64 x 1024 tokens, hidden 512-8192).
SHAPES = [(4096, 14336), (16384, 14336), (4096, 11008), (1, 11008), (128, 14336)]
SHAPES += [(65536, h) for h in (512, 1024, 4096, 8192)]
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
OPS = ("swiglu", "silu_and_mul")
Fn = Callable[..., torch.Tensor]


def _eager(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(a) * b


def _eager_packed(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return F.silu(x[..., :h]) * x[..., h:]


def peers(op: str, missing: dict[str, str]) -> dict[str, Fn]:
    """Each peer's `op` (swiglu(a, b) or silu_and_mul(x)), with autograd; the ones that cannot
    run here go to `missing` with the reason."""
    eager = _eager if op == "swiglu" else _eager_packed
    found: dict[str, Fn] = {"torch": eager}
    probe = (torch.randn(8, 64, device="cuda", requires_grad=True),) * (2 if op == "swiglu" else 1)
    try:
        compiled = compiled_peer(eager)
        compiled(*probe).sum().backward()
        found["torch.compile"] = compiled
    except Exception as exc:  # noqa: BLE001 - any failure means the peer is unavailable here
        missing["torch.compile"] = f"{type(exc).__name__}: {exc}"
    try:
        import tilegym

        tilegym.set_backend("cutile")
        cutile = tilegym.ops.get_swiglu() if op == "swiglu" else tilegym.ops.silu_and_mul
        cutile(*probe).sum().backward()
        found["cutile-python"] = cutile
    except Exception as exc:  # noqa: BLE001
        missing["cutile-python"] = f"{type(exc).__name__}: {exc}"
    try:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction

        liger: Fn = LigerSiLUMulFunction.apply
        found["liger"] = liger if op == "swiglu" else (lambda x: liger(x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]))
    except Exception as exc:  # noqa: BLE001
        missing["liger"] = f"{type(exc).__name__}: {exc}"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", help="MxH,... (default: LLM MLP and TileGym shapes)")
    parser.add_argument("--dtypes", default="bfloat16,float16,float32")
    Rows.add_arguments(parser)
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    rows = Rows.from_args(args, [(op, d, m, h, dt) for op in args.ops.split(",") for d in ("forward", "backward")
                                 for m, h in shapes for dt in args.dtypes.split(",")])
    bench = bench_timer()
    missing: dict[str, dict[str, str]] = {}
    tables = {op: {**peers(op, missing.setdefault(op, {})), "ours": getattr(tilegym_cutile_rs, op)} for op in args.ops.split(",")}
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for op, left_out in missing.items():
        for name, why in left_out.items():
            print(f"{op}: peer {name} not available here ({why[:200]})")
    print()
    heading = None
    for op, direction, m, h, dtype_name in rows:
        fns = tables[op]
        names = [n for n in fns if n != "ours"]
        if (op, direction) != heading:
            heading = (op, direction)
            table_head(f"{op} {direction}", ["M x H", "dtype", "copy", *names, "ours", "ours / best peer", "ours / copy"])
        dtype = DTYPES[dtype_name]
        grad = direction == "backward"
        if op == "swiglu":
            inputs = tuple(torch.randn(m, h, device="cuda", dtype=dtype, requires_grad=grad) for _ in range(2))
        else:
            inputs = (torch.randn(m, 2 * h, device="cuda", dtype=dtype, requires_grad=grad),)
        dy = torch.randn(m, h, device="cuda", dtype=dtype)
        with torch.no_grad():
            ref = (_eager if op == "swiglu" else _eager_packed)(*(t.float() for t in inputs))
        elements = (3 if direction == "forward" else 5) * m * h
        nbytes = elements * inputs[0].element_size()
        calls: dict[str, Callable[[], Any]] = {"copy": copy_call(nbytes)}
        wrong: set[str] = set()
        for name, fn in fns.items():
            try:
                with torch.no_grad():
                    torch.testing.assert_close(fn(*inputs).float(), ref, rtol=2e-2, atol=2e-2)
            except AssertionError as exc:
                print(f"({name} disagrees with the float32 reference on {op} {m} x {h} {dtype_name}: {str(exc)[:300]})",
                      file=sys.stderr)
                wrong.add(name)
                continue
            if direction == "forward":
                calls[name] = lambda fn=fn, inputs=inputs: fn(*inputs)
            else:
                y = fn(*inputs)  # the graph once; each timed call runs only the backward
                calls[name] = lambda y=y, inputs=inputs, dy=dy: torch.autograd.grad(y, inputs, dy, retain_graph=True)
        gbs = best_gbs(calls, args.rounds, bench, nbytes, grad)
        print(bandwidth_row([f"{m} x {h}", dtype_name], gbs, names, wrong), flush=True)
        del inputs, dy, calls, ref
        torch.cuda.empty_cache()
    rows.report()


if __name__ == "__main__":
    main()
