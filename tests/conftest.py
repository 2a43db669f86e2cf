from __future__ import annotations

import pytest


def _gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


GPU_COUNT = _gpu_count()
HAS_GPU = GPU_COUNT > 0


@pytest.fixture(scope="module")
def lib():  # type: ignore[no-untyped-def]
    """The loaded kernel library (its cffi handle)."""
    from tilegym_cutile_rs import _library

    return _library.library()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="no NVIDIA GPU on this machine")
    skip2 = pytest.mark.skip(reason=f"needs two GPUs; this machine has {GPU_COUNT}")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip)
        elif "gpu2" in item.keywords and GPU_COUNT < 2:
            item.add_marker(skip2)


def make_standin_tileiras(directory, real, *, sleep: float | None = None, fail: str | None = None):  # type: ignore[no-untyped-def]
    """A tileiras that logs each compile to directory/compiles.log, then optionally
    stalls (`sleep`) or fails with `fail` on stderr, else runs the real one."""
    from pathlib import Path

    directory = Path(directory)
    log = directory / "compiles.log"
    script = directory / "tileiras"
    compile_branch = f'echo "$$" >> {log}\n'
    if sleep is not None:
        compile_branch += f"  sleep {sleep}\n"
    if fail is not None:
        compile_branch += f"  echo '{fail}' >&2\n  exit 3\n"
    script.write_text(f'#!/bin/sh\ncase " $* " in *" -o "*)\n  {compile_branch};;\nesac\nexec {real} "$@"\n')
    script.chmod(0o755)
    return script
