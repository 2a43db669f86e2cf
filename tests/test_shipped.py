"""The shipped kernels, on CPU: the wheel holds every op's kernels for every architecture,
each shipped launch resolves to a valid entry without a toolchain and without launching,
a shape outside the set and a damaged entry find nothing (docs/design.md, "Shipped kernels")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from tilegym_cutile_rs import _abi, _describe, _library, _op, _registry, _ship_build, _shipped
from tilegym_cutile_rs.errors import ToolchainError


@pytest.fixture(autouse=True)
def shipped_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test reads the installed wheel's kernels unless it points elsewhere."""
    monkeypatch.delenv("TILEGYM_CUTILE_RS_SHIPPED_DIR", raising=False)
    _shipped.enable(_library.library(), jit=True)


def test_the_wheel_ships_every_architecture_and_its_index_checks_out() -> None:
    index = _shipped.index()
    assert index is not None, f"no shipped kernels in {_shipped.KERNELS_DIR}: was the wheel built with scripts/ship_kernels.py?"
    assert index["library_fingerprint"] == _library.manifest().FINGERPRINT
    assert index["ops"] == sorted(_registry.ops())
    for arch in _describe.ARCHS:
        assert index["archs"][arch] > 0, arch
        assert _shipped.count(arch) == index["archs"][arch]
    listed = set(index["sha256"])
    on_disk = {f"{p.parent.name}/{p.name}" for p in _shipped.KERNELS_DIR.glob("sm_*/*")}
    assert listed == on_disk and len(listed) == sum(index["archs"].values())
    for name, digest in list(index["sha256"].items())[:50]:
        assert _shipped.sha256(_shipped.KERNELS_DIR / name) == digest, name


def test_every_shipped_launch_resolves_without_a_toolchain() -> None:
    # A fresh interpreter with no toolchain to find: no pip kit, no CUTILE_TILEIRAS_PATH,
    # no CUDA toolkit variables, no nvidia bin directory on PATH.
    code = textwrap.dedent(
        """
        import json, torch
        from tilegym_cutile_rs import _describe, _library, _op, _registry, _ship_build, _shipped, _toolchain
        from tilegym_cutile_rs.errors import ToolchainError
        _toolchain._from_pip = lambda: None
        try:
            _toolchain.find()
            raise SystemExit("a toolchain was still found")
        except ToolchainError:
            pass
        _shipped.enable(_library.library(), jit=False)
        out = {}
        for arch, sms in _describe.ARCHS.items():
            for n in sms:
                for name, spec in _registry.ops().items():
                    calls = lambda spec=spec: spec.shipped(torch.device("meta"))
                    out[f"{name} {arch} {n} SMs"] = _ship_build.resolve(_describe.Target(arch, n), calls)
        print(json.dumps(out))
        """
    )
    hidden = ("CUTILE_TILEIRAS_PATH", "CUDA_TOOLKIT_PATH", "CUDA_HOME", "TILEGYM_CUTILE_RS_SHIPPED_DIR")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "nvidia" not in p and "cuda" not in p)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    resolved = json.loads(run.stdout)
    assert len(resolved) == len(_registry.ops()) * sum(len(sms) for sms in _describe.ARCHS.values())
    for what, (found, described) in resolved.items():
        assert described > 0 and found == described, f"{what}: {found} of {described} launches have a shipped kernel"


def test_a_shape_outside_the_set_finds_nothing_and_raises_the_documented_error() -> None:
    def odd() -> None:
        from tilegym_cutile_rs import softmax

        softmax(torch.empty(77, 12345, device="meta"))

    assert _ship_build.resolve(_describe.Target("sm_90", 132), odd) == (0, 1)
    # On a GPU the launch fails with CUTILE_ERR_NO_TOOLCHAIN (tests/test_shipped_gpu.py):
    # a ToolchainError naming the kernel, the architecture, the fix and the call.
    lib = _library.library()
    with pytest.raises(ToolchainError, match="softmax: "):
        _abi.check_status(lib.CUTILE_ERR_NO_TOOLCHAIN, "softmax")
    hint = _op._hint(lib.CUTILE_ERR_NO_TOOLCHAIN, None, ("softmax", torch.float32, torch.Size([77, 12345]), "config", ()))
    assert hint == "The call: softmax on torch.float32 of shape (77, 12345)."


def softmax_shipped() -> None:
    _registry.ops()["softmax"].shipped(torch.device("meta"))


def copy_of_kernels(tmp_path: Path) -> Path:
    root = tmp_path / "kernels"
    shutil.copytree(_shipped.KERNELS_DIR, root)
    return root


def test_a_damaged_entry_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = copy_of_kernels(tmp_path)
    monkeypatch.setenv("TILEGYM_CUTILE_RS_SHIPPED_DIR", str(root))
    lib = _library.library()
    _shipped.enable(lib, jit=True)
    target, calls = _describe.Target("sm_90", 132), softmax_shipped
    found, described = _ship_build.resolve(target, calls)
    assert found == described > 0
    # One flipped bit in each payload: the entry's SHA-256 no longer matches.
    for entry in (root / "sm_90").iterdir():
        data = bytearray(entry.read_bytes())
        data[len(data) // 2] ^= 0x01
        entry.write_bytes(bytes(data))
    assert _ship_build.resolve(target, calls) == (0, described)


def test_entries_are_bound_to_their_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every entry renamed to another entry's identity: each checks the identity (which holds
    # the architecture, the kernel and its whole specialization) it was built for.
    root = copy_of_kernels(tmp_path)
    monkeypatch.setenv("TILEGYM_CUTILE_RS_SHIPPED_DIR", str(root))
    _shipped.enable(_library.library(), jit=True)
    entries = sorted((root / "sm_90").iterdir())
    contents = [e.read_bytes() for e in entries]
    for entry, data in zip(entries, contents[1:] + contents[:1], strict=True):
        entry.write_bytes(data)
    target, calls = _describe.Target("sm_90", 132), softmax_shipped
    found, described = _ship_build.resolve(target, calls)
    assert described > 0 and found == 0


def test_describing_ends_with_its_block() -> None:
    # Describe mode ends with its block: afterwards a meta tensor is traced (the operator's
    # fake result), not described, and no target answers device queries.
    from tilegym_cutile_rs import softmax

    with _describe.describe(_describe.Target("sm_90", 132)):
        softmax(torch.empty(8, 256, device="meta"))
    assert not _describe.describing()
    assert softmax(torch.empty(8, 256, device="meta")).device.type == "meta"
    with pytest.raises(RuntimeError, match="no shipped-kernel target"):
        _describe.target()
    assert _ship_build.resolve(_describe.Target("sm_90", 132), lambda: None)[1] == 1  # the block's launch only
