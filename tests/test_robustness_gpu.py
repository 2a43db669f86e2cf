"""On the GPU: the kernel cache across processes, warmup and autotuning, toolchain
faults (tileiras failing, hanging, missing) becoming exceptions the same process
recovers from, property tests against torch.softmax, and load from many threads
and processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import tilegym_cutile_rs
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tilegym_cutile_rs import _cache, _toolchain

from .conftest import make_standin_tileiras

pytestmark = pytest.mark.gpu

TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-7),
    torch.float16: dict(rtol=1e-3, atol=1e-5),
    torch.bfloat16: dict(rtol=1e-2, atol=1e-4),
}

# Prints the tileiras runs of this process and whether every result matched torch.
CHECKED_RUN = """
import json, sys, torch, tilegym_cutile_rs
from tilegym_cutile_rs import _cache
ok = True
for m, n, dt in json.loads(sys.argv[1]):
    x = torch.randn(m, n, device="cuda", dtype=getattr(torch, dt)) * 3
    y = tilegym_cutile_rs.softmax(x)
    ref = torch.softmax(x.float(), -1).to(x.dtype)
    ok &= bool(torch.allclose(y.float(), ref.float(), rtol=1e-2, atol=1e-4))
torch.cuda.synchronize()
print(json.dumps({"ok": ok, **_cache.stats()}))
"""
# Shapes outside the shipped set (shipped_launches proves it), so a first process compiles each.
SHAPES = [[61, 1009, "float32"], [3, 5003, "bfloat16"], [17, 40009, "float16"], [127, 251, "float32"]]


def shipped_launches(shapes: list[list]) -> int:
    """How many of the softmax launches of `shapes` find a kernel the wheel ships for this GPU."""
    from tilegym_cutile_rs import _describe, _device, _library, _ship_build, _shipped

    major, minor = torch.cuda.get_device_capability()
    _shipped.enable(_library.library(), jit=True)
    target = _describe.Target(f"sm_{major}{minor}", _device.sm_count(torch.cuda.current_device()))

    def calls() -> None:
        for m, n, dt in shapes:
            tilegym_cutile_rs.softmax(torch.empty(m, n, device="meta", dtype=getattr(torch, dt)))

    found, described = _ship_build.resolve(target, calls)
    assert described == len(shapes)
    return found


def run(code: str, env: dict[str, str], *args: str, timeout: float = 600) -> dict:
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return {**json.loads(p.stdout.strip().splitlines()[-1]), "stderr": p.stderr}


def cache_env(path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, _cache.DIR_ENV: str(path), **extra}


def test_second_process_compiles_nothing(tmp_path: Path) -> None:
    assert shipped_launches(SHAPES) == 0
    env = cache_env(tmp_path / "cache")
    first = run(CHECKED_RUN, env, json.dumps(SHAPES))
    assert first["ok"] and first["tileiras_runs"] >= len(SHAPES) and first["puts"] == first["tileiras_runs"]
    second = run(CHECKED_RUN, env, json.dumps(SHAPES))
    # Every kernel comes from the warm-start index: no tileiras, no lowering, no bytecode-keyed lookup.
    assert second["ok"] and second["tileiras_runs"] == 0
    assert (second["warm_starts"], second["hits"]) == (first["puts"], 0)


def test_a_corrupt_cache_is_recompiled_not_loaded(tmp_path: Path) -> None:
    env = cache_env(tmp_path / "cache")
    first = run(CHECKED_RUN, env, json.dumps(SHAPES))
    entries = _cache.entries(tmp_path / "cache")
    assert len(entries) == 2 * first["puts"]  # a cubin and a warm-start index entry per kernel
    for entry in entries:
        data = bytearray(entry.path.read_bytes())
        data[-1] ^= 0xFF
        entry.path.write_bytes(bytes(data))
    second = run(CHECKED_RUN, env, json.dumps(SHAPES))
    assert second["ok"] and second["warm_starts"] == 0 and second["tileiras_runs"] == first["tileiras_runs"]


def test_processes_sharing_one_cache_at_once(tmp_path: Path) -> None:
    env = cache_env(tmp_path / "cache")
    shapes = json.dumps(SHAPES)
    procs = [subprocess.Popen([sys.executable, "-c", CHECKED_RUN, shapes], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        assert json.loads(out.strip().splitlines()[-1])["ok"]
    kept = _cache.entries(tmp_path / "cache")
    assert kept and all(e.valid for e in kept)
    after = run(CHECKED_RUN, env, shapes)
    assert after["ok"] and after["tileiras_runs"] == 0


def test_warmup_then_no_compile_and_autotune_is_remembered(tmp_path: Path) -> None:
    env = cache_env(tmp_path / "cache")
    out = run(
        """
        import json, torch, tilegym_cutile_rs
        from tilegym_cutile_rs import _cache
        report = tilegym_cutile_rs.warmup([(64, 3000)], dtypes=["float32"], ops=["softmax"], autotune=True)
        before = _cache.stats()["tileiras_runs"]
        x = torch.randn(64, 3000, device="cuda")
        y = tilegym_cutile_rs.softmax(x)
        torch.testing.assert_close(y, torch.softmax(x, -1))
        print(json.dumps({"report": report, "extra_runs": _cache.stats()["tileiras_runs"] - before}))
        """,
        env,
    )
    [rec] = out["report"]
    assert rec["op"] == "softmax" and rec["tileiras_runs"] >= 2  # several candidates compiled
    assert out["extra_runs"] == 0
    decisions = json.loads((tmp_path / "cache" / _cache.AUTOTUNE_FILE).read_text())["decisions"]
    [(key, config)] = decisions.items()
    assert "float32" in key and "n<=4096" in key
    again = run(
        """
        import json, torch, tilegym_cutile_rs
        from tilegym_cutile_rs.ops import softmax as sm
        from tilegym_cutile_rs import _cache
        x = torch.randn(64, 3000, device="cuda")
        y = tilegym_cutile_rs.softmax(x)
        print(json.dumps({"config": list(sm._choose(x, 0, False)), "runs": _cache.stats()["tileiras_runs"]}))
        """,
        env,
    )
    assert again["config"] == config and again["runs"] == 0


def _real_tileiras() -> str:
    return str(_toolchain.configure().tileiras)


FAULT = """
import json, os, sys, torch, tilegym_cutile_rs
from tilegym_cutile_rs import ToolchainError
x = torch.randn(8, 777, device="cuda")
tilegym_cutile_rs.softmax(torch.randn(2, 2, device="cuda"))  # toolchain configured, cache on
real = os.environ["CUTILE_TILEIRAS_PATH"]
os.environ["CUTILE_TILEIRAS_PATH"] = os.environ["STANDIN"]
try:
    tilegym_cutile_rs.softmax(x)
    error = None
except ToolchainError as exc:
    error = str(exc)
os.environ["CUTILE_TILEIRAS_PATH"] = real
y = tilegym_cutile_rs.softmax(x)  # same thread, same process: launches again
recovered = bool(torch.allclose(y, torch.softmax(x, -1), rtol=1e-5, atol=1e-7))
print(json.dumps({"error": error, "recovered": recovered}))
"""


def test_tileiras_failure_is_a_toolchain_error_with_its_message(tmp_path: Path) -> None:
    standin = make_standin_tileiras(tmp_path, _real_tileiras(), fail="standin: bytecode rejected")
    out = run(FAULT, cache_env(tmp_path / "cache", STANDIN=str(standin)))
    assert "standin: bytecode rejected" in out["error"]
    assert out["recovered"]


def test_hung_tileiras_is_killed_after_the_timeout(tmp_path: Path) -> None:
    standin = make_standin_tileiras(tmp_path, _real_tileiras(), sleep=600)
    env = cache_env(tmp_path / "cache", STANDIN=str(standin), TILEGYM_CUTILE_RS_COMPILE_TIMEOUT="3")
    out = run(FAULT, env, timeout=120)
    assert "did not finish within 3 s and was killed" in out["error"]
    assert out["recovered"]


def test_slow_compile_is_logged(tmp_path: Path) -> None:
    standin = make_standin_tileiras(tmp_path, _real_tileiras(), sleep=2)
    out = run(
        """
        import json, logging, os, torch, tilegym_cutile_rs
        logging.basicConfig(level=logging.INFO)
        tilegym_cutile_rs.softmax(torch.randn(2, 2, device="cuda"))
        os.environ["CUTILE_TILEIRAS_PATH"] = os.environ["STANDIN"]
        tilegym_cutile_rs.softmax(torch.randn(8, 999, device="cuda"))
        print(json.dumps({}))
        """,
        cache_env(tmp_path / "cache", STANDIN=str(standin)),
    )
    assert "compiling a kernel with tileiras" in out["stderr"] and "(8, 999)" in out["stderr"]


def test_missing_tileiras_is_a_toolchain_error(tmp_path: Path) -> None:
    env = {k: v for k, v in cache_env(tmp_path / "cache").items() if k not in ("CUDA_HOME", "CUDA_TOOLKIT_PATH")}
    env["CUTILE_TILEIRAS_PATH"] = str(tmp_path / "no" / "tileiras")
    out = run(
        """
        import json, torch, tilegym_cutile_rs
        from tilegym_cutile_rs import _toolchain
        _toolchain._from_pip = lambda: None  # as on a machine without the [tileiras] extra
        try:
            tilegym_cutile_rs.softmax(torch.randn(2, 2, device="cuda"))
            print(json.dumps({"error": None}))
        except tilegym_cutile_rs.ToolchainError as exc:
            print(json.dumps({"error": str(exc)}))
        """,
        env,
    )
    assert "does not exist" in out["error"] and "pip install 'tilegym-cutile-rs[tileiras]'" in out["error"]


@st.composite
def tensors(draw):  # type: ignore[no-untyped-def]
    dtype = draw(st.sampled_from(list(TOL)))
    ndim = draw(st.integers(1, 4))
    budget = 1 << 21
    shape = []
    for _ in range(ndim):
        size = draw(st.integers(1, max(1, min(70000, budget))))
        budget //= size
        shape.append(size)
    dim = draw(st.integers(-ndim, ndim - 1))
    layout = draw(st.sampled_from(["contiguous", "transposed", "strided"]))
    scale = draw(st.sampled_from([1.0, 10.0, 100.0]))
    return dtype, shape, dim, layout, scale


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(tensors())
def test_property_matches_torch(case) -> None:  # type: ignore[no-untyped-def]
    dtype, shape, dim, layout, scale = case
    x = (torch.randn(*shape, device="cuda") * scale).to(dtype)
    if layout == "transposed" and x.dim() >= 2:
        x = x.transpose(0, -1)
    elif layout == "strided":
        x = torch.randn(*shape[:-1], shape[-1] * 2, device="cuda").to(dtype)[..., ::2] * scale
    y = tilegym_cutile_rs.softmax(x, dim=dim)
    ref = torch.softmax(x.float(), dim=dim).to(dtype)
    assert y.shape == x.shape and y.dtype == dtype and y.is_contiguous()
    torch.testing.assert_close(y, ref, **TOL[dtype])


def test_eight_threads_thousand_calls_each() -> None:
    shapes = [(1, 256, torch.float32), (64, 1000, torch.float32), (7, 9000, torch.bfloat16),
              (256, 1009, torch.float16), (3, 70000, torch.float32), (512, 64, torch.bfloat16)]
    inputs = [(torch.randn(m, n, device="cuda") * 4).to(dt) for m, n, dt in shapes]
    refs = [torch.softmax(x.float(), -1).to(x.dtype) for x in inputs]
    for x in inputs:
        tilegym_cutile_rs.softmax(x)  # compile once, outside the timed storm
    torch.cuda.synchronize()
    wrong: list[str] = []
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            stream = torch.cuda.Stream()  # each thread on its own stream, as a serving process would be
            pending = []
            with torch.cuda.stream(stream):
                for i in range(1000):
                    k = (seed * 7 + i) % len(inputs)
                    pending.append((i, k, tilegym_cutile_rs.softmax(inputs[k])))
                    if len(pending) == 20 or i == 999:  # every result is checked, 20 in flight at a time
                        stream.synchronize()
                        for j, kk, y in pending:
                            if not torch.allclose(y.float(), refs[kk].float(), **TOL[y.dtype]):
                                wrong.append(f"thread {seed} call {j} shape {tuple(y.shape)}")
                        pending.clear()
        except BaseException as exc:  # noqa: BLE001 - collected, reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and wrong == []
