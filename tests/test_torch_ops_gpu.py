"""Our torch operators on the GPU: torch.library.opcheck on each, torch.compile(fullgraph=True)
of a block forward and backward against eager, and "reduce-overhead" (CUDA graphs) replaying
with new data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import tilegym_cutile_rs as t
import torch

pytestmark = pytest.mark.gpu

NS = torch.ops.tilegym_cutile_rs


def cuda(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(dtype)


OPCHECKS: list[tuple[str, Callable[[], tuple[Any, tuple[Any, ...]]]]] = [
    ("softmax", lambda: (NS.softmax.default, (cuda(64, 1000, dtype=torch.float32).requires_grad_(), -1, []))),
    ("swiglu", lambda: (NS.swiglu.default, (cuda(4, 8, 256).requires_grad_(), cuda(4, 8, 256).requires_grad_(), []))),
    ("swiglu_backward", lambda: (NS.swiglu_backward.default, (cuda(32, 256), cuda(32, 256), cuda(32, 256)))),
    ("silu_and_mul", lambda: (NS.silu_and_mul.default, (cuda(64, 2000, dtype=torch.float32).requires_grad_(), []))),
    ("silu_and_mul_out", lambda: (NS.silu_and_mul_out.default, (cuda(64, 512), torch.empty(64, 256, device="cuda", dtype=torch.bfloat16), []))),
    ("silu_and_mul_backward", lambda: (NS.silu_and_mul_backward.default, (cuda(64, 256), cuda(64, 512)))),
    ("matmul", lambda: (NS.matmul.default, (cuda(128, 64).requires_grad_(), cuda(96, 64).t().requires_grad_(), []))),
    ("bmm", lambda: (NS.bmm.default, (cuda(2, 64, 32).requires_grad_(), cuda(2, 32, 48).requires_grad_(), []))),
    ("attention_sink", lambda: (NS.attention_sink.default,
                                (cuda(2, 33, 2, 4, 64), cuda(2, 40, 2, 64), cuda(2, 40, 2, 64), cuda(8, dtype=torch.float32), 0.125, 16, 7, []))),
    ("attention_sink.start_tensor", lambda: (NS.attention_sink.start_tensor,
                                             (cuda(1, 1, 2, 4, 64), cuda(1, 50, 2, 64), cuda(1, 50, 2, 64), cuda(8), 0.125, 0,
                                              torch.tensor([49], dtype=torch.int32, device="cuda"), []))),
]


@pytest.mark.parametrize("name, make", OPCHECKS, ids=[o[0] for o in OPCHECKS])
def test_opcheck(name: str, make: Callable[[], tuple[Any, tuple[Any, ...]]]) -> None:
    op, args = make()
    torch.library.opcheck(op, args)


def block(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, wg: torch.Tensor) -> torch.Tensor:
    h = t.silu_and_mul(t.matmul(x, w1))
    return t.softmax(t.matmul(h, w2), -1) * t.swiglu(x, t.matmul(x, wg))


def weights() -> list[torch.Tensor]:
    return [(cuda(128, 512) * 0.05).requires_grad_(), (cuda(256, 128) * 0.05).requires_grad_(), (cuda(128, 128) * 0.05).requires_grad_()]


# Each op alone, compiled against eager: the same kernels on the same data, so bit-identical
# outputs and gradients (the incoming gradient is given, so no torch arithmetic sits between).
# softmax's gradient is the exception: it is torch's own formula, which Inductor compiles into
# a kernel of its own (seen on an H100: 1 of 64000 bfloat16 gradients one ulp apart).
TORCH_GRADIENT = {"softmax"}
PER_OP: list[tuple[str, Callable[..., torch.Tensor], Callable[[], list[torch.Tensor]]]] = [
    ("softmax", lambda x: t.softmax(x, -1), lambda: [cuda(64, 1000)]),
    ("swiglu", t.swiglu, lambda: [cuda(64, 512), cuda(64, 512)]),
    ("silu_and_mul", t.silu_and_mul, lambda: [cuda(64, 1024)]),
    ("matmul", t.matmul, lambda: [cuda(64, 128), cuda(128, 256) * 0.05]),
    ("bmm", t.bmm, lambda: [cuda(2, 64, 32), cuda(2, 32, 48)]),
]


@pytest.mark.parametrize("name, fn, make", PER_OP, ids=[o[0] for o in PER_OP])
def test_compiled_op_matches_eager_exactly(name: str, fn: Callable[..., torch.Tensor], make: Callable[[], list[torch.Tensor]]) -> None:
    torch._dynamo.reset()
    inputs = [x.requires_grad_() for x in make()]
    eager = fn(*inputs)
    dy = torch.randn_like(eager)
    eager_grads = torch.autograd.grad(eager, inputs, dy)
    compiled = torch.compile(fn, fullgraph=True)(*inputs)
    compiled_grads = torch.autograd.grad(compiled, inputs, dy)
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    tol = dict(rtol=1.6e-2, atol=1e-5) if name in TORCH_GRADIENT else dict(rtol=0, atol=0)
    for got, want in zip(compiled_grads, eager_grads, strict=True):
        torch.testing.assert_close(got, want, **tol)


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
