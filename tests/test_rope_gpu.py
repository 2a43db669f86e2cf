"""rope on the GPU against float32 torch: transformers' layouts (Llama's repeated tables,
GPT-OSS's half tables, per-batch and shared tables), a partial rotary factor, each dtype,
gradients, contiguous and transposed inputs, graph capture, and TileGym's adapters."""

from __future__ import annotations

import pytest
import tilegym_cutile_rs
import torch
from tilegym_cutile_rs.ops import rope as rp

pytestmark = pytest.mark.gpu

TOL = {getattr(torch, name): tol._asdict() for name, tol in rp.TOLERANCES.items()}  # the op's declared tolerances


def tables(b: int, s: int, d: int, dtype: torch.dtype, half_only: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' tables: [B, S, D] with the first half repeated (GPT-OSS: only that half)."""
    freqs = torch.randn(b, s, d // 2, device="cuda")
    emb = freqs if half_only else torch.cat([freqs, freqs], -1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def hf_rotate_half(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' apply_rotary_pos_emb (Llama), in float32."""
    c, s = cos.float().unsqueeze(1), sin.float().unsqueeze(1)

    def rot(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), -1)

    return q.float() * c + rot(q.float()) * s, k.float() * c + rot(k.float()) * s


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("b, hq, hk, s, d", [(2, 32, 8, 37, 128), (1, 64, 8, 1, 64), (3, 28, 4, 5, 128), (1, 5, 3, 9, 32)])
def test_llama_layout_forward_and_gradients(dtype: torch.dtype, b: int, hq: int, hk: int, s: int, d: int) -> None:
    torch.manual_seed(0)
    q = torch.randn(b, s, hq, d, device="cuda", dtype=dtype).transpose(1, 2).requires_grad_(True)  # transformers' layout
    k = torch.randn(b, s, hk, d, device="cuda", dtype=dtype).transpose(1, 2).requires_grad_(True)
    cos, sin = tables(b, s, d, dtype)
    q_out, k_out = tilegym_cutile_rs.rope(q, k, cos, sin)
    q_ref, k_ref = hf_rotate_half(q, k, cos, sin)
    assert q_out.shape == q.shape and k_out.shape == k.shape and q_out.dtype == dtype
    torch.testing.assert_close(q_out.float(), q_ref.detach(), **TOL[dtype])
    torch.testing.assert_close(k_out.float(), k_ref.detach(), **TOL[dtype])
    dq, dk = torch.randn_like(q_out), torch.randn_like(k_out)
    got = torch.autograd.grad([q_out, k_out], [q, k], [dq, dk])
    want = torch.autograd.grad([q_ref, k_ref], [q, k], [dq.float(), dk.float()])
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.float(), w.float(), **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("hq, hk", [(32, 8), (28, 4), (5, 3)])
def test_every_split_and_hint_agrees(dtype: torch.dtype, hq: int, hk: int) -> None:
    """Each split of the heads over CTAs the tuner may pick (partial last blocks included), and
    hints, give the reference both ways, and a repeated call (its descriptors reused) reads the
    new data."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 9, hq, 128, device="cuda", dtype=dtype).transpose(1, 2), torch.randn(2, 9, hk, 128, device="cuda", dtype=dtype).transpose(1, 2)
    cos, sin = tables(2, 9, 128, dtype)
    blocks = {c.blocks for c in rp._tuning_candidates(("bfloat16", 18, hq, hk, 128, 64))}
    for config in [rp.RopeConfig(b) for b in sorted(blocks)] + [rp.RopeConfig(max(blocks), 16, 4)]:
        for x, y in ((q, k), (q * 2, k - 1)):
            for got, want in zip(tilegym_cutile_rs.rope(x, y, cos, sin, config=config), rp.reference(x, y, cos, sin), strict=True):
                torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])
        xg, yg = q.detach().requires_grad_(True), k.detach().requires_grad_(True)
        qo, ko = tilegym_cutile_rs.rope(xg, yg, cos, sin, config=config)
        got = torch.autograd.grad([qo, ko], [xg, yg], [qo.detach(), ko.detach()])
        for g, x in zip(got, (q, k), strict=True):  # the inverse rotation of the rotation: the input back
            torch.testing.assert_close(g.float(), x.float(), **TOL[dtype])


def test_repeated_calls_read_their_own_data() -> None:
    """The fast path (a call seen before reuses its descriptors) rotates each call's own
    tensors, hands over to autograd when gradients are asked for, and is not taken for
    tables that need a cast."""
    torch.manual_seed(0)
    cos, sin = tables(2, 7, 64, torch.bfloat16)
    for i in range(4):
        q = torch.randn(2, 7, 8, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        k = torch.randn(2, 7, 2, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        c, s_ = (cos.float(), sin.float()) if i == 3 else (cos, sin)  # float32 tables: cast per call
        for got, want in zip(tilegym_cutile_rs.rope(q, k, c, s_), rp.reference(q, k, cos, sin), strict=True):
            torch.testing.assert_close(got, want, **TOL[torch.bfloat16])
    qg = q.detach().requires_grad_(True)
    qo, ko = tilegym_cutile_rs.rope(qg, k, cos, sin)
    assert qo.grad_fn is not None and ko.grad_fn is not None


def test_repeated_backward_steps_read_their_own_gradients() -> None:
    """A training step's later forwards and backwards run the plans the first kept (the
    backward's on autograd's thread): each step's own q and k rotated and its own gradients
    rotated back; a transposed gradient (copied) takes the full path."""
    torch.manual_seed(1)
    cos, sin = tables(2, 9, 64, torch.bfloat16)
    for step in range(4):
        q = torch.randn(2, 9, 8, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_(True)
        k = torch.randn(2, 9, 2, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_(True)
        q_out, k_out = tilegym_cutile_rs.rope(q, k, cos, sin)
        q_ref, k_ref = hf_rotate_half(q, k, cos, sin)
        assert rp.plans.get(rp._layout_key("call", None, q, k, cos, sin)) is not None  # kept by the first step's forward
        for got, want in zip((q_out, k_out), (q_ref, k_ref), strict=True):
            torch.testing.assert_close(got.float(), want, **TOL[torch.bfloat16])
        dq, dk = torch.randn_like(q_out), torch.randn_like(k_out)
        if step == 3:
            dq = torch.randn(*q_out.shape[:-1], 64, device="cuda", dtype=torch.bfloat16).transpose(-1, -2).contiguous().transpose(-1, -2)
        got = torch.autograd.grad([q_out, k_out], [q, k], [dq, dk])
        want = torch.autograd.grad([q_ref, k_ref], [q, k], [dq.float(), dk.float()])
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g.float(), w.float(), **TOL[torch.bfloat16])


def test_gpt_oss_half_tables_shared_tables_and_a_partial_factor() -> None:
    q, k = torch.randn(2, 64, 7, 64, device="cuda"), torch.randn(2, 8, 7, 64, device="cuda")
    cos, sin = tables(2, 7, 64, torch.float32, half_only=True)  # [B, S, D/2]
    for got, want in zip(tilegym_cutile_rs.rope(q, k, cos, sin), rp.reference(q, k, cos, sin), strict=True):
        torch.testing.assert_close(got, want, **TOL[torch.float32])
    shared = (cos[:1], sin[:1])  # [1, S, *] serves every batch
    for got, want in zip(tilegym_cutile_rs.rope(q, k, *shared), rp.reference(q, k, *shared), strict=True):
        torch.testing.assert_close(got, want, **TOL[torch.float32])
    flat = (cos[0], sin[0])  # [S, *]
    for got, want in zip(tilegym_cutile_rs.rope(q, k, *flat), rp.reference(q, k, *flat), strict=True):
        torch.testing.assert_close(got, want, **TOL[torch.float32])
    # Qwen 3.5: a quarter of 256 dims rotated, the rest copied.
    q4, k4 = torch.randn(1, 16, 5, 256, device="cuda", dtype=torch.bfloat16), torch.randn(1, 4, 5, 256, device="cuda", dtype=torch.bfloat16)
    c4, s4 = tables(1, 5, 64, torch.bfloat16)
    got = tilegym_cutile_rs.rope(q4, k4, c4, s4, rotary_dim=64)
    for g, w in zip(got, rp.reference(q4, k4, c4, s4, rotary_dim=64), strict=True):
        torch.testing.assert_close(g, w, **TOL[torch.bfloat16])
    torch.testing.assert_close(got[0][..., 64:], q4[..., 64:], rtol=0, atol=0)


def test_tilegym_adapters_and_float32_tables_on_bfloat16() -> None:
    q, k = torch.randn(1, 8, 6, 128, device="cuda", dtype=torch.bfloat16), torch.randn(1, 2, 6, 128, device="cuda", dtype=torch.bfloat16)
    cos, sin = tables(1, 6, 128, torch.float32)
    want = rp.reference(q, k, cos.bfloat16(), sin.bfloat16())
    for got, w in zip(rp._tilegym_get_apply_rope_func("llama")(q, k, cos, sin, None, 1), want, strict=True):
        torch.testing.assert_close(got, w, **TOL[torch.bfloat16])
    q4, k4 = torch.randn(1, 4, 6, 256, device="cuda"), torch.randn(1, 2, 6, 256, device="cuda")
    c4, s4 = tables(1, 6, 64, torch.float32)
    for got, w in zip(rp._tilegym_get_apply_rope_func("qwen3_5")(q4, k4, c4, s4), rp.reference(q4, k4, c4, s4, rotary_dim=64), strict=True):
        torch.testing.assert_close(got, w, **TOL[torch.float32])


def test_bad_input_on_the_gpu_and_empty_tensors() -> None:
    q, k = torch.randn(1, 4, 5, 64, device="cuda"), torch.randn(1, 2, 5, 64, device="cuda")
    cos, sin = tables(1, 5, 64, torch.float32)
    with pytest.raises(ValueError, match="cos must be"):
        tilegym_cutile_rs.rope(q, k, cos[:, :4], sin)
    with pytest.raises(NotImplementedError, match="no gradient for cos"):
        tilegym_cutile_rs.rope(q, k, cos.requires_grad_(True), sin)
    e = torch.randn(1, 4, 0, 64, device="cuda")
    q_out, k_out = tilegym_cutile_rs.rope(e, e[:, :2], cos[:, :0].detach(), sin[:, :0])
    assert q_out.shape == e.shape and k_out.shape == (1, 2, 0, 64)


def test_cuda_graph_capture_of_forward_and_backward() -> None:
    q = torch.randn(2, 16, 8, 64, device="cuda").transpose(1, 2).requires_grad_(True)
    k = torch.randn(2, 16, 2, 64, device="cuda").transpose(1, 2).requires_grad_(True)
    cos, sin = tables(2, 16, 64, torch.float32)
    dq, dk = torch.randn(2, 8, 16, 64, device="cuda"), torch.randn(2, 2, 16, 64, device="cuda")
    for _ in range(2):
        torch.autograd.backward(tilegym_cutile_rs.rope(q, k, cos, sin), [dq, dk])
    q.grad = k.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = tilegym_cutile_rs.rope(q, k, cos, sin)
        torch.autograd.backward(outs, [dq, dk])
    with torch.no_grad():
        q.copy_(torch.randn_like(q))
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(outs, rp.reference(q, k, cos, sin), strict=True):
        torch.testing.assert_close(got, want, **TOL[torch.float32])
    # The inverse rotation of the incoming gradient.
    assert q.grad is not None
    want_dq, _ = rp.reference(dq, dk, cos, -sin)
    torch.testing.assert_close(q.grad, want_dq, **TOL[torch.float32])


def test_check_smoke_and_warmup() -> None:
    assert "rope" in rp.OP.smoke(torch.device("cuda"))
    [record] = tilegym_cutile_rs.warmup([(1, 8, 16, 128)], ["bfloat16"], ops=["rope"])
    assert record["op"] == "rope"
