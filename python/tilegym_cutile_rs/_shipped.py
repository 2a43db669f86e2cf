"""Kernels shipped in the wheel: the common shapes of every op run with no toolchain and no JIT.

When the wheel is built (scripts/ship_kernels.py), every op's `OP.shipped()` runs its
public function on meta tensors (no memory, no GPU) for its documented shapes, once per
target architecture, in the library's describe mode: the library checks the arguments and
picks the kernels exactly as for a real launch, and records each launch instead of making
it. The library then lowers and assembles each recorded kernel for its architecture and
writes it to `kernels/<arch>/`, with `kernels/index.json` saying what was built.

At run time a kernel variant not in memory and not in the user's cache is looked up
among these entries by the identity of the key cutile resolves for the launch; only
without a hit does tileiras run, and without a toolchain the launch raises a
ToolchainError naming the kernel, the architecture and `pip install
"tilegym-cutile-rs[tileiras]"` (docs/design.md, "Shipped kernels").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._paths import PACKAGE_DIR

KERNELS_DIR = PACKAGE_DIR / "kernels"
INDEX = "index.json"


@dataclass(frozen=True)
class Target:
    """A GPU the build describes launches for: its architecture, an SM count of a common GPU
    of it (heuristics that size grids by SMs pick kernels by it), and the device whose fitted
    configs (_tuned) the heuristics take, or None for the nearest fitted one by SM count."""

    arch: str
    sms: int
    device: str | None = None

    @property
    def capability(self) -> tuple[int, int]:
        digits = self.arch.removeprefix("sm_")
        return int(digits[:-1]), int(digits[-1])


# Each architecture a cubin runs on exactly (sm_120 cubins are refused on sm_121), with the
# SM counts of its common GPUs: A100 (108), A10/A40/RTX 3090 (72/84/82), L4/L40S/RTX 4090
# (58/142/128), H100 PCIe/SXM and H200 (114/132), B200 (148), RTX 5090/PRO 6000 (170/188).
ARCHS: dict[str, tuple[int, ...]] = {
    "sm_80": (108,),
    "sm_86": (72, 82, 84),
    "sm_89": (58, 128, 142),
    "sm_90": (114, 132),
    "sm_100": (148,),
    "sm_120": (170, 188),
}

_target: Target | None = None


def describing() -> bool:
    """Whether this process is describing launches (meta tensors stand for device ones)."""
    return _target is not None


def target() -> Target:
    """The target being described (device queries for meta tensors answer from it)."""
    if _target is None:
        raise RuntimeError("no shipped-kernel target is being described")
    return _target


@contextlib.contextmanager
def describe(t: Target) -> Iterator[None]:
    """Describe mode on this thread for target `t`: op calls on meta tensors record their
    launches in the library instead of making them."""
    from . import _library

    global _target
    lib = _library.library()
    if _target is not None:
        raise RuntimeError("describe mode does not nest")
    status = lib.cutile_describe_begin(t.arch.encode())
    if status != 0:
        raise RuntimeError(_library.last_error())
    _target = t
    try:
        yield
    finally:
        _target = None
        lib.cutile_describe_end(_library.ffi().NULL)


def describe_op(name: str, t: Target) -> None:
    """Run op `name`'s shipped shapes in describe mode for `t`."""
    import torch

    from . import _op

    with describe(t):
        _op.ops()[name].shipped(torch.device("meta"))


def build(out: Path, archs: Sequence[str], jobs: int) -> dict[str, Any]:
    """Describe every op's shipped shapes for each of `archs`, compile the kernels they
    take with `jobs` threads into `out/<arch>/`, and write `out/index.json`."""
    import json
    import time

    from . import _library, _op, _toolchain, _tuned

    toolchain = _toolchain.configure()
    lib = _library.library()
    started = time.monotonic()
    for arch in archs:
        if arch not in ARCHS:
            raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
        for target in _tuned.describe_targets(arch, ARCHS[arch], list(_op.tunings())):
            for name in _op.ops():
                describe_op(name, target)
    written = _library.ffi().new("int32_t *")
    status = lib.cutile_shipped_build(str(out).encode(), jobs, written)
    if status != 0:
        from . import _abi

        _abi.check_status(status, "shipped kernels")
    files = {arch: sorted(p.name for p in (out / arch).iterdir()) if (out / arch).is_dir() else [] for arch in archs}
    index = {
        "library_fingerprint": _library.manifest().FINGERPRINT,
        "toolchain": toolchain.versions,
        "archs": {arch: len(names) for arch, names in files.items()},
        "ops": sorted(_op.ops()),
        "build_seconds": round(time.monotonic() - started, 1),
        "sha256": {f"{arch}/{name}": _sha256(out / arch / name) for arch, names in files.items() for name in names},
    }
    (out / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    return index


def _sha256(path: Path) -> str:
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


def resolve(t: Target, calls: Callable[[], object]) -> tuple[int, int]:
    """(found, described): of the launches `calls()` makes for target `t` (op calls on meta
    tensors), how many find a valid shipped entry, without launching (the CPU tests' check).
    Call enable() first."""
    from . import _library

    with describe(t):
        calls()
    found = _library.ffi().new("int32_t *")
    described = _library.ffi().new("int32_t *")
    status = _library.library().cutile_shipped_resolve(found, described)
    if status != 0:
        raise RuntimeError(_library.last_error())
    return int(found[0]), int(described[0])
