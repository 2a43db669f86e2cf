"""Host time of pieces of the ops' per-call fast paths (output allocations, rope's plan key),
the form they had against the form they use now, on this machine's CPU (no GPU needed: this
Python and dispatcher cost is host time a launch-bound call pays).

    python benchmarks/fast_path_host_bench.py [--number N]

Prints a markdown table of microseconds a call, the best of 7 repeats of N calls, on CPU
tensors of a decode step's shapes (rope: 32 q and 8 k heads of 128, one position).
"""

from __future__ import annotations

import argparse
import timeit

import torch
from tilegym_cutile_rs.ops import rope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=50000)
    number = parser.parse_args().number
    q = torch.empty(1, 1, 32, 128, dtype=torch.bfloat16).transpose(1, 2)
    k = torch.empty(1, 1, 8, 128, dtype=torch.bfloat16).transpose(1, 2)

    def empty_then_transpose() -> tuple[torch.Tensor, torch.Tensor]:
        b, hq, s, d = q.shape
        return (torch.empty((b, s, hq, d), dtype=q.dtype, device=q.device).transpose(1, 2),
                torch.empty((b, s, k.shape[1], d), dtype=k.dtype, device=k.device).transpose(1, 2))

    cos = sin = torch.empty(1, 1, 128, dtype=torch.bfloat16)
    forms = {
        "rope's two outputs: torch.empty, then transpose (before)": empty_then_transpose,
        "rope's two outputs: new_empty_strided (now)": lambda: rope._outputs(q, k),
        "one output: torch.empty(shape, dtype=, device=) (before)": lambda: torch.empty((1, 4096), dtype=q.dtype, device=q.device),
        "one output: x.new_empty(shape) (now)": lambda: q.new_empty((1, 4096)),
        "rope's plan key: a generator over the four tensors (before)":
            lambda: ("call", None, *((t.shape, t.stride(), t.dtype, t.get_device()) for t in (q, k, cos, sin))),
        "rope's plan key: spelt out (now)": lambda: rope._layout_key("call", None, q, k, cos, sin),
    }
    print(f"torch {torch.__version__}, best of 7 x {number} calls\n")
    print("| piece | us a call |\n| --- | --- |")
    for name, form in forms.items():
        print(f"| {name} | {min(timeit.repeat(form, number=number, repeat=7)) / number * 1e6:.2f} |")


if __name__ == "__main__":
    main()
