"""rms_norm on CPU: the library's checks at the C boundary, the Python checks that need no
GPU, the rule's configs, and TileGym's module classes."""

from __future__ import annotations

import pytest
import tilegym_cutile_rs
import torch
from tilegym_cutile_rs import _library
from tilegym_cutile_rs.ops import rms_norm as rn

from .test_abi import desc


def forward(lib, y, x, w, eps=1e-6, offset=0.0, config=(1, 128, 0, 0)):  # type: ignore[no-untyped-def]
    return lib.cutile_rms_norm_forward(y, x, w, eps, offset, *config, 0, 0), _library.last_error()


@pytest.mark.parametrize(
    "x_kw, w_kw, y_kw, scalars, config, fragment",
    [
        ({"shape": [2, 100]}, {"shape": [99]}, {"shape": [2, 100]}, (1e-6, 0.0), (1, 128, 0, 0), "w must be a contiguous [100]"),
        ({"shape": [2, 100]}, {"shape": [100], "dtype": 1}, {"shape": [2, 100]}, (1e-6, 0.0), (1, 128, 0, 0), "w must be"),
        ({"shape": [2, 100], "strides": [1, 2]}, {"shape": [100]}, {"shape": [2, 100]}, (1e-6, 0.0), (1, 128, 0, 0), "unit stride"),
        ({"shape": [2, 100]}, {"shape": [100]}, {"shape": [2, 100], "strides": [200, 1]}, (1e-6, 0.0), (1, 128, 0, 0), "contiguous"),
        ({"shape": [2, 100]}, {"shape": [100]}, {"shape": [2, 100]}, (1e-6, 0.0), (1, 64, 0, 0), "cover a row"),
        ({"shape": [2, 100]}, {"shape": [100]}, {"shape": [2, 100]}, (1e-6, 0.0), (3, 128, 0, 0), "power of two"),
        ({"shape": [2, 100]}, {"shape": [100]}, {"shape": [2, 100]}, (-1.0, 0.0), (1, 128, 0, 0), "eps"),
        ({"shape": [2, 100]}, {"shape": [100]}, {"shape": [2, 100]}, (1e-6, float("inf")), (1, 128, 0, 0), "offset"),
        ({"shape": [2, 100, 1]}, {"shape": [100]}, {"shape": [2, 100, 1]}, (1e-6, 0.0), (1, 128, 0, 0), "2-D"),
    ],
)
def test_forward_rejects_bad_views_before_any_launch(lib, x_kw, w_kw, y_kw, scalars, config, fragment) -> None:  # type: ignore[no-untyped-def]
    status, msg = forward(lib, desc(lib, **y_kw), desc(lib, **x_kw), desc(lib, **w_kw), *scalars, config)
    assert status == lib.CUTILE_ERR_INVALID_ARGUMENT and fragment in msg, msg


def test_backward_checks_its_partials_and_an_empty_problem_launches_nothing(lib) -> None:  # type: ignore[no-untyped-def]
    x, w = desc(lib, [5, 100]), desc(lib, [100])
    # 5 rows at 4 per CTA: two partial rows of float32.
    status = lib.cutile_rms_norm_backward(desc(lib, [5, 100]), desc(lib, [3, 100]), x, x, w, 1e-6, 0.0, 1, 128, 4, 0, 0, 0, 0)
    assert status == lib.CUTILE_ERR_INVALID_ARGUMENT and "dw_part must be a contiguous [2, 100]" in _library.last_error()
    status = lib.cutile_rms_norm_backward(desc(lib, [5, 100]), desc(lib, [2, 100]), x, x, w, 1e-6, 0.0, 8, 128, 4, 0, 0, 0, 0)
    assert status == lib.CUTILE_ERR_INVALID_ARGUMENT and "at least block_m" in _library.last_error()
    empty = desc(lib, [0, 100])
    status = lib.cutile_rms_norm_backward(empty, desc(lib, [0, 100]), empty, empty, w, 1e-6, 0.0, 1, 128, 4, 0, 0, 0, 0)
    assert status == lib.CUTILE_OK, _library.last_error()
    status, msg = forward(lib, empty, empty, w)
    assert status == lib.CUTILE_OK, msg
    status = lib.cutile_rms_norm_dw(desc(lib, [100]), desc(lib, [2, 100], [1, 2]), 32, 64, 0, 0, 0, 0)
    assert status == lib.CUTILE_ERR_INVALID_ARGUMENT and "dw_part" in _library.last_error()


@pytest.mark.parametrize(
    "call, exc, fragment",
    [
        (lambda: tilegym_cutile_rs.rms_norm(torch.randn(4, 8), torch.ones(8)), ValueError, "CUDA tensors"),
        (lambda: tilegym_cutile_rs.rms_norm([1.0], torch.ones(8)), TypeError, "torch.Tensor"),
        (lambda: tilegym_cutile_rs.rms_norm(torch.randn(4, 8), None), TypeError, "torch.Tensor"),
    ],
)
def test_bad_input_is_a_clear_exception_on_cpu(call, exc, fragment) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match=fragment):
        call()


@pytest.mark.parametrize(
    "x, w, exc, fragment",
    [
        (torch.empty(4, 8, device="meta"), torch.empty(7, device="meta"), ValueError, r"weight must have shape \[N\]"),
        (torch.empty(4, 8, dtype=torch.float64, device="meta"), torch.empty(8, device="meta"), TypeError, "supports"),
        (torch.empty(4, 8, device="meta"), torch.empty(8, dtype=torch.int32, device="meta"), TypeError, "weight must be"),
        (torch.empty(2, rn.MAX_N + 1, device="meta"), torch.empty(rn.MAX_N + 1, device="meta"), ValueError, "up to 16384"),
    ],
)
def test_shape_and_dtype_checks_run_on_fake_tensors_too(x, w, exc, fragment) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match=fragment):
        rn._check_alike(x, w)


@pytest.mark.parametrize("m", [1, 3, 4096, 1 << 20])
@pytest.mark.parametrize("n", [1, 7, 1000, 4096, 16384])
def test_the_rule_s_configs_are_ones_the_library_takes(lib, m: int, n: int) -> None:  # type: ignore[no-untyped-def]
    config = rn.rms_norm_rule(m, n, "bfloat16")
    assert 1 <= config.block_m <= max(1, 1 << (m - 1).bit_length()) and config.block_m & (config.block_m - 1) == 0
    assert config.block_m * rn._op.next_pow2(n) <= max(rn.TILE_ELEMENTS, rn._op.next_pow2(n))
    rows = rn._backward_rows(m, config.block_m, 132)
    assert rows >= config.block_m and rows & (rows - 1) == 0 and -(-m // rows) <= 2 * 132


def test_tilegym_modules_are_the_model_classes_with_their_initial_weights() -> None:
    plain, gemma = rn._tilegym_get_rms_norm_module("llama"), rn._tilegym_get_rms_norm_module("gemma3")
    llama_norm, gemma_norm = plain(64, eps=1e-5), gemma(64)
    assert isinstance(llama_norm, torch.nn.Module) and issubclass(gemma, plain)
    assert torch.equal(llama_norm.weight, torch.ones(64)) and llama_norm.offset == 0.0 and llama_norm.variance_epsilon == 1e-5
    assert torch.equal(gemma_norm.weight, torch.zeros(64)) and gemma_norm.offset == 1.0
    assert "offset=1.0" in repr(gemma_norm)
    with pytest.raises(NotImplementedError, match="no bias"):
        rn._tilegym_rms_norm(torch.randn(2, 64), None, torch.ones(64), 1e-6, bias=torch.zeros(64))
