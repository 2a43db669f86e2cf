"""Watches calls into the library from a daemon thread (the calls release the GIL):

- a call still running after SLOW_S (a JIT compile: tileiras takes about a second
  per variant) is reported once through logging, saying what is compiled and why;
- tileiras still running after $TILEGYM_CUTILE_RS_COMPILE_TIMEOUT seconds
  (default 600) is killed, so a hung compiler becomes a ToolchainError instead of
  a stalled process. cutile runs tileiras as a child process with no timeout.

A call costs two dict operations and a clock read; the thread starts at the first call.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TIMEOUT_ENV = "TILEGYM_CUTILE_RS_COMPILE_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0
SLOW_S = 1.0
POLL_S = 0.2
log = logging.getLogger("tilegym_cutile_rs")

# thread id -> [start, what, reported, killed]; begin()/end() fill it, and an op's
# per-call fast path sets and pops its own thread's slot directly.
inflight: dict[int, list[Any]] = {}
_thread: threading.Thread | None = None
_start_lock = threading.Lock()
_monotonic, _get_ident = time.monotonic, threading.get_ident  # per-call path: skip two lookups


def timeout_s() -> float:
    value = os.environ.get(TIMEOUT_ENV)
    try:
        return float(value) if value else DEFAULT_TIMEOUT_S
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV}={value!r}: expected a number of seconds") from None


def _children(pid: int) -> Iterator[tuple[int, str]]:
    """(pid, name) of every descendant of `pid`, from /proc."""
    parent_of: dict[int, int] = {}
    names: dict[int, str] = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat_file.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2 :].split()[1])
        child = int(stat_file.parent.name)
        parent_of[child], names[child] = ppid, name
    frontier = {pid}
    while frontier:
        nxt = {c for c, p in parent_of.items() if p in frontier}
        for c in nxt:
            yield c, names[c]
        frontier = nxt


def _tileiras_processes() -> list[int]:
    """tileiras processes under this one, and everything they started (ptxas, ...):
    a surviving child would hold tileiras's output pipes open and keep cutile waiting."""
    found = [pid for pid, name in _children(os.getpid()) if name.startswith("tileiras")]
    return found + [pid for t in found for pid, _ in _children(t)]


def _watch() -> None:
    while True:
        time.sleep(POLL_S)
        now = time.monotonic()
        for slot in list(inflight.values()):
            start, what, reported, killed = slot
            age = now - start
            if age >= SLOW_S and not reported:
                slot[2] = True
                if _tileiras_processes():
                    log.warning(
                        "%s: compiling a kernel with tileiras (first use of this shape class and dtype "
                        "in this process, not in the kernel cache); about a second per variant. "
                        "tilegym_cutile_rs.warmup() does this ahead of time.",
                        _describe(what),
                    )
            if age >= timeout_s() and not killed:
                procs = _tileiras_processes()
                for pid in procs:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                if procs:
                    slot[3] = True
                    log.error("%s: killed tileiras after %.0f s (%s)", _describe(what), age, TIMEOUT_ENV)


def _describe(what: tuple[Any, ...]) -> str:
    return " ".join(str(part) for part in what)


def _ensure_thread() -> None:
    global _thread
    if _thread is None:
        with _start_lock:
            if _thread is None:
                _thread = threading.Thread(target=_watch, name="tilegym_cutile_rs-watchdog", daemon=True)
                _thread.start()


def begin(what: tuple[Any, ...]) -> list[Any]:
    """Register the current thread's library call (`what`: op name and details, formatted
    only if reported). Returns its slot for end(); slot[3] says whether tileiras was killed."""
    if _thread is None:
        _ensure_thread()
    slot = [_monotonic(), what, False, False]
    inflight[_get_ident()] = slot
    return slot


def end(slot: list[Any]) -> None:
    inflight.pop(_get_ident(), None)


def timed_out_message(slot: list[Any]) -> str | None:
    if slot[3]:
        return (
            f"tileiras did not finish within {timeout_s():.0f} s and was killed; raise {TIMEOUT_ENV} "
            "if your machine is slow, or check the toolchain with `python -m tilegym_cutile_rs.check`"
        )
    return None
