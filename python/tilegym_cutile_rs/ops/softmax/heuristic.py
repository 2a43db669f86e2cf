"""Softmax's shape heuristic: which tile config an [m, n] softmax takes.

A device with a fitted table (`benchmarks/tune.py softmax`, tuned/softmax.json) takes the
entry of its nearest problem with the same kernel family and row-length class; otherwise
the rule: tables fitted on the H200 (kernel time from CUPTI), kept as data in rules.json
beside this file; docs/benchmarks.md has the sweeps and says which measurement each entry
rests on. Which kernel family a row takes (plain, exact-width or gather) is the library's
decision (`cutile_softmax_row_family`, launch.rs): the tables are looked up by it, never by
a copy of its rule.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ... import _device, _library, _tuned
from ..._op import next_pow2

if TYPE_CHECKING:
    import torch


class SoftmaxConfig(NamedTuple):
    """A softmax launch: `block_m` rows of `block_n` columns per tile (powers of two;
    block_n >= n takes one tile per row, else the row loop over block_n tiles), with
    `occupancy` CTAs per SM, `warps` worker warps per CTA (0: tileiras' choice) and `cga`
    CTAs of a cluster sharing each tile (sm_90 and later; 0: one CTA a tile)."""

    block_m: int
    block_n: int
    occupancy: int = 0
    warps: int = 0
    cga: int = 0


# The rule's tables, fitted on an H200 and kept as data (rules.json, which says what each
# rests on): per element size, rows up to `block_n` elements take one register tile of
# `elements` per CTA (block_m = elements // block_n rows) with `occupancy` and `warps`;
# longer rows loop over LOOP tiles (two reads: online max/sum, then normalise).
# FEW_ROWS_WARPS: worker warps when the rows are too few for the entry's row blocks (block_m
# cut to keep MIN_CTAS CTAs). GATHER_*: 2-byte rows that are not whole 16-byte vectors, one
# row per CTA from 2048 wide, loop tiles by row count (below GATHER_LOOP_ROWS rows and from
# it). EXACT_*: power-of-two rows (no column bounds checks); EXACT_LOOP's rows are (largest n,
# block_n, occupancy, warps), and exact row blocks shrink for MIN_CTAS only down to
# EXACT_MIN_TILE_ELEMENTS elements per CTA. Row blocks stop at MAX_BLOCK_M rows.
_RULES = json.loads((Path(__file__).parent / "rules.json").read_text())


def _by_size(table: dict[str, Any]) -> dict[int, Any]:
    return {int(size): value for size, value in table.items()}


def _rows(table: dict[str, Any]) -> dict[int, list[tuple[int, ...]]]:
    return {size: [tuple(row) for row in rows] for size, rows in _by_size(table).items()}


SINGLE_TILE = _rows(_RULES["single_tile"])
FEW_ROWS_WARPS: dict[int, int] = _by_size(_RULES["few_rows_warps"])
LOOP: dict[int, tuple[int, ...]] = {size: tuple(row) for size, row in _by_size(_RULES["loop"]).items()}
GATHER_SINGLE_TILE = _rows(_RULES["gather_single_tile"])
GATHER_LOOP: dict[int, tuple[tuple[int, ...], ...]] = {
    size: tuple(tuple(row) for row in rows) for size, rows in _by_size(_RULES["gather_loop"]).items()
}
GATHER_LOOP_ROWS: int = _RULES["gather_loop_rows"]
EXACT_SINGLE_TILE = _rows(_RULES["exact_single_tile"])
EXACT_LOOP = {  # a largest n of null: no limit
    size: [(sys.maxsize if row[0] is None else row[0], *row[1:]) for row in rows] for size, rows in _by_size(_RULES["exact_loop"]).items()
}
EXACT_MIN_TILE_ELEMENTS: int = _RULES["exact_min_tile_elements"]
MAX_BLOCK_M: int = _RULES["max_block_m"]
MIN_CTAS: int = _RULES["min_ctas"]
# The widest single tile the autotuner tries (register pressure beyond it).
MAX_TILE_ELEMENTS = 32768
# Worker warps per CTA the autotuner tries: tileiras' choice, or 8.
WARPS = (0, 8)
# Rows of CLUSTER_MIN_BLOCK_N or more (rounded up) also try one tile per row shared by a
# cluster of 2, 4 or 8 CTAs, each holding CLUSTER_MIN_CTA_ELEMENTS to MAX_TILE_ELEMENTS of it:
# a vocabulary row read from memory once instead of twice (docs/benchmarks.md, "softmax").
CLUSTER_MIN_BLOCK_N = 16384
CLUSTER_MIN_CTA_ELEMENTS = 4096
CLUSTERS = (2, 4, 8)


def row_family(dtype: torch.dtype, m: int, n: int, row_stride: int | None = None) -> int:
    """The kernel family (`CUTILE_SOFTMAX_ROWS_*`) the library runs [m, n] rows of `dtype` with,
    `row_stride` elements apart (default: contiguous)."""
    from ... import _abi

    family = _library.ffi().new("int32_t *")
    status = _library.library().cutile_softmax_row_family(_abi.dtype_code(dtype), m, n, n if row_stride is None else row_stride, family)
    _abi.check_status(status, "softmax")
    return int(family[0])


def softmax_config(m: int, n: int, dtype: torch.dtype, family: int | None = None, device: int | None = None) -> SoftmaxConfig:
    """The heuristic's config for an [m, n] softmax of `dtype` whose rows take kernel
    `family` (default: contiguous rows' family, asked of the library) on CUDA device
    `device` (default: the current one, if any): its fitted table's, else `softmax_rule`'s."""
    if family is None:
        family = row_family(dtype, m, n)
    if family != row_family(dtype, m, n):  # the fits are of contiguous rows
        return softmax_rule(m, n, dtype, family)
    rule = lambda: softmax_rule(m, n, dtype, family)  # noqa: E731
    return SoftmaxConfig(*_tuned.fitted("softmax", _tuned.problem(dtype, m, n), device, rule, adapt_fitted))


def adapt_fitted(config: tuple[int, ...], problem: _tuned.Problem, fitted: _tuned.Problem) -> tuple[int, ...] | None:
    """A fitted config for a nearby problem of the same kernel family and row-length class
    (its tiles are sized by the row length), with row blocks no taller than its rows."""
    dtype_name, m, n = problem
    dtype = _tuned.torch_dtype(dtype_name)
    if next_pow2(n) != next_pow2(fitted[2]) or row_family(dtype, m, n) != row_family(dtype, fitted[1], fitted[2]):
        return None
    return (min(config[0], next_pow2(m)), *config[1:])


def softmax_rule(m: int, n: int, dtype: torch.dtype, family: int | None = None) -> SoftmaxConfig:
    """The rule's config (rules.json) for an [m, n] softmax of `dtype` whose rows take kernel
    `family` (default: contiguous rows' family)."""
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


def softmax_candidates(m: int, n: int, dtype: torch.dtype, family: int | None = None, arch: str = "sm_90") -> list[SoftmaxConfig]:
    """The autotuner's search space on `arch` around the heuristic: row blocks, tile widths,
    occupancy, warps, and from sm_90 on long rows in one tile shared by a cluster."""
    base = softmax_config(m, n, dtype, family)
    rule = softmax_rule(m, n, dtype, family)
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
    if block_n >= CLUSTER_MIN_BLOCK_N and _device.has_clusters(arch):
        for cga in CLUSTERS:
            if CLUSTER_MIN_CTA_ELEMENTS <= block_n // cga <= MAX_TILE_ELEMENTS:
                configs.update(SoftmaxConfig(1, block_n, occ, warps, cga) for occ in (0, 1) for warps in WARPS)
    configs.update((base, rule))
    return sorted(configs)


def shape_class(device_name: str, dtype: torch.dtype, m: int, n: int, family: int) -> str:
    """The autotuning decision key: row counts fall in octaves, and a decision for one row
    length class serves every n with the same next power of two and the same kernel family
    (a config tuned for whole-vector rows can be 0.6x of the best on gathered ones)."""
    lib = _library.library()
    m_class = min(next_pow2(m), 1 << 20)
    suffix = {lib.CUTILE_SOFTMAX_ROWS_GATHER: "|gather", lib.CUTILE_SOFTMAX_ROWS_EXACT: "|exact"}.get(family, "")
    return f"softmax|{device_name}|{dtype}|n<={next_pow2(n)}|m~{m_class}{suffix}"
