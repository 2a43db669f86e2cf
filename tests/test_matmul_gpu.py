"""matmul and bmm on the GPU against torch in float32: TileGym's shapes and tolerances,
every layout combination, TF32 and full float32, gradients, streams and graphs."""

from __future__ import annotations

import pytest
import tilegym_cutile_rs
import torch
from tilegym_cutile_rs.ops import matmul as mm

pytestmark = pytest.mark.gpu

# The op's declared tolerances (TileGym's; see tilegym_cutile_rs.ops.matmul.TOLERANCES).
TOL = {getattr(torch, name): tol._asdict() for name, tol in mm.TOLERANCES.items()}


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.double() @ b.double()).to(a.dtype)


def make(shape: tuple[int, ...], dtype: torch.dtype, transposed: bool) -> torch.Tensor:
    """A `shape` operand, stored row-major or (transposed) column-major."""
    if not transposed:
        return torch.rand(shape, device="cuda", dtype=dtype)
    return torch.rand(*shape[:-2], shape[-1], shape[-2], device="cuda", dtype=dtype).transpose(-1, -2)


TILEGYM_MATMUL = [(1024, 1024, 1024), (1024, 1024, 1023), (8192, 8192, 8192), (8, 8, 8), (3072, 6144, 2720)]


@pytest.mark.parametrize("m, n, k", TILEGYM_MATMUL)
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_tilegym_shapes_every_layout(m: int, n: int, k: int, trans_a: bool, trans_b: bool) -> None:
    torch.manual_seed(0)
    a, b = make((m, k), torch.bfloat16, trans_a), make((k, n), torch.bfloat16, trans_b)
    c = tilegym_cutile_rs.matmul(a, b)
    assert c.shape == (m, n) and c.dtype == torch.bfloat16 and c.is_contiguous()
    torch.testing.assert_close(c, reference(a, b), **TOL[torch.bfloat16])


@pytest.mark.parametrize("m", [128, 1024])
@pytest.mark.parametrize("n", [256, 512])
@pytest.mark.parametrize("k", [511, 512, 1023, 1024])
def test_bmm_tilegym_shapes(m: int, n: int, k: int) -> None:
    torch.manual_seed(1)
    a = torch.rand(4, m, k, device="cuda", dtype=torch.float16) - 0.5
    b = torch.rand(4, k, n, device="cuda", dtype=torch.float16) - 0.5
    torch.testing.assert_close(tilegym_cutile_rs.bmm(a, b), reference(a, b), **TOL[torch.float16])


@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, True)])
def test_bmm_layouts(trans_a: bool, trans_b: bool) -> None:
    a, b = make((3, 100, 70), torch.bfloat16, trans_a), make((3, 70, 90), torch.bfloat16, trans_b)
    torch.testing.assert_close(tilegym_cutile_rs.bmm(a, b), reference(a, b), **TOL[torch.bfloat16])


@pytest.mark.parametrize("tf32", [False, True])
def test_float32_full_precision_and_tf32(tf32: bool) -> None:
    a, b = torch.randn(300, 500, device="cuda"), torch.randn(500, 200, device="cuda")
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        c = tilegym_cutile_rs.matmul(a, b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    err = (c.double() - a.double() @ b.double()).abs().max().item()
    # TF32 keeps 10 mantissa bits: errors near 1e-2 over K = 500; full float32 near 1e-4.
    assert err < (5e-2 if tf32 else 1e-3), err


@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (1, 4096, 4096), (16, 14336, 4096), (128, 4096, 14336), (33, 17, 9)])
def test_odd_and_llm_shapes(m: int, n: int, k: int) -> None:
    a, b = torch.randn(m, k, device="cuda", dtype=torch.bfloat16), torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(tilegym_cutile_rs.matmul(a, b), reference(a, b), atol=5e-2 * max(1, k / 1024) ** 0.5, rtol=1e-2)


def test_zero_sizes_and_strided_operands() -> None:
    for m, n, k in [(0, 4, 3), (4, 0, 3), (4, 5, 0)]:
        a, b = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
        c = tilegym_cutile_rs.matmul(a, b)
        assert c.shape == (m, n) and (c == 0).all()
    base = torch.randn(64, 300, device="cuda", dtype=torch.bfloat16)
    a = base[:, ::3]  # neither row- nor column-major: copied once
    b = torch.randn(100, 40, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(tilegym_cutile_rs.matmul(a, b), reference(a, b), **TOL[torch.bfloat16])


@pytest.mark.parametrize("op", ["matmul", "bmm"])
def test_gradients_match_torch(op: str) -> None:
    shape_a, shape_b = ((2, 96, 80), (2, 80, 72)) if op == "bmm" else ((96, 80), (80, 72))
    a = torch.randn(shape_a, device="cuda", requires_grad=True)
    b = torch.randn(shape_b, device="cuda", requires_grad=True)
    fn = getattr(tilegym_cutile_rs, op)
    c = fn(a, b)
    dc = torch.randn_like(c)
    c.backward(dc)
    a_ref, b_ref = a.detach().double().requires_grad_(True), b.detach().double().requires_grad_(True)
    (a_ref @ b_ref).backward(dc.double())
    torch.testing.assert_close(a.grad.double(), a_ref.grad, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(b.grad.double(), b_ref.grad, atol=1e-3, rtol=1e-3)


def test_bad_input_on_the_gpu() -> None:
    a = torch.randn(4, 8, device="cuda")
    with pytest.raises(ValueError, match="do not chain"):
        tilegym_cutile_rs.matmul(a, torch.randn(7, 2, device="cuda"))
    with pytest.raises(ValueError, match="use bmm"):
        tilegym_cutile_rs.matmul(a.unsqueeze(0), torch.randn(1, 8, 2, device="cuda"))
    with pytest.raises(ValueError, match="use matmul"):
        tilegym_cutile_rs.bmm(a, torch.randn(8, 2, device="cuda"))
    with pytest.raises(ValueError, match="batch sizes"):
        tilegym_cutile_rs.bmm(torch.randn(2, 4, 8, device="cuda"), torch.randn(3, 8, 2, device="cuda"))
    with pytest.raises(TypeError, match="cast"):
        tilegym_cutile_rs.matmul(a, torch.randn(8, 2, device="cuda", dtype=torch.float16))
    with pytest.raises(TypeError, match="supports"):
        tilegym_cutile_rs.matmul(a.double(), a.double().t())
    with pytest.raises(ValueError, match="CUDA tensors"):
        tilegym_cutile_rs.matmul(a, torch.randn(8, 2))


@pytest.mark.parametrize("group_m", [0, 8])
def test_persistent_and_per_tile_kernels_agree(group_m: int) -> None:
    from tilegym_cutile_rs import MatmulConfig

    # More tiles than CTAs (the persistent CTAs loop), a partial last group, and a batch.
    a, b = make((3, 1000, 300), torch.bfloat16, False), make((3, 300, 1200), torch.bfloat16, True)
    c = tilegym_cutile_rs.bmm(a, b, config=MatmulConfig(64, 64, 32, 0, 0, group_m))
    torch.testing.assert_close(c, reference(a, b), **TOL[torch.bfloat16])
    a2, b2 = torch.randn(333, 777, device="cuda"), torch.randn(777, 555, device="cuda")
    c2 = tilegym_cutile_rs.matmul(a2, b2, config=MatmulConfig(64, 64, 32, 1, 0, group_m))
    torch.testing.assert_close(c2, (a2.double() @ b2.double()).float(), atol=1e-2, rtol=1e-3)


@pytest.mark.parametrize("cga", [0, 2])
def test_persistent_launches_replay_on_new_operands(cga: int) -> None:
    """A repeated persistent launch goes straight to the driver (replay) with the new
    pointers: each of several fresh operand pairs gets its own right product."""
    from tilegym_cutile_rs import MatmulConfig, _cache

    if torch.cuda.get_device_capability() < (9, 0):
        cga = 0  # no clusters before sm_90 (test_clusters_where_the_gpu_has_them checks the refusal)
    config = MatmulConfig(128, 128, 64, 0, 0, 8, cga)
    first = make((2, 700, 256), torch.bfloat16, False), make((2, 256, 900), torch.bfloat16, True)
    tilegym_cutile_rs.bmm(*first, config=config)
    before = _cache.stats()["replays"]
    for _ in range(3):
        a, b = make((2, 700, 256), torch.bfloat16, False), make((2, 256, 900), torch.bfloat16, True)
        torch.testing.assert_close(tilegym_cutile_rs.bmm(a, b, config=config), reference(a, b), **TOL[torch.bfloat16])
    assert _cache.stats()["replays"] - before >= 3


def test_repeated_calls_take_the_fast_path_with_each_call_s_data() -> None:
    """A public call of a layout seen before runs its kept plan: each call's own operands,
    a view at a misaligned offset (same shape and strides) back on the full path, TF32's
    switch and a gradient request never served by a plan made without them."""
    buf_a = torch.randn(3 * 300 * 256 + 8, device="cuda", dtype=torch.bfloat16)
    shape_a, shape_b = (300, 256), (256, 200)
    for i in range(3):
        a, b = buf_a[i * 300 * 256:(i + 1) * 300 * 256].view(shape_a), torch.randn(shape_b, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(tilegym_cutile_rs.matmul(a, b), reference(a, b), **TOL[torch.bfloat16])
        a3, b3 = a.view(3, 100, 256), torch.randn(3, 256, 64, device="cuda", dtype=torch.bfloat16).transpose(-1, -2).contiguous().transpose(-1, -2)
        torch.testing.assert_close(tilegym_cutile_rs.bmm(a3, b3), reference(a3, b3), **TOL[torch.bfloat16])
    assert mm.plans.get(mm._plan_key(a, b)) is not None and mm.plans.get(mm._plan_key(a3, b3)) is not None
    odd = buf_a[1:1 + 300 * 256].view(shape_a)  # 2-byte offset: not 16-byte aligned, copied to an aligned operand
    torch.testing.assert_close(tilegym_cutile_rs.matmul(odd, b), reference(odd, b), **TOL[torch.bfloat16])
    x, y = torch.randn(96, 160, device="cuda"), torch.randn(160, 112, device="cuda")
    exact = (x.double() @ y.double()).float()
    allowed = torch.backends.cuda.matmul.allow_tf32
    try:
        for tf32 in (False, True, False):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            for _ in range(2):
                err = (tilegym_cutile_rs.matmul(x, y) - exact).abs().max().item()
                assert (err < 1e-3) if not tf32 else (1e-4 < err < 0.2), (tf32, err)  # TF32 rounds its operands
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    a.requires_grad_(True)
    c = tilegym_cutile_rs.matmul(a, b)
    assert c.grad_fn is not None
    (ga,) = torch.autograd.grad(c.float().sum(), a)
    torch.testing.assert_close(ga, reference(torch.ones(300, 200, device="cuda", dtype=torch.bfloat16), b.t()), **TOL[torch.bfloat16])


@pytest.mark.parametrize("transposed", [False, True])
def test_repeated_calls_of_unaligned_operands_keep_their_copies(transposed: bool) -> None:
    """2-byte operands with odd strides (K = 511, M = 201, N = 97) are copied to 16-byte
    strides (`_operand`); a repeated call takes the kept plan, which copies each call's own
    operands the same way."""
    a0, b0 = make((4, 201, 511), torch.bfloat16, transposed), make((4, 511, 97), torch.bfloat16, not transposed)
    torch.testing.assert_close(tilegym_cutile_rs.bmm(a0, b0), reference(a0, b0), **TOL[torch.bfloat16])
    kept = mm.plans.get(mm._plan_key(a0, b0))
    assert kept is not None and kept[1] is not None and kept[2] is not None, kept
    for _ in range(3):
        a, b = make((4, 201, 511), torch.bfloat16, transposed), make((4, 511, 97), torch.bfloat16, not transposed)
        # The copies' padding is never written: leave NaN where the allocator will hand them out.
        for shape in ((4, 201, 512), (4, 511, 512), (4, 97, 512), (4, 511, 208)):
            torch.full(shape, float("nan"), device="cuda", dtype=torch.bfloat16)  # freed at once
        torch.testing.assert_close(tilegym_cutile_rs.bmm(a, b), reference(a, b), **TOL[torch.bfloat16])
    a2, b2 = make((300, 1023), torch.float16, transposed), make((1023, 128), torch.float16, False)
    for _ in range(3):
        a2.uniform_(), b2.uniform_()
        torch.testing.assert_close(tilegym_cutile_rs.matmul(a2, b2), reference(a2, b2), **TOL[torch.float16])


def test_clusters_where_the_gpu_has_them() -> None:
    from tilegym_cutile_rs import MatmulConfig

    a, b = torch.randn(1000, 512, device="cuda", dtype=torch.bfloat16), torch.randn(512, 700, device="cuda", dtype=torch.bfloat16)
    if torch.cuda.get_device_capability() >= (9, 0):
        for group_m in (0, 8):
            c = tilegym_cutile_rs.matmul(a, b, config=MatmulConfig(128, 128, 64, 0, 0, group_m, 2))
            torch.testing.assert_close(c, reference(a, b), **TOL[torch.bfloat16])
    else:  # no clusters before sm_90: the toolchain's refusal is an exception, not a crash
        with pytest.raises(tilegym_cutile_rs.CutileError):
            tilegym_cutile_rs.matmul(a, b, config=MatmulConfig(128, 128, 64, 0, 0, 0, 2))


def test_tilegym_keywords_change_what_they_say() -> None:
    from tilegym_cutile_rs.ops.matmul import OP

    a, b = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16), torch.randn(384, 256, device="cuda", dtype=torch.bfloat16)
    for persistent in (True, False, None):
        c = OP.tilegym["matmul"](a.t().contiguous(), b, trans_a=True, trans_b=True, static_persistent=persistent, use_tma=True)
        torch.testing.assert_close(c, reference(a, b.t()), **TOL[torch.bfloat16])
    a3, b3 = torch.randn(2, 64, 96, device="cuda", dtype=torch.float16), torch.randn(2, 80, 96, device="cuda", dtype=torch.float16)
    c3 = OP.tilegym["bmm"](a3, b3, transpose_b=True, static_persistent=True)
    torch.testing.assert_close(c3, reference(a3, b3.transpose(-1, -2)), **TOL[torch.float16])


def test_side_stream_and_graph_capture() -> None:
    a, b = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16), torch.randn(128, 64, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        c = tilegym_cutile_rs.matmul(a, b)
    side.synchronize()
    torch.testing.assert_close(c, reference(a, b), **TOL[torch.bfloat16])
    tilegym_cutile_rs.matmul(a, b)  # compile and record outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = tilegym_cutile_rs.matmul(a, b)
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, reference(a, b), **TOL[torch.bfloat16])
