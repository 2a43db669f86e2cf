"""softmax on the GPU against torch.softmax: TileGym's shapes and tolerances,
long rows, many rows, any rank and dim, strided inputs, streams and graphs."""

from __future__ import annotations

import pytest
import tilegym_cutile_rs
import torch
from tilegym_cutile_rs import _abi, _cache, _device, _library, _op
from tilegym_cutile_rs.ops import softmax as softmax_module
from tilegym_cutile_rs.ops.softmax import SoftmaxConfig, softmax_config

pytestmark = pytest.mark.gpu

# The op's declared tolerances (TileGym's), by dtype.
TOL = {getattr(torch, name): tol._asdict() for name, tol in softmax_module.TOLERANCES.items()}
DTYPES = list(TOL)


def reference(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.softmax(x.float(), dim=dim).to(x.dtype)


def check(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    y = tilegym_cutile_rs.softmax(x, dim=dim)
    ref = reference(x, dim)
    assert y.dtype == x.dtype and y.shape == x.shape and y.device == x.device
    assert y.is_contiguous() and y.stride() == ref.contiguous().stride()
    torch.testing.assert_close(y, ref, **TOL[x.dtype])
    return y


TILEGYM_CASES = [(256, 256), (256, 2048), (256, 32768), (256, 9), (256, 1009)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m, n", TILEGYM_CASES)
def test_tilegym_shapes(m: int, n: int, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    check(torch.randn(m, n, device="cuda", dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 2, 3, 100, 4097, 8193, 16385, 65535, 65536, 131072, 262144])
def test_row_lengths(n: int, dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    check(torch.randn(3, n, device="cuda", dtype=dtype) * 4)


@pytest.mark.parametrize("m", [1, 7, 100000])
def test_row_counts_cover_every_row(m: int) -> None:
    x = torch.randn(m, 384, device="cuda")
    y = check(x)
    # Every row was written: each sums to one.
    torch.testing.assert_close(y.sum(-1), torch.ones(m, device="cuda"))


@pytest.mark.parametrize("shape, dim", [((4, 5, 300), -1), ((2, 3, 4, 1000), -1), ((2, 3, 4, 1000), 1), ((6, 70), 0), ((8,), 0)])
def test_any_rank_and_dim(shape: tuple[int, ...], dim: int) -> None:
    check(torch.randn(*shape, device="cuda"), dim)


def test_non_contiguous_inputs() -> None:
    base = torch.randn(64, 2048, device="cuda", dtype=torch.float16)
    check(base[:, 100:1300])  # strided rows, kernel reads in place
    check(base[::3])  # every third row
    check(base[:, 8:1032])  # power-of-two rows (the exact kernels) at a strided, offset start
    wide = torch.randn(3, 65544, device="cuda", dtype=torch.bfloat16)
    check(wide[:, 8:32776])  # whole loop tiles of strided rows
    check(torch.randn(3, 70000, device="cuda")[:, :65536])
    check(base.t())  # transposed: copied to a contiguous layout first
    check(base.t(), dim=0)


def plan_for(x: torch.Tensor, dim: int = -1) -> _op.Plan | None:
    return softmax_module.plans.get((x.shape, x.stride(), x.dtype, x.get_device(), dim))


def test_repeated_calls_take_each_call_s_data() -> None:
    # The first call of a shape makes this thread's plan and records its launch;
    # later calls only swap pointers, in Python and in the replayed launch.
    base = torch.randn(3, 64, 2048, device="cuda", dtype=torch.bfloat16)
    long_rows = torch.randn(3, 5, 40000, device="cuda")  # the row-loop kernel
    before = _cache.stats()["replays"]
    for i in range(3):
        check(base[i])
        check(base[i, :, 100:1300])  # strided rows at an offset pointer
        check(base[i].view(8, 8, 2048))
        check(long_rows[i])
    # Every call but the first of each launch key (the 8x8x2048 view shares base[i]'s; the
    # long_rows[i] differ in pointer by multiples of 256 bytes, all 16-byte aligned).
    assert _cache.stats()["replays"] - before >= 12 - 3
    assert plan_for(base[0]) is not None and plan_for(base[0, :, 100:1300]) is not None
    assert plan_for(base[0].t()) is None  # a copied input never gets a plan
    check(base[0].t())
    assert plan_for(base[0].t()) is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_two_byte_rows_that_are_not_whole_vectors(dtype: torch.dtype) -> None:
    # N or the row stride not a multiple of 8 elements: the gather kernel (kernel.rs).
    for m, n in [(256, 1009), (7, 9), (1001, 1001), (5, 8191), (33, 4095), (3, 1)]:
        check(torch.randn(m, n, device="cuda", dtype=dtype))
    wide = torch.randn(50, 1031, device="cuda", dtype=dtype)
    check(wide[:, :1024])  # whole-vector length, odd row stride
    check(wide[:, 3:1000])  # odd length at an odd offset
    x = torch.randn(9, 777, device="cuda", dtype=dtype)
    x[0, :] = float("-inf")
    x[0, 5] = 1.0  # one finite value in a row of -inf
    x[1] *= 300
    assert check(x)[0, 5] == 1.0
    # Rows in blocks of 16, the last block partial: every row is written.
    y = tilegym_cutile_rs.softmax(torch.randn(1000, 63, device="cuda", dtype=dtype), config=(16, 64))
    torch.testing.assert_close(y.float().sum(-1), torch.ones(1000, device="cuda"), rtol=0, atol=2e-2)
    before = _cache.stats()["replays"]
    for rows in [torch.randn(300, 1009, device="cuda", dtype=dtype) for _ in range(4)]:  # one launch key
        check(rows)
    assert _cache.stats()["replays"] - before >= 3
    # Longer than one tile: the loop gather kernel, heuristic and explicit configs.
    for m, n in [(3, 50257), (2, 65535), (4, 8193)]:
        check(torch.randn(m, n, device="cuda", dtype=dtype))
    long = torch.randn(6, 20011, device="cuda", dtype=dtype)
    check(long[:, 5:20000])  # odd length at an odd offset
    x = torch.randn(37, 3001, device="cuda", dtype=dtype)
    x[0, :] = float("-inf")
    x[0, 2999] = 2.0  # the one finite value in the last, partial tile
    x[1, :1024] = float("-inf")  # a whole tile of -inf
    for config in [(1, 1024, 0, 0), (4, 512, 2, 8)]:
        y = tilegym_cutile_rs.softmax(x, config=config)
        torch.testing.assert_close(y, reference(x), **TOL[dtype])
        assert y[0, 2999] == 1.0


def test_plans_are_per_thread() -> None:
    import threading

    xs = [torch.randn(33, 777, device="cuda") + i for i in range(4)]
    errors: list[BaseException] = []

    def work(x: torch.Tensor) -> None:
        try:
            for _ in range(50):
                check(x)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(x,)) for x in xs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert plan_for(xs[0]) is None  # made on the worker threads, not here


def test_a_tuned_decision_replaces_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(41, 1501, device="cuda")
    check(x)
    check(x)
    heuristic = plan_for(x)
    assert heuristic is not None and heuristic.args == softmax_config(41, 1501, torch.float32)
    tuned = SoftmaxConfig(2, 2048, 1, 8)
    monkeypatch.setattr(softmax_module.chooser, "_decide", lambda *args: (tuned, True))
    torch.testing.assert_close(tilegym_cutile_rs.softmax(x, autotune=True), reference(x), **TOL[torch.float32])
    check(x)
    check(x)
    assert plan_for(x).args == tuned


def test_extreme_values() -> None:
    x = torch.randn(16, 5000, device="cuda")
    x[0, :] = float("-inf")
    x[0, 7] = 3.0  # a single finite value in a row of -inf
    x[1, :4096] = float("-inf")  # first whole tile -inf, the rest finite
    x[2] *= 1e4
    y = check(x[:3])
    assert y[0, 7] == 1.0


def test_probabilities_below_the_float32_normals_are_within_tiny() -> None:
    # exp2 flushes subnormal results to zero (kernel.rs): e^-88 and e^-100 come out 0
    # or subnormal, never more than float32's smallest normal away; e^-80 stays normal.
    row = [0.0, -80.0, -88.0, -100.0, -1e4, -5.0, -20.0, -87.0]
    for n in (5, 8):  # the bounds-checked kernel and the exact one
        x = torch.tensor([row[:n]] * 3, device="cuda")
        y = tilegym_cutile_rs.softmax(x)
        ref = torch.softmax(x.double(), -1).float()
        torch.testing.assert_close(y, ref, rtol=1e-5, atol=torch.finfo(torch.float32).tiny)
        assert bool((y[:, 1] > 0).all())


def test_empty_and_scalar() -> None:
    for shape in [(0, 16), (16, 0), (2, 0, 3)]:
        y = tilegym_cutile_rs.softmax(torch.empty(shape, device="cuda"))
        assert y.shape == shape
    check(torch.tensor(2.5, device="cuda"), 0)


def test_non_default_stream() -> None:
    x = torch.randn(4096, 1024, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x2 = x * 2  # ordered on s
        y = tilegym_cutile_rs.softmax(x2)
    s.synchronize()
    torch.testing.assert_close(y, torch.softmax(x * 2, -1), **TOL[torch.float32])


GRAPH_SCRIPT = """
import torch, tilegym_cutile_rs
from tilegym_cutile_rs import _cache
static_x = torch.randn(512, 3000, device="cuda")
tilegym_cutile_rs.softmax(static_x)  # compile outside capture
torch.cuda.synchronize()
replays = _cache.stats()["replays"]
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    static_y = tilegym_cutile_rs.softmax(static_x)
# The captured launch is the recorded one, replayed straight to cuLaunchKernel (crates/ops/src/replay.rs).
assert _cache.stats()["replays"] == replays + 1, (replays, _cache.stats())
for _ in range(3):
    static_x.copy_(torch.randn_like(static_x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(static_y, torch.softmax(static_x, -1), rtol=1e-5, atol=1e-7)
print("replayed")
"""


def test_cuda_graph_capture_and_replay() -> None:
    # In a fresh process: a failed capture leaves torch's CUDA state unusable.
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", GRAPH_SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "replayed" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize(
    "config", [(1, 64), (2, 128), (4, 1024), (1, 8192), (2, 4096, 2), (1, 1024, 1), (1, 4096, 0, 8), (2, 1024, 4, 8)]
)
def test_explicit_configs_agree(config: tuple[int, ...]) -> None:
    x = torch.randn(37, 3333, device="cuda", dtype=torch.bfloat16)
    y = tilegym_cutile_rs.softmax(x, config=config)
    torch.testing.assert_close(y, reference(x), **TOL[torch.bfloat16])


@pytest.mark.parametrize(
    "n, dtype, config",
    [
        (151936, torch.bfloat16, (1, 262144, 0, 8, 8)),  # one tile per row over 8 CTAs, the last one's part cut
        (128256, torch.float32, (1, 131072, 1, 8, 4)),
        (50257, torch.bfloat16, (1, 65536, 0, 8, 4)),  # a gathered row (not whole 16-byte vectors)
        (32768, torch.float16, (1, 32768, 0, 0, 2)),  # a power-of-two row: the exact kernel
        (40000, torch.float32, (1, 32768, 0, 8, 2)),  # longer than the tile: the row loop in a cluster
    ],
)
def test_row_tiles_shared_by_a_cluster_where_the_gpu_has_them(n: int, dtype: torch.dtype, config: tuple[int, ...]) -> None:
    x = torch.randn(19, n, device="cuda", dtype=dtype) * 4
    x[3, : n // 3] = -torch.inf  # a row's max and sum spread over the cluster's CTAs
    if torch.cuda.get_device_capability() < (9, 0):  # no clusters: the toolchain's refusal is an exception, not a crash
        with pytest.raises(tilegym_cutile_rs.CutileError):
            tilegym_cutile_rs.softmax(x, config=config)
        return
    torch.testing.assert_close(tilegym_cutile_rs.softmax(x, config=config), reference(x), **TOL[dtype])


def test_warps_the_toolchain_refuses_are_an_error_not_a_crash() -> None:
    # Tile IR 13.4 takes 4 or 8 worker warps; the library accepts Tile IR's wider domain.
    from tilegym_cutile_rs import _toolchain
    from tilegym_cutile_rs.errors import CutileError

    x = torch.randn(4, 256, device="cuda")
    if _toolchain.configure().release < (13, 5):
        with pytest.raises(ValueError, match="4 or 8 worker warps"):
            tilegym_cutile_rs.softmax(x, config=(1, 256, 0, 16))
        # Past the Python check, cutile refuses the hint in a compile error, not a crash.
        status = _library.library().cutile_softmax(
            _abi.tensor_desc(x), _abi.tensor_desc(torch.empty_like(x)), 1, 256, 0, 16, 0, 0, _device.current_stream(0)
        )
        with pytest.raises(CutileError, match="num_worker_warps_per_cta"):
            _abi.check_status(status, "softmax")
    else:
        torch.testing.assert_close(tilegym_cutile_rs.softmax(x, config=(1, 256, 0, 16)), reference(x), **TOL[x.dtype])
    check(x)  # the failed variant leaves nothing behind


@pytest.mark.parametrize(
    "make, exc",
    [
        (lambda: torch.randint(0, 5, (4, 8), device="cuda"), TypeError),
        (lambda: torch.randn(4, 8, device="cuda", dtype=torch.float64), TypeError),
    ],
)
def test_bad_dtypes_on_gpu(make, exc) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match="float32, float16, bfloat16"):
        tilegym_cutile_rs.softmax(make())


def test_dim_out_of_range() -> None:
    x = torch.randn(4, 8, device="cuda")
    with pytest.raises(IndexError, match="out of range"):
        tilegym_cutile_rs.softmax(x, dim=2)
    with pytest.raises(TypeError, match="dim must be an int"):
        tilegym_cutile_rs.softmax(x, dim=1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim", [-1, 0])
def test_gradient_matches_torch(dtype: torch.dtype, dim: int) -> None:
    x = (torch.randn(33, 1500, device="cuda") * 3).to(dtype).requires_grad_()
    g = torch.randn(33, 1500, device="cuda").to(dtype)
    (dx,) = torch.autograd.grad(tilegym_cutile_rs.softmax(x, dim=dim), x, g)
    # Reference in float64. dx = y * (g - sum(g * y)) cancels where g is close to the
    # sum, so a relative tolerance does not fit; the bound is the error an output y
    # rounded to the dtype (and dx rounded again) can carry, elementwise; a wrong
    # backward exceeds it by orders of magnitude in float32.
    x64, g64 = x.detach().double(), g.double()
    y64 = torch.softmax(x64, dim=dim)
    ref = y64 * (g64 - (g64 * y64).sum(dim, keepdim=True))
    info, spread = torch.finfo(dtype), g64.abs() + (g64.abs() * y64).sum(dim, keepdim=True)
    # 16 ulps of each term (the f32 sum over a row takes several); `tiny` covers subnormal y.
    bound = 16 * info.eps * (y64 * spread + ref.abs()) + info.tiny * spread
    err = (dx.double() - ref).abs()
    assert dx.dtype == dtype and dx.shape == x.shape
    assert bool((err <= bound).all()), f"worst error {float((err / bound).max()):.2f}x the bound"
