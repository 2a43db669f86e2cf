"""softmax(x, dim=-1): cuTile Rust kernel, f32/f16/bf16, any shape."""

from __future__ import annotations

from typing import Any

from .. import _abi, _device, _library

__all__ = ["softmax", "softmax_config"]

SUPPORTED = ("float32", "float16", "bfloat16")
# Rows up to this many elements are softmaxed in one register tile; longer rows
# loop over tiles of LOOP_BLOCK_N (two reads: online max/sum, then normalise).
SINGLE_TILE_MAX_N = {4: 8192, 2: 16384}
LOOP_BLOCK_N = {4: 4096, 2: 8192}
# Elements per CTA tile for the single-tile kernel. Chosen from a sweep on the
# H200 (docs/benchmarks.md): bigger row blocks won at every row length tried.
TILE_ELEMENTS = {4: 8192, 2: 16384}
MAX_BLOCK_M = 64


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def softmax_config(m: int, n: int, element_size: int) -> tuple[int, int]:
    """(block_m, block_n) for an [m, n] softmax: the shape heuristic."""
    if n <= SINGLE_TILE_MAX_N[element_size]:
        block_n = _next_pow2(n)
        elements = 16384 if block_n <= 256 else TILE_ELEMENTS[element_size]
        block_m = max(1, min(elements // block_n, _next_pow2(m), MAX_BLOCK_M))
        return block_m, block_n
    return 1, LOOP_BLOCK_N[element_size]


def softmax(x: Any, dim: int = -1, *, config: tuple[int, int] | None = None) -> Any:
    """Softmax of `x` along `dim`, computed in float32, returned as a new
    contiguous tensor of x's shape and dtype on x's device.

    The kernel runs on the current torch stream of x's device and does not
    block the host (it can be captured in a CUDA graph). A `dim` other than the
    last is handled by moving it last first (one extra copy in and out).
    `config=(block_m, block_n)` overrides the tile choice (powers of two).
    """
    import torch

    _device.check_cuda_tensor(x, "softmax")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"softmax supports {', '.join(SUPPORTED)}; x is {x.dtype}. Cast it, e.g. x.float()")
    if x.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            "tilegym_cutile_rs.softmax has no backward pass; call it under torch.no_grad() or use torch.softmax for training"
        )
    ndim = max(x.dim(), 1)
    if not -ndim <= dim < ndim:
        raise IndexError(f"dim {dim} is out of range for a tensor with {x.dim()} dims")
    dim %= ndim
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    src = x.reshape(1) if x.dim() == 0 else x
    moved = src.movedim(dim, -1) if dim != ndim - 1 else src
    n = moved.shape[-1]
    m = moved.numel() // n
    x2 = moved.reshape(m, n)
    if (n > 1 and x2.stride(1) != 1) or (m > 1 and x2.stride(0) < n):
        x2 = x2.contiguous()
    y2 = torch.empty((m, n), dtype=x.dtype, device=x.device)
    index = x.device.index if x.device.index is not None else torch.cuda.current_device()
    _device.prepare(index)
    block_m, block_n = config if config is not None else softmax_config(m, n, x.element_size())
    lib = _library.library()
    stream = _device.current_stream(index)
    status = lib.cutile_softmax(_abi.tensor_desc(x2), _abi.tensor_desc(y2), block_m, block_n, index, stream)
    _abi.check_status(status, "softmax")
    y = y2.view(moved.shape)
    if dim != ndim - 1:
        y = y.movedim(-1, dim).contiguous()
    return y.reshape(x.shape)
