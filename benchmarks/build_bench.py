"""Build and import costs of the package, and the kernel developer's loop.

    python benchmarks/build_bench.py [--skip-cold] [--skip-dev] [--shipped-archs all|sm_90,...]

Prints, in one table:
- cold `pip wheel .` (a fresh cargo target dir) and the no-op rebuild (same target
  dir, nothing changed), both through pip's isolated build environment;
- the shipped kernels (scripts/ship_kernels.py on that wheel, every CPU): the time it
  adds to the build, the wheel's size without and with them, the kernels per
  architecture and their size unpacked;
- the developer loop in a scratch virtual environment: `pip install -e .` once, then
  again with nothing changed (no-op), then after one kernel file is touched (cargo
  rebuilds the ops crate and relinks the library, as after an edit); then the no-op
  with `--no-build-isolation`, the build requirements installed in that environment;
- wheel and library sizes, and the import time of the installed package (median of
  5 fresh interpreters, minus bare interpreter start-up).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "crates" / "ops" / "src" / "ops" / "softmax" / "kernel.rs"


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    return time.perf_counter() - t0


def startup(code: str) -> float:
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--skip-cold", action="store_true", help="reuse ./target instead of timing a cold build")
    parser.add_argument("--skip-dev", action="store_true", help="skip the editable-install loop")
    parser.add_argument("--shipped-archs", default="all", help="architectures to ship kernels for ('' skips)")
    args = parser.parse_args()
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        target = ROOT / "target" if args.skip_cold else tmp_path / "target"
        env = {**os.environ, "CARGO_TARGET_DIR": str(target)}
        wheel_cmd = [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w"]
        if not args.skip_cold:
            rows.append(("cold `pip wheel .` (fresh target dir)", f"{timed([*wheel_cmd, str(tmp_path / 'w1')], env):.0f} s"))
        else:
            timed([*wheel_cmd, str(tmp_path / "w1")], env)
        rows.append(("no-op `pip wheel .` (same target dir)", f"{timed([*wheel_cmd, str(tmp_path / 'w2')], env):.0f} s"))
        wheel = next((tmp_path / "w2").glob("*.whl"))
        with zipfile.ZipFile(wheel) as z:
            lib = z.getinfo("tilegym_cutile_rs/libcutile_kernels.so")
        rows.append((f"wheel size without shipped kernels ({wheel.name})", f"{wheel.stat().st_size / 2**20:.1f} MiB"))
        rows.append(("libcutile_kernels.so size", f"{lib.file_size / 2**20:.1f} MiB"))
        if args.shipped_archs:
            rows += shipped_rows(wheel, tmp_path, args.shipped_archs)
        if not args.skip_dev:
            rows += dev_loop_rows(tmp_path, env)
    base = startup("pass")
    rows.append(("import tilegym_cutile_rs", f"{(startup('import tilegym_cutile_rs') - base) * 1e3:.0f} ms"))
    load = startup("from tilegym_cutile_rs import _library; _library.library()")
    rows.append(("import + load and check the library", f"{(load - base) * 1e3:.0f} ms"))
    print("| measure | value |")
    print("| --- | --- |")
    for name, value in rows:
        print(f"| {name} | {value} |")


def shipped_rows(wheel: Path, tmp_path: Path, archs: str) -> list[tuple[str, str]]:
    """scripts/ship_kernels.py on a copy of `wheel`: its time, and what it added."""
    shipped = tmp_path / "shipped" / wheel.name
    shipped.parent.mkdir()
    shutil.copy(wheel, shipped)
    jobs = os.cpu_count() or 1
    seconds = timed([sys.executable, str(ROOT / "scripts" / "ship_kernels.py"), str(shipped), "--archs", archs], dict(os.environ))
    with zipfile.ZipFile(shipped) as z:
        index = json.loads(z.read("tilegym_cutile_rs/kernels/index.json"))
        unpacked = sum(i.file_size for i in z.infolist() if i.filename.startswith("tilegym_cutile_rs/kernels/"))
    per_arch = ", ".join(f"{arch} {n}" for arch, n in sorted(index["archs"].items()))
    return [
        (f"`ship_kernels.py --archs {archs}` ({jobs} jobs), added to the build", f"{seconds:.0f} s"),
        ("wheel size with shipped kernels", f"{shipped.stat().st_size / 2**20:.1f} MiB"),
        ("shipped kernels per architecture", per_arch),
        ("shipped kernels unpacked", f"{unpacked / 2**20:.1f} MiB"),
    ]


def dev_loop_rows(tmp_path: Path, env: dict[str, str]) -> list[tuple[str, str]]:
    """The kernel developer's loop: editable installs, with and without build isolation."""
    rows: list[tuple[str, str]] = []
    venv.create(tmp_path / "dev", with_pip=True)
    dev_pip = [str(tmp_path / "dev" / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT)]
    timed(dev_pip, env)  # the first editable build (its own profile flags: not timed)
    rows.append(("no-op `pip install -e .`", f"{timed(dev_pip, env):.0f} s"))
    KERNEL.touch()
    rows.append((f"`pip install -e .` after touching {KERNEL.relative_to(ROOT)}", f"{timed(dev_pip, env):.0f} s"))
    # The same loop without build isolation: the build requirements installed once in the
    # environment (their scripts, cargo-zigbuild among them, on PATH), none set up per build.
    import tomllib

    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    subprocess.run([*dev_pip[:4], "-q", *requires], check=True)
    dev_env = {**env, "PATH": f"{tmp_path / 'dev' / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
    timed([*dev_pip, "--no-build-isolation"], dev_env)  # the first (this environment's own paths)
    rows.append(("no-op `pip install -e . --no-build-isolation`", f"{timed([*dev_pip, '--no-build-isolation'], dev_env):.0f} s"))
    return rows


if __name__ == "__main__":
    main()
