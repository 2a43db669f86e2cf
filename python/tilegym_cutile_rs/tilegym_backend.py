"""TileGym integration: our prebuilt kernels as TileGym's "cutile-rs" backend.

    import tilegym_cutile_rs.tilegym_backend as backend
    backend.register()                 # explicit, once per process
    tilegym.set_backend("cutile-rs")
    tilegym.ops.softmax(x)             # runs our prebuilt softmax: no cargo, no build

or `TILEGYM_CUTILE_RS_REGISTER=1` and `import tilegym_cutile_rs` registers
itself. TileGym (`pip install 'tilegym-cutile-rs[tilegym]'`) has no plugin
mechanism: register() adds our implementation to its dispatcher registry
(`tilegym.backend.register_impl(op, backend="cutile-rs")`) and "cutile-rs" to
its availability set, which TileGym fills once at import. It registers only the
ops this package exports (each op's `OP.tilegym`), never points TileGym at
our library for anything else and never runs cargo. Ops we do not provide keep
TileGym's behaviour: its own cutile-rs wrapper where it has one and can build
it, else its dispatcher's fallback backend.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

BACKEND = "cutile-rs"
_lock = threading.Lock()
_registered: list[str] | None = None


def provided_ops() -> dict[str, Callable[..., Any]]:
    """TileGym op name -> our implementation, from every op's `OP.tilegym`."""
    from . import _registry

    found: dict[str, Callable[..., Any]] = {}
    for spec in _registry.ops().values():
        found.update(spec.tilegym)
    return found


def register() -> list[str]:
    """Register our ops with TileGym under "cutile-rs" (idempotent); returns their names.

    Raises ImportError with the install command when TileGym is not installed, and
    RuntimeError when TileGym is installed but cannot import (no usable GPU).
    """
    global _registered
    with _lock:
        if _registered is not None:
            return list(_registered)
        try:
            import tilegym  # noqa: F401  - runs TileGym's own registrations first, so ours win
            import tilegym.ops  # noqa: F401
            from tilegym.backend import register_impl, selector
        except ImportError as exc:
            raise ImportError(
                f"TileGym is not importable ({exc}); install it with `pip install 'tilegym-cutile-rs[tilegym]'`"
            ) from exc
        except Exception as exc:
            # Where TileGym 1.5.1 finds nvcc >= 13.3 it imports tilegym.ops.tilecpp, which
            # builds autotune configs from torch.cuda.get_device_capability() at import:
            # then TileGym fails to import on a machine without a working NVIDIA driver.
            raise RuntimeError(
                f"TileGym failed to import ({type(exc).__name__}: {exc}); with nvcc >= 13.3 found, "
                "TileGym's tilecpp backend queries the CUDA device at import, so it needs a working "
                "NVIDIA GPU and driver. Run `python -m tilegym_cutile_rs.check` to see what this machine lacks."
            ) from exc
        names = []
        for name, impl in sorted(provided_ops().items()):
            register_impl(name, backend=BACKEND)(impl)
            names.append(name)
        # Filled once at TileGym's import; without cargo it leaves "cutile-rs" out.
        selector._AVAILABLE_BACKENDS.add(BACKEND)
        _registered = names
        return list(names)
