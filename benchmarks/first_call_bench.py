"""First-call latency and tileiras runs, with an empty and with a warm kernel cache.

    python benchmarks/first_call_bench.py

Each measurement is a fresh Python process whose kernel cache is a directory this
script owns ($TILEGYM_CUTILE_RS_CACHE_DIR), so "cold" really is empty. Prints:
- the first softmax call (1000x1000 f32; timed from the call, torch already
  imported and the input on the GPU) cold and warm, with tileiras runs;
- a sweep of 50 shapes and dtypes in one process, cold then warm: total time,
  tileiras runs (the warm sweep must run none) and warm starts (kernels loaded from
  the cache's warm-start index, no lowering; crates/ops/src/warm_start.rs);
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


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TILEGYM_CUTILE_RS_CACHE_DIR": os.path.join(tmp, "first"), "CUTILE_JIT_TIMING": "1"}
        cold, warm = run(FIRST, env), run(FIRST, env)
        print("| first call, 1000x1000 f32 | ms | of which setup | lowering (cutile stage 1) | tileiras or disk (stage 2) | module load (stage 3) | tileiras runs | warm starts |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for label, r in (("empty cache", cold), ("warm cache", warm)):
            st = r.get("stages", {})
            print(f"| {label} | {r['ms']:.0f} | {r['setup_ms']:.0f} | {st.get('stage1_ms', float('nan')):.0f} | "
                  f"{st.get('stage2_ms', float('nan')):.0f} | {st.get('stage3_ms', float('nan')):.0f} | {r['tileiras_runs']} | {r['warm_starts']} |")
        shapes = json.dumps(sweep_shapes())
        env = {**os.environ, "TILEGYM_CUTILE_RS_CACHE_DIR": os.path.join(tmp, "sweep"), "CUTILE_JIT_TIMING": "1"}
        cold, warm = run(SWEEP, env, shapes), run(SWEEP, env, shapes)
        print("\n| 50-shape sweep, one process | seconds | lowering s | tileiras or disk s | module load s | tileiras runs | warm starts |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for label, r in (("empty cache", cold), ("warm cache", warm)):
            st = r.get("stages", {})
            print(f"| {label} | {r['s']:.2f} | {st.get('stage1_ms', 0) / 1e3:.2f} | {st.get('stage2_ms', 0) / 1e3:.2f} | "
                  f"{st.get('stage3_ms', 0) / 1e3:.2f} | {r['tileiras_runs']} | {r['warm_starts']} |")
        try:
            ct = run(CUTILE_PYTHON, {**os.environ, "CUDA_TILE_CACHE_DIR": "0"})
            print(f"\ncuTile Python (TileGym backend cutile, its cache off) first call: {ct['ms']:.0f} ms")
        except SystemExit as exc:
            print(f"\ncuTile Python first call not measured: {str(exc).splitlines()[-1]}")


if __name__ == "__main__":
    main()
