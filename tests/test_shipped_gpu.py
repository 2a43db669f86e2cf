"""The shipped kernels on the GPU, without a toolchain: every op's shipped shapes run with
zero tileiras runs, each first launch's derived spec is the key cutile resolves, and a
shape outside the set raises the documented ToolchainError (docs/design.md, "Shipped kernels")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from tilegym_cutile_rs import _registry

pytestmark = pytest.mark.gpu

# A fresh interpreter that cannot find a toolchain (pip kit hidden, no toolchain variables,
# no nvidia bin on PATH) and has no user kernel cache: every kernel must come from the wheel.
PRELUDE = """
    import json, torch
    from tilegym_cutile_rs import cache, _registry, _toolchain
    from tilegym_cutile_rs.errors import ToolchainError
    _toolchain._from_pip = lambda: None
"""


def run_without_toolchain(body: str) -> dict[str, object]:
    hidden = ("CUTILE_TILEIRAS_PATH", "CUDA_TOOLKIT_PATH", "CUDA_HOME", "TILEGYM_CUTILE_RS_SHIPPED_DIR")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "nvidia" not in p and "cuda" not in p)
    env["TILEGYM_CUTILE_RS_CACHE_DIR"] = "off"
    code = textwrap.dedent(PRELUDE) + textwrap.dedent(body)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result: dict[str, object] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("op", list(_registry.ops()))
def test_each_ops_shipped_shapes_run_with_no_toolchain(op: str) -> None:
    # The very calls the build describes on meta tensors, on the device: every kernel comes
    # from the wheel, and each first launch's derived spec is the key cutile resolved.
    stats = run_without_toolchain(
        f"""
        spec = _registry.ops()[{op!r}]
        print(spec.smoke(torch.device("cuda")))
        spec.shipped(torch.device("cuda"))
        torch.cuda.synchronize()
        print(json.dumps(cache.stats()))
        """
    )
    assert stats["tileiras_runs"] == 0, stats
    assert stats["shipped"] > 0 and stats["spec_mismatches"] == 0, stats


def test_a_shape_outside_the_set_raises_the_documented_error() -> None:
    result = run_without_toolchain(
        """
        from tilegym_cutile_rs import softmax
        try:
            softmax(torch.randn(77, 12345, device="cuda"))
            print(json.dumps({"raised": None}))
        except ToolchainError as exc:
            print(json.dumps({"raised": str(exc), "stats": cache.stats()}))
        """
    )
    message = str(result["raised"])
    major, minor = __import__("torch").cuda.get_device_capability()
    assert f"sm_{major}{minor}" in message and 'pip install "tilegym-cutile-rs[tileiras]"' in message, message
    assert "(77, 12345)" in message and "softmax_row_" in message, message  # names the kernel it needed
    assert result["stats"]["tileiras_runs"] == 0  # type: ignore[index]


def test_with_a_toolchain_shipped_kernels_still_come_first() -> None:
    # With the toolchain present and no user cache, a shipped shape runs no tileiras either,
    # and its derived spec names cutile's key.
    env = dict(os.environ, TILEGYM_CUTILE_RS_CACHE_DIR="off")
    code = textwrap.dedent(
        """
        import json, torch
        from tilegym_cutile_rs import cache, softmax
        softmax(torch.randn(4096, 50257, device="cuda", dtype=torch.bfloat16))
        torch.cuda.synchronize()
        print(json.dumps(cache.stats()))
        """
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    stats = json.loads(run.stdout.strip().splitlines()[-1])
    assert stats["tileiras_runs"] == 0 and stats["shipped"] == 1 and stats["spec_mismatches"] == 0, stats
