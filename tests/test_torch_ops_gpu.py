"""Our torch operators on the GPU: torch.library.opcheck on each, torch.compile(fullgraph=True)
of a block forward and backward against eager, and "reduce-overhead" (CUDA graphs) replaying
with new data."""

from __future__ import annotations

from typing import Any

import pytest
import tilegym_cutile_rs as t
import torch
from tilegym_cutile_rs import _registry

from .test_torch_ops import TORCH_OPS, operator

pytestmark = pytest.mark.gpu

NS = torch.ops.tilegym_cutile_rs


def cuda(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(dtype)


# Every operator every op declares (tests/test_torch_ops.py's list, each run on its
# TorchOp.example on the GPU): a new op is checked without an edit here.
DEVICE = torch.device("cuda")


@pytest.mark.parametrize("op", TORCH_OPS, ids=[op.name for op in TORCH_OPS])
def test_opcheck(op: _registry.TorchOp) -> None:
    t.register_torch_ops()
    assert op.example is not None, f"{op.name} declares no example"
    torch.library.opcheck(operator(op), op.example(DEVICE))


def block(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, wg: torch.Tensor) -> torch.Tensor:
    h = t.silu_and_mul(t.matmul(x, w1))
    return t.softmax(t.matmul(h, w2), -1) * t.swiglu(x, t.matmul(x, wg))


def weights() -> list[torch.Tensor]:
    return [(cuda(128, 512) * 0.05).requires_grad_(), (cuda(256, 128) * 0.05).requires_grad_(), (cuda(128, 128) * 0.05).requires_grad_()]


# Each operator alone, compiled against eager: the same kernels on the same data, so
# bit-identical outputs and gradients (the incoming gradient is given, so no torch arithmetic
# sits between), and for an operator that writes an argument, that argument. An operator whose
# gradient is torch's own formula (TorchOp.torch_gradient: softmax's) is the exception: Inductor
# compiles it into a kernel of its own (seen on an H100: 1 of 64000 bfloat16 gradients one ulp apart).
def _outputs(result: Any, args: tuple[Any, ...]) -> list[torch.Tensor]:
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (tuple, list)) and result:  # "-> (Tensor, Tensor)" (rope, rms_norm_backward)
        return list(result)
    return [a for a in args if isinstance(a, torch.Tensor)]  # "-> ()": what it wrote into its arguments


@pytest.mark.parametrize("op", TORCH_OPS, ids=[op.name for op in TORCH_OPS])
def test_compiled_operator_matches_eager_exactly(op: _registry.TorchOp) -> None:
    t.register_torch_ops()
    assert op.example is not None
    torch._dynamo.reset()
    fn = operator(op)
    args = op.example(DEVICE)
    inputs = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]

    def run(call: Any) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        copies = tuple(a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) and not a.requires_grad
                       else a for a in args)  # written arguments start equal in both runs
        outs = _outputs(call(*copies), copies)
        if not inputs:
            return outs, []
        torch.manual_seed(1)  # the same incoming gradients in both runs
        differentiable = [o for o in outs if o.requires_grad]  # not an output marked non-differentiable (lse)
        dys = [torch.randn_like(o) for o in differentiable]
        return outs, list(torch.autograd.grad(differentiable, inputs, dys))

    eager, eager_grads = run(fn)
    compiled, compiled_grads = run(torch.compile(lambda *a: fn(*a), fullgraph=True))
    for got, want in zip(compiled, eager, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    tol = dict(rtol=1.6e-2, atol=1e-5) if op.torch_gradient else dict(rtol=0, atol=0)
    for got, want in zip(compiled_grads, eager_grads, strict=True):
        torch.testing.assert_close(got, want, **tol)


def _written(op: _registry.TorchOp, args: tuple[Any, ...]) -> list[torch.Tensor]:
    """The arguments a "-> ()" operator writes (schema `Tensor(a!)`)."""
    params = op.schema.partition("(")[2].rpartition(") ->")[0].split(", ")
    return [a for a, p in zip(args, params, strict=True) if "!" in p]


# Each operator against the float32 reference it declares (TorchOp.reference), on its example,
# within the tolerance it declares for the example's dtype: outputs, and where it has a backward,
# the gradients of its inputs that require them (an incoming gradient given, the same for both).
# Twice, on fresh data while the first call's tensors stay alive: the second call's launches
# take the plans the first made (_op.launch), so they must rebind every data pointer.
@pytest.mark.parametrize("op", TORCH_OPS, ids=[op.name for op in TORCH_OPS])
def test_operator_matches_its_reference(op: _registry.TorchOp) -> None:
    t.register_torch_ops()
    assert op.example is not None and op.reference is not None
    kept = []
    for _ in range(2):
        args = op.example(DEVICE)
        kept.append((args, _check_against_reference(op, args)))


def _check_against_reference(op: _registry.TorchOp, args: Any) -> Any:
    """The operator's result on `args` (after checking it and its gradients)."""
    inputs = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    tol = op.tolerance(args)._asdict()
    result = operator(op)(*args)
    got = _written(op, args) if op.schema.endswith("-> ()") else _outputs(result, args)
    wide = [a.detach().float().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
            for a in args]
    expected = op.reference(*wide)
    want = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    assert len(got) == len(want), f"{op.name}: {len(got)} outputs, the reference gives {len(want)}"
    checked = [(g, w) for g, w in zip(got, want, strict=True) if w is not None]
    for g, w in checked:
        torch.testing.assert_close(g, w.detach().to(g.dtype), **tol, msg=lambda m: f"{op.name} output: {m}")
    if not inputs:
        return result
    dys = [torch.randn_like(g) for g, _ in checked if g.requires_grad]
    grads = torch.autograd.grad([g for g, _ in checked if g.requires_grad], inputs, dys)
    wide_inputs = [w for w, a in zip(wide, args, strict=True) if isinstance(a, torch.Tensor) and a.requires_grad]
    wide_grads = torch.autograd.grad([w for g, w in checked if g.requires_grad], wide_inputs, [d.float() for d in dys])
    for a, g, w in zip(inputs, grads, wide_grads, strict=True):
        torch.testing.assert_close(g, w.to(a.dtype), **tol, msg=lambda m: f"{op.name} gradient: {m}")
    return result, grads


def test_compile_fullgraph_forward_and_backward_match_eager() -> None:
    # The forward is our operators and one bfloat16 product, which Inductor rounds as eager
    # does: bit-identical. The gradients also pass through torch's own arithmetic (softmax's
    # backward formula, the product's, and the sum of x's three gradient contributions),
    # which Inductor fuses in float32 with one rounding where eager rounds every step to
    # bfloat16: equal to bfloat16 rounding, not bit for bit (each op alone is exact, above).
    torch._dynamo.reset()
    ws = weights()
    x = cuda(64, 128).requires_grad_()
    eager = block(x, *ws)
    eager.float().sum().backward()
    eager_grads = [p.grad.clone() for p in (x, *ws)]  # type: ignore[union-attr]
    for p in (x, *ws):
        p.grad = None
    compiled = torch.compile(block, fullgraph=True)(x, *ws)
    compiled.float().sum().backward()
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)  # the same kernels on the same data
    for got, want in zip([p.grad for p in (x, *ws)], eager_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1e-5)


def test_reduce_overhead_replays_with_new_data() -> None:
    torch._dynamo.reset()
    ws = [w.detach() for w in weights()]
    compiled = torch.compile(lambda x: block(x, *ws), mode="reduce-overhead", fullgraph=True)
    for _ in range(4):  # warm-up, record, then replays, each on new inputs
        x = cuda(64, 128)
        got = compiled(x).clone()
        torch.testing.assert_close(got, block(x, *ws), rtol=0, atol=0)


def test_attention_sink_compiles_with_a_device_start_q() -> None:
    torch._dynamo.reset()
    q, k, v, s = cuda(1, 1, 8, 8, 64), cuda(1, 300, 8, 64), cuda(1, 300, 8, 64), cuda(64)
    start = torch.tensor([299], dtype=torch.int32, device="cuda")
    f = torch.compile(lambda q, k, v, s, p: t.attention_sink(q, k, v, s, 0.125, 128, p), fullgraph=True)
    torch.testing.assert_close(f(q, k, v, s, start), t.attention_sink(q, k, v, s, 0.125, 128, start), rtol=0, atol=0)
