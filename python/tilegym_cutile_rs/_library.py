"""Loads libcutile_kernels.so once, lazily and thread-safely, and checks it
against the cdef manifest generated at build time.

Nothing here runs cargo, a compiler or any subprocess, and nothing here opens
libcuda: the library opens the driver itself when a kernel first runs.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ._paths import LIBRARY_ENV, LIBRARY_NAME, PACKAGE_DIR
from .errors import ABIMismatchError, LibraryError, StaleLibraryError

_lock = threading.Lock()
_lib: Any = None

_REINSTALL = (
    "reinstall the package (`pip install --force-reinstall tilegym-cutile-rs`) or, in a source "
    "checkout, rebuild it (`pip install -e . --no-build-isolation`)"
)


def library_path() -> Path:
    """The library that will be loaded: $TILEGYM_CUTILE_RS_LIBRARY or the packaged one."""
    override = os.environ.get(LIBRARY_ENV)
    return Path(override) if override else PACKAGE_DIR / LIBRARY_NAME


def manifest() -> Any:
    """The generated manifest module (fingerprint, function names), or a LibraryError."""
    try:
        from . import _abi_manifest
    except ImportError as exc:
        raise LibraryError(
            f"the generated cdef manifest (tilegym_cutile_rs/_abi_manifest.py) is missing: {exc}. "
            f"This is an unbuilt source tree; {_REINSTALL}"
        ) from None
    return _abi_manifest


def _source_checkout() -> Path | None:
    """The repository root when the package runs from an editable source checkout."""
    root = PACKAGE_DIR.parent.parent
    if (root / "crates" / "cutile_kernels" / "Cargo.toml").is_file() and (root / "Cargo.lock").is_file():
        return root
    return None


def check_fresh(path: Path) -> None:
    """In a source checkout, refuse a library older than any Rust input it is built from."""
    root = _source_checkout()
    if root is None or path.parent != PACKAGE_DIR:
        return
    built = path.stat().st_mtime
    inputs = [root / "Cargo.toml", root / "Cargo.lock", *root.glob("crates/**/*.rs"), *root.glob("crates/*/Cargo.toml")]
    newer = [p for p in inputs if p.stat().st_mtime > built]
    if newer:
        shown = ", ".join(str(p.relative_to(root)) for p in sorted(newer)[:3])
        raise StaleLibraryError(
            f"{path} is older than its Rust sources ({shown}{', ...' if len(newer) > 3 else ''}). "
            "Rebuild it: `pip install -e .` (or `python setup.py build_rust --inplace` in an environment with the build requirements)"
        )


def _load() -> Any:
    man = manifest()
    from ._cdef import ffi

    path = library_path()
    if not path.is_file():
        raise LibraryError(f"{path} does not exist; {_REINSTALL}")
    check_fresh(path)
    try:
        lib = ffi.dlopen(str(path))
    except OSError as exc:
        raise LibraryError(f"cannot load {path}: {exc}; {_REINSTALL}") from None
    try:
        found = ffi.string(lib.cutile_abi_fingerprint()).decode()
    except (AttributeError, ffi.error):  # cffi raises ffi.error for a missing symbol
        raise ABIMismatchError(
            f"{path} exports no cutile_abi_fingerprint: it is not a tilegym_cutile_rs library; {_REINSTALL}"
        ) from None
    if found != man.FINGERPRINT:
        raise ABIMismatchError(
            f"{path} was built from C declarations with fingerprint {found}, but this package's "
            f"cdef manifest has {man.FINGERPRINT}: calling it could corrupt memory. Library and "
            f"Python package come from different builds; {_REINSTALL}"
        )
    return lib


def library() -> Any:
    """The loaded, checked library (cffi lib object)."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                _lib = _load()
    return _lib


def ops() -> list[str]:
    """The ops compiled into the library, in name order (`cutile_ops_list`)."""
    return str(ffi().string(library().cutile_ops_list()).decode()).split(",")


def loaded() -> bool:
    """Whether library() has loaded the library in this process."""
    return _lib is not None


def ffi() -> Any:
    from ._cdef import ffi as _ffi

    return _ffi


def last_error() -> str:
    return str(ffi().string(library().cutile_last_error()).decode(errors="replace"))
