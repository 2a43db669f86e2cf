"""rms_norm on the GPU against float32 torch: LLM hidden sizes and odd widths, each dtype,
Gemma's offset, gradients of x and weight, strided rows, a weight of another dtype,
empty inputs, graph capture, and TileGym's module classes."""

from __future__ import annotations

import pytest
import tilegym_cutile_rs
import torch
from tilegym_cutile_rs.ops import rms_norm as rn

pytestmark = pytest.mark.gpu

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# One rounding of the output to the storage type, plus float32 reduction order.
TOL = {getattr(torch, name): tol._asdict() for name, tol in rn.TOLERANCES.items()}  # the op's declared tolerances


def reference_grads(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor, eps: float, offset: float) -> tuple[torch.Tensor, ...]:
    xr, wr = x.detach().float().requires_grad_(True), w.detach().float().requires_grad_(True)
    y = xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + eps) * (wr + offset)
    y.backward(dy.float())
    assert xr.grad is not None and wr.grad is not None
    return y.detach(), xr.grad, wr.grad


@pytest.mark.parametrize("shape", [(4, 512, 4096), (1, 2880), (37, 1000), (3, 7), (2, 16384), (4096, 128), (5, 1)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_forward_and_gradients_match_float32_torch(shape: tuple[int, ...], dtype: torch.dtype, offset: float) -> None:
    torch.manual_seed(0)
    eps = 1e-6
    x = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
    w = (1 + 0.1 * torch.randn(shape[-1], device="cuda")).to(dtype).requires_grad_(True)
    dy = torch.randn(shape, device="cuda", dtype=dtype)
    y = tilegym_cutile_rs.rms_norm(x, w, eps, offset)
    y_ref, dx_ref, dw_ref = reference_grads(x, w, dy, eps, offset)
    assert y.shape == x.shape and y.dtype == dtype and y.is_contiguous()
    torch.testing.assert_close(y.float(), y_ref, **TOL[dtype])
    y.backward(dy)
    assert x.grad is not None and w.grad is not None and w.grad.dtype == dtype
    torch.testing.assert_close(x.grad.float(), dx_ref, **TOL[dtype])
    # dw sums M products: its error grows with the number of rows summed.
    rows = x.numel() // shape[-1]
    scale = max(1.0, dw_ref.abs().max().item())
    torch.testing.assert_close(w.grad.float(), dw_ref, rtol=TOL[dtype]["rtol"] * 4, atol=TOL[dtype]["atol"] * scale + 1e-6 * rows)


def test_repeated_backward_steps_read_their_own_data() -> None:
    """A training step's later backwards replay the two launches the first one kept (on
    autograd's thread): each step's own dy, x and weight; a sum's expanded dy takes the full path."""
    torch.manual_seed(3)
    for step in range(4):
        x = torch.randn(96, 1536, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = (1 + 0.1 * torch.randn(1536, device="cuda")).to(torch.bfloat16).requires_grad_(True)
        dy = torch.ones_like(x) if step == 3 else torch.randn_like(x)
        y = tilegym_cutile_rs.rms_norm(x, w, 1e-5)
        (y.float().sum() if step == 3 else y).backward(None if step == 3 else dy)
        _, dx_ref, dw_ref = reference_grads(x, w, dy, 1e-5, 0.0)
        assert x.grad is not None and w.grad is not None
        torch.testing.assert_close(x.grad.float(), dx_ref, **TOL[torch.bfloat16])
        scale = max(1.0, dw_ref.abs().max().item())
        torch.testing.assert_close(w.grad.float(), dw_ref, rtol=TOL[torch.bfloat16]["rtol"] * 4,
                                   atol=TOL[torch.bfloat16]["atol"] * scale + 1e-6 * 96)


def test_repeated_calls_take_the_fast_path_with_each_call_s_data() -> None:
    """A call of a layout seen before (a model's Parameter weight, under no_grad, strided rows
    read in place) runs the plan it kept on each call's own x and weight; another offset, a
    weight that needs a cast, or a gradient request takes the full path."""
    torch.manual_seed(4)
    base = torch.randn(3, 64, 2048 + 8, device="cuda", dtype=torch.bfloat16)
    weight = torch.nn.Parameter((1 + 0.1 * torch.randn(2048, device="cuda")).to(torch.bfloat16))
    with torch.no_grad():
        for i in range(3):
            x = base[i, :, :2048]  # rows 2056 apart
            y = tilegym_cutile_rs.rms_norm(x, weight, 1e-5, 1.0 if i == 2 else 0.0)
            torch.testing.assert_close(y, rn.reference(x, weight, 1e-5, 1.0 if i == 2 else 0.0), **TOL[torch.bfloat16])
            weight.mul_(1.5)  # the next call reads the weight's new values
        assert rn.forward_plans.get(rn._plan_key(base[0, :, :2048], weight, 1e-5, 0.0)) is not None
        y = tilegym_cutile_rs.rms_norm(base[1, :, :2048], weight.float(), 1e-5)  # cast per call: not kept
        torch.testing.assert_close(y, rn.reference(base[1, :, :2048], weight, 1e-5), **TOL[torch.bfloat16])
    y = tilegym_cutile_rs.rms_norm(base[0, :, :2048], weight, 1e-5)
    assert y.grad_fn is not None


def test_strided_rows_a_float32_weight_and_eps_zero() -> None:
    base = torch.randn(64, 3000, device="cuda", dtype=torch.bfloat16)
    x = base[:, 100:1100]  # strided rows, read in place
    w = torch.randn(1000, device="cuda")  # float32 weight on bfloat16 x: cast to x's dtype
    torch.testing.assert_close(tilegym_cutile_rs.rms_norm(x, w), rn.reference(x, w.bfloat16()), **TOL[torch.bfloat16])
    xt = torch.randn(1000, 64, device="cuda").t()  # copied once
    torch.testing.assert_close(tilegym_cutile_rs.rms_norm(xt, w, 0.0), rn.reference(xt, w, 0.0), **TOL[torch.float32])
    # The weight's gradient comes back in its own dtype through the cast.
    wg = w.clone().requires_grad_(True)
    tilegym_cutile_rs.rms_norm(x, wg).float().sum().backward()
    assert wg.grad is not None and wg.grad.dtype == torch.float32


def test_bad_input_on_the_gpu() -> None:
    x = torch.randn(4, 8, device="cuda")
    with pytest.raises(ValueError, match="weight must have shape"):
        tilegym_cutile_rs.rms_norm(x, torch.ones(7, device="cuda"))
    with pytest.raises(ValueError, match="one device"):
        tilegym_cutile_rs.rms_norm(x, torch.ones(8))
    with pytest.raises(ValueError, match="eps"):
        tilegym_cutile_rs.rms_norm(x, torch.ones(8, device="cuda"), eps=float("nan"))
    with pytest.raises(TypeError, match="supports"):
        tilegym_cutile_rs.rms_norm(x.double(), torch.ones(8, device="cuda"))


def test_empty_tensors() -> None:
    x = torch.randn(0, 64, device="cuda", requires_grad=True)
    w = torch.ones(64, device="cuda", requires_grad=True)
    y = tilegym_cutile_rs.rms_norm(x, w)
    assert y.shape == (0, 64)
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
    assert w.grad is not None and torch.equal(w.grad, torch.zeros(64, device="cuda"))


def test_cuda_graph_capture_of_forward_and_backward() -> None:
    x = torch.randn(64, 1024, device="cuda", requires_grad=True)
    w = torch.randn(1024, device="cuda", requires_grad=True)
    dy = torch.randn(64, 1024, device="cuda")
    for _ in range(2):  # compile and record outside the capture
        tilegym_cutile_rs.rms_norm(x, w).backward(dy)
    x.grad = w.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = tilegym_cutile_rs.rms_norm(x, w)
        y.backward(dy)
    with torch.no_grad():
        x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    y_ref, dx_ref, dw_ref = reference_grads(x, w, dy, 1e-6, 0.0)
    torch.testing.assert_close(y, y_ref, **TOL[torch.float32])
    torch.testing.assert_close(x.grad, dx_ref, **TOL[torch.float32])
    torch.testing.assert_close(w.grad, dw_ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("model", ["llama", "gemma3"])
def test_tilegym_modules_match_the_models_own(model: str) -> None:
    torch.manual_seed(3)
    cls = rn._tilegym_get_rms_norm_module(model)
    norm = cls(2048, eps=1e-6).cuda().to(torch.bfloat16)
    with torch.no_grad():
        norm.weight.normal_(0, 0.1)
    x = torch.randn(2, 16, 2048, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(norm(x), rn.reference(x, norm.weight, 1e-6, norm.offset), **TOL[torch.bfloat16])


def test_check_smoke_and_warmup() -> None:
    assert "rms_norm" in rn.OP.smoke(torch.device("cuda"))
    [record] = tilegym_cutile_rs.warmup([(64, 4096)], ["bfloat16"], ops=["rms_norm"])
    assert record["op"] == "rms_norm" and record["config"].block_m == 1
