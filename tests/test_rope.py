"""rope on CPU: the library's checks at the C boundary, the Python checks that need no GPU,
and TileGym's model table."""

from __future__ import annotations

import pytest
import tilegym_cutile_rs
import torch
from tilegym_cutile_rs import _library
from tilegym_cutile_rs.ops import rope as rp

from .test_abi import desc


def call(lib, q_out, k_out, q, k, cos, sin, half=32, tiles=(8, 2)):  # type: ignore[no-untyped-def]
    return lib.cutile_rope(q_out, k_out, q, k, cos, sin, 1.0, half, *tiles, 0, 0, 0, 0), _library.last_error()


@pytest.mark.parametrize(
    "q_shape, k_shape, table, half, tiles, fragment",
    [
        ([2, 8, 5, 64], [2, 2, 5, 64], [1, 5, 64], 32, (3, 1), "tile_q = 3: must be a power of two"),
        ([2, 8, 5, 64], [2, 2, 5, 64], [1, 5, 64], 32, (4, 2), "must fall in as many blocks; got 2 and 1"),
        ([2, 8, 5, 64], [2, 0, 5, 64], [1, 5, 64], 32, (8, 1), "both need heads"),
        ([2, 8, 5, 64], [2, 2, 5, 32], [1, 5, 64], 32, (8, 2), "share batch, seq, head_dim"),
        ([2, 8, 5, 64], [2, 2, 5, 64], [3, 5, 64], 32, (8, 2), "cos must be a [1 or 2, 5, >= 32]"),
        ([2, 8, 5, 64], [2, 2, 5, 64], [1, 5, 16], 32, (8, 2), ">= 32"),
        ([2, 8, 5, 64], [2, 2, 5, 64], [1, 5, 64], 48, (8, 2), "power of two"),
        ([2, 8, 5, 64], [2, 2, 5, 64], [1, 5, 64], 64, (8, 2), "must fit head_dim 64"),
        ([2, 8, 5], [2, 2, 5], [1, 5, 64], 32, (8, 2), "4-D"),
    ],
)
def test_bad_views_are_refused_before_any_launch(lib, q_shape, k_shape, table, half, tiles, fragment) -> None:  # type: ignore[no-untyped-def]
    b, s, d = q_shape[0], q_shape[2], q_shape[-1]
    q_out, k_out = desc(lib, [b * s, q_shape[1], d]), desc(lib, [b * s, k_shape[1], k_shape[-1]])
    status, msg = call(lib, q_out, k_out, desc(lib, q_shape), desc(lib, k_shape), desc(lib, table), desc(lib, table), half, tiles)
    assert status == lib.CUTILE_ERR_INVALID_ARGUMENT and fragment in msg, msg


def test_an_empty_problem_launches_nothing(lib) -> None:  # type: ignore[no-untyped-def]
    q, k, table = desc(lib, [2, 8, 0, 64]), desc(lib, [2, 2, 0, 64]), desc(lib, [1, 0, 64])
    status, msg = call(lib, desc(lib, [0, 8, 64]), desc(lib, [0, 2, 64]), q, k, table, table)
    assert status == lib.CUTILE_OK, msg


@pytest.mark.parametrize(
    "kwargs, exc, fragment",
    [
        (dict(q=torch.randn(2, 8, 5, 64), k=torch.randn(2, 2, 5, 64), cos=torch.randn(5, 64), sin=torch.randn(5, 64)), ValueError, "CUDA tensors"),
        (dict(q=torch.randn(8, 5, 64), k=torch.randn(2, 5, 64), cos=torch.randn(5, 64), sin=torch.randn(5, 64)), ValueError, r"\[batch, heads"),
        (dict(q=torch.randn(1, 1, 5, 80), k=torch.randn(1, 1, 5, 80), cos=torch.randn(5, 80), sin=torch.randn(5, 80)), ValueError, "power of two"),
        (dict(q=[1.0], k=torch.randn(1), cos=torch.randn(1), sin=torch.randn(1)), TypeError, "torch.Tensor"),
    ],
)
def test_bad_input_is_a_clear_exception_on_cpu(kwargs, exc, fragment) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match=fragment):
        tilegym_cutile_rs.rope(**kwargs)


def test_shape_checks_run_on_fake_tensors_too() -> None:
    meta = dict(device="meta")
    q, k = torch.empty(2, 8, 5, 64, **meta), torch.empty(2, 2, 5, 64, **meta)
    rp._check(q, k, torch.empty(5, 64, **meta), torch.empty(2, 5, 32, **meta), 32)
    with pytest.raises(ValueError, match="sin must be"):
        rp._check(q, k, torch.empty(5, 64, **meta), torch.empty(2, 4, 32, **meta), 32)
    with pytest.raises(TypeError, match="one dtype"):
        rp._check(q, k.half(), torch.empty(5, 64, **meta), torch.empty(5, 64, **meta), 32)


def test_tilegym_serves_its_rotate_half_models_and_names_the_others() -> None:
    for model in ("llama", "qwen2", "gemma3", "gpt-oss"):
        assert rp._tilegym_get_apply_rope_func(model) is rp._tilegym_apply_rope_base
    assert callable(rp._tilegym_get_apply_rope_func("qwen3_5"))
    with pytest.raises(NotImplementedError, match="serves the models"):
        rp._tilegym_get_apply_rope_func("deepseek")


@pytest.mark.parametrize("hq, hk", [(32, 8), (64, 8), (28, 4), (16, 4), (5, 3), (40, 8), (1, 1), (8, 32)])
def test_every_split_puts_q_and_k_in_as_many_blocks(hq: int, hk: int) -> None:
    splits = rp.rope_splits(hq, hk)
    assert 1 in splits and rp.rope_rule(64, hq, hk, 128, 64, "bfloat16").blocks in splits
    for blocks, (tile_q, tile_k) in splits.items():
        assert tile_q & (tile_q - 1) == 0 and tile_k & (tile_k - 1) == 0
        assert -(-hq // tile_q) == blocks == -(-hk // tile_k), (blocks, tile_q, tile_k)
    with pytest.raises(ValueError, match=r"pass one of those"):
        rp._tiles(hq, hk, max(splits) + 1)
