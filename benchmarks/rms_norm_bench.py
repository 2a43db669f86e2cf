"""rms_norm throughput against the peers a user has, forward and backward, in one process on
the same inputs.

    python benchmarks/rms_norm_bench.py [--rounds R] [--shapes MxN,...] [--dtypes D,...]
                                        [--rows I,J] [--budget S] [--list-rows]

Prints one markdown table per direction. GB/s = bytes read and written / time: forward
reads x and writes y (2 * M * N elements; the weight's N is left out), backward reads dy and
x and writes dx (3 * M * N; dweight's partial sums left out). Times from
triton.testing.do_bench (L2 flushed between runs) when Triton is installed, else CUDA
events; each column takes --rounds rounds in turn and keeps its best. Peers, each where it
runs here: eager torch (transformers' LlamaRMSNorm arithmetic: float32 normalisation,
`weight * x.to(dtype)`, autograd's backward), `torch.compile` of the same, cuTile Python
through TileGym (backend "cutile": `tilegym.ops.rms_norm`), Liger-Kernel's `LigerRMSNorm`
module (its defaults: casting mode "llama", in-place backward) and quack's `rmsnorm`.
"copy" is a device-to-device copy of the same bytes, the bandwidth ceiling of the same run.
Every peer's forward is checked against a float32 reference on each row before it is
timed; one that disagrees is shown as "wrong" and not ranked. Peers that cannot run here
are named under the device line, with the reason.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import tilegym_cutile_rs
import torch
from _timing import Rows, bandwidth_row, bench_timer, best_gbs, compiled_peer, copy_call, table_head

# LLM hidden sizes (Llama 3 8B / 70B, Qwen 2 7B, GPT-OSS) at prefill / training batches and a
# decode step, and a per-head size (q/k norms: 128).
SHAPES = [(4096, 4096), (16384, 4096), (4096, 8192), (16384, 8192), (4096, 2880), (4096, 3584), (1, 4096), (128, 4096),
          (65536, 128)]
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
EPS = 1e-6
Fn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _eager(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


def peers(missing: dict[str, str]) -> dict[str, Fn]:
    """Each peer as f(x, weight), with autograd; the ones that cannot run here go to
    `missing` with the reason."""
    found: dict[str, Fn] = {"torch": _eager}
    probe = (torch.randn(8, 64, device="cuda", requires_grad=True), torch.ones(64, device="cuda", requires_grad=True))
    try:
        compiled = compiled_peer(_eager)
        compiled(*probe).sum().backward()
        found["torch.compile"] = compiled
    except Exception as exc:  # noqa: BLE001 - any failure means the peer is unavailable here
        missing["torch.compile"] = f"{type(exc).__name__}: {exc}"
    try:
        import tilegym

        tilegym.set_backend("cutile")

        def cutile(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return tilegym.ops.rms_norm(x, None, w, EPS)

        cutile(*probe).sum().backward()
        found["cutile-python"] = cutile
    except Exception as exc:  # noqa: BLE001
        missing["cutile-python"] = f"{type(exc).__name__}: {exc}"
    try:
        from liger_kernel.transformers.rms_norm import LigerRMSNorm

        modules: dict[tuple[int, torch.dtype], Any] = {}

        def liger(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            module = modules.get((w.data_ptr(), w.dtype))
            if module is None:  # its module, reading this very weight (so its gradient is w's)
                module = modules[(w.data_ptr(), w.dtype)] = LigerRMSNorm(w.shape[0], eps=EPS).to(w.device, w.dtype)
                del module.weight
                module.weight = w
            return module(x)  # type: ignore[no-any-return]

        liger(*probe).sum().backward()
        found["liger"] = liger
    except Exception as exc:  # noqa: BLE001
        missing["liger"] = f"{type(exc).__name__}: {exc}"
    try:
        from quack.rmsnorm import rmsnorm  # type: ignore[import-not-found]

        def quack(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return rmsnorm(x, w, eps=EPS)  # type: ignore[no-any-return]

        quack(*probe).sum().backward()
        found["quack"] = quack
    except Exception as exc:  # noqa: BLE001
        missing["quack"] = f"{type(exc).__name__}: {exc}"
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shapes", help="MxN,... (default: LLM hidden sizes)")
    parser.add_argument("--dtypes", default="bfloat16,float16,float32")
    Rows.add_arguments(parser)
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    rows = Rows.from_args(args, [(d, m, n, dt) for d in ("forward", "backward") for m, n in shapes for dt in args.dtypes.split(",")])
    # Each timed backward reruns one graph (retain_graph=True), which torch.compile's donated
    # buffers refuse (a harness defect fix: the peer's code and config are unchanged).
    import torch._functorch.config

    torch._functorch.config.donated_buffer = False
    bench = bench_timer()
    missing: dict[str, str] = {}
    fns: dict[str, Fn] = {**peers(missing), "ours": lambda x, w: tilegym_cutile_rs.rms_norm(x, w, EPS)}
    names = [n for n in fns if n != "ours"]
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, why in missing.items():
        print(f"peer {name} not available here ({why[:200]})")
    print()
    heading = None
    for direction, m, n, dtype_name in rows:
        if direction != heading:
            heading = direction
            table_head(f"rms_norm {direction}", ["M x N", "dtype", "copy", *names, "ours", "ours / best peer", "ours / copy"])
        dtype = DTYPES[dtype_name]
        grad = direction == "backward"
        x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=grad)
        w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dtype).requires_grad_(grad)
        dy = torch.randn(m, n, device="cuda", dtype=dtype)
        with torch.no_grad():
            xf = x.float()
            ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()
        nbytes = (2 if direction == "forward" else 3) * m * n * x.element_size()
        calls: dict[str, Callable[[], Any]] = {"copy": copy_call(nbytes)}
        wrong: set[str] = set()
        for name, fn in fns.items():
            try:
                with torch.no_grad():
                    torch.testing.assert_close(fn(x, w).float(), ref, rtol=2e-2, atol=5e-2)
            except Exception as exc:  # noqa: BLE001 - a peer that fails on this row is not ranked on it
                print(f"({name} fails or disagrees with the float32 reference on {m} x {n} {dtype_name}: {str(exc)[:300]})",
                      file=sys.stderr)
                wrong.add(name)
                continue
            if direction == "forward":
                calls[name] = lambda fn=fn, x=x, w=w: fn(x, w)
            else:
                y = fn(x, w)  # the graph once; each timed call runs only the backward
                calls[name] = lambda y=y, x=x, w=w, dy=dy: torch.autograd.grad(y, (x, w), dy, retain_graph=True)
        gbs = best_gbs(calls, args.rounds, bench, nbytes, grad)
        print(bandwidth_row([f"{m} x {n}", dtype_name], gbs, names, wrong), flush=True)
        del x, w, dy, calls, ref
        torch.cuda.empty_cache()
    rows.report()


if __name__ == "__main__":
    main()
