"""Describe mode: the shipped-kernel build runs each op's public function on meta tensors for
a target GPU, and the library records each launch instead of making it (_ship_build). A leaf
that the hot paths read (`describing()`), apart from the build's orchestration."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """A GPU the build describes launches for: its architecture, an SM count of a common GPU
    of it (heuristics that size grids by SMs pick kernels by it), and the device whose fitted
    configs (_tuned) the heuristics take, or None for the nearest fitted one by SM count."""

    arch: str
    sms: int
    device: str | None = None

    @property
    def capability(self) -> tuple[int, int]:
        digits = self.arch.removeprefix("sm_")
        return int(digits[:-1]), int(digits[-1])


# Each architecture a cubin runs on exactly (sm_120 cubins are refused on sm_121), with the
# SM counts of its common GPUs: A100 (108), A10/A40/RTX 3090 (72/84/82), L4/L40S/RTX 4090
# (58/142/128), H100 PCIe/SXM and H200 (114/132), B200 (148), RTX 5090/PRO 6000 (170/188).
ARCHS: dict[str, tuple[int, ...]] = {
    "sm_80": (108,),
    "sm_86": (72, 82, 84),
    "sm_89": (58, 128, 142),
    "sm_90": (114, 132),
    "sm_100": (148,),
    "sm_120": (170, 188),
}

_target: Target | None = None


def describing() -> bool:
    """Whether this process is describing launches (meta tensors stand for device ones)."""
    return _target is not None


def target() -> Target:
    """The target being described (device queries for meta tensors answer from it)."""
    if _target is None:
        raise RuntimeError("no shipped-kernel target is being described")
    return _target


@contextlib.contextmanager
def describe(t: Target) -> Iterator[None]:
    """Describe mode on this thread for target `t`: op calls on meta tensors record their
    launches in the library instead of making them."""
    from . import _library

    global _target
    lib = _library.library()
    if _target is not None:
        raise RuntimeError("describe mode does not nest")
    status = lib.cutile_describe_begin(t.arch.encode())
    if status != 0:
        raise RuntimeError(_library.last_error())
    _target = t
    try:
        yield
    finally:
        _target = None
        lib.cutile_describe_end(_library.ffi().NULL)
