"""Build and import costs of the package.

    python benchmarks/build_bench.py

Prints: cold `pip wheel .` time (fresh cargo target dir), no-op rebuild time
(same target dir, nothing changed), wheel and library sizes, and the import
time of the installed package (median of 5 fresh interpreters, minus bare
interpreter start-up).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pip_wheel(out: Path, target: Path) -> float:
    env = {**__import__("os").environ, "CARGO_TARGET_DIR": str(target)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(out)], check=True, env=env)
    return time.perf_counter() - t0


def startup(code: str) -> float:
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        target = tmp_path / "target"
        cold = pip_wheel(tmp_path / "w1", target)
        noop = pip_wheel(tmp_path / "w2", target)
        wheel = next((tmp_path / "w2").glob("*.whl"))
        with zipfile.ZipFile(wheel) as z:
            lib = z.getinfo("tilegym_cutile_rs/libcutile_kernels.so")
        print("| measure | value |")
        print("| --- | --- |")
        print(f"| cold `pip wheel .` (fresh target dir) | {cold:.0f} s |")
        print(f"| no-op rebuild (same target dir) | {noop:.0f} s |")
        print(f"| wheel size ({wheel.name}) | {wheel.stat().st_size / 2**20:.1f} MiB |")
        print(f"| libcutile_kernels.so size | {lib.file_size / 2**20:.1f} MiB |")
    base = startup("pass")
    imp = startup("import tilegym_cutile_rs")
    load = startup("from tilegym_cutile_rs import _library; _library.library()")
    print(f"| import tilegym_cutile_rs | {(imp - base) * 1e3:.0f} ms |")
    print(f"| import + load and check the library | {(load - base) * 1e3:.0f} ms |")


if __name__ == "__main__":
    main()
