"""The softmax shape heuristic and its decision keys, on any machine (no GPU)."""

from __future__ import annotations

import pytest
import torch
from tilegym_cutile_rs import _library
from tilegym_cutile_rs.ops.softmax import heuristic as sm

F32, BF16 = torch.float32, torch.bfloat16
SHAPES = [(1, 1), (256, 9), (8192, 255), (8192, 1009), (8192, 1024), (4096, 2047), (2048, 4095), (1024, 8191)]
SHAPES += [(8192, 8192), (2048, 16385), (2048, 32768), (1024, 32767), (256, 65535), (4096, 50257), (4096, 50264)]
SHAPES += [(100000, 262144)]


@pytest.mark.parametrize("m, n", SHAPES)
@pytest.mark.parametrize("dtype", [F32, BF16])
def test_every_config_is_one_the_library_takes(m: int, n: int, dtype: torch.dtype) -> None:
    # The library's own limits on a config, from the generated manifest; worker warps
    # as tileiras before 13.5 compiles them (0: its own choice).
    lib = _library.library()
    for bm, bn, occupancy, warps, cga in [sm.softmax_config(m, n, dtype), *sm.softmax_candidates(m, n, dtype)]:
        ctas = max(cga, 1)  # a cluster's CTAs share the tile
        assert cga in (0, *sm.CLUSTERS) and (cga == 0 or bm == 1 and bn >= sm.CLUSTER_MIN_BLOCK_N), (bm, bn, cga)
        assert 1 <= bm <= lib.CUTILE_MAX_BLOCK and 1 <= bn <= lib.CUTILE_MAX_BLOCK * ctas
        assert bm & (bm - 1) == 0 and bn & (bn - 1) == 0
        assert 0 <= occupancy <= lib.CUTILE_MAX_OCCUPANCY
        assert warps == 0 or lib.CUTILE_WORKER_WARPS_BEFORE_TILEIRAS_13_5 >> warps & 1
        if bn >= n:  # one tile per row block: each CTA's part stays within what the sweeps fitted
            assert bm * bn <= sm.MAX_TILE_ELEMENTS * ctas
    assert not any(c.cga for c in sm.softmax_candidates(m, n, dtype, arch="sm_89"))  # no clusters before Hopper
    if dtype == BF16 and n in (50257, 151936):  # a vocabulary row: its single-read cluster tiles are tried
        assert {c.cga for c in sm.softmax_candidates(m, n, dtype) if c.block_n >= n} >= {4, 8}


def test_two_byte_rows_that_are_not_whole_vectors_take_the_gather_rows() -> None:
    # One row per CTA from 2048 wide and loop tiles by row count (docs/benchmarks.md, the gather sweep).
    assert sm.softmax_config(4096, 2047, BF16) == sm.SoftmaxConfig(1, 2048, 0, 0)
    assert sm.softmax_config(4096, 2048, BF16) != sm.softmax_config(4096, 2047, BF16)
    assert sm.softmax_config(4096, 2047, F32) == sm.softmax_config(4096, 2048, F32)  # float32 has no gather kernel
    few, many = sm.GATHER_LOOP[2]
    assert sm.softmax_config(sm.GATHER_LOOP_ROWS - 1, 50257, BF16) == sm.SoftmaxConfig(1, *few)
    assert sm.softmax_config(sm.GATHER_LOOP_ROWS, 50257, BF16) == sm.SoftmaxConfig(1, *many)
    assert sm.softmax_config(4096, 50264, BF16) == sm.SoftmaxConfig(1, *sm.LOOP[2])


def test_power_of_two_rows_take_the_exact_rows() -> None:
    # One row per CTA with 8 warps from 4096 wide, one tile up to 16384 (docs/benchmarks.md, the exact sweep).
    assert sm.softmax_config(8192, 4096, BF16) == sm.SoftmaxConfig(1, 4096, 2, 8)
    assert sm.softmax_config(8192, 4095, BF16) != sm.softmax_config(8192, 4096, BF16)
    assert sm.softmax_config(4096, 16384, BF16) == sm.SoftmaxConfig(1, 16384, 0, 8)
    assert sm.softmax_config(4096, 16376, BF16) == sm.SoftmaxConfig(1, *sm.LOOP[2])  # not a power of two: the checked loop
    # Exact loops keep at least four tiles (two would unroll into one register-held row).
    assert sm.softmax_config(2048, 32768, BF16) == sm.SoftmaxConfig(1, 8192, 4, 0)
    assert sm.softmax_config(2048, 65536, BF16) == sm.SoftmaxConfig(1, 16384, 2, 8)
    assert sm.softmax_config(128, 262144, F32) == sm.SoftmaxConfig(1, 16384, 1, 8)
    assert sm.softmax_config(2048, 40000, F32) == sm.SoftmaxConfig(1, *sm.LOOP[4])  # not a power of two: the checked loop
    # Few rows cut the row block only down to EXACT_MIN_TILE_ELEMENTS, with the table's warps.
    assert sm.softmax_config(256, 256, BF16) == sm.SoftmaxConfig(4, 256, 0, 0)
    assert sm.softmax_config(256, 255, BF16)[0] == 1
    assert sm.softmax_config(256, 2048, BF16) == sm.SoftmaxConfig(1, 2048, 4, 0)
    # float32 keeps one single-tile table for both kernels.
    for m, n in [(8192, 1024), (8192, 4096), (2048, 32768)]:
        assert sm.softmax_config(m, n, F32) == sm.softmax_config(m, n - 1, F32)


def test_gathered_rows_keep_their_own_tuned_decisions() -> None:
    def key(index: int, dtype: torch.dtype, m: int, n: int) -> str:
        return sm.shape_class(f"GPU{index}", dtype, m, n, sm.row_family(dtype, m, n))

    # Same length class, other kernel family: a decision must not cross over.
    assert key(0, torch.bfloat16, 4096, 50257) != key(0, torch.bfloat16, 4096, 50264)
    assert key(0, torch.bfloat16, 4096, 50257) == key(0, torch.bfloat16, 4096, 50001)
    assert key(0, torch.float32, 4096, 50257) == key(0, torch.float32, 4096, 50264)
    # Power-of-two rows run the exact kernels: their decisions are their own too.
    assert key(0, torch.float32, 4096, 4096) != key(0, torch.float32, 4096, 4095)
    assert key(0, torch.float32, 4096, 4095) == key(0, torch.float32, 4096, 3000)
    assert key(0, torch.float16, 4096, 50257) != key(1, torch.float16, 4096, 50257)
