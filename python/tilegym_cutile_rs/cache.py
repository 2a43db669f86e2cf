"""python -m tilegym_cutile_rs.cache [info|list|clear] [--json]: the persistent kernel cache.

  info   where the cache is, whether it is usable, entries, size, cap, autotuning decisions
  list   every stored kernel: target, toolchain, size, last use, and whether it verifies
  clear  delete every stored kernel and autotuning decision

The cache lives in $TILEGYM_CUTILE_RS_CACHE_DIR or the platform's user cache
directory; TILEGYM_CUTILE_RS_CACHE_DIR=off disables it; TILEGYM_CUTILE_RS_CACHE_SIZE
caps it (default 2G, least recently used kernels go first). Hit counts are not
kept on disk; a process's own counters are `tilegym_cutile_rs.cache.stats()`.

Exit codes: 0 done, 2 the cache directory is unusable (the reason is printed).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from . import _autotune, _cache
from ._cache import stats

__all__ = ["info", "main", "stats"]

EXIT_OK, EXIT_UNUSABLE = 0, 2


def info() -> tuple[dict[str, Any], int]:
    where = _cache.root()
    if where is None:
        return {"enabled": False, "reason": f"disabled by {_cache.DIR_ENV}"}, EXIT_OK
    out: dict[str, Any] = {"enabled": True, "root": str(where)}
    try:
        _cache.private_dir(where)
        out["capacity_bytes"] = _cache.capacity()
    except (OSError, ValueError) as exc:
        return {"enabled": False, "root": str(where), "reason": str(exc)}, EXIT_UNUSABLE
    found = _cache.entries(where)
    out.update(
        entries=len(found),
        bytes=sum(e.size for e in found),
        invalid=sum(not e.valid for e in found),
        autotune_decisions=len(_autotune._read(where / _cache.AUTOTUNE_FILE)),
    )
    return out, EXIT_OK


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tilegym_cutile_rs.cache",
        description="Show or clear the tilegym-cutile-rs kernel cache.",
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="info", choices=("info", "list", "clear"))
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    args = parser.parse_args(argv)

    summary, code = info()
    if args.command == "list" and summary.get("enabled"):
        summary["kernels"] = [
            {"file": str(e.path), "gpu": e.gpu_name, "toolchain": e.toolchain, "bytes": e.size,
             "last_used": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.last_used)), "valid": e.valid}
            for e in _cache.entries(_cache.root())  # type: ignore[arg-type]
        ]
    if args.command == "clear" and summary.get("enabled"):
        summary["removed"] = _cache.clear(_cache.root())  # type: ignore[arg-type]
        summary.update(entries=0, bytes=0, invalid=0, autotune_decisions=0)
    if args.json:
        print(json.dumps(summary, indent=2))
        return code
    if not summary.get("enabled"):
        print(f"kernel cache disabled: {summary['reason']}")
        return code
    print(f"kernel cache   {summary['root']}")
    print(f"entries        {summary['entries']} ({_fmt_bytes(summary['bytes'])} of {_fmt_bytes(summary['capacity_bytes'])} cap)"
          + (f", {summary['invalid']} failing verification (recompiled on next use)" if summary["invalid"] else ""))
    print(f"autotuning     {summary['autotune_decisions']} decisions")
    for k in summary.get("kernels", []):
        print(f"  {k['gpu']:<7} {_fmt_bytes(k['bytes']):>10}  last used {k['last_used']}  "
              f"{'ok' if k['valid'] else 'CORRUPT'}  {k['toolchain'][:50]}  {k['file']}")
    if "removed" in summary:
        print(f"removed        {summary['removed']} files")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
