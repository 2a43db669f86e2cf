"""warmup(): compile (and optionally autotune) ops ahead of a service's first request."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def warmup(
    shapes: Iterable[Sequence[int]],
    dtypes: Iterable[str | torch.dtype] = ("float32", "float16", "bfloat16"),
    *,
    ops: Iterable[str] | None = None,
    device: torch.device | str | int | None = None,
    autotune: bool = False,
) -> list[dict[str, Any]]:
    """Run each op once for every shape and dtype so its kernels are compiled (and,
    with the kernel cache on, stored for later processes); with `autotune=True`,
    tune each shape class first (decisions are cached too).

    cutile specializes kernels on the divisibility of shapes, strides and
    addresses: warm up the shapes you will call with. Each op reads a shape its
    own way (softmax, swiglu, rms_norm: the input's shape; matmul: `[M, K]` or
    `[B, M, K]`; rope: `[B, H, S, D]`; attention_sink: `(B, S_q, S_kv, H_kv, G, D)`,
    16-bit only): `ops` left out warms each op at the shapes and dtypes it takes,
    while an op named in `ops` raises on one it does not. Returns one record per
    (op, shape, dtype) warmed: the config chosen, seconds taken, and tileiras runs.
    """
    import torch

    from . import _cache, _library, _registry

    specs = _registry.ops()
    names = list(specs) if ops is None else list(ops)
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise ValueError(f"no op named {', '.join(unknown)}; ops: {', '.join(specs)}")
    where = torch.device(device if device is not None else "cuda")
    int_shapes, dtypes = [tuple(int(s) for s in shape) for shape in shapes], list(dtypes)
    report = []
    for name in names:
        for shape in int_shapes:
            for dtype in dtypes:
                dt = getattr(torch, dtype) if isinstance(dtype, str) else dtype
                if ops is None and not specs[name].warms_up(shape, dt):
                    continue
                before = _cache.stats()["tileiras_runs"] if _library.loaded() else 0
                start = time.perf_counter()
                config = specs[name].warmup(shape, dt, where, autotune)
                torch.cuda.synchronize(where)
                report.append(
                    {
                        "op": name,
                        "shape": shape,
                        "dtype": str(dt).replace("torch.", ""),
                        "config": config,
                        "seconds": round(time.perf_counter() - start, 3),
                        "tileiras_runs": _cache.stats()["tileiras_runs"] - before,
                    }
                )
    return report
