"""attention_sink on CPU: the library's checks at the C boundary, the Python checks that
need no GPU, and the heuristic's configs."""

from __future__ import annotations

import pytest
import tilegym_cutile_rs
import torch
from tilegym_cutile_rs import _library
from tilegym_cutile_rs.ops import attention_sink as at

from .test_abi import desc

BF16 = 2


def call(lib, views, config=(4, 4, 64, 1), window=0, group=4, head_dim=64):  # type: ignore[no-untyped-def]
    """The export on descriptors (B 2, S_q 5, S_kv 7, 2 KV heads of 4 query heads, D 64 unless
    views say otherwise); config fields past those given are 0 (occupancy, warps, latency)."""
    args = [views[name] for name in ("out", "q", "k", "v", "sinks", "start_q", "acc", "ml")]
    config = (*config, *(0,) * (len(at.AttentionSinkConfig._fields) - len(config)))
    status = lib.cutile_attention_sink(*args, 0.18, window, group, head_dim, *config, 0, 0)
    return status, _library.last_error()


def views(lib, **changes):  # type: ignore[no-untyped-def]
    base = {
        "out": desc(lib, [2, 5, 512], dtype=BF16),
        "q": desc(lib, [2, 5, 512], dtype=BF16),
        "k": desc(lib, [2, 7, 128], dtype=BF16),
        "v": desc(lib, [2, 7, 128], dtype=BF16),
        "sinks": desc(lib, [8]),
        "start_q": desc(lib, [1], dtype=lib.CUTILE_DTYPE_I32),
        "acc": _library.ffi().NULL,
        "ml": _library.ffi().NULL,
    }
    base.update(changes)
    return base


@pytest.mark.parametrize(
    "changes, config, fragment",
    [
        ({"q": "f32"}, None, "float16 or bfloat16"),
        ({"k": [2, 7, 96]}, None, "H_kv*64"),
        ({"v": [2, 6, 128]}, None, "must both be"),
        ({"q": [2, 5, 384], "out": [2, 5, 384]}, None, "q's last dim 384"),
        ({"sinks": [4]}, None, "sinks must hold 8"),
        ({"start_q": "f32"}, None, "not int32"),
        ({"start_q": [2]}, None, "one-element"),
        ({"out": "strided"}, None, "contiguous"),
        ({}, (3, 4, 64, 1), "block_q = 3"),
        ({}, (4, 8, 64, 1), "dividing group"),
        ({}, (2, 4, 64, 1), "block_q * heads_per_tile = 8"),
        ({}, (4, 4, 64, 2), "acc: TensorDesc pointer is null"),
        ({}, (4, 4, 64, 0), "splits = 0"),
        ({}, (4, 4, 64, 1, 0, 0, 11), "latency = 11"),
        ({"k": [2, 0, 128], "v": [2, 0, 128]}, None, "S_kv = 0"),
    ],
)
def test_the_library_refuses_inconsistent_calls_before_any_launch(lib, changes, config, fragment) -> None:  # type: ignore[no-untyped-def]
    made = {}
    for name, change in changes.items():
        if change == "f32":
            shape = {"q": [2, 5, 512], "start_q": [1]}[name]
            made[name] = desc(lib, shape)
        elif change == "strided":
            made[name] = desc(lib, [2, 5, 512], [5 * 1024, 1024, 1], dtype=BF16)
        else:
            dtype = lib.CUTILE_DTYPE_F32 if name == "sinks" else lib.CUTILE_DTYPE_I32 if name == "start_q" else BF16
            made[name] = desc(lib, change, dtype=dtype)
    status, msg = call(lib, views(lib, **made), config or (4, 4, 64, 1))
    assert status != lib.CUTILE_OK and fragment in msg, msg


def test_split_partials_are_checked_and_an_empty_batch_launches_nothing(lib) -> None:  # type: ignore[no-untyped-def]
    acc, ml = desc(lib, [6, 5, 512]), desc(lib, [6, 5, 16])
    status, msg = call(lib, views(lib, acc=acc, ml=desc(lib, [6, 5, 8])), (4, 4, 64, 3))
    assert status == lib.CUTILE_ERR_INVALID_ARGUMENT and "ml must be" in msg, msg
    # With no batch the library returns before it needs a GPU, once every view checks out.
    empty = {"out": desc(lib, [0, 5, 512], dtype=BF16), "q": desc(lib, [0, 5, 512], dtype=BF16)}
    empty |= {"k": desc(lib, [0, 7, 128], dtype=BF16), "v": desc(lib, [0, 7, 128], dtype=BF16)}
    empty |= {"acc": desc(lib, [0, 5, 512]), "ml": desc(lib, [0, 5, 16])}
    assert call(lib, views(lib, **empty), (4, 4, 64, 3))[0] == lib.CUTILE_OK
    del acc, ml


@pytest.mark.parametrize(
    "call_, exc, fragment",
    [
        (lambda: tilegym_cutile_rs.attention_sink(torch.randn(1, 2, 1, 1, 64), torch.randn(1, 2, 1, 64), torch.randn(1, 2, 1, 64), torch.randn(1)), ValueError, "CUDA tensors"),
        (lambda: tilegym_cutile_rs.attention_sink([1.0], None, None, None), TypeError, "torch.Tensor"),
        (lambda: at._window(-1), ValueError, "sliding_window"),
        (lambda: at._window(2.5), ValueError, "sliding_window"),
    ],
)
def test_bad_input_is_a_clear_exception_on_cpu(call_, exc, fragment) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match=fragment):
        call_()


@pytest.mark.parametrize("batch, s_q, s_kv", [(1, 1, 10919), (1, 10820, 10820), (2, 128, 2048), (4, 1, 100), (64, 1, 4096), (1, 3, 17)])
@pytest.mark.parametrize("group, d", [(8, 64), (8, 128), (6, 64), (1, 64), (16, 128), (7, 32)])
@pytest.mark.parametrize("window", [0, 128])
def test_every_config_is_one_the_library_takes(lib, batch: int, s_q: int, s_kv: int, group: int, d: int, window: int) -> None:  # type: ignore[no-untyped-def]
    for config in [at.attention_sink_config(batch, s_q, s_kv, 8, group, d, window, 132), *at.attention_sink_candidates(batch, s_q, s_kv, 8, group, d, window, 132)]:
        rows = config.block_q * config.heads_per_tile
        assert (32 if d >= 128 else 16) <= rows <= 256 and 16 <= config.block_n <= 256, config
        assert config.block_q & (config.block_q - 1) == 0 and group % config.heads_per_tile == 0, config
        assert 1 <= config.splits <= 1024 and config.occupancy <= lib.CUTILE_MAX_OCCUPANCY, config
    chosen = at.attention_sink_config(batch, s_q, s_kv, 8, group, d, window, 132)
    assert chosen in at.attention_sink_candidates(batch, s_q, s_kv, 8, group, d, window, 132)
    if s_q == 1 and batch * 8 < 132 and s_kv >= 4096 and not window:
        assert chosen.splits > 1, chosen  # decode over a long cache: split-KV fills the SMs


def test_the_op_is_registered_for_tilegym_and_the_check() -> None:
    from tilegym_cutile_rs import _registry, tilegym_backend

    assert "attention_sink" in _registry.ops() and "attention_sink" in tilegym_backend.provided_ops()
    assert callable(_library.library().cutile_attention_sink)


def test_tilegym_fmha_refuses_what_it_cannot_run_with_the_fix() -> None:
    from tilegym_cutile_rs.ops import attention_sink as at

    q, k = torch.empty(1, 6, 8, 64, device="meta"), torch.empty(1, 4, 8, 64, device="meta")
    with pytest.raises(ValueError, match="multiple of k's 4"):
        at._fmha(q, k, k, None, True)
    with pytest.raises(ValueError, match="S_q <= S_kv"):
        at._fmha(torch.empty(1, 8, 9, 64, device="meta"), k, k, None, True)
    with pytest.raises(ValueError, match=r"\[batch, heads, seq, head_dim\]"):
        at._fmha(torch.empty(8, 9, 64, device="meta"), k, k, None, True)


@pytest.mark.parametrize("start_q", [7, "tensor"])
def test_a_traced_training_step_runs_the_training_operators(start_q) -> None:  # type: ignore[no-untyped-def]
    """Traced with inputs that require grad (torch.compile's and torch.export's view, on fake
    tensors), attention_sink is the training operator and its gradient our backward operator,
    not a forward-only operator autograd cannot see through."""
    from torch.fx.experimental.proxy_tensor import make_fx

    tilegym_cutile_rs.register_torch_ops()

    def step(q, k, v, s, start):  # type: ignore[no-untyped-def]
        out = tilegym_cutile_rs.attention_sink(q, k, v, s, 0.125, 16, start)
        return torch.autograd.grad(out.float().square().sum(), (q, k, v, s))

    meta = dict(device="meta", requires_grad=True)
    args = (torch.empty(2, 33, 2, 4, 64, dtype=torch.bfloat16, **meta), torch.empty(2, 40, 2, 64, dtype=torch.bfloat16, **meta),
            torch.empty(2, 40, 2, 64, dtype=torch.bfloat16, **meta), torch.empty(8, **meta),
            torch.zeros(1, dtype=torch.int32, device="meta") if start_q == "tensor" else start_q)
    gm = make_fx(step, tracing_mode="fake")(*args)
    called = [str(n.target) for n in gm.graph.nodes if n.op == "call_function" and "tilegym_cutile_rs" in str(n.target)]
    overload = "start_tensor" if start_q == "tensor" else "default"
    assert called == [f"tilegym_cutile_rs.attention_sink_train.{overload}", f"tilegym_cutile_rs.attention_sink_backward.{overload}"], gm.code
    grads = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    assert [tuple(g.meta["val"].shape) for g in grads] == [(2, 33, 2, 4, 64), (2, 40, 2, 64), (2, 40, 2, 64), (8,)]
