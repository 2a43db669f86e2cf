"""`python -m tilegym_cutile_rs.check` on a machine without a GPU, and with simulated faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tilegym_cutile_rs import check

from .conftest import HAS_GPU


def run_check(*args: str, env: dict[str, str] | None = None, prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(prelude) + f"\nfrom tilegym_cutile_rs.check import main\nraise SystemExit(main({list(args)!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.skipif(HAS_GPU, reason="needs a machine without an NVIDIA driver")
def test_no_driver_exit_code_and_message() -> None:
    out = run_check()
    assert out.returncode == check.EXIT_DRIVER, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert "no NVIDIA driver found" in out.stdout
    assert "-> install an NVIDIA driver for CUDA 13" in out.stdout
    assert "ok       library" in out.stdout  # a failure does not hide the other checks


@pytest.mark.skipif(HAS_GPU, reason="needs a machine without an NVIDIA driver")
def test_no_driver_json_parses() -> None:
    out = run_check("--json")
    assert out.returncode == check.EXIT_DRIVER
    report = json.loads(out.stdout)
    assert report["exit_code"] == check.EXIT_DRIVER
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["driver"]["status"] == "failed" and by_name["driver"]["remedy"]
    assert by_name["library"]["status"] == "ok"
    assert report["gpus"] == []


def _fake_driver_prelude(arch_major: int = 9) -> str:
    # Stand in for libcuda: one sm_90 GPU, CUDA 13.0 driver.
    return f"""
        import ctypes
        from tilegym_cutile_rs import check
        class FakeCuda:
            def cuInit(self, flags): return 0
            def cuDriverGetVersion(self, v): v._obj.value = 13000; return 0
            def cuDeviceGetCount(self, c): c._obj.value = 1; return 0
            def cuDeviceGet(self, d, i): d._obj.value = i; return 0
            def cuDeviceGetName(self, buf, n, d): buf.value = b"Fake H200"; return 0
            def cuDeviceGetAttribute(self, v, attr, d):
                v._obj.value = {arch_major} if attr == 75 else 0
                return 0
        check._cuda = lambda: FakeCuda()
    """


def test_missing_toolchain_code_and_remedy(tmp_path: Path) -> None:
    # Hide the pip kit and any explicit toolchain, and the shipped kernels (an empty directory).
    prelude = _fake_driver_prelude() + """
        from tilegym_cutile_rs import _toolchain
        _toolchain._from_pip = lambda: None
    """
    env = {k: v for k, v in os.environ.items() if k not in ("CUTILE_TILEIRAS_PATH", "CUDA_TOOLKIT_PATH", "CUDA_HOME")}
    env["TILEGYM_CUTILE_RS_SHIPPED_DIR"] = str(tmp_path)
    out = run_check("--no-smoke", env=env, prelude=prelude)
    assert out.returncode == check.EXIT_TOOLCHAIN, out.stdout + out.stderr
    assert "no Tile IR toolchain found" in out.stdout
    assert "-> pip install 'tilegym-cutile-rs[tileiras]'" in out.stdout
    assert "warning  shipped kernels  this build ships no compiled kernels" in out.stdout


def test_missing_toolchain_with_shipped_kernels_is_a_warning() -> None:
    # The same machine with the wheel's shipped kernels: they run without a toolchain.
    prelude = _fake_driver_prelude() + """
        from tilegym_cutile_rs import _toolchain
        _toolchain._from_pip = lambda: None
    """
    hidden = ("CUTILE_TILEIRAS_PATH", "CUDA_TOOLKIT_PATH", "CUDA_HOME", "TILEGYM_CUTILE_RS_SHIPPED_DIR")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    out = run_check("--no-smoke", env=env, prelude=prelude)
    assert out.returncode == check.EXIT_OK, out.stdout + out.stderr
    assert "warning  toolchain        none found: the shipped kernels run" in out.stdout
    assert "-> pip install 'tilegym-cutile-rs[tileiras]'" in out.stdout
    from tilegym_cutile_rs import _shipped

    assert f"ok       shipped sm_90    {_shipped.count('sm_90')} kernels shipped for this GPU" in out.stdout


def test_mixed_toolchain_versions_code_and_remedy(tmp_path: Path) -> None:
    root = tmp_path / "cu13"
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "lib" / "libnvvm.so.4").write_text("")
    for tool, version in (("tileiras", "13.4.92"), ("ptxas", "13.0.88")):
        exe = root / "bin" / tool
        exe.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {version[:4]}, V{version}'\n")
        exe.chmod(0o755)
    prelude = _fake_driver_prelude() + """
        from tilegym_cutile_rs import _toolchain
        _toolchain._from_pip = lambda: None
    """
    env = dict(os.environ, CUTILE_TILEIRAS_PATH=str(root / "bin" / "tileiras"))
    out = run_check("--no-smoke", env=env, prelude=prelude)
    assert out.returncode == check.EXIT_TOOLCHAIN, out.stdout + out.stderr
    assert "tileiras 13.4.92 and ptxas 13.0.88 are different CUDA releases" in out.stdout
    assert "-> pip install 'tilegym-cutile-rs[tileiras]'" in out.stdout


def test_pip_kit_of_mixed_versions_is_refused() -> None:
    prelude = """
        import importlib.metadata as md
        real = md.distribution
        class Fake:
            def __init__(self, d, v): self._d, self.version = d, v
            files = property(lambda self: self._d.files)
            def locate_file(self, f): return self._d.locate_file(f)
        def fake(name):
            d = real(name)
            return Fake(d, "13.0.88") if name == "nvidia-cuda-nvcc" else d
        md.distribution = fake
    """ + _fake_driver_prelude()
    out = run_check("--no-smoke", prelude=prelude)
    if "nvidia-cuda-tileiras" not in out.stdout and "mixed pip" not in out.stdout:
        pytest.skip("the [tileiras] pip kit is not installed here")
    assert out.returncode == check.EXIT_TOOLCHAIN, out.stdout
    assert "mixed pip Tile IR toolchain versions" in out.stdout


def test_fingerprint_mismatch_code_and_remedy() -> None:
    prelude = """
        from tilegym_cutile_rs import _abi_manifest
        _abi_manifest.FINGERPRINT = "f" * 64
    """
    out = run_check("--no-smoke", prelude=prelude)
    assert out.returncode == check.EXIT_LIBRARY, out.stdout + out.stderr
    assert "ffffffffffffffff" in out.stdout and "different builds" in out.stdout
    assert "-> " in out.stdout and "reinstall" in out.stdout.split("failed   library", 1)[1]
    assert "Traceback" not in out.stdout + out.stderr


def test_help_documents_exit_codes() -> None:
    out = subprocess.run([sys.executable, "-m", "tilegym_cutile_rs.check", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for code in ("0 ", "2 ", "3 ", "4 ", "5 ", "6 "):
        assert f"  {code}" in out.stdout


@pytest.mark.skipif(HAS_GPU, reason="needs a machine without an NVIDIA driver")
def test_every_op_brings_its_smoke_run_and_a_failing_one_is_reported() -> None:
    # A fake sm_90 GPU passes the driver and toolchain checks (tileiras compiles without a
    # GPU), then each op's own smoke run fails in its subprocess, where torch finds no GPU:
    # one failed line per op the package has, exit code 5, the others not hidden.
    from tilegym_cutile_rs import _registry

    out = run_check("--json", prelude=_fake_driver_prelude())
    report = json.loads(out.stdout)
    by_name = {c["name"]: c for c in report["checks"]}
    if by_name.get("compile sm_90", {}).get("status") != "ok":
        pytest.skip(f"no Tile IR toolchain for sm_90 here: {by_name.get('compile sm_90')}")
    assert report["exit_code"] == check.EXIT_KERNEL, out.stdout
    for name in _registry.ops():
        smoke = by_name[f"{name} gpu 0"]
        assert smoke["status"] == "failed" and smoke["exit_code"] == check.EXIT_KERNEL, smoke
        assert "Error" in smoke["detail"] and smoke["remedy"], smoke
