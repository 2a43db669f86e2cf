"""Timing helpers the benchmark scripts share (imported from the script's directory)."""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


@functools.cache
def flush_buffer() -> torch.Tensor:
    """256 MiB to zero before a timed call: more than the H200's L2, as triton.testing flushes."""
    return torch.empty(256 << 20, dtype=torch.int8, device="cuda")


def copy_call(nbytes: int) -> Callable[[], Any]:
    """A device-to-device copy that reads and writes `nbytes` in all (`dst.copy_(src)`): the
    bandwidth ceiling a memory-bound row is compared with, in the same run."""
    src = torch.empty(nbytes // 2, dtype=torch.int8, device="cuda")
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def compiled_peer(fn: Callable[..., Any]) -> Callable[..., Any]:
    """torch.compile(fn) for a benchmark's column. Each row is a shape, dtype or grad mode of
    its own, and past dynamo's recompile limit (8 by default) the function runs eagerly: the
    column then times eager torch without a word but a log warning (the tables before
    2026-12-07 did from the 9th compile on). The limits are raised for this process."""
    import torch._dynamo.config as dynamo

    dynamo.recompile_limit = max(dynamo.recompile_limit, 1 << 12)
    dynamo.accumulated_recompile_limit = max(dynamo.accumulated_recompile_limit, 1 << 14)
    return torch.compile(fn)


def host_us_per_call(fns: dict[str, Callable[[], Any]], calls: int, warmup: int, rounds: int = 10) -> dict[str, float]:
    """Host us per call of each of fns: the best of `rounds` rounds of calls // rounds calls
    each, after `warmup` calls, the GPU drained around each round. The fns take turns round by
    round, so a slow spell of the host (this machine's host timings move by 2x between runs)
    hits them alike and their ratio holds; the best round is the one other load disturbed least
    (as timeit advises). For calls whose GPU work is shorter than their host time (1x256), so
    the GPU never holds the host back."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    per_round = max(1, calls // rounds)
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(per_round):
                fn()
            torch.cuda.synchronize()
            best[name] = min(best[name], (time.perf_counter() - t0) / per_round * 1e6)
    return best


def kernel_us(fn: Callable[[], Any], reps: int, flush: bool) -> float:
    """Mean duration (CUPTI, through torch.profiler) of the one softmax kernel a call of fn
    launches; with `flush`, the L2 is flushed before each call (the flush kernel is not counted)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            if flush:
                flush_buffer().zero_()
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    durations = [e.device_time for e in kernels if "softmax" in e.name.lower()]
    if len(durations) != reps:  # a kernel name without "softmax": everything but the flush
        durations = [e.device_time for e in kernels if "fill" not in e.name.lower()]
    if len(durations) != reps:
        raise RuntimeError(f"expected {reps} softmax kernels in the profile, found {len(durations)}")
    return sum(durations) / reps


def bench_timer() -> Callable[[Callable[[], Any]], float]:
    """ms per call of a function: triton.testing.do_bench (L2 flushed between runs) when
    Triton is installed, else the median of 20 CUDA-event timings after 5 warm-up calls."""
    try:
        from triton.testing import do_bench

        return lambda fn: do_bench(fn, warmup=25, rep=100)
    except ImportError:

        def events(fn: Callable[[], Any]) -> float:
            for _ in range(5):
                fn()
            times = []
            for _ in range(20):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            return statistics.median(times)

        return events


def best_gbs(calls: dict[str, Callable[[], Any]], rounds: int, bench: Callable[[Callable[[], Any]], float], nbytes: int,
             grad: bool = False) -> dict[str, float]:
    """GB/s of each call moving `nbytes`: `rounds` rounds, the calls taking their turns in each
    (so a slow spell of the machine hits them alike), each keeping its best; autograd on with `grad`."""
    gbs = dict.fromkeys(calls, 0.0)
    for _ in range(rounds):
        for name, call in calls.items():
            with torch.set_grad_enabled(grad):
                ms = bench(call)
            gbs[name] = max(gbs[name], nbytes / (ms * 1e-3) / 1e9)
    return gbs


def bandwidth_row(labels: list[str], gbs: dict[str, float], peers: list[str], wrong: set[str]) -> str:
    """A memory-bound table's row: the labels, "copy", each peer's GB/s ("wrong" where it
    disagreed with the reference, and then not ranked), ours, ours / best peer, ours / copy."""
    ranked = [gbs[n] for n in peers if n not in wrong]
    best = max(ranked) if ranked else float("nan")
    ours = gbs.get("ours", 0.0)
    cells = [f"{gbs['copy']:.0f}", *("wrong" if n in wrong else f"{gbs[n]:.0f}" for n in peers),
             "wrong" if "ours" in wrong else f"{ours:.0f}", f"{ours / best:.2f}x", f"{ours / gbs['copy']:.2f}"]
    return "| " + " | ".join([*labels, *cells]) + " |"


def table_head(title: str, columns: list[str]) -> None:
    """Print a markdown table's title and header lines."""
    print(f"\n### {title}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + " --- |" * len(columns))


class Rows:
    """A benchmark's rows under `--rows` and `--budget`: iterating yields the selected rows
    in order until the budget (seconds since construction) is spent; `report()` then prints
    the rows left unmeasured, so a cut table never passes for a whole one."""

    def __init__(self, rows: list[Any], selected: list[int] | None, budget: float | None) -> None:
        self.rows = rows
        self.selected = list(range(len(rows))) if selected is None else selected
        bad = [i for i in self.selected if not 0 <= i < len(rows)]
        if bad:
            raise SystemExit(f"--rows {bad}: this benchmark has rows 0 to {len(rows) - 1}")
        self.budget, self.started = budget, time.monotonic()
        self.unmeasured: list[Any] = []

    @staticmethod
    def add_arguments(parser: Any) -> None:
        parser.add_argument("--rows", type=lambda text: [int(i) for i in text.split(",")],
                            help="indices (from 0) of the rows to measure, in the order listed by --list-rows (default: all)")
        parser.add_argument("--budget", type=float, help="seconds; rows not started by then are listed as unmeasured")
        parser.add_argument("--list-rows", action="store_true", help="print the rows with their indices and exit")

    @classmethod
    def from_args(cls, args: Any, rows: list[Any]) -> Rows:
        if args.list_rows:
            for i, row in enumerate(rows):
                print(f"{i}: {row}")
            raise SystemExit(0)
        return cls(rows, args.rows, args.budget)

    def __iter__(self) -> Any:
        for position, i in enumerate(self.selected):
            if self.budget is not None and time.monotonic() - self.started > self.budget:
                self.unmeasured = [self.rows[j] for j in self.selected[position:]]
                return
            yield self.rows[i]

    def report(self) -> None:
        """Print which selected rows the budget left unmeasured (nothing when all were)."""
        if self.unmeasured:
            print(f"\nNOT MEASURED (budget {self.budget:g} s spent): {len(self.unmeasured)} of {len(self.selected)} rows: "
                  + ", ".join(map(str, self.unmeasured)), flush=True)
