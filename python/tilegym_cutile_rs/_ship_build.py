"""The shipped-kernel build (scripts/ship_kernels.py): every op's `OP.shipped()` runs its public
function on meta tensors (no memory, no GPU) for its documented shapes, once per target GPU,
in describe mode (_describe): the library checks the arguments and picks the kernels exactly
as for a real launch, and records each launch instead of making it. The library then lowers
and assembles each recorded kernel for its architecture and writes it to the kernel store
(`kernels/<arch>/`, read by _shipped), with `kernels/index.json` saying what was built."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import _describe, _library, _registry, _shipped, _toolchain, _tuned
from ._describe import ARCHS, Target


def describe_op(name: str, t: Target) -> None:
    """Run op `name`'s shipped shapes in describe mode for `t`."""
    import torch

    with _describe.describe(t):
        _registry.ops()[name].shipped(torch.device("meta"))


def build(out: Path, archs: Sequence[str], jobs: int) -> dict[str, Any]:
    """Describe every op's shipped shapes for each of `archs`, compile the kernels they
    take with `jobs` threads into `out/<arch>/`, and write `out/index.json`."""
    import json
    import time

    toolchain = _toolchain.configure()
    lib = _library.library()
    started = time.monotonic()
    for arch in archs:
        if arch not in ARCHS:
            raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
        for target in _tuned.describe_targets(arch, ARCHS[arch], list(_registry.tunings())):
            for name in _registry.ops():
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
        "ops": sorted(_registry.ops()),
        "build_seconds": round(time.monotonic() - started, 1),
        "sha256": {f"{arch}/{name}": _shipped.sha256(out / arch / name) for arch, names in files.items() for name in names},
    }
    (out / _shipped.INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    return index


def resolve(t: Target, calls: Callable[[], object]) -> tuple[int, int]:
    """(found, described): of the launches `calls()` makes for target `t` (op calls on meta
    tensors), how many find a valid shipped entry, without launching (the CPU tests' check).
    Call _shipped.enable() first."""
    with _describe.describe(t):
        calls()
    found = _library.ffi().new("int32_t *")
    described = _library.ffi().new("int32_t *")
    status = _library.library().cutile_shipped_resolve(found, described)
    if status != 0:
        raise RuntimeError(_library.last_error())
    return int(found[0]), int(described[0])
