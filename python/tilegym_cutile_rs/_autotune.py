"""Autotuning: time an op's candidate configs on the GPU with CUDA events (after
a first, compiling, call per candidate: never a host timer around a JIT), keep
the fastest per (device, dtype, shape class), in memory and in the kernel cache
directory (autotune.json) so later processes reuse the decision without tuning.

Writes take an flock (filelock; the kernel drops it when its holder dies, so a
killed writer leaves no stale lock) and replace the file atomically; readers
never see a partial file. A corrupt file is ignored and rewritten.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from . import _cache

ENABLE_ENV = "TILEGYM_CUTILE_RS_AUTOTUNE"
ConfigT = TypeVar("ConfigT", bound=tuple[int, ...])
# GPU clock cycles to sleep before the timed runs: a few ms, longer than the host takes to queue them.
_QUEUE_CYCLES = 10_000_000
FORMAT = 1
log = logging.getLogger("tilegym_cutile_rs")

_lock = threading.Lock()
_decisions: dict[str, list[int]] | None = None


def enabled_by_env() -> bool:
    return os.environ.get(ENABLE_ENV, "0").strip().lower() in ("1", "on", "true", "yes")


def _path() -> Path | None:
    where = _cache.root()
    return None if where is None else where / _cache.AUTOTUNE_FILE


def _read(path: Path) -> dict[str, list[int]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable autotuning decisions in %s: %s", path, exc)
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("decisions"), dict):
        return {}
    return {k: list(v) for k, v in data["decisions"].items() if isinstance(v, list)}


def _loaded() -> dict[str, list[int]]:
    global _decisions
    if _decisions is None:
        with _lock:
            if _decisions is None:
                path = _path()
                _decisions = _read(path) if path is not None else {}
    return _decisions


def lookup(key: str) -> tuple[int, ...] | None:
    found = _loaded().get(key)
    return tuple(found) if found is not None else None


def record(key: str, config: Sequence[int]) -> None:
    """Keep `config` for `key` in this process and, when the cache is on, on disk."""
    decisions = _loaded()
    decisions[key] = list(config)
    path = _path()
    if path is None:
        return
    try:
        _cache.private_dir(path.parent)
        from filelock import FileLock

        with FileLock(str(path) + ".lock", timeout=30):
            merged = _read(path)
            merged[key] = list(config)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".autotune.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump({"format": FORMAT, "decisions": merged}, f, indent=1, sort_keys=True)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
    except Exception as exc:  # a decision that cannot be saved only costs a re-tune later
        log.warning("could not save the autotuning decision for %s in %s: %s", key, path, exc)


def tune(key: str, candidates: Sequence[ConfigT], run: Callable[[ConfigT], object], *, reps: int = 20) -> ConfigT:
    """Time each candidate with CUDA events on the current stream (runs queued behind a GPU
    sleep, so host launch time does not count); record and return the fastest.

    `run(config)` launches the op once. A candidate that raises is skipped (and logged).
    """
    import torch

    if not candidates:
        raise ValueError("autotune needs at least one candidate config")
    start = time.monotonic()
    timings: dict[ConfigT, float] = {}
    for config in candidates:
        try:
            run(config)  # compiles this variant (or loads it from the kernel cache)
            torch.cuda.synchronize()
            begin = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            for _ in range(3):
                run(config)
            # The GPU sleeps while the host queues the timed runs, so the events time
            # the kernels back to back, not the host's launch rate (which small shapes hit).
            torch.cuda._sleep(_QUEUE_CYCLES)  # type: ignore[no-untyped-call]
            begin.record()
            for _ in range(reps):
                run(config)
            end.record()
            end.synchronize()
            timings[config] = begin.elapsed_time(end) / reps
        except Exception as exc:
            log.info("autotune %s: config %s rejected: %s", key, config, exc)
    if not timings:
        raise RuntimeError(f"autotune {key}: every candidate failed: {list(candidates)}")
    best = min(timings, key=timings.__getitem__)
    log.info(
        "autotuned %s in %.1f s: %s (%.1f us); tried %s",
        key, time.monotonic() - start, best, timings[best] * 1e3,
        ", ".join(f"{c}: {t * 1e3:.1f} us" for c, t in sorted(timings.items(), key=lambda kv: kv[1])),
    )
    record(key, best)
    return best

