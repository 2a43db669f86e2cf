"""Kernels shipped in the wheel, as the library reads them: the common shapes of every op run
with no toolchain and no JIT. A leaf: it knows the kernel store (`kernels/<arch>/`, described
by `kernels/index.json`), nothing of ops or launches; _ship_build writes the store.

At run time a kernel variant not in memory and not in the user's cache is looked up
among these entries by the identity of the key cutile resolves for the launch; only
without a hit does tileiras run, and without a toolchain the launch raises a
ToolchainError naming the kernel, the architecture and `pip install
"tilegym-cutile-rs[tileiras]"` (docs/design.md, "Shipped kernels").
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ._paths import PACKAGE_DIR

KERNELS_DIR = PACKAGE_DIR / "kernels"
INDEX = "index.json"


def sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def directory() -> Path:
    """Where shipped kernels are read from: $TILEGYM_CUTILE_RS_SHIPPED_DIR or the package's."""
    override = os.environ.get("TILEGYM_CUTILE_RS_SHIPPED_DIR")
    return Path(override) if override else KERNELS_DIR


def index(root: Path | None = None) -> dict[str, Any] | None:
    """The shipped kernels' index, or None when this build ships none."""
    import json

    path = (root or directory()) / INDEX
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


def count(arch: str) -> int:
    """How many kernels this build ships for `arch` (0 when it ships none)."""
    found = index()
    if found is None or found.get("library_fingerprint") != _fingerprint():
        return 0
    return int(found.get("archs", {}).get(arch, 0))


def _fingerprint() -> str:
    from . import _library

    return str(_library.manifest().FINGERPRINT)


def enable(lib: Any, jit: bool) -> None:
    """Point the library at the shipped kernels; `jit`: a toolchain compiles what is not shipped."""
    root = directory()
    status = lib.cutile_shipped_enable(str(root if (root / INDEX).is_file() else "").encode(), int(jit))
    if status != 0:
        from . import _abi

        _abi.check_status(status, "shipped kernels")
