"""Every op as a torch operator, on CPU: tracing (make_fx, torch.compile with fullgraph,
torch.export) on meta tensors yields our operators and no graph break, the fake
implementations give the outputs the ops document, and registering again is harmless."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import tilegym_cutile_rs as t
import torch
from tilegym_cutile_rs import _registry
from torch.fx.experimental.proxy_tensor import make_fx

META = torch.device("meta")
NS = torch.ops.tilegym_cutile_rs


def meta(*shape: int, dtype: torch.dtype = torch.bfloat16, grad: bool = False) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device=META, requires_grad=grad)


def targets(gm: torch.fx.GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def ours(gm: torch.fx.GraphModule) -> list[str]:
    return [name.split(".")[1] for name in targets(gm) if name.startswith("tilegym_cutile_rs.")]


# (call, its inputs, the operators its forward traces to)
CALLS: list[tuple[str, Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]], list[str]]] = [
    ("softmax", lambda x: t.softmax(x, 0), lambda: (meta(6, 10, dtype=torch.float32),), ["softmax"]),
    ("swiglu", lambda a, b: t.swiglu(a, b), lambda: (meta(3, 5, 16), meta(3, 5, 16)), ["swiglu"]),
    ("silu_and_mul", lambda x: t.silu_and_mul(x), lambda: (meta(7, 32, dtype=torch.float16),), ["silu_and_mul"]),
    ("matmul", lambda a, b: t.matmul(a, b.t()), lambda: (meta(8, 16), meta(24, 16)), ["matmul"]),
    ("bmm", lambda a, b: t.bmm(a, b), lambda: (meta(2, 8, 16), meta(2, 16, 4)), ["bmm"]),
    ("attention_sink", lambda q, k, s: t.attention_sink(q, k, k, s, 0.125, 16, 3),
     lambda: (meta(2, 9, 2, 4, 64), meta(2, 12, 2, 64), meta(8, dtype=torch.float32)), ["attention_sink"]),
    ("attention_sink start tensor", lambda q, k, s, p: t.attention_sink(q, k, k, s, 0.125, None, p),
     lambda: (meta(1, 1, 2, 4, 64), meta(1, 40, 2, 64), meta(8), torch.empty(1, dtype=torch.int32, device=META)),
     ["attention_sink"]),
]


def test_every_op_declares_its_operators_and_they_are_registered() -> None:
    t.register_torch_ops()
    declared = {op.name for spec in _registry.ops().values() for op in spec.torch_ops}
    assert {"softmax", "swiglu", "silu_and_mul", "matmul", "bmm", "attention_sink"} <= declared
    for name in declared:
        base, _, overload = name.partition(".")
        assert (overload or "default") in getattr(NS, base).overloads(), name


# Every operator every op declares, with its own example: a new op is checked here (and by
# tests/test_torch_ops_gpu.py) without an edit to the tests.
TORCH_OPS = [op for spec in _registry.ops().values() for op in spec.torch_ops]


def operator(op: _registry.TorchOp) -> Any:
    base, _, overload = op.name.partition(".")
    return getattr(getattr(NS, base), overload or "default")


def test_every_operator_declares_an_example() -> None:
    assert not [op.name for op in TORCH_OPS if op.example is None]


@pytest.mark.parametrize("op", TORCH_OPS, ids=[op.name for op in TORCH_OPS])
def test_every_operator_declares_its_reference_and_a_tolerance_for_its_example(op: _registry.TorchOp) -> None:
    # tests/test_torch_ops_gpu.py compares each operator with its reference on its example,
    # within the tolerance declared for the example's dtype.
    assert op.reference is not None and op.example is not None, f"{op.name} declares no reference"
    try:
        op.tolerance(op.example(META))
    except KeyError as missing:
        raise AssertionError(f"{op.name}: no tolerance for its example's dtype {missing}") from None
    assert all(isinstance(tol, _registry.Tolerance) and tol.rtol >= 0 and tol.atol >= 0 for tol in op.tolerances.values())


@pytest.mark.parametrize("op", TORCH_OPS, ids=[op.name for op in TORCH_OPS])
def test_every_operator_traces_and_compiles_on_its_example(op: _registry.TorchOp) -> None:
    t.register_torch_ops()
    assert op.example is not None
    fn = operator(op)
    gm = make_fx(lambda *a: fn(*a), tracing_mode="fake")(*op.example(META))
    assert ours(gm) == [op.name.partition(".")[0]], gm.code
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example: Any) -> Any:
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    torch.compile(lambda *a: fn(*a), fullgraph=True, backend=backend)(*op.example(META))
    assert len(graphs) == 1 and ours(graphs[0]) == [op.name.partition(".")[0]], graphs[0].code


def test_registering_again_is_harmless() -> None:
    # In a fresh interpreter: register, register again, reload an op module and the operators'
    # registration module (whose registry survives: a reload re-runs a module in the same namespace), then trace.
    code = """
import importlib, torch
import tilegym_cutile_rs as t
from tilegym_cutile_rs import _torch_ops
t.register_torch_ops(); t.register_torch_ops()
importlib.reload(importlib.import_module("tilegym_cutile_rs.ops.softmax"))
importlib.reload(_torch_ops)
_torch_ops.register_torch_ops()
from torch.fx.experimental.proxy_tensor import make_fx
gm = make_fx(lambda x: t.softmax(x), tracing_mode="fake")(torch.empty(4, 8, device="meta"))
print([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "['tilegym_cutile_rs.softmax.default']", run.stdout


def test_import_after_torch_registers_and_before_torch_does_not_import_it() -> None:
    code = "import sys, tilegym_cutile_rs; print('torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.stdout.strip() == "False", run.stdout + run.stderr
    code = "import torch, tilegym_cutile_rs; print(torch.ops.tilegym_cutile_rs.softmax.default)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.stdout.strip() == "tilegym_cutile_rs.softmax.default", run.stdout + run.stderr
    # Imported before torch, compiled before any eager call: registered as torch.compile loads its tracer.
    code = """
import tilegym_cutile_rs as t
import torch
out = torch.compile(lambda x: t.softmax(x), fullgraph=True, backend="eager")(torch.empty(4, 8, device="meta"))
print(tuple(out.shape))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.stdout.strip() == "(4, 8)", run.stdout + run.stderr[-3000:]


@pytest.mark.parametrize("name, call, inputs, expected", CALLS, ids=[c[0] for c in CALLS])
def test_make_fx_traces_our_operator(name: str, call: Callable[..., Any], inputs: Callable[[], tuple[torch.Tensor, ...]],
                                     expected: list[str]) -> None:
    gm = make_fx(call, tracing_mode="fake")(*inputs())
    assert ours(gm) == expected, gm.code


@pytest.mark.parametrize("name, call, inputs, expected", CALLS, ids=[c[0] for c in CALLS])
def test_torch_compile_fullgraph_holds_our_operator(name: str, call: Callable[..., Any],
                                                    inputs: Callable[[], tuple[torch.Tensor, ...]], expected: list[str]) -> None:
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example: Any) -> Any:
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    args = inputs()
    out = torch.compile(call, fullgraph=True, backend=backend)(*args)  # fullgraph: a graph break raises
    assert len(graphs) == 1 and ours(graphs[0]) == expected, graphs[0].code
    assert out.device == META


def block(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """An MLP block and a softmax: every op with gradients, chained."""
    return t.softmax(t.matmul(t.silu_and_mul(t.matmul(x, w1)), w2), -1)


def test_export_and_the_backward_trace_use_our_operators() -> None:
    x, w1, w2 = meta(8, 64), meta(64, 256), meta(128, 64)

    class Block(torch.nn.Module):
        def forward(self, x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
            return block(x, w1, w2)

    exported = torch.export.export(Block(), (x, w1, w2))
    assert [n for n in targets(exported.graph_module) if "tilegym" in n] == [
        "tilegym_cutile_rs.matmul.default", "tilegym_cutile_rs.silu_and_mul.default",
        "tilegym_cutile_rs.matmul.default", "tilegym_cutile_rs.softmax.default",
    ]
    grads = make_fx(lambda *a: torch.autograd.grad(block(*a).float().sum(), a), tracing_mode="fake")(
        meta(8, 64, grad=True), meta(64, 256, grad=True), meta(128, 64, grad=True)
    )
    names = ours(grads)
    # forward, then the gradients: matmul's two, silu_and_mul's by its backward kernel, matmul's two.
    assert names == ["matmul", "silu_and_mul", "matmul", "softmax", "matmul", "matmul", "silu_and_mul_backward", "matmul", "matmul"]
    a, b = meta(4, 16, grad=True), meta(4, 16, grad=True)
    grads = make_fx(lambda a, b: torch.autograd.grad(t.swiglu(a, b).float().sum(), (a, b)), tracing_mode="fake")(a, b)
    assert ours(grads) == ["swiglu", "swiglu_backward"]


def test_out_is_a_mutation_of_its_argument() -> None:
    (schema,) = [op.schema for op in NS.silu_and_mul_out.default._schemas.values()] if hasattr(
        NS.silu_and_mul_out.default, "_schemas") else [NS.silu_and_mul_out.default._schema]
    assert schema.arguments[1].alias_info is not None and schema.arguments[1].alias_info.is_write
    gm = make_fx(lambda x, out: t.silu_and_mul(x, out), tracing_mode="fake")(meta(4, 32), meta(4, 16))
    assert ours(gm) == ["silu_and_mul_out"]


# The fake implementations against each op's documented output: a new contiguous tensor of
# the documented shape, the input's dtype and device, for a spread of shapes, dims, strides, dtypes.
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, dim", [((7,), 0), ((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1), ((0, 4), -1)])
def test_fake_softmax_matches_the_contract(shape: tuple[int, ...], dim: int, dtype: torch.dtype) -> None:
    x = meta(*shape, dtype=dtype).transpose(0, -1) if len(shape) > 1 else meta(*shape, dtype=dtype)
    y = NS.softmax(x, dim, [])
    assert y.shape == x.shape and y.dtype == dtype and y.device == META and y.is_contiguous()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 16), (2, 3, 1000), (1, 8)])
def test_fake_swiglu_family_matches_the_contract(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    a = meta(*shape, dtype=dtype)
    for y in (NS.swiglu(a, a, []), *NS.swiglu_backward(a, a, a)):
        assert y.shape == a.shape and y.dtype == dtype and y.is_contiguous()
    y = NS.silu_and_mul(a, [])
    assert y.shape == (*shape[:-1], shape[-1] // 2) and y.dtype == dtype and y.is_contiguous()
    assert NS.silu_and_mul_backward(y, a).shape == a.shape
    with pytest.raises(ValueError, match="even last dim"):
        NS.silu_and_mul(meta(3, 7, dtype=dtype), [])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m, n, k", [(8, 16, 4), (1, 1, 1), (33, 7, 0)])
def test_fake_products_match_the_contract(m: int, n: int, k: int, dtype: torch.dtype) -> None:
    c = NS.matmul(meta(k, m, dtype=dtype).t(), meta(k, n, dtype=dtype), [])
    assert c.shape == (m, n) and c.dtype == dtype and c.is_contiguous()
    c = NS.bmm(meta(3, m, k, dtype=dtype), meta(3, n, k, dtype=dtype).transpose(1, 2), [])
    assert c.shape == (3, m, n) and c.is_contiguous()
    with pytest.raises(ValueError, match="chain"):
        NS.matmul(meta(m, k + 1, dtype=dtype), meta(k, n, dtype=dtype), [])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("b, s_q, s_kv, h_kv, group, d", [(1, 1, 10919, 8, 8, 64), (2, 128, 32, 2, 4, 128), (1, 5, 5, 1, 1, 64)])
def test_fake_attention_sink_matches_the_contract(b: int, s_q: int, s_kv: int, h_kv: int, group: int, d: int,
                                                   dtype: torch.dtype) -> None:
    q, k = meta(b, s_q, h_kv, group, d, dtype=dtype), meta(b, s_kv, h_kv, d, dtype=dtype)
    out = NS.attention_sink(q, k, k, meta(h_kv * group, dtype=torch.float32), 0.125, 0, 0, [])
    assert out.shape == (b, s_q, h_kv * group * d) and out.dtype == dtype and out.is_contiguous()
    with pytest.raises(ValueError, match=r"sinks must be \(H_kv\*G,\)"):
        NS.attention_sink(q, k, k, meta(h_kv * group + 1, dtype=dtype), 0.125, 0, 0, [])
