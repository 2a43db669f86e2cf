"""TileGym integration: tilegym_cutile_rs.tilegym_backend.register() makes
`tilegym.set_backend("cutile-rs")` route softmax to our prebuilt kernel.

The CPU tests run in fresh interpreters with no cargo on PATH (as on a user's
machine), so TileGym's own cutile-rs availability probe says no and only our
registration can make the backend available. Where TileGym 1.5.1 finds nvcc >=
13.3 (the [tileiras] extra's nvcc on PATH, as in scripts/test.sh) it imports its
tilecpp backend, which asks torch for the GPU's compute capability and raises on
a machine without a driver; these subprocesses answer that one query as an H200
would (9, 0), so the registration wiring is tested without a GPU either way.
test_register_without_a_gpu_says_why covers the unpatched case."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import HAS_GPU

if importlib.util.find_spec("tilegym") is None:
    pytest.skip("TileGym is installed by the [tilegym] extra (scripts/test.sh does)", allow_module_level=True)

# TileGym's own softmax parametrization and tolerances (../shared/BRIEF.md).
TILEGYM_CASES = [
    (256, 256, "float32"), (256, 2048, "float32"), (256, 32768, "float32"), (256, 256, "float16"),
    (256, 2048, "float16"), (256, 9, "float32"), (256, 1009, "float16"),
]
TOLERANCES = {"float16": (1e-3, 1e-5), "float32": (1e-5, 1e-7)}


def no_cargo_env(tmp_path: Path) -> dict[str, str]:
    """PATH without cargo or rustc: the interpreter's bin dir and /usr/bin-style dirs holding neither."""
    keep = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not (Path(d) / "cargo").exists() and not (Path(d) / "rustc").exists()]
    env = {**os.environ, "PATH": os.pathsep.join(keep)}
    env.pop("CUTILE_TUTORIALS_BACKEND", None)
    return env


CAPABILITY_STANDIN = """
import torch
if not torch.cuda.is_available():
    torch.cuda.get_device_capability = lambda device=None: (9, 0)
"""


def run(code: str, env: dict[str, str], capability_standin: bool = True) -> dict:
    prelude = textwrap.dedent(
        """
        import json, subprocess, sys
        spawned = []
        def audit(event, args):
            if event in ("subprocess.Popen", "os.posix_spawn", "os.exec"):
                spawned.append(str(args[0] if event != "subprocess.Popen" else args[1])[:200])
        sys.addaudithook(audit)
        """
    ) + (CAPABILITY_STANDIN if capability_standin else "")
    p = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_no_cargo_on_the_test_path(tmp_path: Path) -> None:
    env = no_cargo_env(tmp_path)
    assert shutil.which("cargo", path=env["PATH"]) is None


def test_register_makes_the_backend_available_and_routes_softmax(tmp_path: Path) -> None:
    out = run(
        """
        import torch, tilegym
        from tilegym.backend import selector, get_registry_info, has_backend_impl
        before = "cutile-rs" in selector.get_available_backends()
        import tilegym_cutile_rs.tilegym_backend as backend
        names = backend.register()
        again = backend.register()
        provided = sorted(backend.provided_ops())
        tilegym.set_backend("cutile-rs")
        errors = {}
        for label, kwargs in [("plain", {}), ("tilegym kwargs", dict(use_tma=True, use_chunked=True, use_multi_wave=True))]:
            try:
                tilegym.ops.softmax(torch.randn(4, 8), **kwargs)
            except Exception as exc:
                errors[label] = f"{type(exc).__name__}: {exc}"
        try:
            tilegym.ops.softmax(torch.randn(4, 8), backend="cutile-rs")
        except Exception as exc:
            errors["explicit"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps({
            "before": before, "names": names, "again": again,
            "available": "cutile-rs" in selector.get_available_backends(),
            "impl": get_registry_info()["softmax"]["cutile-rs"],
            "impls": {op: get_registry_info()[op]["cutile-rs"] for op in provided},
            "provided": provided,
            "errors": errors,
            "others": sorted(op for op in get_registry_info() if op not in provided and has_backend_impl(op, "cutile-rs")),
            "spawned": [s for s in spawned if "cargo" in s],
        }))
        """,
        no_cargo_env(tmp_path),
    )
    assert out["before"] is False  # no cargo: TileGym alone does not offer cutile-rs
    assert "softmax" in out["provided"] and out["names"] == out["provided"] == out["again"]
    for op, impl in out["impls"].items():  # every op we provide routes to our module
        assert impl.startswith("tilegym_cutile_rs.ops."), (op, impl)
    assert out["available"] is True
    assert out["impl"].startswith("tilegym_cutile_rs.ops.softmax.")
    for label in ("plain", "tilegym kwargs", "explicit"):
        # Our error, naming the fix, not TileGym's NotImplementedError or a TypeError over kwargs.
        assert out["errors"][label].startswith("ValueError: softmax runs on CUDA tensors"), out["errors"]
    assert out["others"] == []  # ops we do not provide are not registered by us (and TileGym, without cargo, has none)
    assert out["spawned"] == []


def test_other_ops_keep_tilegym_behaviour(tmp_path: Path) -> None:
    out = run(
        """
        import torch, tilegym
        from tilegym.backend import get_registry_info
        before = {op: {b: str(i) for b, i in impls.items()} for op, impls in get_registry_info().items()}
        import tilegym_cutile_rs.tilegym_backend as backend
        backend.register()
        after = {op: {b: str(i) for b, i in impls.items()} for op, impls in get_registry_info().items()}
        print(json.dumps({
            "changed": sorted(op for op in after if after[op] != before.get(op)),
            "provided": sorted(backend.provided_ops()),
        }))
        """,
        no_cargo_env(tmp_path),
    )
    assert out["changed"] == out["provided"]


def test_importing_our_package_does_not_import_tilegym(tmp_path: Path) -> None:
    out = run(
        """
        import tilegym_cutile_rs
        tilegym_cutile_rs.softmax
        print(json.dumps({"tilegym": "tilegym" in sys.modules}))
        """,
        no_cargo_env(tmp_path),
    )
    assert out["tilegym"] is False


def test_env_opt_in_registers_at_import(tmp_path: Path) -> None:
    env = {**no_cargo_env(tmp_path), "TILEGYM_CUTILE_RS_REGISTER": "1"}
    out = run(
        """
        import tilegym_cutile_rs, tilegym
        print(json.dumps({"available": "cutile-rs" in tilegym.get_available_backends()}))
        """,
        env,
    )
    assert out["available"] is True


def test_unknown_tilegym_kwargs_are_ignored_with_a_warning(tmp_path: Path) -> None:
    out = run(
        """
        import logging, torch
        records = []
        logging.getLogger("tilegym_cutile_rs").addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: records.append(r.getMessage())})())
        from tilegym_cutile_rs.ops.softmax import OP
        try:
            OP.tilegym["softmax"](torch.randn(2, 2), some_future_flag=3)
        except ValueError as exc:
            error = str(exc)
        print(json.dumps({"records": records, "error": error}))
        """,
        no_cargo_env(tmp_path),
    )
    assert any("some_future_flag" in r for r in out["records"])
    assert "CUDA tensors" in out["error"]


@pytest.mark.skipif(HAS_GPU, reason="needs a machine without an NVIDIA driver")
def test_register_without_a_gpu_says_why(tmp_path: Path) -> None:
    from tilegym_cutile_rs import _toolchain

    # TileGym enables its tilecpp backend, whose import queries the GPU, when it finds
    # nvcc >= 13.3: point it at the [tileiras] extra's nvcc (13.4.92).
    nvcc = _toolchain.find().ptxas.with_name("nvcc")
    if not nvcc.exists():
        pytest.skip(f"needs nvcc >= 13.3 next to ptxas ({nvcc}); the [tileiras] extra installs it")
    out = run(
        """
        import tilegym_cutile_rs.tilegym_backend as backend
        try:
            backend.register()
            error = None
        except RuntimeError as exc:
            error = str(exc)
        print(json.dumps({"error": error}))
        """,
        {**no_cargo_env(tmp_path), "TILECPP_NVCC_PATH": str(nvcc)},
        capability_standin=False,
    )
    assert out["error"] is not None and out["error"].startswith("TileGym failed to import"), out
    assert "python -m tilegym_cutile_rs.check" in out["error"]


@pytest.fixture(scope="module")
def registered() -> None:
    from tilegym_cutile_rs import tilegym_backend

    tilegym_backend.register()


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,dtype", TILEGYM_CASES)
def test_tilegym_softmax_parametrization_on_cutile_rs(registered: None, m: int, n: int, dtype: str) -> None:
    import tilegym
    import torch

    previous = tilegym.get_current_backend()
    tilegym.set_backend("cutile-rs")
    try:
        x = torch.randn(m, n, device="cuda", dtype=getattr(torch, dtype))
        ref = torch.softmax(x.float(), dim=-1).to(x.dtype)
        y = tilegym.ops.softmax(x)
        y_tma = tilegym.ops.softmax(x, use_tma=True)
    finally:
        tilegym.set_backend(previous)
    rtol, atol = TOLERANCES[dtype]
    for out in (y, y_tma):
        assert out.is_contiguous() and out.dtype == x.dtype and out.stride() == ref.stride()
        torch.testing.assert_close(out, ref, rtol=rtol, atol=atol)
