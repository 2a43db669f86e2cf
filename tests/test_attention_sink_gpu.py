"""attention_sink on the GPU against the float32 eager reference with TileGym's tolerances
(atol 5e-2, rtol 1e-2): TileGym's grid, prefill, decode (split-KV), head dim 128, windows,
fully masked rows, start_q as a device tensor, explicit configs, graphs and bad input."""

from __future__ import annotations

import math

import pytest
import tilegym_cutile_rs
import torch
from tilegym_cutile_rs.ops.attention_sink import AttentionSinkConfig, reference

pytestmark = pytest.mark.gpu

TOL = dict(atol=5e-2, rtol=1e-2)


def inputs(b: int, s_q: int, s_kv: int, h_kv: int = 8, group: int = 8, d: int = 64, dtype: torch.dtype = torch.bfloat16):  # type: ignore[no-untyped-def]
    q = torch.randn(b, s_q, h_kv, group, d, device="cuda", dtype=dtype)
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dtype)
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dtype)
    sinks = torch.randn(h_kv * group, device="cuda", dtype=dtype)
    return q, k, v, sinks


# TileGym's test grid (it leaves out S_q > S_kv; test_queries_past_the_cache covers queries past the keys).
GRID = [
    (batch, s_q, s_kv, window, start_q)
    for batch in (1, 2)
    for s_q in (1, 128)
    for s_kv in (128, 32)
    for window in (None, 128)
    for start_q in (0, 5)
    if s_q <= s_kv
]


@pytest.mark.parametrize("batch, s_q, s_kv, window, start_q", GRID)
def test_tilegym_grid(batch: int, s_q: int, s_kv: int, window: int | None, start_q: int) -> None:
    torch.manual_seed(0)
    q, k, v, sinks = inputs(batch, s_q, s_kv)
    start = torch.tensor([start_q], dtype=torch.int32, device="cuda")  # as TileGym passes it
    out = tilegym_cutile_rs.attention_sink(q, k, v, sinks, 0.125, window, start)
    assert out.shape == (batch, s_q, 8 * 8 * 64) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out, reference(q, k, v, sinks, 0.125, window, start_q), **TOL)


@pytest.mark.parametrize(
    "b, s_q, s_kv, group, d, window, dtype",
    [
        (1, 4096, 4096, 8, 64, None, torch.bfloat16),  # prefill
        (1, 4096, 4096, 8, 64, 128, torch.float16),
        (1, 10820, 10820, 8, 64, 128, torch.bfloat16),  # TileGym's prefill perf shape
        (1, 1, 10919, 8, 64, None, torch.bfloat16),  # decode: split-KV
        (2, 1, 5000, 8, 128, None, torch.float16),
        (2, 128, 2048, 8, 128, None, torch.bfloat16),  # head dim 128
        (3, 77, 300, 6, 64, 50, torch.bfloat16),  # a group that is not a power of two
        (1, 33, 33, 1, 32, 1, torch.float16),  # MHA, a window of one: each query sees itself
        (2, 100, 260, 4, 64, 1000, torch.bfloat16),  # a window wider than S_kv
    ],
)
def test_prefill_decode_head_dims_and_windows(b: int, s_q: int, s_kv: int, group: int, d: int, window: int | None, dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    q, k, v, sinks = inputs(b, s_q, s_kv, 8 if group > 1 else 4, group, d, dtype)
    start = s_kv - s_q
    out = tilegym_cutile_rs.attention_sink(q, k, v, sinks, d**-0.5, window, start)
    torch.testing.assert_close(out, reference(q, k, v, sinks, d**-0.5, window, start), **TOL)


def test_queries_past_the_cache_and_fully_masked_rows_are_zero() -> None:
    # start_q = S_kv: positions S_kv.. see every key (causal), but a window of 4 reaches
    # back only to positions above S_kv - 4 + i: rows past S_kv + 3 see no key at all.
    torch.manual_seed(2)
    q, k, v, sinks = inputs(1, 16, 40, 2, 4)
    out = tilegym_cutile_rs.attention_sink(q, k, v, sinks, 0.125, 4, 40)
    ref = reference(q, k, v, sinks, 0.125, 4, 40)
    torch.testing.assert_close(out, ref, **TOL)
    assert out[:, 4:].abs().max().item() == 0.0  # the sink takes all the weight
    assert out[:, :3].abs().max().item() > 0.0


def test_every_split_count_and_tile_agrees() -> None:
    torch.manual_seed(3)
    q, k, v, sinks = inputs(1, 3, 3000, 2, 8)
    ref = reference(q, k, v, sinks, 0.1, None, 2997)
    for config in [(2, 8, 64, 1), (2, 8, 64, 7), (2, 8, 32, 40), (4, 4, 128, 3), (16, 1, 64, 2), (2, 8, 64, 200), (4, 8, 64, 5),
                   (2, 8, 64, 7, 0, 0, 4), (8, 8, 128, 1, 1, 8, 6)]:  # K/V loads with latency hints
        out = tilegym_cutile_rs.attention_sink(q, k, v, sinks, 0.1, None, 2997, config=AttentionSinkConfig(*config))
        torch.testing.assert_close(out, ref, **TOL, msg=lambda m, c=config: f"config {c}: {m}")


def test_split_partials_of_each_batch_combine_apart() -> None:
    """The combine reads one head's partials of one batch element a chunk of splits at a time
    (rows split * B + b; 16 splits a chunk at D 64): several batch elements, split counts below,
    at and past a chunk, heads of a second tile (heads_per_tile 4 of group 8), and decode's S_q = 1."""
    torch.manual_seed(6)
    for s_q, start in ((3, 2997), (1, 2999)):
        q, k, v, sinks = inputs(3, s_q, 3000, 2, 8)
        ref = reference(q, k, v, sinks, 0.1, None, start)
        for config in [(2, 8, 64, 3), (2, 8, 64, 16), (2, 8, 64, 17), (4, 4, 64, 9), (2, 8, 32, 66), (4, 8, 64, 130)]:
            out = tilegym_cutile_rs.attention_sink(q, k, v, sinks, 0.1, None, start, config=AttentionSinkConfig(*config))
            torch.testing.assert_close(out, ref, **TOL, msg=lambda m, c=config, s=s_q: f"S_q {s}, config {c}: {m}")


def test_start_q_tensor_int64_and_cpu_forms_agree() -> None:
    torch.manual_seed(4)
    q, k, v, sinks = inputs(2, 8, 64, 2, 2)
    ref = reference(q, k, v, sinks, 0.125, 16, 56)
    for start in (56, torch.tensor(56), torch.tensor([56], device="cuda"), torch.tensor([56], dtype=torch.int32, device="cuda")):
        torch.testing.assert_close(tilegym_cutile_rs.attention_sink(q, k, v, sinks, 0.125, 16, start), ref, **TOL)


def test_float32_sinks_and_strided_inputs() -> None:
    torch.manual_seed(5)
    q, k, v, sinks = inputs(2, 20, 50, 2, 4)
    k_wide = torch.randn(2, 50, 2, 128, device="cuda", dtype=torch.bfloat16)[..., :64]  # rows 128 apart
    k_wide.copy_(k)
    ref = reference(q, k, v, sinks.float(), 0.2, None, 30)
    torch.testing.assert_close(tilegym_cutile_rs.attention_sink(q, k_wide, v, sinks.float(), 0.2, None, 30), ref, **TOL)
    q_t = q.transpose(0, 1).contiguous().transpose(0, 1)  # batch not outermost in memory
    torch.testing.assert_close(tilegym_cutile_rs.attention_sink(q_t, k, v, sinks, 0.2, None, 30), reference(q, k, v, sinks, 0.2, None, 30), **TOL)


def test_repeated_calls_take_each_call_s_data_and_start() -> None:
    torch.manual_seed(6)
    shapes = [inputs(1, 1, 4000, 8, 8) for _ in range(3)]  # decode: the split path's plan
    for step, (q, k, v, sinks) in enumerate(shapes * 2):
        start = torch.tensor([3999 - step], dtype=torch.int32, device="cuda")
        out = tilegym_cutile_rs.attention_sink(q, k, v, sinks, 0.125, None, start)
        torch.testing.assert_close(out, reference(q, k, v, sinks, 0.125, None, 3999 - step), **TOL)
    q, k, v, sinks = inputs(2, 64, 64, 2, 4)
    for start in (0, 10, 0):  # the one-pass path's plan, an int start_q each time
        torch.testing.assert_close(tilegym_cutile_rs.attention_sink(q, k, v, sinks, 0.125, 8, start), reference(q, k, v, sinks, 0.125, 8, start), **TOL)


def test_cuda_graph_capture_and_replay() -> None:
    torch.manual_seed(7)
    q, k, v, sinks = inputs(1, 1, 2048, 8, 8)
    start = torch.tensor([2047], dtype=torch.int32, device="cuda")
    tilegym_cutile_rs.attention_sink(q, k, v, sinks, 0.125, None, start)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = tilegym_cutile_rs.attention_sink(q, k, v, sinks, 0.125, None, start)
    for step in range(3):
        q.copy_(torch.randn_like(q))
        start.fill_(2047 - 100 * step)
        graph.replay()
        torch.testing.assert_close(out, reference(q, k, v, sinks, 0.125, None, 2047 - 100 * step), **TOL)


def test_bad_input_on_the_gpu() -> None:
    q, k, v, sinks = inputs(1, 4, 8, 2, 2)
    cases = [
        (lambda: tilegym_cutile_rs.attention_sink(q.float(), k, v, sinks), TypeError, "float16 and bfloat16"),
        (lambda: tilegym_cutile_rs.attention_sink(q, k.half(), v, sinks), TypeError, "key dtype"),
        (lambda: tilegym_cutile_rs.attention_sink(q[..., :48], k[..., :48], v[..., :48], sinks), ValueError, "power of two"),
        (lambda: tilegym_cutile_rs.attention_sink(q, k[:, :, :1], v[:, :, :1], sinks), ValueError, "H_kv=2"),
        (lambda: tilegym_cutile_rs.attention_sink(q, k, v, sinks[:3]), ValueError, r"\(4,\)"),
        (lambda: tilegym_cutile_rs.attention_sink(q[0], k, v, sinks), ValueError, "5 dims|\\(B, S_q"),
        (lambda: tilegym_cutile_rs.attention_sink(q, k, v, sinks, start_q=-1), ValueError, "start_q = -1"),
        (lambda: tilegym_cutile_rs.attention_sink(q, k, v, sinks, start_q=9), ValueError, "start_q = 9"),
        (lambda: tilegym_cutile_rs.attention_sink(q, k, v, sinks, start_q=torch.tensor([1.5])), ValueError, "integer"),
        (lambda: tilegym_cutile_rs.attention_sink(q, k, v, sinks, sliding_window=-2), ValueError, "sliding_window"),
        (lambda: tilegym_cutile_rs.attention_sink(q, k[:, :0], v[:, :0], sinks), ValueError, "S_kv = 0"),
        (lambda: tilegym_cutile_rs.attention_sink(q, k, v, sinks, config=(3, 2, 64)), Exception, "block_q"),
        (lambda: tilegym_cutile_rs.attention_sink(q, k, v, sinks, config=(8, 4, 64)), Exception, "dividing group"),
    ]
    for call, exc, fragment in cases:
        with pytest.raises(exc, match=fragment):
            call()
    q.requires_grad_(True)
    with pytest.raises(ValueError, match="takes its own tiles"):
        tilegym_cutile_rs.attention_sink(q, k, v, sinks, config=(8, 2, 64))
    with torch.no_grad():
        assert tilegym_cutile_rs.attention_sink(q, k, v, sinks).shape == (1, 4, 2 * 2 * 64)


def test_empty_batch_and_queries() -> None:
    q, k, v, sinks = inputs(0, 4, 8, 2, 2)
    assert tilegym_cutile_rs.attention_sink(q, k, v, sinks).shape == (0, 4, 256)
    q, k, v, sinks = inputs(2, 0, 8, 2, 2)
    assert tilegym_cutile_rs.attention_sink(q, k, v, sinks).shape == (2, 0, 256)


def test_tilegym_registration_and_check_smoke() -> None:
    from tilegym_cutile_rs import tilegym_backend

    assert "attention_sink" in tilegym_backend.provided_ops()
    from tilegym_cutile_rs import _registry

    assert "attention_sink max abs error" in _registry.ops()["attention_sink"].smoke(torch.device("cuda"))
    [record] = tilegym_cutile_rs.warmup([(1, 1, 1024, 8, 8, 64)], ["bfloat16"], ops=["attention_sink"])
    assert record["op"] == "attention_sink" and record["config"].splits > 1


@pytest.mark.parametrize("s_q, s_kv, causal", [(37, 37, True), (16, 300, True), (33, 70, False), (1, 4096, False)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_tilegym_fmha_and_fmha_decode_match_sdpa(s_q: int, s_kv: int, causal: bool, dtype: torch.dtype) -> None:
    import torch.nn.functional as F
    from tilegym_cutile_rs.ops import attention_sink as at

    torch.manual_seed(5)
    # transformers' layout: [B, S, H, D] projections seen as [B, H, S, D]; 32 q heads over 8 kv heads.
    q = torch.randn(2, s_q, 32, 128, device="cuda", dtype=dtype).transpose(1, 2)
    k = torch.randn(2, s_kv, 8, 128, device="cuda", dtype=dtype).transpose(1, 2)
    v = torch.randn(2, s_kv, 8, 128, device="cuda", dtype=dtype).transpose(1, 2)
    if s_q == 1:
        got = at._tilegym_fmha_decode(q, k, v, 0.1)
    else:
        got = at._tilegym_fmha(q, k, v, 0.1, is_causal=causal)
    kf, vf = k.float().repeat_interleave(4, 1), v.float().repeat_interleave(4, 1)
    mask = None
    if causal:  # bottom-right: query i sits at position s_kv - s_q + i
        mask = torch.ones(s_q, s_kv, dtype=torch.bool, device="cuda").tril(s_kv - s_q)
    want = F.scaled_dot_product_attention(q.float(), kf, vf, attn_mask=mask, scale=0.1)
    assert got.shape == q.shape and got.dtype == dtype
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)


def _reference_grads(q, k, v, sinks, sm_scale, window, start_q, dout):  # type: ignore[no-untyped-def]
    leaves = [t.detach().float().requires_grad_(True) for t in (q, k, v, sinks)]
    ref = at_reference(*leaves, sm_scale, window, start_q)
    torch.autograd.backward([ref], [dout.float()])
    return ref.detach(), [t.grad for t in leaves]


def at_reference(q, k, v, sinks, sm_scale, window, start_q):  # type: ignore[no-untyped-def]
    """The float32 reference, differentiable (the op's own reference runs under no_grad)."""
    b, s_q, h_kv, group, d = q.shape
    s_kv = k.shape[1]
    logits = torch.einsum("bqhgd,bkhd->bhgqk", q, k) * sm_scale
    pos_q = torch.arange(s_q, device=q.device)[:, None] + start_q
    pos_k = torch.arange(s_kv, device=q.device)[None, :]
    hidden = pos_k > pos_q
    if window:
        hidden = hidden | (pos_k < pos_q - window + 1)
    logits = logits.masked_fill(hidden, float("-inf"))
    sink = sinks.view(1, h_kv, group, 1, 1).expand(b, h_kv, group, s_q, 1)
    weights = torch.softmax(torch.cat([logits, sink], dim=-1), dim=-1)[..., :-1]
    out = torch.einsum("bhgqk,bkhd->bqhgd", weights, v)
    return out.reshape(b, s_q, h_kv * group * d)


@pytest.mark.parametrize(
    "b, s_q, s_kv, h_kv, group, d, window, start",
    [
        (2, 128, 128, 2, 4, 128, None, 0),  # Llama-style prefill
        (1, 77, 77, 2, 8, 64, 32, 0),  # GPT-OSS-style sliding window, ragged length
        (1, 50, 130, 1, 2, 64, None, 80),  # a chunk after a cached prefix
        (2, 33, 33, 4, 1, 128, None, 0),  # no grouping
    ],
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_gradients_match_the_float32_reference(b, s_q, s_kv, h_kv, group, d, window, start, dtype) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(11)
    q = torch.randn(b, s_q, h_kv, group, d, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dtype, requires_grad=True)
    sinks = torch.randn(h_kv * group, device="cuda", dtype=torch.float32, requires_grad=True)
    sm_scale = 1 / math.sqrt(d)
    dout = torch.randn(b, s_q, h_kv * group * d, device="cuda", dtype=dtype)
    out = tilegym_cutile_rs.attention_sink(q, k, v, sinks, sm_scale, window, start)
    torch.autograd.backward([out], [dout])
    ref, ref_grads = _reference_grads(q, k, v, sinks, sm_scale, window, start, dout)
    torch.testing.assert_close(out.float(), ref, rtol=0, atol=5e-2)
    for name, got, want in zip(("dq", "dk", "dv", "dsinks"), (q.grad, k.grad, v.grad, sinks.grad), ref_grads, strict=True):
        assert got is not None and got.shape == want.shape, name
        # bfloat16 operands of every matmul (as FlashAttention's backward): error relative to the largest gradient
        err = (got.float() - want).abs().max() / want.abs().max().clamp_min(1e-6)
        assert err < (3e-2 if dtype == torch.bfloat16 else 1e-2), (name, float(err))


def test_tilegym_fmha_trains_like_sdpa() -> None:
    import torch.nn.functional as F
    from tilegym_cutile_rs.ops import attention_sink as at

    torch.manual_seed(3)
    shape = [(1, 96, 32, 128), (1, 96, 8, 128), (1, 96, 8, 128)]  # transformers' [B, S, H, D] seen as [B, H, S, D]
    leaves = [torch.randn(*s, device="cuda", dtype=torch.bfloat16, requires_grad=True) for s in shape]
    q, k, v = (t.transpose(1, 2) for t in leaves)
    out = at._tilegym_fmha(q, k, v, None, True, has_backward=False)
    dout = torch.randn_like(out)
    torch.autograd.backward([out], [dout])
    ref_leaves = [t.detach().float().requires_grad_(True) for t in leaves]
    rq, rk, rv = (t.transpose(1, 2) for t in ref_leaves)
    ref = F.scaled_dot_product_attention(rq, rk.repeat_interleave(4, 1), rv.repeat_interleave(4, 1), is_causal=True)
    torch.autograd.backward([ref], [dout.float()])
    for got, want in zip(leaves, ref_leaves, strict=True):
        err = (got.grad.float() - want.grad).abs().max() / want.grad.abs().max()
        assert err < 3e-2, float(err)
