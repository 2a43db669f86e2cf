"""matmul and bmm on CPU: the library's checks at the C boundary, the Python checks
that need no GPU, and the per-architecture heuristic's configs."""

from __future__ import annotations

import pytest
import tilegym_cutile_rs
import torch
from tilegym_cutile_rs import _library
from tilegym_cutile_rs.ops import matmul as mm

from .test_abi import desc


def call(lib, c, a, b, tf32=0, config=(16, 16, 16, 0, 0, 0, 0), ctas=1):  # type: ignore[no-untyped-def]
    return lib.cutile_matmul(c, a, b, tf32, ctas, *config, 0, 0), _library.last_error()


@pytest.mark.parametrize(
    "c_kw, a_kw, b_kw, tf32, config, fragment",
    [
        ({"shape": [1, 4, 8]}, {"shape": [1, 4, 6]}, {"shape": [1, 5, 8]}, 0, (16, 16, 16), "do not chain"),
        ({"shape": [1, 4, 8]}, {"shape": [2, 4, 6]}, {"shape": [2, 6, 8]}, 0, (16, 16, 16), "must be [2, 4, 8]"),
        ({"shape": [1, 4, 8]}, {"shape": [1, 4, 6], "dtype": 1}, {"shape": [1, 6, 8]}, 0, (16, 16, 16), "dtype"),
        ({"shape": [4, 8]}, {"shape": [4, 6]}, {"shape": [6, 8]}, 0, (16, 16, 16), "3-D"),
        ({"shape": [1, 4, 8], "strides": [64, 16, 1]}, {"shape": [1, 4, 6]}, {"shape": [1, 6, 8]}, 0, (16, 16, 16), "contiguous"),
        ({"shape": [1, 4, 8]}, {"shape": [1, 4, 6], "strides": [48, 12, 2]}, {"shape": [1, 6, 8]}, 0, (16, 16, 16), "row- or column-major"),
        ({"shape": [1, 4, 8], "dtype": 1}, {"shape": [1, 4, 6], "dtype": 1}, {"shape": [1, 6, 8], "dtype": 1}, 1, (16, 16, 16), "tf32"),
        ({"shape": [1, 4, 8]}, {"shape": [1, 4, 0]}, {"shape": [1, 0, 8]}, 0, (16, 16, 16), "K = 0"),
        ({"shape": [1, 4, 8]}, {"shape": [1, 4, 6]}, {"shape": [1, 6, 8]}, 0, (16, 16, 24), "block_k = 24"),
        ({"shape": [1, 4, 8]}, {"shape": [1, 4, 6]}, {"shape": [1, 6, 8]}, 0, (16, 16, 16, 40), "occupancy"),
        ({"shape": [1, 4, 8]}, {"shape": [1, 4, 6], "ptr": 0}, {"shape": [1, 6, 8]}, 0, (16, 16, 16), "null"),
        ({"shape": [1, 4, 8]}, {"shape": [1, 4, 6]}, {"shape": [1, 6, 8]}, 0, (16, 16, 16, 0, 0, -1), "group_m = -1"),
        ({"shape": [1, 4, 8]}, {"shape": [1, 4, 6]}, {"shape": [1, 6, 8]}, 0, (16, 16, 16, 0, 0, 0, 3), "cga = 3"),
    ],
)
def test_library_rejects_bad_views_before_any_launch(lib, c_kw, a_kw, b_kw, tf32, config, fragment) -> None:  # type: ignore[no-untyped-def]
    status, msg = call(lib, desc(lib, **c_kw), desc(lib, **a_kw), desc(lib, **b_kw), tf32, (*config, 0, 0, 0, 0)[:7])
    assert status == lib.CUTILE_ERR_INVALID_ARGUMENT or status == lib.CUTILE_ERR_NULL_POINTER, msg
    assert fragment in msg, msg


def test_an_empty_product_launches_nothing(lib) -> None:  # type: ignore[no-untyped-def]
    # Column-major a and b (transposed views) with no rows: checked, then nothing to do, no GPU needed.
    status, msg = call(lib, desc(lib, [1, 0, 8]), desc(lib, [1, 0, 6], [0, 1, 1]), desc(lib, [1, 6, 8], [48, 1, 6]))
    assert status == lib.CUTILE_OK, msg
    # The persistent kernel needs CTAs to run on.
    status, msg = call(lib, desc(lib, [1, 4, 8]), desc(lib, [1, 4, 6]), desc(lib, [1, 6, 8]), 0, (16, 16, 16, 0, 0, 8, 0), ctas=0)
    assert status == lib.CUTILE_ERR_INVALID_ARGUMENT and "ctas >= 1" in msg, msg


@pytest.mark.parametrize(
    "call, exc, fragment",
    [
        (lambda: tilegym_cutile_rs.matmul(torch.randn(4, 8), torch.randn(8, 2)), ValueError, "CUDA tensors"),
        (lambda: tilegym_cutile_rs.bmm(torch.randn(2, 4, 8), torch.randn(2, 8, 2)), ValueError, "CUDA tensors"),
        (lambda: tilegym_cutile_rs.matmul([[1.0]], torch.randn(1, 1)), TypeError, "torch.Tensor"),
        (lambda: tilegym_cutile_rs.matmul(torch.randn(1, 1), None), TypeError, "torch.Tensor"),
    ],
)
def test_bad_input_is_a_clear_exception_on_cpu(call, exc, fragment) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match=fragment):
        call()


SHAPES = [(1, 1, 1), (8, 8, 8), (1, 14336, 4096), (16, 4096, 14336), (128, 128256, 4096), (4096, 4096, 4096), (3072, 6144, 2720)]


@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"])
def test_every_config_is_one_the_library_takes(lib, m: int, n: int, k: int, dtype: torch.dtype, arch: str) -> None:  # type: ignore[no-untyped-def]
    for config in [mm.matmul_config(m, n, k, dtype, arch), *mm.matmul_candidates(m, n, k, dtype, arch)]:
        for block in config[:3]:
            assert mm.MIN_BLOCK <= block <= lib.CUTILE_MAX_BLOCK and block & (block - 1) == 0, config
        assert 0 <= config.occupancy <= lib.CUTILE_MAX_OCCUPANCY, config
        assert config.warps == 0 or lib.CUTILE_WORKER_WARPS_BEFORE_TILEIRAS_13_5 >> config.warps & 1, config
        assert config.cga == 0 or (config.cga <= lib.CUTILE_MAX_CTAS_IN_CGA and config.cga & (config.cga - 1) == 0), config
    assert mm.matmul_config(m, n, k, dtype, arch) in mm.matmul_candidates(m, n, k, dtype, arch)


def test_the_heuristic_depends_on_the_architecture_and_fits_the_problem() -> None:
    big = (4096, 4096, 4096)
    assert mm.matmul_rule(*big, torch.bfloat16, "sm_90") == (128, 128, 64, 0, 0, 0, 0)
    assert mm.matmul_rule(*big, torch.bfloat16, "sm_80") == (128, 128, 32, 0, 0, 0, 0)
    assert mm.matmul_rule(*big, torch.float32, "sm_90") == (64, 64, 32, 0, 0, 0, 0)
    # The autotuner also tries the persistent kernel in grouped order, and clusters where they exist.
    assert any(c.group_m == mm.GROUP_M for c in mm.matmul_candidates(*big, torch.bfloat16, "sm_90"))
    assert any(c.cga == 2 for c in mm.matmul_candidates(*big, torch.bfloat16, "sm_90"))
    assert not any(c.cga for arch in ("sm_80", "sm_86", "sm_89") for c in mm.matmul_candidates(*big, torch.bfloat16, arch))
    # Decode: one row takes the smallest row tile; tiny problems the smallest tiles.
    assert mm.matmul_rule(1, 14336, 4096, torch.bfloat16, "sm_90")[:3] == (16, 128, 64)
    assert mm.matmul_rule(8, 8, 8, torch.bfloat16, "sm_90")[:3] == (16, 16, 16)


def test_a_fitted_cluster_carries_over_only_on_the_persistent_kernel() -> None:
    fitted = ("bfloat16", 1, 4096, 4096, 4096)
    persistent = mm.MatmulConfig(128, 256, 64, 0, 0, mm.GROUP_M, 2)
    one_per_tile = mm.MatmulConfig(128, 256, 64, 0, 0, 0, 2)
    near = ("bfloat16", 1, 2048, 4096, 4096)
    assert mm._adapt(persistent, near, fitted) == persistent
    assert mm._adapt(one_per_tile, near, fitted) == one_per_tile._replace(cga=0)
    assert mm._adapt(one_per_tile, fitted, fitted) == one_per_tile  # where it was measured
    # Tiles are cut to a smaller problem, as the rule cuts its own.
    assert mm._adapt(persistent, ("bfloat16", 1, 16, 100, 4096), fitted)[:3] == (16, 128, 64)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_operands_are_read_in_place_only_with_16_byte_aligned_strides(dtype: torch.dtype) -> None:
    """TMA needs every stride but the unit one, and the start, 16-byte aligned: other operands
    are copied once with the leading dimension padded (the view keeps their shape and values)."""
    per16 = 16 // dtype.itemsize
    aligned = torch.randn(100, 64 * per16, dtype=dtype)
    assert mm._operand(aligned) is aligned
    assert mm._operand(aligned.t()).data_ptr() == aligned.data_ptr()  # column-major: read in place
    for t in (torch.randn(100, 1023, dtype=dtype),                     # row-major, K = 1023
              torch.randn(100, 1023, dtype=dtype).t(),                 # column-major, leading 1023
              torch.randn(4, 128, 511, dtype=dtype),                   # a batch of them
              torch.randn(100, 1025, dtype=dtype)[:, 1:],              # starts one element in
              torch.randn(64, 300, dtype=dtype)[:, ::3]):              # neither row- nor column-major
        got = mm._operand(t)
        unit = -1 if got.stride(-1) == 1 else -2
        assert got.shape == t.shape and torch.equal(got, t)
        # The copy is decided by shape and strides alone: a kept plan applies it to new data.
        other = torch.randn_like(t)
        fresh = torch.empty_strided(t.shape, t.stride(), dtype=dtype).copy_(other)
        copied = mm._copying(t).copy(fresh)
        assert copied.stride() == got.stride() and torch.equal(copied, other)
        assert got.storage_offset() * dtype.itemsize % 16 == 0
        assert all(s * dtype.itemsize % 16 == 0 for d, s in enumerate(got.stride()) if d != got.dim() + unit), got.stride()
    small = torch.randn(8, 7, dtype=dtype)
    assert mm._operand(small) is small  # a copy would cost more than it saves
    x = torch.randn(100, 1023, dtype=dtype, requires_grad=True)
    mm._operand(x).sum().backward()
    assert x.grad is not None and torch.equal(x.grad, torch.ones_like(x))
