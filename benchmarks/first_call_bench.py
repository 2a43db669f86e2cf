"""First-call latency and tileiras runs, with an empty and with a warm kernel cache.

    python benchmarks/first_call_bench.py [--rows I,J] [--budget S] [--list-rows]

Each measurement is a fresh Python process whose kernel cache is a directory this
script owns ($TILEGYM_CUTILE_RS_CACHE_DIR), so "cold" really is empty. Prints:
- the first softmax call (1000x1000 f32; timed from the call, torch already
  imported and the input on the GPU) cold and warm, with tileiras runs;
- a sweep of 50 shapes and dtypes in one process, cold then warm: total time,
  tileiras runs (the warm sweep must run none) and warm starts (kernels loaded from
  the cache's warm-start index, no lowering; crates/ops/src/warm_start.rs);
- the first call of a shipped shape of each op with no toolchain to find (the pip kit
  hidden, no toolchain variables) and the kernel cache off: every kernel comes from the
  wheel's shipped kernels (docs/design.md, "Shipped kernels");
- cuTile Python's first call through TileGym with its own cache off, when installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

FIRST = """
import json, time, torch
x = torch.randn(1000, 1000, device="cuda"); torch.cuda.synchronize()
t0 = time.perf_counter()
import tilegym_cutile_rs
from tilegym_cutile_rs import _cache, _device, _library
_library.library(); _device.prepare(0)  # load + check the library, find the toolchain, open the cache
t1 = time.perf_counter()
y = tilegym_cutile_rs.softmax(x); torch.cuda.synchronize()
t2 = time.perf_counter()
stats = _cache.stats()
print(json.dumps({"ms": (t2 - t0) * 1e3, "setup_ms": (t1 - t0) * 1e3, "tileiras_runs": stats["tileiras_runs"], "warm_starts": stats["warm_starts"]}))
"""

SWEEP = """
import json, time, torch
shapes = json.loads(__import__("sys").argv[1])
xs = [torch.randn(m, n, device="cuda", dtype=getattr(torch, d)) for m, n, d in shapes]
torch.cuda.synchronize()
t0 = time.perf_counter()
import tilegym_cutile_rs
for x in xs:
    tilegym_cutile_rs.softmax(x)
torch.cuda.synchronize()
from tilegym_cutile_rs import _cache
stats = _cache.stats()
print(json.dumps({"s": time.perf_counter() - t0, "tileiras_runs": stats["tileiras_runs"], "warm_starts": stats["warm_starts"]}))
"""

# One shipped shape per op, with the call that makes it; the inputs exist before the clock starts.
SHIPPED_CALLS = {
    "softmax 8192x4096 bf16": ("x = torch.randn(8192, 4096, device='cuda', dtype=torch.bfloat16)", "t.softmax(x)"),
    "silu_and_mul 4096x(2x14336) bf16": ("x = torch.randn(4096, 28672, device='cuda', dtype=torch.bfloat16)", "t.silu_and_mul(x)"),
    "matmul 4096^3 bf16": (
        "a = torch.randn(4096, 4096, device='cuda', dtype=torch.bfloat16); b = torch.randn_like(a)", "t.matmul(a, b)"),
    "attention_sink decode 1x10919, 8x8 heads, D 64, bf16": (
        "q = torch.randn(1, 1, 8, 8, 64, device='cuda', dtype=torch.bfloat16); "
        "k = torch.randn(1, 10919, 8, 64, device='cuda', dtype=torch.bfloat16); s = torch.randn(64, device='cuda', dtype=torch.bfloat16)",
        "t.attention_sink(q, k, k, s, 0.125, None, 10918)"),
}

SHIPPED = """
import json, sys, time, torch
{setup}
torch.cuda.synchronize()
t0 = time.perf_counter()
from tilegym_cutile_rs import _toolchain
_toolchain._from_pip = lambda: None  # no toolchain to find
import tilegym_cutile_rs as t
{call}
torch.cuda.synchronize()
ms = (time.perf_counter() - t0) * 1e3
from tilegym_cutile_rs import cache
stats = cache.stats()
print(json.dumps({{"ms": ms, "tileiras_runs": stats["tileiras_runs"], "shipped": stats["shipped"]}}))
"""

CUTILE_PYTHON = """
import json, time, torch
x = torch.randn(1000, 1000, device="cuda"); torch.cuda.synchronize()
import tilegym
tilegym.set_backend("cutile")
t0 = time.perf_counter()
tilegym.ops.softmax(x); torch.cuda.synchronize()
print(json.dumps({"ms": (time.perf_counter() - t0) * 1e3}))
"""


def sweep_shapes() -> list[tuple[int, int, str]]:
    ns = [9, 64, 100, 256, 513, 1000, 1009, 2048, 3000, 4096, 6000, 8192, 12000, 16384, 32768, 50000, 100000]
    dtypes = ["float32", "bfloat16", "float16"]
    shapes = []
    for i, n in enumerate(ns * 3):
        shapes.append(((i * 37) % 500 + 1, n, dtypes[i % 3]))
    return shapes[:50]


def run(code: str, env: dict[str, str], *args: str) -> dict:
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"benchmark process failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    # cutile's own per-kernel timing line (CUTILE_JIT_TIMING): lowering, tileiras or disk, module load.
    stages = [dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
              for line in p.stderr.splitlines() if line.startswith("CUTILE_JIT_TIMING")]
    if stages:
        out["stages"] = {k: sum(float(s[k]) for s in stages) for k in ("stage1_ms", "stage2_ms", "stage3_ms")}
    return out


def first_call(tmp: str) -> None:
    env = {**os.environ, "TILEGYM_CUTILE_RS_CACHE_DIR": os.path.join(tmp, "first"), "CUTILE_JIT_TIMING": "1"}
    cold, warm = run(FIRST, env), run(FIRST, env)
    print("| first call, 1000x1000 f32 | ms | of which setup | lowering (cutile stage 1) | tileiras or disk (stage 2) | module load (stage 3) | tileiras runs | warm starts |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, r in (("empty cache", cold), ("warm cache", warm)):
        st = r.get("stages", {})
        print(f"| {label} | {r['ms']:.0f} | {r['setup_ms']:.0f} | {st.get('stage1_ms', float('nan')):.0f} | "
              f"{st.get('stage2_ms', float('nan')):.0f} | {st.get('stage3_ms', float('nan')):.0f} | {r['tileiras_runs']} | {r['warm_starts']} |")


def sweep(tmp: str) -> None:
    shapes = json.dumps(sweep_shapes())
    env = {**os.environ, "TILEGYM_CUTILE_RS_CACHE_DIR": os.path.join(tmp, "sweep"), "CUTILE_JIT_TIMING": "1"}
    cold, warm = run(SWEEP, env, shapes), run(SWEEP, env, shapes)
    print("\n| 50-shape sweep, one process | seconds | lowering s | tileiras or disk s | module load s | tileiras runs | warm starts |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label, r in (("empty cache", cold), ("warm cache", warm)):
        st = r.get("stages", {})
        print(f"| {label} | {r['s']:.2f} | {st.get('stage1_ms', 0) / 1e3:.2f} | {st.get('stage2_ms', 0) / 1e3:.2f} | "
              f"{st.get('stage3_ms', 0) / 1e3:.2f} | {r['tileiras_runs']} | {r['warm_starts']} |")


SHIPPED_HEADER = ("\n| first call of a shipped shape, fresh process, no toolchain, cache off | ms | tileiras runs | shipped kernels loaded |\n"
                  "| --- | --- | --- | --- |")


def shipped(label: str, printed: set[str]) -> None:
    hidden = ("CUTILE_TILEIRAS_PATH", "CUDA_TOOLKIT_PATH", "CUDA_HOME")
    bare = {k: v for k, v in os.environ.items() if k not in hidden}
    bare["PATH"] = os.pathsep.join(p for p in bare.get("PATH", "").split(os.pathsep) if "nvidia" not in p and "cuda" not in p)
    bare["TILEGYM_CUTILE_RS_CACHE_DIR"] = "off"
    if "shipped" not in printed:
        printed.add("shipped")
        print(SHIPPED_HEADER)
    setup, call = SHIPPED_CALLS[label]
    r = run(SHIPPED.format(setup=setup, call=call), bare)
    print(f"| {label} | {r['ms']:.0f} | {r['tileiras_runs']} | {r['shipped']} |", flush=True)


def cutile_python() -> None:
    try:
        ct = run(CUTILE_PYTHON, {**os.environ, "CUDA_TILE_CACHE_DIR": "0"})
        print(f"\ncuTile Python (TileGym backend cutile, its cache off) first call: {ct['ms']:.0f} ms")
    except SystemExit as exc:
        print(f"\ncuTile Python first call not measured: {str(exc).splitlines()[-1]}")


def main() -> None:
    import argparse

    from _timing import Rows

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    Rows.add_arguments(parser)
    args = parser.parse_args()
    rows = Rows.from_args(args, ["first call", "50-shape sweep", *(f"shipped: {label}" for label in SHIPPED_CALLS), "cuTile Python"])
    printed: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            if row == "first call":
                first_call(tmp)
            elif row == "50-shape sweep":
                sweep(tmp)
            elif row == "cuTile Python":
                cutile_python()
            else:
                shipped(row.removeprefix("shipped: "), printed)
    rows.report()

if __name__ == "__main__":
    main()
