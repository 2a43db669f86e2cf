"""Softmax's shape heuristic: which tile config an [m, n] softmax takes.

Every table is fitted to `benchmarks/softmax_sweep.py` on the H200 (kernel time
from CUPTI); docs/benchmarks.md has the sweeps, and says which measurement each
entry rests on. Which kernel family a row takes (plain, exact-width or gather) is
the library's decision (`cutile_softmax_row_family`, launch.rs): the tables are
looked up by it, never by a copy of its rule.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, NamedTuple

from ... import _library
from ..._op import next_pow2

if TYPE_CHECKING:
    import torch


class SoftmaxConfig(NamedTuple):
    """A softmax launch: `block_m` rows of `block_n` columns per CTA tile (powers of two;
    block_n >= n takes one tile per row, else the row loop over block_n tiles), with
    `occupancy` CTAs per SM and `warps` worker warps per CTA (0: tileiras' choice)."""

    block_m: int
    block_n: int
    occupancy: int = 0
    warps: int = 0


# Per element size, rows up to `block_n` elements take one register tile of
# `elements` per CTA (block_m = elements // block_n rows) with `occupancy` and
# `warps`; longer rows loop over LOOP tiles (two reads: online max/sum, then
# normalise). Eight warps pay for wide tiles: with them one float32 tile holds a
# 32768-element row.
SINGLE_TILE = {  # element size -> [(largest block_n, elements per CTA tile, occupancy, warps)]
    4: [
        (256, 1024, 1, 0),
        (1024, 4096, 0, 0),
        (2048, 8192, 1, 0),
        (4096, 4096, 4, 0),
        (8192, 8192, 4, 8),
        (16384, 16384, 2, 0),
        (32768, 32768, 1, 8),
    ],
    2: [
        (256, 1024, 0, 0),
        (512, 1024, 4, 0),
        (1024, 2048, 0, 0),
        (2048, 8192, 4, 0),
        (4096, 8192, 4, 0),
        (8192, 16384, 4, 8),
    ],
}
# element size -> worker warps when the rows are too few for the entry's row
# blocks (block_m cut to keep MIN_CTAS CTAs): a grid of one-row 2-byte tiles keeps
# too few loads in flight with four warps.
FEW_ROWS_WARPS = {2: 8}
# Loop tiles of the software-pipelined loop kernels: float32 loops over 8192-wide
# tiles, as its 16384-wide ones spill with two tiles in flight.
LOOP = {4: (8192, 2, 8), 2: (8192, 4, 0)}  # element size -> (block_n, occupancy, warps)
# Gathered rows (2-byte rows that are not whole 16-byte vectors) want one row per
# CTA from 2048 wide, and in the loop narrower tiles when rows are many, wide ones
# with 8 warps when they are few (each CTA then keeps more loads in flight).
GATHER_SINGLE_TILE = {
    2: [
        (256, 2048, 0, 0),
        (1024, 4096, 0, 0),
        (2048, 2048, 0, 0),
        (4096, 4096, 1, 8),
        (8192, 8192, 1, 8),
    ],
}
# element size -> (block_n, occupancy, warps) below GATHER_LOOP_ROWS rows, and from it
GATHER_LOOP = {2: ((8192, 2, 8), (4096, 4, 8))}
GATHER_LOOP_ROWS = 2048
# Exact-width rows (a power of two, no column bounds checks) let 2-byte rows keep one
# row per CTA with 8 warps from 4096 wide and one tile up to 16384; float32's
# single tiles measured within noise of SINGLE_TILE, which they keep.
EXACT_SINGLE_TILE = {
    4: SINGLE_TILE[4],
    # SINGLE_TILE's rows up to 2048 wide, refitted rows from 4096.
    2: [row for row in SINGLE_TILE[2] if row[0] <= 2048] + [(4096, 4096, 2, 8), (8192, 8192, 2, 0), (16384, 16384, 0, 8)],
}
# element size -> [(largest n, block_n, occupancy, warps)] for exact rows over one
# tile. A loop of only two exact tiles has a static trip count that tileiras
# unrolls, keeping the whole row in registers: 32768-wide 2-byte rows loop over
# four 8192-wide tiles instead.
EXACT_LOOP = {
    4: [(sys.maxsize, 16384, 1, 8)],
    2: [(32768, 8192, 4, 0), (sys.maxsize, 16384, 2, 8)],
}
# Exact rows' row blocks shrink for MIN_CTAS only down to this many elements per CTA.
EXACT_MIN_TILE_ELEMENTS = 1024
MAX_BLOCK_M = 64
# Row blocks shrink until there are this many CTAs (when there are rows enough):
# about two per SM of an H200 (132 SMs); few-row problems were fastest so.
MIN_CTAS = 256
# The widest single tile the autotuner tries (register pressure beyond it).
MAX_TILE_ELEMENTS = 32768
# Worker warps per CTA the autotuner tries: tileiras' choice, or 8.
WARPS = (0, 8)


def row_family(dtype: torch.dtype, m: int, n: int, row_stride: int | None = None) -> int:
    """The kernel family (`CUTILE_SOFTMAX_ROWS_*`) the library runs [m, n] rows of `dtype` with,
    `row_stride` elements apart (default: contiguous)."""
    from ... import _abi

    family = _library.ffi().new("int32_t *")
    status = _library.library().cutile_softmax_row_family(_abi.dtype_code(dtype), m, n, n if row_stride is None else row_stride, family)
    _abi.check_status(status, "softmax")
    return int(family[0])


def softmax_config(m: int, n: int, dtype: torch.dtype, family: int | None = None) -> SoftmaxConfig:
    """The heuristic's config for an [m, n] softmax of `dtype` whose rows take kernel
    `family` (default: contiguous rows' family, asked of the library)."""
    lib = _library.library()
    size = dtype.itemsize
    if family is None:
        family = row_family(dtype, m, n)
    gather, exact = family == lib.CUTILE_SOFTMAX_ROWS_GATHER, family == lib.CUTILE_SOFTMAX_ROWS_EXACT
    block_n = next_pow2(n)
    single_tile = (GATHER_SINGLE_TILE if gather else EXACT_SINGLE_TILE if exact else SINGLE_TILE)[size]
    for largest, elements, occupancy, warps in single_tile:
        if block_n <= largest:
            fitted = max(1, min(elements // block_n, MAX_BLOCK_M))
            enough_ctas = 1 << max(0, (m // MIN_CTAS).bit_length() - 1)  # largest power of two <= m / MIN_CTAS
            if exact:
                block_m = min(fitted, max(enough_ctas, EXACT_MIN_TILE_ELEMENTS // block_n))
            else:
                block_m = min(fitted, enough_ctas)
                if block_m < fitted:
                    warps = FEW_ROWS_WARPS.get(size, warps)
            return SoftmaxConfig(block_m, block_n, occupancy, warps)
    if gather:
        loop_n, occupancy, warps = GATHER_LOOP[size][m >= GATHER_LOOP_ROWS]
    elif exact:
        loop_n, occupancy, warps = next(row[1:] for row in EXACT_LOOP[size] if n <= row[0])
    else:
        loop_n, occupancy, warps = LOOP[size]
    return SoftmaxConfig(1, loop_n, occupancy, warps)


def softmax_candidates(m: int, n: int, dtype: torch.dtype, family: int | None = None) -> list[SoftmaxConfig]:
    """The autotuner's search space around the heuristic: row blocks, tile widths, occupancy, warps."""
    base = softmax_config(m, n, dtype, family)
    shapes: set[tuple[int, int]] = set()
    block_n = next_pow2(n)
    if block_n <= MAX_TILE_ELEMENTS:  # one tile per row block
        for block_m in (1, 2, 4, 8, 16, 32, 64):
            if block_m <= next_pow2(m) and block_m * block_n <= MAX_TILE_ELEMENTS:
                shapes.add((block_m, block_n))
    if n > 1024:  # row loop over narrower tiles
        for width in (2048, 4096, 8192, 16384):
            if width < n:
                shapes.add((1, width))
    configs = {SoftmaxConfig(bm, bn, occ, warps) for bm, bn in shapes for occ in (0, 1, 2, 4) for warps in WARPS}
    configs.add(base)
    return sorted(configs)


def shape_class(device_name: str, dtype: torch.dtype, m: int, n: int, family: int) -> str:
    """The autotuning decision key: row counts fall in octaves, and a decision for one row
    length class serves every n with the same next power of two and the same kernel family
    (a config tuned for whole-vector rows can be 0.6x of the best on gathered ones)."""
    lib = _library.library()
    m_class = min(next_pow2(m), 1 << 20)
    suffix = {lib.CUTILE_SOFTMAX_ROWS_GATHER: "|gather", lib.CUTILE_SOFTMAX_ROWS_EXACT: "|exact"}.get(family, "")
    return f"softmax|{device_name}|{dtype}|n<={next_pow2(n)}|m~{m_class}{suffix}"
