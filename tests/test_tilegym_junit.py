"""scripts/tilegym_junit.py, the GPU job's verdict on TileGym's own test files: only our
backend's cases count, and only the skips TileGym's files make by name or by shape pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "tilegym_junit.py"


def verdict(tmp_path: Path, cases: str, *args: str) -> tuple[int, str]:
    junit = tmp_path / "junit.xml"
    junit.write_text(f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
    run = subprocess.run([sys.executable, str(SCRIPT), str(junit), *args], capture_output=True, text=True)
    return run.returncode, run.stdout + run.stderr


PASS = '<testcase classname="t" name="test_op[cutile_rs-4-128]"/>'
OTHER_FAIL = '<testcase classname="t" name="test_op[cutile-4-128]"><failure message="x"/></testcase>'


def skip(name: str, message: str) -> str:
    return f'<testcase classname="t" name="{name}"><skipped message="{message}"/></testcase>'


def test_passes_with_our_cases_passing_and_skips_made_by_name(tmp_path: Path) -> None:
    cases = PASS + OTHER_FAIL + skip("test_op[cutile-rs-1023]", "Skip matmul due to result mismatch when cannot divide BLOCK")
    cases += skip("test_op_backward[cutile_rs-8]", "cutile-rs backend does not support the backward pass")
    code, out = verdict(tmp_path, cases)
    assert code == 0, out
    assert "1 passed, 2 skipped (by name)" in out


def test_fails_on_a_failure_an_unexplained_skip_or_no_case(tmp_path: Path) -> None:
    failed = '<testcase classname="t" name="test_op[cutile-rs-8]"><error message="boom"/></testcase>'
    assert verdict(tmp_path, PASS + failed)[0] == 1
    code, out = verdict(tmp_path, PASS + skip("test_op[cutile_rs-8]", "Backend is not supported: no cargo"))
    assert code == 1 and "NOT ALLOWED: Backend is not supported" in out
    assert verdict(tmp_path, OTHER_FAIL)[0] == 1  # no case of ours ran


def oom(name: str, where: str) -> str:
    text = (f"self = &lt;Test&gt;\n{where}:58: in reference\n    logits = q.float() @ k.float()\n"
            f"E   torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 27.90 GiB\n{where}:58: OutOfMemoryError")
    return f'<testcase classname="t" name="{name}"><failure message="torch.OutOfMemoryError: CUDA out of memory">{text}</failure></testcase>'


PERF = "test_perf[cutile_rs-10820-10820-8-8-64]"


def test_an_oom_in_tilegyms_reference_is_accepted_on_a_small_card_only(tmp_path: Path) -> None:
    cases = PASS + oom(PERF, "tests/ops/test_attention_sink.py")
    code, out = verdict(tmp_path, cases, "--card-gib", "79.2")
    assert code == 0, out
    assert f"accepted: {PERF}: torch.OutOfMemoryError raised in TileGym's tests/ops/test_attention_sink.py" in out
    assert verdict(tmp_path, cases, "--card-gib", "139.8")[0] == 1  # an H200 must pass it
    assert verdict(tmp_path, cases)[0] == 1  # no card size given: nothing is accepted


def test_an_oom_elsewhere_or_outside_a_perf_case_fails(tmp_path: Path) -> None:
    ours = oom(PERF, "/usr/lib/python3/site-packages/tilegym_cutile_rs/ops/attention_sink.py")
    assert verdict(tmp_path, PASS + ours, "--card-gib", "79.2")[0] == 1
    not_perf = oom("test_op[cutile_rs-10820]", "tests/ops/test_attention_sink.py")
    assert verdict(tmp_path, PASS + not_perf, "--card-gib", "79.2")[0] == 1
