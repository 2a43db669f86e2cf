"""warmup(): compile (and optionally autotune) ops ahead of a service's first request."""

from __future__ import annotations

import importlib
import pkgutil
import time
from collections.abc import Iterable, Sequence
from typing import Any


def _op_modules() -> dict[str, Any]:
    ops = importlib.import_module(f"{__package__}.ops")
    found = {}
    for info in pkgutil.iter_modules(ops.__path__):
        module = importlib.import_module(f"{ops.__name__}.{info.name}")
        if hasattr(module, "_warmup"):
            found[info.name] = module
    return found


def warmup(
    shapes: Iterable[Sequence[int]],
    dtypes: Iterable[Any] = ("float32", "float16", "bfloat16"),
    *,
    ops: Iterable[str] | None = None,
    device: Any = None,
    autotune: bool = False,
) -> list[dict[str, Any]]:
    """Run each op once for every shape and dtype so its kernels are compiled (and,
    with the kernel cache on, stored for later processes); with `autotune=True`,
    tune each shape class first (decisions are cached too).

    cutile specializes kernels on the divisibility of shapes, strides and
    addresses: warm up the shapes you will call with. Returns one record per
    (op, shape, dtype): the config chosen, seconds taken, and tileiras runs.
    """
    import torch

    from . import _cache

    modules = _op_modules()
    names = list(modules) if ops is None else list(ops)
    unknown = [n for n in names if n not in modules]
    if unknown:
        raise ValueError(f"no op named {', '.join(unknown)}; ops with warmup: {', '.join(sorted(modules))}")
    device = torch.device(device if device is not None else "cuda")
    report = []
    for name in names:
        for shape in shapes:
            for dtype in dtypes:
                dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
                before = _cache.stats()["tileiras_runs"] if _cache_loaded() else 0
                start = time.perf_counter()
                config = modules[name]._warmup(tuple(int(s) for s in shape), dt, device, autotune)
                torch.cuda.synchronize(device)
                report.append(
                    {
                        "op": name,
                        "shape": tuple(shape),
                        "dtype": str(dt).replace("torch.", ""),
                        "config": config,
                        "seconds": round(time.perf_counter() - start, 3),
                        "tileiras_runs": _cache.stats()["tileiras_runs"] - before,
                    }
                )
    return report


def _cache_loaded() -> bool:
    from . import _library

    return _library._lib is not None
