"""What a torch operator call costs by registration route, the choice behind docs/design.md,
"Torch operators"; and the check every eager call of ours pays.

    python benchmarks/torch_op_bench.py [--calls N] [--rows I,J] [--budget S] [--list-rows]

Two operators with the same trivial CPU kernel (returns a new empty tensor like its input,
as our kernels allocate their output), one defined through
`torch.library.Library` (define/impl, as vLLM's direct_register_custom_op and as we do),
one through `torch.library.custom_op`, each called through `torch.ops`, eagerly, as a
compiled graph's extern call would. Then the calls our eager path makes instead:
`tilegym_cutile_rs._op.is_compiling()` and, for scale, a bare Python function call.
Needs no GPU. Prints microseconds per call (median of 7 rounds) and the ratio to the
Library route.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from _timing import Rows


def per_call(fn: Callable[[], Any], calls: int) -> float:
    rounds = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - t0) / calls)
    return statistics.median(rounds) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20000)
    Rows.add_arguments(parser)
    args = parser.parse_args()

    lib = torch.library.Library("tilegym_bench", "FRAGMENT")  # type: ignore[no-untyped-call]
    lib.define("direct(Tensor x) -> Tensor")
    lib.impl("direct", torch.empty_like, "CPU")

    @torch.library.custom_op("tilegym_bench::wrapped", mutates_args=())  # type: ignore[misc]
    def wrapped(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    from tilegym_cutile_rs import _torch_ops

    x = torch.empty(4)
    calls: dict[str, Any] = {
        "torch.library.Library define/impl (ours)": lambda: torch.ops.tilegym_bench.direct(x),
        "torch.library.custom_op": lambda: torch.ops.tilegym_bench.wrapped(x),
        "our eager check, _torch_ops.is_compiling()": _torch_ops.is_compiling,
        "a bare Python call (lambda: None)": lambda: None,
    }
    rows = Rows.from_args(args, list(calls))
    base = None
    print("| call | us per call | vs Library route |")
    print("| --- | --- | --- |")
    for name in rows:
        us = per_call(calls[name], args.calls)
        if name == "torch.library.Library define/impl (ours)":
            base = us
        print(f"| {name} | {us:.2f} | {f'{us / base:.2f}x' if base else '-'} |", flush=True)
    rows.report()


if __name__ == "__main__":
    main()
