"""A launch passes its tensors and scalars by the C export's parameter names, checked against
the header the manifest was generated from (`_op.check_arguments`): an argument out of place
raises on the launch's first call instead of running with the wrong tensor."""

from __future__ import annotations

import pytest
import torch
from tilegym_cutile_rs import _describe, _library, _op, _registry, _ship_build
from tilegym_cutile_rs.errors import InternalError


def test_every_op_export_ends_with_device_and_stream() -> None:
    ops = {name: params for name, params in _library.manifest().PARAMS.items() if "stream" in params}
    assert "cutile_rope" in ops and "cutile_matmul" in ops
    assert all(params[-2:] == ("device", "stream") for params in ops.values()), ops


def test_a_launch_in_the_declared_order_passes_and_a_swap_is_refused() -> None:
    tensors = {"q_out": 0, "k_out": 0, "q": 0, "k": 0, "cos": 0, "sin": 0}
    scalars = {"sign": 1.0, "half": 64, "tile_q": 8, "tile_k": 2, "occupancy": 0, "warps": 0}
    _op.check_arguments("cutile_rope", tensors, scalars)
    swapped = {"q_out": 0, "k_out": 0, "k": 0, "q": 0, "cos": 0, "sin": 0}
    with pytest.raises(InternalError, match=r"cutile_rope called with parameters .*'k', 'q'.* declares .*'q', 'k'"):
        _op.check_arguments("cutile_rope", swapped, scalars)
    with pytest.raises(InternalError, match="declares"):
        _op.check_arguments("cutile_rope", tensors, {**scalars, "extra": 1})
    with pytest.raises(InternalError, match="declares None"):
        _op.check_arguments("cutile_no_such_export", tensors, scalars)


def test_a_config_is_named_by_its_type_fields() -> None:
    from tilegym_cutile_rs.ops.swiglu import SwigluConfig

    assert _op.named(SwigluConfig, (4, 1024, 0, 8, 2)) == {"block_m": 4, "block_n": 1024, "occupancy": 0, "warps": 8, "cga": 2}
    with pytest.raises(ValueError):
        _op.named(SwigluConfig, (4, 1024))


def op_names() -> list[str]:
    return sorted(_registry.ops())


@pytest.mark.parametrize("name", op_names())
def test_every_shipped_launch_of_every_op_passes_the_check(name: str) -> None:
    # Describe mode runs each op's shipped shapes (forward and backward) on meta tensors through
    # the real launch path, so every launch an op makes meets check_arguments here, without a GPU.
    # `resolve` takes the described launches off the library's pending list again.
    _, described = _ship_build.resolve(_describe.Target("sm_90", 132), lambda: _registry.ops()[name].shipped(torch.device("meta")))
    assert described > 0


def test_kept_launches_serve_plain_tensors_and_parameters_only() -> None:
    """A fast path takes torch.Tensor and nn.Parameter (a model's weights and sinks, which
    dispatch as plain tensors) with no gradient asked for; any other subclass, or a tensor
    asking for a gradient under grad mode, takes the full path."""

    class Traced(torch.Tensor):
        pass

    kept = _op.KeptLaunches[str]("test")
    kept.keep("k", "plan")
    x, weight = torch.ones(4), torch.nn.Parameter(torch.ones(4))
    assert kept.reusable("k", x) == "plan" and kept.reusable("other", x) is None
    assert kept.reusable("k", weight) is None  # it asks for a gradient, and grad mode is on
    with torch.no_grad():
        assert kept.reusable("k", x, weight) == "plan"
        assert kept.reusable("k", x.as_subclass(Traced)) is None
    assert _op.plain(x) and _op.plain(weight) and not _op.plain(x.as_subclass(Traced)) and not _op.plain(None)
