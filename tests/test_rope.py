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


@pytest.mark.parametrize("b, s, hq, hk, d", [(1, 1, 32, 8, 128), (2, 7, 5, 1, 64), (0, 3, 4, 2, 16), (2, 0, 4, 2, 16), (1, 3, 0, 0, 8), (1, 3, 4, 2, 0)])
def test_outputs_are_transformers_layout_with_torch_s_own_strides(b: int, s: int, hq: int, hk: int, d: int) -> None:
    """rope's outputs, made strided at once, match `torch.empty([B, S, H, D]).transpose(1, 2)`
    stride for stride, empty extents included (fake and real tensors must agree)."""
    q = torch.empty(b, s, hq, d, dtype=torch.bfloat16).transpose(1, 2)
    k = torch.empty(b, s, hk, d, dtype=torch.bfloat16).transpose(1, 2)
    for out, x, heads in zip(rp._outputs(q, k), (q, k), (hq, hk), strict=True):
        like = torch.empty(b, s, heads, d, dtype=x.dtype).transpose(1, 2)
        assert (out.shape, out.stride(), out.dtype, out.device) == (like.shape, like.stride(), like.dtype, like.device)
