"""The persistent kernel cache, so a new process's first call on a shape class it
has seen before runs no tileiras.

Compiled kernels live in cutile's own content-addressed store (`kernels/`,
installed through `cutile_cache_enable`): atomic temp-file + rename writes,
entries checked against their payload SHA-256 on read (a torn or corrupt entry is
deleted and recompiled), least-recently-used eviction under a size cap. Its key
is the Tile IR bytecode, target, opt level and `tileiras --version`; the salt
adds the ptxas/libNVVM versions (no ABI fingerprint: the warm-start entries beside
the cubins carry their own op's, so adding an op keeps the others'). Autotuning
decisions live beside it (`autotune.json`, see _autotune.py).

Location: $TILEGYM_CUTILE_RS_CACHE_DIR, else the platform's user cache directory
(platformdirs). "0", "off", "false" or "none" disables it. The directory is
created user-only (0700), and one that others can write is refused: a cache hit
loads the stored bytes as device code.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DIR_ENV = "TILEGYM_CUTILE_RS_CACHE_DIR"
SIZE_ENV = "TILEGYM_CUTILE_RS_CACHE_SIZE"
DISABLE_VALUES = ("0", "off", "false", "none", "no")
DEFAULT_CAPACITY = 2 << 30  # as cuTile Python's
KERNELS = "kernels"
AUTOTUNE_FILE = "autotune.json"

# cutile's entry header (cutile_compiler::jit_cache, format version 1).
_MAGIC = b"CUTILECUBIN\0"
_HEADER_LEN = 96

_lock = threading.Lock()
_enabled: Path | None = None
_disabled_reason: str | None = None


class CacheDirError(OSError):
    """The cache directory cannot be used safely."""


def root() -> Path | None:
    """The cache root, or None when disabled by the environment."""
    value = os.environ.get(DIR_ENV)
    if value is not None:
        if value.strip().lower() in DISABLE_VALUES or not value.strip():
            return None
        return Path(value).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("tilegym-cutile-rs", appauthor=False))


def capacity() -> int:
    """The size cap in bytes: $TILEGYM_CUTILE_RS_CACHE_SIZE (e.g. 500M, 4G), default 2 GiB."""
    value = os.environ.get(SIZE_ENV)
    if not value:
        return DEFAULT_CAPACITY
    m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)i?b?\s*", value.lower())
    if not m:
        raise ValueError(f"{SIZE_ENV}={value!r}: expected a size such as 500M or 4G")
    return int(m.group(1)) << (10 * "_kmgt".index(m.group(2) or "_"))


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) user-only; refuse one another user owns or others can write."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise CacheDirError(f"{path} belongs to another user; set {DIR_ENV} to a directory of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheDirError(
            f"{path} is writable by other users, who could plant device code in it; "
            f"`chmod 700 {path}` or set {DIR_ENV} elsewhere"
        )
    return path


def salt(toolchain: Any) -> str:
    """What the store's keys add to cutile's: the versions of the tools it does not pin."""
    return ",".join(f"{k}={v}" for k, v in sorted(toolchain.versions.items()))


def enable(lib: Any, toolchain: Any) -> Path | None:
    """Install the cache for this process once (idempotent); returns its root or None.

    A cache that cannot be used is never fatal: the reason is logged and kept for
    `python -m tilegym_cutile_rs.cache`, and kernels compile as without a cache.
    """
    global _enabled, _disabled_reason
    with _lock:
        if _enabled is not None or _disabled_reason is not None:
            return _enabled
        where = root()
        if where is None:
            _disabled_reason = f"disabled by {DIR_ENV}={os.environ.get(DIR_ENV)!r}"
            return None
        try:
            private_dir(where)
            kernels = private_dir(where / KERNELS)
            cap = capacity()
        except (OSError, ValueError) as exc:
            _disabled_reason = str(exc)
            import logging

            logging.getLogger("tilegym_cutile_rs").warning("kernel cache disabled: %s", exc)
            return None
        from . import _abi

        status = lib.cutile_cache_enable(str(kernels).encode(), cap, salt(toolchain).encode())
        _abi.check_status(status, "kernel cache")
        _enabled = where
        return where


def disabled_reason() -> str | None:
    return _disabled_reason


def stats() -> dict[str, int]:
    """This process's counters: disk hits, misses, puts, bytes written, I/O errors, tileiras
    runs, warm starts (kernels loaded from the warm-start index without lowering),
    replays (launches that repeated an earlier one straight through cuLaunchKernel),
    shipped (kernels loaded from the wheel's shipped kernels) and spec_mismatches (first
    launches whose shipped-kernel spec named another kernel than cutile resolved: a bug)."""
    from . import _abi, _library

    lib = _library.library()
    out = _library.ffi().new("CacheStats *")
    _abi.check_status(lib.cutile_cache_stats(out), "kernel cache stats")
    names = ("hits", "misses", "puts", "bytes_written", "io_errors", "tileiras_runs", "warm_starts", "replays", "shipped", "spec_mismatches")
    return {name: int(getattr(out, name)) for name in names}


@dataclass(frozen=True)
class Entry:
    path: Path
    size: int
    last_used: float  # mtime: cutile touches an entry on every hit
    gpu_name: str
    toolchain: str
    valid: bool


def read_entry(path: Path) -> Entry:
    """Parse and verify one stored kernel (header fields and payload checksum)."""
    data = path.read_bytes()
    st = path.stat()
    gpu = tool = ""
    valid = False
    if len(data) >= _HEADER_LEN and data[:12] == _MAGIC:
        payload_sha = data[16:48]
        gpu_len = int.from_bytes(data[80:82], "little")
        fp_len = int.from_bytes(data[82:84], "little")
        payload_len = int.from_bytes(data[88:96], "little")
        names_end = _HEADER_LEN + gpu_len + fp_len
        gpu = data[_HEADER_LEN : _HEADER_LEN + gpu_len].decode(errors="replace")
        tool = (data[_HEADER_LEN + gpu_len : names_end].decode(errors="replace").strip().splitlines() or [""])[-1]
        payload = data[names_end:]
        valid = len(payload) == payload_len and hashlib.sha256(payload).digest() == payload_sha
    return Entry(path, st.st_size, st.st_mtime, gpu, tool, valid)


def entries(where: Path) -> list[Entry]:
    kernels = where / KERNELS
    if not kernels.is_dir():
        return []
    found = []
    for path in kernels.glob("*/*.cubin"):
        try:
            found.append(read_entry(path))
        except OSError:  # evicted or replaced while we looked
            continue
    return sorted(found, key=lambda e: e.last_used, reverse=True)


def clear(where: Path) -> int:
    """Delete every kernel and autotuning decision under `where`; returns how many files went.

    Directories stay: a process using the cache meanwhile just misses and recompiles."""
    removed = 0
    for path in [*(where / KERNELS).glob("*/*"), where / AUTOTUNE_FILE]:
        try:
            if path.is_file():
                path.unlink()
                removed += 1
        except FileNotFoundError:
            pass
    return removed
