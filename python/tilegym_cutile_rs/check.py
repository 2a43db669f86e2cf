"""python -m tilegym_cutile_rs.check: can this machine run the kernels, and if not, what to do.

Each check prints one line (ok / warning / failed) with its detail, and for a
failure the exact remedy on the next line. A failing check never hides the
others; the toolchain probe and the smoke runs are subprocesses with a time
limit, so nothing hangs or takes the checker down.

Exit codes (the first failed check decides):
  0  every check passed (warnings allowed)
  2  no NVIDIA driver, no GPU, or a driver older than CUDA 13
  3  Tile IR toolchain missing (and no shipped kernels for a GPU), mixed, or unable to
     compile for this GPU
  4  kernel library missing, unloadable, or not matching the cdef manifest
  5  an op's smoke run failed or gave a wrong result
  6  Python environment: torch or cffi missing
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from .errors import ToolchainError, ToolchainNotFoundError

EXIT_OK, EXIT_DRIVER, EXIT_TOOLCHAIN, EXIT_LIBRARY, EXIT_KERNEL, EXIT_ENVIRONMENT = 0, 2, 3, 4, 5, 6
MIN_DRIVER_CUDA = 13000
PROBE_TIMEOUT_S = 120.0
SMOKE_TIMEOUT_S = 300.0


@dataclass
class Result:
    name: str
    status: str  # "ok" | "warning" | "failed"
    detail: str
    remedy: str = ""
    exit_code: int = EXIT_OK


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)
    gpus: list[dict[str, object]] = field(default_factory=list)

    def add(self, r: Result) -> Result:
        self.results.append(r)
        return r

    @property
    def exit_code(self) -> int:
        return next((r.exit_code for r in self.results if r.status == "failed"), EXIT_OK)


def _guard(report: Report, name: str, exit_code: int, fn: Callable[[], Result | list[Result]]) -> None:
    """Run one check; an unexpected exception is that check's failure, not the checker's."""
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001 - reported, never raised
        out = Result(name, "failed", f"{type(exc).__name__}: {exc}", _remedy_for(exc), exit_code)
    for r in out if isinstance(out, list) else [out]:
        report.add(r)


def _remedy_for(exc: Exception) -> str:
    text = str(exc)
    for marker in ("Fix: ", "Rebuild it: "):
        if marker in text:
            return text.split(marker, 1)[1]
    return ""


def check_package() -> Result:
    import tilegym_cutile_rs

    return Result("package", "ok", f"tilegym-cutile-rs {tilegym_cutile_rs.__version__} at {os.path.dirname(tilegym_cutile_rs.__file__)}")


def check_environment() -> list[Result]:
    out = [Result("python", "ok", f"{platform.python_version()} ({sys.executable})")]
    for module, remedy in (("torch", "pip install torch"), ("cffi", "pip install cffi")):
        try:
            mod = __import__(module)
            out.append(Result(module, "ok", getattr(mod, "__version__", "?")))
        except ImportError as exc:
            out.append(Result(module, "failed", f"not importable: {exc}", remedy, EXIT_ENVIRONMENT))
    return out


def check_library() -> list[Result]:
    from . import _library

    path = _library.library_path()
    lib = _library.library()  # raises LibraryError / ABIMismatchError / StaleLibraryError
    man = _library.manifest()
    fp = _library.ffi().string(lib.cutile_abi_fingerprint()).decode()
    from . import _registry

    missing = [f for f in man.FUNCTIONS if not hasattr(lib, f)]
    ops = _library.ops()
    python_ops = list(_registry.ops())
    results = [Result("library", "ok", f"{path}, fingerprint {fp[:16]} matches the cdef manifest")]
    reinstall = "reinstall: pip install --force-reinstall tilegym-cutile-rs"
    if missing:
        results.append(Result("ops", "failed", f"manifest functions missing from the library: {missing}", reinstall, EXIT_LIBRARY))
    elif ops != python_ops:
        results.append(Result("ops", "failed", f"the library has ops {ops}, the Python package {python_ops}", reinstall, EXIT_LIBRARY))
    else:
        results.append(Result("ops", "ok", f"{', '.join(ops)} ({len(man.FUNCTIONS)} C functions)"))
    return results


def _cuda() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def check_driver(report: Report) -> list[Result]:
    remedy = "install an NVIDIA driver for CUDA 13 (R580 or newer) and make sure libcuda.so.1 is on the loader path"
    try:
        cuda = _cuda()
    except OSError as exc:
        return [Result("driver", "failed", f"no NVIDIA driver found (libcuda.so.1: {exc})", remedy, EXIT_DRIVER)]
    rc = cuda.cuInit(0)
    if rc != 0:
        return [Result("driver", "failed", f"cuInit failed with CUDA error {rc}", remedy + "; check `nvidia-smi`", EXIT_DRIVER)]
    ver = ctypes.c_int()
    cuda.cuDriverGetVersion(ctypes.byref(ver))
    v = ver.value
    text = f"CUDA {v // 1000}.{(v % 1000) // 10} driver"
    out = [Result("driver", "ok", text) if v >= MIN_DRIVER_CUDA else
           Result("driver", "failed", f"{text}: the kernels need a CUDA 13 driver", remedy, EXIT_DRIVER)]
    count = ctypes.c_int()
    cuda.cuDeviceGetCount(ctypes.byref(count))
    if count.value == 0:
        out.append(Result("gpus", "failed", "the driver sees no GPU", "check `nvidia-smi` and CUDA_VISIBLE_DEVICES", EXIT_DRIVER))
    for i in range(count.value):
        dev = ctypes.c_int()
        cuda.cuDeviceGet(ctypes.byref(dev), i)
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGetName(name, 256, dev)
        major, minor = ctypes.c_int(), ctypes.c_int()
        cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)  # COMPUTE_CAPABILITY_MAJOR
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)  # COMPUTE_CAPABILITY_MINOR
        arch = f"sm_{major.value}{minor.value}"
        report.gpus.append({"index": i, "name": name.value.decode(), "arch": arch, "capability": (major.value, minor.value)})
        ok = (major.value, minor.value) >= (8, 0)
        out.append(Result(f"gpu {i}", "ok" if ok else "failed", f"{name.value.decode()}, {arch}",
                          "" if ok else "cuTile needs an sm_80 or newer GPU", EXIT_OK if ok else EXIT_DRIVER))
    return out


def _subprocess(code: str, timeout: float, env: dict[str, str] | None = None, whole_stdout: bool = False) -> tuple[int, str]:
    """Run `code` in a fresh interpreter; (exit code, its stdout, or its stderr when stdout is
    empty; with `whole_stdout`, stdout followed by stderr when it failed)."""
    try:
        p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return -1, f"{partial}\ntimed out after {timeout:.0f} s" if whole_stdout else f"timed out after {timeout:.0f} s"
    if whole_stdout:
        return p.returncode, p.stdout + (p.stderr if p.returncode else "")
    return p.returncode, (p.stdout.strip() or p.stderr.strip())


def check_shipped(report: Report) -> list[Result]:
    """The kernels this wheel ships compiled, for each GPU's architecture."""
    from . import _shipped

    index = _shipped.index()
    if index is None:
        return [Result("shipped kernels", "warning", "this build ships no compiled kernels: every kernel compiles with "
                       "tileiras at its first use", "install a release wheel from PyPI for the shipped kernels")]
    total = sum(index.get("archs", {}).values())
    out = [Result("shipped kernels", "ok", f"{total} kernels for {', '.join(sorted(index.get('archs', {})))} "
                  f"(built with tileiras {index.get('toolchain', {}).get('tileiras', '?')})")]
    for arch in sorted({str(g["arch"]) for g in report.gpus}):
        n = _shipped.count(arch)
        out.append(Result(f"shipped {arch}", "ok" if n else "warning",
                          f"{n} kernels shipped for this GPU" if n else "none shipped for this GPU: its kernels compile with tileiras"))
    return out


def check_toolchain(report: Report) -> list[Result]:
    from . import _shipped, _toolchain

    try:
        tc = _toolchain.find()
    except ToolchainNotFoundError as exc:
        gpu_archs = sorted({str(g["arch"]) for g in report.gpus})
        if gpu_archs and all(_shipped.count(arch) for arch in gpu_archs):
            return [Result("toolchain", "warning", f"none found: the shipped kernels run, any other shape raises a ToolchainError ({exc})",
                           _remedy_for(exc))]
        raise
    out = [Result("toolchain", "ok", tc.describe())]
    env = dict(os.environ, CUTILE_TILEIRAS_PATH=str(tc.tileiras), CUDA_HOME=str(tc.root),
               PATH=str(tc.tileiras.parent) + os.pathsep + os.environ.get("PATH", ""))
    archs = {str(g["arch"]): g["capability"] for g in report.gpus}
    for arch, capability in sorted(archs.items()):
        try:
            _toolchain.require_arch(tc, capability)  # type: ignore[arg-type]
        except ToolchainError as exc:
            out.append(Result(f"compile {arch}", "failed", str(exc), _remedy_for(exc), EXIT_TOOLCHAIN))
            continue
        rc, text = _subprocess(
            f"""
            from tilegym_cutile_rs import _library
            lib = _library.library()
            status = lib.cutile_compile_probe({arch!r}.encode())
            print(_library.last_error() if status else "compiled")
            raise SystemExit(0 if status == 0 else 1)
            """, PROBE_TIMEOUT_S, env)
        if rc == 0:
            out.append(Result(f"compile {arch}", "ok", "an empty Tile IR module assembles for this GPU"))
        else:
            out.append(Result(f"compile {arch}", "failed", text[-800:],
                              f"{_toolchain.INSTALL_KIT} (tileiras, ptxas and libNVVM of one release)", EXIT_TOOLCHAIN))
    return out


def check_smoke(report: Report) -> list[Result]:
    """Every op's own smoke test (`OP.smoke`) on each GPU, in one subprocess per GPU."""
    from . import _registry

    names = list(_registry.ops())
    out = []
    for gpu in report.gpus:
        i = gpu["index"]
        rc, text = _subprocess(
            f"""
            import json, torch
            from tilegym_cutile_rs import _registry
            for name, spec in _registry.ops().items():
                try:
                    print(json.dumps([name, True, spec.smoke(torch.device("cuda:{i}"))]), flush=True)
                except Exception as exc:
                    print(json.dumps([name, False, f"{{type(exc).__name__}}: {{exc}}"]), flush=True)
            """, SMOKE_TIMEOUT_S, whole_stdout=True)
        results: dict[str, tuple[bool, str]] = {}
        for line in text.splitlines():
            try:
                name, ok, detail = json.loads(line)
            except ValueError:
                continue
            results[name] = (bool(ok), str(detail))
        for name in names:
            ok, detail = results.get(name, (False, f"no result (the smoke process exited with {rc}): {text[-600:]}"))
            out.append(Result(f"{name} gpu {i}", "ok" if ok else "failed", detail[-800:],
                              "" if ok else "run the GPU tests (pytest -m gpu) and report the output", EXIT_KERNEL))
    return out


def check_cache() -> Result:
    from . import cache

    summary, code = cache.info()
    if not summary.get("enabled"):
        return Result("kernel cache", "warning", f"off: {summary['reason']}; every process compiles its kernels again",
                      "" if code == 0 else f"fix the directory or set {_cache_env()} to one of your own")
    return Result("kernel cache", "ok", f"{summary['root']}: {summary['entries']} kernels, "
                  f"{summary['bytes'] / 2**20:.1f} MiB of {summary['capacity_bytes'] / 2**30:.1f} GiB, "
                  f"{summary['autotune_decisions']} autotuning decisions")


def _cache_env() -> str:
    from . import _cache

    return _cache.DIR_ENV


def run(smoke: bool = True) -> Report:
    report = Report()
    _guard(report, "package", EXIT_LIBRARY, check_package)
    _guard(report, "library", EXIT_LIBRARY, check_library)
    _guard(report, "environment", EXIT_ENVIRONMENT, check_environment)
    _guard(report, "driver", EXIT_DRIVER, lambda: check_driver(report))
    _guard(report, "shipped kernels", EXIT_OK, lambda: check_shipped(report))
    _guard(report, "toolchain", EXIT_TOOLCHAIN, lambda: check_toolchain(report))
    _guard(report, "kernel cache", EXIT_OK, check_cache)
    if not smoke:
        report.add(Result("smoke", "warning", "smoke runs skipped (--no-smoke)"))
    elif not report.gpus:
        report.add(Result("smoke", "warning", "smoke runs skipped: no GPU"))
    elif any(r.status == "failed" for r in report.results):
        report.add(Result("smoke", "warning", "smoke runs skipped: fix the failures above first"))
    else:
        _guard(report, "smoke", EXIT_KERNEL, lambda: check_smoke(report))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tilegym_cutile_rs.check",
        description="Check whether this machine can run the tilegym-cutile-rs kernels, and say how to fix it.",
        epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.add_argument("--no-smoke", action="store_true", help="skip every op's smoke run on each GPU")
    args = parser.parse_args(argv)
    report = run(smoke=not args.no_smoke)
    if args.json:
        print(json.dumps({"exit_code": report.exit_code, "gpus": report.gpus,
                          "checks": [asdict(r) for r in report.results]}, indent=2))
    else:
        width = max([16, *(len(r.name) for r in report.results)])  # "attention_sink gpu 0" is 20
        for r in report.results:
            print(f"{r.status:<8} {r.name:<{width}} {r.detail}")
            if r.remedy:
                print(f"{'':<8} {'':<{width}} -> {r.remedy}")
        print(f"exit code {report.exit_code}")
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
