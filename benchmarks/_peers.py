"""The peers the softmax benchmarks time ours against, each None where it cannot run here."""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch


def triton_softmax() -> Callable[[torch.Tensor], torch.Tensor] | None:
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def kernel(y_ptr, x_ptr, x_row_stride, y_row_stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        y = num / tl.sum(num, axis=0)
        tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)

    def run(x: torch.Tensor) -> torch.Tensor:
        m, n = x.shape
        y = torch.empty_like(x)
        block = triton.next_power_of_2(n)
        warps = 4 if block <= 2048 else (8 if block <= 8192 else 16)
        kernel[(m,)](y, x, x.stride(0), y.stride(0), n, BLOCK=block, num_warps=warps)
        return y

    return run


def tilegym_cutile_softmax() -> Callable[[torch.Tensor], torch.Tensor] | None:
    try:
        import tilegym

        tilegym.set_backend("cutile")
        fn = tilegym.ops.softmax
        fn(torch.randn(4, 64, device="cuda"))
    except Exception as exc:  # noqa: BLE001 - any failure means the peer is unavailable here
        print(f"(cuTile Python via TileGym unavailable: {type(exc).__name__}: {exc})", file=sys.stderr)
        return None
    return fn
