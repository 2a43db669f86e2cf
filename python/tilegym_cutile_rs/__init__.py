"""tilegym-cutile-rs: NVIDIA cuTile Rust kernels for TileGym, prebuilt.

Importing this package loads nothing: the kernel library is opened at the
first op call, and the CUDA driver when a kernel first runs.
"""

from __future__ import annotations

import functools
import importlib
import os
import pkgutil
from typing import Any

from . import errors
from .errors import (
    ABIMismatchError,
    CutileError,
    DeviceError,
    InternalError,
    KernelLaunchError,
    LibraryError,
    StaleLibraryError,
    ToolchainError,
)

__version__ = "0.1.0"

if os.environ.get("TILEGYM_CUTILE_RS_REGISTER", "0") == "1":  # opt-in: imports TileGym
    from .tilegym_backend import register as _register

    _register()


@functools.lru_cache(maxsize=None)
def _op_exports() -> dict[str, str]:
    # import_module, not `from . import ops`: the latter would re-enter __getattr__.
    ops = importlib.import_module(f"{__name__}.ops")
    names: dict[str, str] = {}
    for info in pkgutil.iter_modules(ops.__path__):
        module = importlib.import_module(f"{ops.__name__}.{info.name}")
        for name in getattr(module, "__all__", ()):
            names[name] = module.__name__
    return names


_EXTRA = {"warmup": f"{__name__}._warmup"}


def __getattr__(name: str) -> Any:
    module = None if name.startswith("_") else _EXTRA.get(name) or _op_exports().get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXTRA, *_op_exports()])


__all__ = [
    "ABIMismatchError",
    "CutileError",
    "DeviceError",
    "InternalError",
    "KernelLaunchError",
    "LibraryError",
    "StaleLibraryError",
    "ToolchainError",
    "errors",
    "__version__",
]
