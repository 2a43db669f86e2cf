"""swiglu and silu_and_mul on the GPU against torch (float32 references): TileGym's
shapes and tolerances, LLM MLP shapes, gradients, strided inputs, out=, streams and graphs."""

from __future__ import annotations

import pytest
import tilegym_cutile_rs
import torch
import torch.nn.functional as F
from tilegym_cutile_rs.ops import swiglu as sw

pytestmark = pytest.mark.gpu

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# The ops' declared tolerances (TileGym's: silu_and_mul rtol 0, atol 1e-2; swiglu atol = rtol = 1e-2).
SILU_AND_MUL_TOL = sw.SILU_AND_MUL_TOLERANCES["bfloat16"]._asdict()
SWIGLU_TOL = sw.SWIGLU_TOLERANCES["bfloat16"]._asdict()


def reference_silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    return sw.reference_silu_and_mul(x.float()).to(x.dtype)


def reference_swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return sw.reference_swiglu(a.float(), b.float()).to(a.dtype)


# TileGym's silu_and_mul shapes (batch, seq, hidden), regular and irregular.
TILEGYM_SILU_AND_MUL = [
    (8, 512, 512, torch.float16), (8, 1024, 1024, torch.float32), (16, 1024, 1024, torch.float16),
    (32, 1024, 4096, torch.float32), (7, 512, 512, torch.float32), (13, 256, 1024, torch.float32),
    (8, 100, 512, torch.float32), (8, 333, 1024, torch.float32), (8, 256, 1000, torch.float32),
    (8, 256, 1500, torch.float32), (8, 256, 3000, torch.float32), (7, 100, 1000, torch.float32),
    (13, 333, 1500, torch.float32),
]


@pytest.mark.parametrize("batch, seq, hidden, dtype", TILEGYM_SILU_AND_MUL)
def test_silu_and_mul_tilegym_shapes_with_gradients(batch: int, seq: int, hidden: int, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randn(batch, seq, 2 * hidden, dtype=dtype, device="cuda", requires_grad=True)
    dy = 0.1 * torch.randn(batch, seq, hidden, dtype=dtype, device="cuda")
    y = tilegym_cutile_rs.silu_and_mul(x)
    x_ref = x.detach().clone().requires_grad_(True)
    ref = reference_silu_and_mul(x_ref)
    torch.testing.assert_close(y, ref, **SILU_AND_MUL_TOL)
    assert y.shape == (batch, seq, hidden) and y.dtype == dtype and y.is_contiguous()
    y.backward(dy)
    ref.backward(dy)
    torch.testing.assert_close(x.grad, x_ref.grad, **SILU_AND_MUL_TOL)


@pytest.mark.parametrize("shape", [(4096, 2 * 14336), (1, 2 * 11008), (3, 2 * 7), (5, 2 * 8191), (2, 2)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_silu_and_mul_llm_and_odd_widths(shape: tuple[int, int], dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    x = torch.randn(shape, dtype=dtype, device="cuda") * 3
    # Outputs reach 30+, where one unit in the last place of float16 (bfloat16) is over
    # TileGym's atol: allow that one rounding step beside it.
    ulp = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}.get(dtype, 1e-6)
    torch.testing.assert_close(tilegym_cutile_rs.silu_and_mul(x), reference_silu_and_mul(x), atol=1e-2, rtol=ulp)


TILEGYM_SWIGLU = [(8, 2048, 4096), (4, 1024, 2048), (2, 512, 1024), (7, 512, 1024), (13, 256, 2048), (8, 100, 1024),
                  (8, 333, 512), (8, 256, 1000), (8, 256, 1500), (8, 256, 3000), (7, 100, 1000), (13, 333, 1500)]


@pytest.mark.parametrize("batch, seq, hidden", TILEGYM_SWIGLU)
def test_swiglu_tilegym_shapes(batch: int, seq: int, hidden: int) -> None:
    a = torch.randn(batch, seq, hidden, device="cuda")
    b = torch.randn(batch, seq, hidden, device="cuda")
    torch.testing.assert_close(tilegym_cutile_rs.swiglu(a, b), reference_swiglu(a, b), **SWIGLU_TOL)


@pytest.mark.parametrize("shape", [(4, 512, 1024), (8, 512, 512), (7, 256, 512), (4, 256, 1000), (13, 333, 1500)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_swiglu_gradients_match_torch(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    torch.manual_seed(2)
    a = torch.randn(shape, dtype=dtype, device="cuda", requires_grad=True)
    b = torch.randn(shape, dtype=dtype, device="cuda", requires_grad=True)
    a_ref, b_ref = a.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)
    y, ref = tilegym_cutile_rs.swiglu(a, b), reference_swiglu(a_ref, b_ref)
    torch.testing.assert_close(y, ref, **SWIGLU_TOL)
    dy = torch.randn_like(y)
    y.backward(dy)
    ref.backward(dy)
    torch.testing.assert_close(a.grad, a_ref.grad, **SWIGLU_TOL)
    torch.testing.assert_close(b.grad, b_ref.grad, **SWIGLU_TOL)


@pytest.mark.parametrize("config", [(1, 16384, 0, 8, 2), (1, 8192, 0, 0, 2), (2, 4096, 0, 4, 2)])
def test_tiles_shared_by_a_cluster_where_the_gpu_has_them(config: tuple[int, ...]) -> None:
    # 11008 columns: the last tile of each row is cut, in whichever CTA of the cluster holds it.
    torch.manual_seed(3)
    x = torch.randn(37, 2 * 11008, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    if torch.cuda.get_device_capability() < (9, 0):  # no clusters: the toolchain's refusal is an exception, not a crash
        with pytest.raises(tilegym_cutile_rs.CutileError):
            tilegym_cutile_rs.silu_and_mul(x.detach(), config=config)
        return
    x_ref = x.detach().clone().requires_grad_(True)
    y, ref = tilegym_cutile_rs.silu_and_mul(x, config=config), reference_silu_and_mul(x_ref)
    torch.testing.assert_close(y, ref, **SILU_AND_MUL_TOL)
    dy = torch.randn_like(y)
    y.backward(dy)
    ref.backward(dy)
    torch.testing.assert_close(x.grad, x_ref.grad, **SWIGLU_TOL)
    a, b = x.detach()[:, :11008], x.detach()[:, 11008:]
    torch.testing.assert_close(tilegym_cutile_rs.swiglu(a, b, config=config), reference_swiglu(a, b), **SWIGLU_TOL)


def test_strided_inputs_are_read_in_place_or_copied() -> None:
    base = torch.randn(64, 3000, device="cuda")
    a, b = base[:, 100:1100], base[:, 1500:2500]  # strided rows, read in place
    torch.testing.assert_close(tilegym_cutile_rs.swiglu(a, b), reference_swiglu(a, b), **SWIGLU_TOL)
    at, bt = torch.randn(1000, 64, device="cuda").t(), torch.randn(1000, 64, device="cuda").t()  # copied once
    torch.testing.assert_close(tilegym_cutile_rs.swiglu(at, bt), reference_swiglu(at, bt), **SWIGLU_TOL)
    x = torch.randn(32, 5000, device="cuda")[:, :4000]  # silu_and_mul on strided rows
    torch.testing.assert_close(tilegym_cutile_rs.silu_and_mul(x), reference_silu_and_mul(x), **SILU_AND_MUL_TOL)
    # Gradients of a non-contiguous (expanded) incoming gradient.
    xg = torch.randn(8, 64, device="cuda", requires_grad=True)
    tilegym_cutile_rs.silu_and_mul(xg).sum().backward()
    ref = xg.detach().clone().requires_grad_(True)
    reference_silu_and_mul(ref).sum().backward()
    torch.testing.assert_close(xg.grad, ref.grad, **SILU_AND_MUL_TOL)


def test_out_is_written_in_place_and_checked() -> None:
    x = torch.randn(16, 2 * 300, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(16, 300, device="cuda", dtype=torch.bfloat16)
    assert tilegym_cutile_rs.silu_and_mul(x, out) is out
    torch.testing.assert_close(out, reference_silu_and_mul(x), **SILU_AND_MUL_TOL)
    strided = torch.empty(16, 600, device="cuda", dtype=torch.bfloat16)[:, ::2]
    tilegym_cutile_rs.silu_and_mul(x, strided)
    torch.testing.assert_close(strided, reference_silu_and_mul(x), **SILU_AND_MUL_TOL)
    with pytest.raises(ValueError, match="shape"):
        tilegym_cutile_rs.silu_and_mul(x, torch.empty(16, 301, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="float32"):
        tilegym_cutile_rs.silu_and_mul(x, torch.empty(16, 300, device="cuda"))
    with pytest.raises(ValueError, match="overlaps"):
        tilegym_cutile_rs.silu_and_mul(x, x[:, :300])
    with pytest.raises(RuntimeError, match="gradients"):
        tilegym_cutile_rs.silu_and_mul(x.float().requires_grad_(True), torch.empty(16, 300, device="cuda"))


def test_bad_input_on_the_gpu() -> None:
    x = torch.randn(4, 7, device="cuda")
    with pytest.raises(ValueError, match="even last dim"):
        tilegym_cutile_rs.silu_and_mul(x)
    with pytest.raises(ValueError, match="same shape"):
        tilegym_cutile_rs.swiglu(x, torch.randn(4, 8, device="cuda"))
    with pytest.raises(TypeError, match="same dtype"):
        tilegym_cutile_rs.swiglu(x, x.half())
    with pytest.raises(TypeError, match="supports"):
        tilegym_cutile_rs.swiglu(x.double(), x.double())
    with pytest.raises(ValueError, match="CUDA tensors"):
        tilegym_cutile_rs.swiglu(x, x.cpu())


def test_empty_tensors() -> None:
    for shape in [(0, 8), (4, 0), (0,)]:
        a = torch.randn(shape, device="cuda")
        assert tilegym_cutile_rs.swiglu(a, a).shape == a.shape
    assert tilegym_cutile_rs.silu_and_mul(torch.randn(0, 3, 8, device="cuda")).shape == (0, 3, 4)
    x = torch.randn(0, 8, device="cuda", requires_grad=True)
    tilegym_cutile_rs.silu_and_mul(x).sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


def test_repeated_calls_take_each_call_s_data_and_side_streams() -> None:
    xs = [torch.randn(33, 2 * 777, device="cuda") for _ in range(3)]
    for x in xs * 2:
        a, b = x[:, :777].contiguous(), x[:, 777:].contiguous()
        torch.testing.assert_close(tilegym_cutile_rs.swiglu(a, b), reference_swiglu(a, b), **SWIGLU_TOL)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = tilegym_cutile_rs.silu_and_mul(xs[0])
    side.synchronize()
    torch.testing.assert_close(y, reference_silu_and_mul(xs[0]), **SILU_AND_MUL_TOL)


def test_repeated_silu_and_mul_calls_take_the_fast_path_with_each_call_s_data() -> None:
    """A silu_and_mul of a layout seen before runs its kept plan on each call's own halves: 3-D
    and row-strided x (rows read in place), an odd H, a side stream, and a gradient request
    or out= never served by the plan."""
    base = torch.randn(6, 40, 2 * 777 + 10, device="cuda", dtype=torch.bfloat16)
    for i in range(3):
        x = base[2 * i:2 * i + 2, :, : 2 * 777]  # rows 2 * 777 + 10 apart
        torch.testing.assert_close(tilegym_cutile_rs.silu_and_mul(x), reference_silu_and_mul(x), **SILU_AND_MUL_TOL)
        assert sw.forward_plans.get(sw._halves_key(x)) is not None
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = tilegym_cutile_rs.silu_and_mul(base[4:, :, : 2 * 777])
    side.synchronize()
    torch.testing.assert_close(y, reference_silu_and_mul(base[4:, :, : 2 * 777]), **SILU_AND_MUL_TOL)
    leaf = base.clone().requires_grad_(True)
    x = leaf[:2, :, : 2 * 777]  # the layout of a kept plan, now asking for gradients
    y = tilegym_cutile_rs.silu_and_mul(x)
    assert y.grad_fn is not None
    (dx,) = torch.autograd.grad(y.float().sum(), leaf)
    assert dx[:2, :, : 2 * 777].abs().sum() > 0 and dx[2:].abs().sum() == 0
    out = torch.empty(2, 40, 777, device="cuda", dtype=torch.bfloat16)
    assert tilegym_cutile_rs.silu_and_mul(base[:2, :, : 2 * 777], out) is out
    torch.testing.assert_close(out, reference_silu_and_mul(base[:2, :, : 2 * 777]), **SILU_AND_MUL_TOL)


def test_repeated_backward_steps_take_each_step_s_data() -> None:
    """A training step's later backwards run the plan the first kept (on autograd's device
    thread): each step's own dy, a and b (swiglu and silu_and_mul), and an expanded dy (a
    sum's gradient), which is copied and never planned."""
    for step in range(3):
        x = torch.randn(48, 2 * 900, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        a, b = (torch.randn(48, 900, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
        dy = torch.randn(48, 900, device="cuda", dtype=torch.bfloat16)
        x_ref, a_ref, b_ref = (t.detach().clone().requires_grad_(True) for t in (x, a, b))
        tilegym_cutile_rs.silu_and_mul(x).backward(dy)
        reference_silu_and_mul(x_ref).backward(dy)
        torch.testing.assert_close(x.grad, x_ref.grad, **SILU_AND_MUL_TOL)
        y = tilegym_cutile_rs.swiglu(a, b)
        (y.sum() if step == 2 else y).backward(None if step == 2 else dy)
        (reference_swiglu(a_ref, b_ref).float().sum() if step == 2 else reference_swiglu(a_ref, b_ref)).backward(
            None if step == 2 else dy)
        torch.testing.assert_close(a.grad, a_ref.grad, **SWIGLU_TOL)
        torch.testing.assert_close(b.grad, b_ref.grad, **SWIGLU_TOL)


def test_cuda_graph_capture_of_forward_and_backward() -> None:
    x = torch.randn(64, 2 * 1024, device="cuda", requires_grad=True)
    dy = torch.randn(64, 1024, device="cuda")
    for _ in range(2):  # compile and record outside the capture
        tilegym_cutile_rs.silu_and_mul(x).backward(dy)
    x.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = tilegym_cutile_rs.silu_and_mul(x)
        y.backward(dy)
    with torch.no_grad():
        x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    ref_x = x.detach().clone().requires_grad_(True)
    ref = reference_silu_and_mul(ref_x)
    ref.backward(dy)
    torch.testing.assert_close(y, ref, **SILU_AND_MUL_TOL)
    torch.testing.assert_close(x.grad, ref_x.grad, **SILU_AND_MUL_TOL)


def test_check_smoke_and_warmup() -> None:
    from tilegym_cutile_rs.ops.swiglu import OP

    assert "silu_and_mul" in OP.smoke(torch.device("cuda"))
    [record] = tilegym_cutile_rs.warmup([(64, 512)], ["bfloat16"], ops=["swiglu"])
    assert record["op"] == "swiglu" and record["config"].block_n >= 256


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_the_tilegym_mlp_module_matches_torch_with_gradients(dtype: torch.dtype) -> None:
    from types import SimpleNamespace

    from tilegym_cutile_rs.ops import swiglu as sw

    torch.manual_seed(4)
    mlp = sw._tilegym_get_swiglu_module()(SimpleNamespace(hidden_size=256, intermediate_size=704, hidden_act="silu"))
    mlp = mlp.cuda().to(dtype)
    x = torch.randn(2, 37, 256, device="cuda", dtype=dtype, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    y = mlp(x)
    ref = F.linear(F.silu(F.linear(x_ref, mlp.gate_proj.weight)) * F.linear(x_ref, mlp.up_proj.weight), mlp.down_proj.weight)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(y, ref, **tol)
    dy = torch.randn_like(y)
    weights = [mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight]
    grads = torch.autograd.grad(y, [x, *weights], dy)
    grads_ref = torch.autograd.grad(ref, [x_ref, *weights], dy)
    for got, want in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(got.float(), want.float(), rtol=tol["rtol"] * 2, atol=tol["atol"] * 4 * max(1.0, want.abs().max().item()))
