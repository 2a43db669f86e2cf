"""Finds one consistent Tile IR toolchain (tileiras + ptxas + libNVVM of the
same CUDA release) and hands it to cutile's JIT through the environment.

Search order: the pip kit (`pip install tilegym-cutile-rs[tileiras]`), then
$CUTILE_TILEIRAS_PATH, then a CUDA toolkit ($CUDA_TOOLKIT_PATH, $CUDA_HOME,
/usr/local/cuda). Versions are never mixed silently: tileiras with another
release's ptxas or libNVVM fails even on an empty module.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from .errors import ToolchainError, ToolchainNotFoundError

PIP_KIT = ("nvidia-cuda-tileiras", "nvidia-cuda-nvcc", "nvidia-nvvm")
INSTALL_KIT = "pip install 'tilegym-cutile-rs[tileiras]'"
# Oldest tileiras release that targets each architecture (cuTile Rust's table).
MIN_RELEASE = {(9, 0): (13, 3)}
DEFAULT_MIN_RELEASE = (13, 2)
PROBE_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Toolchain:
    source: str
    root: Path
    tileiras: Path
    ptxas: Path
    libnvvm: Path
    release: tuple[int, int]
    versions: dict[str, str]

    def describe(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in self.versions.items())
        return f"{self.source}: {self.root} ({parts})"


def _release(version: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", version)
    if not m:
        raise ToolchainError(f"cannot read a CUDA release from version {version!r}")
    return int(m.group(1)), int(m.group(2))


def _dist_file(dist: md.Distribution, pattern: str) -> Path | None:
    for f in dist.files or ():
        if re.search(pattern, str(f)):
            return Path(str(dist.locate_file(f)))
    return None


def _from_pip() -> Toolchain | None:
    dists = {}
    for name in PIP_KIT:
        try:
            dists[name] = md.distribution(name)
        except md.PackageNotFoundError:
            pass
    if not dists:
        return None
    versions = {name: d.version for name, d in dists.items()}
    missing = [n for n in PIP_KIT if n not in dists]
    if missing:
        raise ToolchainError(
            f"incomplete pip Tile IR toolchain: {', '.join(missing)} not installed (found {versions}). "
            f"Fix: {INSTALL_KIT}"
        )
    if len(set(versions.values())) != 1:
        raise ToolchainError(
            f"mixed pip Tile IR toolchain versions {versions}: tileiras, ptxas and libNVVM must be "
            f"the same release. Fix: {INSTALL_KIT} --force-reinstall"
        )
    tileiras = _dist_file(dists["nvidia-cuda-tileiras"], r"bin/tileiras$")
    ptxas = _dist_file(dists["nvidia-cuda-nvcc"], r"bin/ptxas$")
    libnvvm = _dist_file(dists["nvidia-nvvm"], r"libnvvm\.so")
    if not (tileiras and ptxas and libnvvm):
        raise ToolchainError(f"the pip Tile IR toolchain {versions} lacks tileiras, ptxas or libnvvm. Fix: {INSTALL_KIT} --force-reinstall")
    version = versions["nvidia-cuda-tileiras"]
    return Toolchain(
        "pip kit", tileiras.parent.parent, tileiras, ptxas, libnvvm, _release(version),
        {"tileiras": version, "ptxas": version, "libnvvm": version},
    )


def _tool_version(exe: Path) -> str:
    try:
        out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"{exe} --version failed: {exc}") from None
    m = re.search(r"V(\d+\.\d+\.\d+)", out.stdout + out.stderr)
    if out.returncode != 0 or not m:
        raise ToolchainError(f"{exe} --version did not report a version (exit {out.returncode}): {out.stderr.strip()[:300]}")
    return m.group(1)


def _from_root(root: Path, tileiras: Path, source: str) -> Toolchain:
    ptxas = root / "bin" / "ptxas"
    nvvm = sorted([*root.glob("lib/libnvvm.so*"), *root.glob("nvvm/lib64/libnvvm.so*")])
    if not tileiras.is_file():
        raise ToolchainError(f"{source}: {tileiras} does not exist. Fix: {INSTALL_KIT}")
    if not ptxas.is_file() or not nvvm:
        raise ToolchainError(
            f"{source}: {root} has tileiras but not the ptxas and libNVVM of the same release beside it "
            f"(looked for bin/ptxas, lib/libnvvm.so*, nvvm/lib64/libnvvm.so*). Fix: {INSTALL_KIT}"
        )
    tv, pv = _tool_version(tileiras), _tool_version(ptxas)
    if _release(tv) != _release(pv):
        raise ToolchainError(
            f"{source}: tileiras {tv} and ptxas {pv} are different CUDA releases; tileiras fails with "
            f"another release's ptxas/libNVVM. Fix: {INSTALL_KIT} (and unset CUTILE_TILEIRAS_PATH)"
        )
    return Toolchain(source, root, tileiras, ptxas, nvvm[0], _release(tv), {"tileiras": tv, "ptxas": pv, "libnvvm": f"from {root}"})


def find() -> Toolchain:
    """The toolchain to use, or a ToolchainError saying what to install."""
    kit = _from_pip()
    if kit is not None:
        return kit
    explicit = os.environ.get("CUTILE_TILEIRAS_PATH")
    if explicit:
        exe = Path(explicit)
        return _from_root(exe.resolve().parent.parent, exe, "CUTILE_TILEIRAS_PATH")
    for var in ("CUDA_TOOLKIT_PATH", "CUDA_HOME"):
        if os.environ.get(var):
            root = Path(os.environ[var])
            return _from_root(root, root / "bin" / "tileiras", var)
    default = Path("/usr/local/cuda")
    if (default / "bin" / "tileiras").is_file():
        return _from_root(default, default / "bin" / "tileiras", "CUDA toolkit")
    raise ToolchainNotFoundError(
        "no Tile IR toolchain found: the kernels are compiled for your GPU by tileiras at first use. "
        f"Fix: {INSTALL_KIT} (or set CUTILE_TILEIRAS_PATH to a CUDA >= 13.3 tileiras with its ptxas and libNVVM)"
    )


_lock = threading.Lock()
_configured: Toolchain | None = None


def configure() -> Toolchain:
    """Find the toolchain once and point cutile's JIT (and tileiras) at it.

    Sets CUTILE_TILEIRAS_PATH, CUDA_HOME and puts the toolchain's bin first on
    PATH for this process, so tileiras picks the ptxas/libNVVM of its release.
    """
    global _configured
    with _lock:
        if _configured is None:
            tc = find()
            os.environ["CUTILE_TILEIRAS_PATH"] = str(tc.tileiras)
            os.environ["CUDA_HOME"] = str(tc.root)
            bin_dir = str(tc.tileiras.parent)
            path = os.environ.get("PATH", "")
            if path.split(os.pathsep)[0] != bin_dir:
                os.environ["PATH"] = bin_dir + (os.pathsep + path if path else "")
            _configured = tc
        return _configured


def require_arch(tc: Toolchain, capability: tuple[int, int]) -> None:
    if capability < (8, 0):
        raise ToolchainError(
            f"sm_{capability[0]}{capability[1]} is not supported by cuTile (Tile IR needs sm_80 or newer)"
        )
    need = MIN_RELEASE.get(capability, DEFAULT_MIN_RELEASE)
    if tc.release < need:
        raise ToolchainError(
            f"sm_{capability[0]}{capability[1]} needs tileiras >= {need[0]}.{need[1]}, but {tc.describe()} "
            f"is {tc.release[0]}.{tc.release[1]}. Fix: {INSTALL_KIT}"
        )
