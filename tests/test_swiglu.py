"""swiglu and silu_and_mul on CPU: the library's checks at the C boundary, the Python
checks that need no GPU, the heuristic's configs, and the layout helpers."""

from __future__ import annotations

import pytest
import tilegym_cutile_rs
import torch
from tilegym_cutile_rs import _library
from tilegym_cutile_rs.ops import swiglu as sw

from .test_abi import desc


def forward(lib, y, a, b, config=(4, 256, 0, 0, 0)):  # type: ignore[no-untyped-def]
    return lib.cutile_swiglu_forward(y, a, b, *config, 0, 0), _library.last_error()


def backward(lib, dg, dy, a, b, config=(4, 256, 0, 0, 0)):  # type: ignore[no-untyped-def]
    return lib.cutile_swiglu_backward(dg, dy, a, b, *config, 0, 0), _library.last_error()


@pytest.mark.parametrize(
    "a_kw, b_kw, y_kw, config, fragment",
    [
        ({"shape": [2, 3]}, {"shape": [2, 4]}, {"shape": [2, 3]}, (4, 256), "differs"),
        ({"shape": [2, 3]}, {"shape": [2, 3], "dtype": 1}, {"shape": [2, 3]}, (4, 256), "dtype"),
        ({"shape": [2, 3, 4]}, {"shape": [2, 3, 4]}, {"shape": [2, 3, 4]}, (4, 256), "2-D"),
        ({"shape": [2, 3], "strides": [3, 2]}, {"shape": [2, 3]}, {"shape": [2, 3]}, (4, 256), "unit stride"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, {"shape": [2, 3], "strides": [6, 1]}, (4, 256), "contiguous"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, {"shape": [2, 3]}, (3, 256), "power of two"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, {"shape": [2, 3]}, (4, 256, 33), "occupancy"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, {"shape": [2, 3]}, (4, 256, 0, 3), "warps = 3"),
        ({"shape": [2, 3]}, {"shape": [2, 3]}, {"shape": [2, 3]}, (4, 256, 0, 0, 3), "cga = 3"),
        ({"shape": [2, 3], "dtype": 3}, {"shape": [2, 3]}, {"shape": [2, 3]}, (4, 256), "unsupported dtype code 3"),
        ({"shape": [2, 3], "ptr": 0}, {"shape": [2, 3]}, {"shape": [2, 3]}, (4, 256), "null"),
    ],
)
def test_forward_rejects_bad_views_before_any_launch(lib, a_kw, b_kw, y_kw, config, fragment) -> None:  # type: ignore[no-untyped-def]
    status, msg = forward(lib, desc(lib, **y_kw), desc(lib, **a_kw), desc(lib, **b_kw), (*config, 0, 0, 0)[:5])
    assert status != lib.CUTILE_OK and fragment in msg, msg


@pytest.mark.parametrize(
    "dg_kw, fragment",
    [
        ({"shape": [2, 2, 3], "strides": [3, 3, 1]}, "overlap"),  # da and db on the same memory
        ({"shape": [2, 2, 3], "strides": [6, 1, 1]}, "overlap"),
        ({"shape": [2, 2, 3], "strides": [6, 3, 2]}, "overlap"),  # no unit stride
        ({"shape": [2, 2, 4]}, "[2, 2, 3] view"),
        ({"shape": [2, 2, 3], "dtype": 1}, "[2, 2, 3] view"),
        ({"shape": [2, 6]}, "[2, 2, 3] view"),
    ],
)
def test_backward_refuses_gradient_buffers_that_overlap_or_do_not_fit(lib, dg_kw, fragment) -> None:  # type: ignore[no-untyped-def]
    status, msg = backward(lib, desc(lib, **dg_kw), desc(lib, [2, 3]), desc(lib, [2, 3], [6, 1]), desc(lib, [2, 3], [6, 1]))
    assert status == lib.CUTILE_ERR_INVALID_ARGUMENT and fragment in msg, msg


@pytest.mark.parametrize("dg_strides", [[6, 3, 1], [3, 6, 1]])
def test_backward_takes_both_gradient_layouts_and_an_empty_problem_launches_nothing(lib, dg_strides) -> None:  # type: ignore[no-untyped-def]
    # silu_and_mul's dx [M, 2H] seen as [M, 2, H], and swiglu's [2, M, H] planes: M = 2, H = 3.
    # With no rows the library returns before it needs a GPU.
    status, msg = backward(lib, desc(lib, [0, 2, 3], dg_strides), desc(lib, [0, 3]), desc(lib, [0, 3], [6, 1]), desc(lib, [0, 3], [6, 1]))
    assert status == lib.CUTILE_OK, msg
    status, msg = forward(lib, desc(lib, [0, 3]), desc(lib, [0, 3], [6, 1]), desc(lib, [0, 3], [6, 1]))
    assert status == lib.CUTILE_OK, msg


@pytest.mark.parametrize(
    "call, exc, fragment",
    [
        (lambda: tilegym_cutile_rs.swiglu(torch.randn(4, 8), torch.randn(4, 8)), ValueError, "CUDA tensors"),
        (lambda: tilegym_cutile_rs.swiglu([1.0], torch.randn(4, 8)), TypeError, "torch.Tensor"),
        (lambda: tilegym_cutile_rs.swiglu(torch.randn(4, 8), None), TypeError, "torch.Tensor"),
        (lambda: tilegym_cutile_rs.silu_and_mul(torch.randn(4, 8)), ValueError, "CUDA tensors"),
        (lambda: tilegym_cutile_rs.silu_and_mul("x"), TypeError, "torch.Tensor"),
    ],
)
def test_bad_input_is_a_clear_exception_on_cpu(call, exc, fragment) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match=fragment):
        call()


@pytest.mark.parametrize("m", [1, 3, 256, 4096, 1 << 20])
@pytest.mark.parametrize("h", [1, 7, 1000, 1024, 11008, 14336, 65537])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_config_is_one_the_library_takes(lib, m: int, h: int, dtype: torch.dtype) -> None:  # type: ignore[no-untyped-def]
    for config in [sw.swiglu_config(m, h, dtype), *sw.swiglu_candidates(m, h, dtype)]:
        for block in config[:2]:
            assert 1 <= block <= lib.CUTILE_MAX_BLOCK and block & (block - 1) == 0, config
        assert 0 <= config.occupancy <= lib.CUTILE_MAX_OCCUPANCY, config
        assert config.warps == 0 or lib.CUTILE_WORKER_WARPS_BEFORE_TILEIRAS_13_5 >> config.warps & 1, config
        assert config.cga in (0, 2) and (config.cga == 0 or config.block_m * config.block_n >= sw.CLUSTER_MIN_ELEMENTS), config
        # A tile never exceeds the problem by more than one power of two in each direction.
        assert config.block_m <= max(1, 1 << (m - 1).bit_length()), config
    assert sw.swiglu_config(m, h, dtype) in sw.swiglu_candidates(m, h, dtype)
    assert not any(c.cga for c in sw.swiglu_candidates(m, h, dtype, "sm_80"))  # no clusters before Hopper


def test_overlap_test_sees_shared_memory_only() -> None:
    x = torch.randn(4, 16)
    assert sw._overlaps(x[:, :8], x[:, 8:])  # interleaved rows share x's span
    assert not sw._overlaps(x[:2], x[2:])
    assert not sw._overlaps(x, torch.randn(4, 16))
    assert not sw._overlaps(x[:0], x)


def test_the_tilegym_mlp_module_is_built_as_llamas_and_refuses_other_activations() -> None:
    from types import SimpleNamespace

    cls = sw._tilegym_get_swiglu_module()
    mlp = cls(SimpleNamespace(hidden_size=64, intermediate_size=160, hidden_act="silu"))
    assert isinstance(mlp, torch.nn.Module)
    assert {name: tuple(p.shape) for name, p in mlp.named_parameters()} == {
        "gate_proj.weight": (160, 64), "up_proj.weight": (160, 64), "down_proj.weight": (64, 160)}
    assert cls(SimpleNamespace(hidden_size=8, intermediate_size=16, hidden_act="silu", mlp_bias=True)).down_proj.bias is not None
    with pytest.raises(ValueError, match="hidden_act is 'gelu'"):
        cls(SimpleNamespace(hidden_size=8, intermediate_size=16, hidden_act="gelu"))
