"""attention_sink throughput against the peers a user has, in one process on the same inputs.

    python benchmarks/attention_sink_bench.py [--rounds R] [--skip-eager-above N] [--rows I,J,...] [--budget S] [--list-rows]

Prints a markdown table: TFLOP/s = 4 * B * H * D * (visible query-key pairs) / time,
counting only unmasked work (causal, window, start_q), timed with triton.testing.do_bench
(L2 flushed) when Triton is installed, else CUDA events; each column takes --rounds rounds
in turn and keeps its best. Peers, each where it runs here: eager PyTorch in float32 (what
TileGym's tests compare with; skipped past --skip-eager-above query-key pairs, where it
needs tens of GB), TileGym's "cutile" backend (cuTile Python: `attention_sink`, and on decode
rows, one query, `attention_sink_decode`, the split-KV kernel TileGym runs there) and OpenAI's Triton
flash attention with sinks (PyPI `gpt-oss`, `gpt_oss.triton.attention`). Every peer's
first 64 query rows are checked against the float32 reference before it is timed; a peer
that disagrees prints "wrong" in its cell (and the reason on stderr) and is not ranked.
gpt-oss's kernel runs only on rows whose queries start at position 0 (prefill of an empty
cache) and prints "n/a" elsewhere: its key loop begins at start_q, so keys before it are never
read (`_attn_fwd` in gpt_oss/triton/attention.py), and its own model calls it only for such
prefills of 64 tokens or more, taking its eager reference otherwise (gpt_oss/triton/model.py).
Its P.V product runs in float32 off the tensor cores (V cast to float32, allow_tf32=False) and
its wrapper repeats K and V per query head, hence its low TFLOP/s: a correctness-grade
reference, not a tuned kernel. FlashAttention-4 (PyPI `flash-attn-4`, `flash_attn.cute`, its
`learnable_sink` argument; it needs nvidia-cutlass-dsl) is shown where it installs, as a
reference column that is checked like the peers but not ranked.
Shapes: TileGym's attention_sink perf shapes and the same with head dim 128 (bfloat16,
sm_scale 1/sqrt(D)); --rows picks rows of that list by index (from 0). What the peers print
while they autotune goes to stderr, with each row's seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from typing import Any

import tilegym_cutile_rs
import torch
from _timing import Rows, bench_timer
from tilegym_cutile_rs.ops.attention_sink import reference, visible_pairs

# (B, S_q, S_kv, H_kv, G, D, window), as TileGym's test_perf lists them.
SHAPES = [
    (1, 128, 2048, 8, 8, 64, None),
    (1, 128, 4096, 8, 8, 64, None),
    (1, 128, 2048, 8, 8, 64, 128),
    (1, 128, 4096, 8, 8, 64, 128),
    (1, 10820, 10820, 8, 8, 64, None),
    (1, 10820, 10820, 8, 8, 64, 128),
    (1, 1, 10919, 8, 8, 64, None),
    (1, 128, 2048, 8, 8, 128, None),
    (1, 128, 4096, 8, 8, 128, None),
    (2, 128, 2048, 8, 8, 128, None),
    (1, 1, 10919, 8, 8, 128, None),
    (1, 4096, 4096, 8, 8, 128, None),
]


def tilegym_cutile(op: str = "attention_sink") -> Callable[..., torch.Tensor] | None:
    """TileGym's cutile `op`: attention_sink, or attention_sink_decode (split-KV, what TileGym
    runs for one query)."""
    try:
        import tilegym

        tilegym.set_backend("cutile")
        fn = getattr(tilegym.ops, op)
        q = torch.randn(1, 1 if op == "attention_sink_decode" else 16, 1, 1, 64, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, 16, 1, 64, device="cuda", dtype=torch.bfloat16)
        fn(q, k, k, torch.zeros(1, device="cuda", dtype=torch.bfloat16), 0.125, None, torch.zeros(1, dtype=torch.int32, device="cuda"))
    except Exception as exc:  # noqa: BLE001 - any failure means the peer is unavailable here
        print(f"(cuTile Python's {op} via TileGym unavailable: {type(exc).__name__}: {exc})", file=sys.stderr)
        return None
    return fn


def optional_peer(label: str, load: Callable[[], Callable[..., torch.Tensor]]) -> Callable[..., torch.Tensor] | None:
    """The runner `load()` returns, or None, with the reason on stderr, where it cannot load here."""
    try:
        return load()
    except Exception as exc:  # noqa: BLE001 - any failure means the peer is unavailable here
        print(f"({label} unavailable: {type(exc).__name__}: {exc})", file=sys.stderr)
        return None


def gpt_oss_triton() -> Callable[..., torch.Tensor]:
    from gpt_oss.triton.attention import attention

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor, scale: float, window: int | None,
            start: torch.Tensor) -> torch.Tensor:
        return attention(q, k, v, sinks, scale, window or 0, start)

    return run


def flash_attention_4() -> Callable[..., torch.Tensor]:
    """FlashAttention-4 (PyPI `flash-attn-4`, `flash_attn.cute`) with its `learnable_sink`,
    called as its interface documents: q `[B, S_q, H, D]` with the query heads of one KV head
    adjacent (ours `[B, S_q, H_kv, G, D]` read as that view), k and v `[B, S_kv, H_kv, D]`,
    causal aligned to the cache's end (query i at position S_kv - S_q + i, as `start_q` here),
    a window of W keys as `window_size=(W - 1, 0)`."""
    from flash_attn.cute import flash_attn_func

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor, scale: float, window: int | None,
            start: torch.Tensor) -> torch.Tensor:
        b, s_q, h_kv, group, d = q.shape
        out = flash_attn_func(q.view(b, s_q, h_kv * group, d), k, v, softmax_scale=scale, causal=True,
                              window_size=(window - 1, 0) if window else (None, None), learnable_sink=sinks)
        out = out[0] if isinstance(out, tuple) else out
        return out.reshape(b, s_q, h_kv * group * d)

    return run


# Peers defined only for queries starting at position 0 (see the module's docstring), and
# only for one query (decode).
START_AT_ZERO_ONLY = {"gpt-oss triton"}
ONE_QUERY_ONLY = {"cutile-python decode"}
# Shown beside the peers as a reference, not ranked: what a hand-tuned CUTLASS kernel reaches.
UNRANKED = {"fa4 (reference)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-eager-above", type=int, default=1 << 26)
    Rows.add_arguments(parser)
    args = parser.parse_args()
    rows = Rows.from_args(args, SHAPES)
    bench = bench_timer()
    with contextlib.redirect_stdout(sys.stderr):  # keeps stdout the table
        peers: dict[str, Callable[..., torch.Tensor] | None] = {
            "eager f32": reference,
            "cutile-python": tilegym_cutile(),
            "cutile-python decode": tilegym_cutile("attention_sink_decode"),
            "gpt-oss triton": optional_peer("gpt-oss Triton attention", gpt_oss_triton),
            "fa4 (reference)": optional_peer("FlashAttention-4", flash_attention_4),
        }
    names = list(peers)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    print("TFLOP/s over unmasked work; '-' where a peer does not run (see stderr); 'n/a' where a row is outside a peer's\n"
          "domain (gpt-oss's kernel: queries starting at position 0 only; cuTile Python's decode kernel: one query).\n"
          "FlashAttention-4's column is a reference, not ranked in 'ours / best peer'.\n")
    print(f"| B, S_q, S_kv, H_kv x G, D, window | {' | '.join(names)} | ours | ours / best peer |")
    print("| --- | " + "--- | " * (len(names) + 2))
    for shape in rows:
        start = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):  # TileGym's autotuner prints its search
            line = row(shape, peers, bench, args.rounds, args.skip_eager_above)
        print(line, flush=True)
        print(f"(row {shape}: {time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
        torch.cuda.empty_cache()
    rows.report()


def row(
    shape: tuple[Any, ...], peers: dict[str, Callable[..., torch.Tensor] | None], bench: Callable[..., float], rounds: int, eager_limit: int
) -> str:
    """One table row: every runnable peer and ours on one shape, each checked against the reference first."""
    b, s_q, s_kv, h_kv, group, d, window = shape
    torch.manual_seed(0)
    q = torch.randn(b, s_q, h_kv, group, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    sinks = torch.randn(h_kv * group, device="cuda", dtype=torch.bfloat16)
    start_q = s_kv - s_q
    start = torch.tensor([start_q], dtype=torch.int32, device="cuda")
    scale = d**-0.5
    flops = 4 * b * h_kv * group * d * visible_pairs(s_q, s_kv, window, start_q)
    calls: dict[str, Callable[[], Any]] = {}
    out_of_domain: set[str] = set()
    for name, fn in peers.items():
        if fn is None or (name == "eager f32" and b * h_kv * group * s_q * s_kv > eager_limit):
            continue
        if name in START_AT_ZERO_ONLY and start_q > 0 or name in ONE_QUERY_ONLY and s_q != 1:
            out_of_domain.add(name)
            continue
        offset = start_q if fn is reference else start
        calls[name] = lambda fn=fn, offset=offset: fn(q, k, v, sinks, scale, window, offset)
    calls["ours"] = lambda: tilegym_cutile_rs.attention_sink(q, k, v, sinks, scale, window, start)
    ref = reference(q[:, :64], k, v, sinks, scale, window, start_q)  # the first rows, checked before timing
    wrong = set()
    first_call_s = {}
    for name, call in calls.items():
        if name == "eager f32":
            continue
        try:
            began = time.perf_counter()
            with torch.no_grad():
                got = call()[:, : ref.shape[1]]
            torch.cuda.synchronize()
            first_call_s[name] = time.perf_counter() - began  # compiling and autotuning included
            torch.testing.assert_close(got, ref, atol=5e-2, rtol=1e-2)
        except Exception as exc:  # noqa: BLE001 - a peer's failure is reported, ours fails the run
            if name == "ours":
                raise
            print(f"({name} on {shape}: {type(exc).__name__}: {str(exc).splitlines()[0]})", file=sys.stderr)
            wrong.add(name)
    for name in wrong:
        del calls[name]
    print("(first calls: " + ", ".join(f"{n} {t:.1f} s" for n, t in first_call_s.items()) + ")", file=sys.stderr)
    tflops = dict.fromkeys(calls, 0.0)
    with torch.no_grad():
        for _ in range(rounds):
            for name, call in calls.items():
                ms = bench(call)
                tflops[name] = max(tflops[name], flops / (ms * 1e-3) / 1e12)
    names = list(peers)
    cells = " | ".join(
        f"{tflops[n]:.1f}" if n in tflops else ("wrong" if n in wrong else "n/a" if n in out_of_domain else "-") for n in names
    )
    best = max((tflops[n] for n in names if n in tflops and n not in UNRANKED), default=0.0)
    ratio = f"{tflops['ours'] / best:.2f}x" if best else "-"
    return f"| {b}, {s_q}, {s_kv}, {h_kv} x {group}, {d}, {window or '-'} | {cells} | {tflops['ours']:.1f} | {ratio} |"


if __name__ == "__main__":
    main()
