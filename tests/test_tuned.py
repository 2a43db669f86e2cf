"""Fitted config tables (_tuned, benchmarks/tune.py) on CPU: a written table round-trips and
is what the heuristic reads, the device and problem lookups take the nearest fit, a missing or
malformed table falls back to the op's rule with a warning (never an error), an interrupted
sweep resumes from its results, and the wheel's build describes every fitted device."""

from __future__ import annotations

import importlib.util
import json
import sys
import warnings
from pathlib import Path

import pytest
from tilegym_cutile_rs import _describe, _registry, _tuned
from tilegym_cutile_rs.ops import swiglu as sw

ROOT = Path(__file__).resolve().parent.parent


def tune_module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("tune", ROOT / "benchmarks" / "tune.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tune"] = module
    spec.loader.exec_module(module)
    return module


H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
META = {"sms": 132, "commit": "abc1234", "tileiras": "13.4.92", "date": "2026-12-06"}


def entry(problem: list, config: list, us: float = 10.0) -> dict:
    return {"problem": problem, "config": config, "us": us, "rule": [4, 1024, 0, 0], "rule_us": 2 * us}


@pytest.fixture
def tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tuned/ directory of our own, read afresh by every lookup."""
    monkeypatch.setattr(_tuned, "TUNED_DIR", tmp_path)
    _tuned.table.cache_clear()
    yield tmp_path
    _tuned.table.cache_clear()


def on_device(monkeypatch: pytest.MonkeyPatch, arch: str, name: str | None, sms: int) -> None:
    monkeypatch.setattr(_tuned, "current_device", lambda index: (arch, name, sms))


def test_a_written_table_round_trips_and_keeps_other_devices(tables: Path) -> None:
    tune = tune_module()
    path = _tuned.path("swiglu")
    tune.write_table(path, "swiglu", "sm_90", H200, META, [entry(["bfloat16", 4096, 14336], [1, 16384, 0, 8, 0])])
    tune.write_table(path, "swiglu", "sm_90", H100, META, [entry(["bfloat16", 4096, 14336], [2, 8192, 0, 8, 0])])
    # A refit of some problems keeps this device's other entries.
    tune.write_table(path, "swiglu", "sm_90", H100, META, [entry(["float32", 1, 11008], [1, 16384, 0, 0, 0])])
    data = json.loads(path.read_text())
    assert data["format"] == _tuned.FORMAT and data["table"] == "swiglu"
    assert set(data["archs"]["sm_90"]) == {H100, H200}
    assert [e["problem"] for e in data["archs"]["sm_90"][H100]["entries"]] == [["bfloat16", 4096, 14336], ["float32", 1, 11008]]
    assert data["archs"]["sm_90"][H100]["commit"] == "abc1234"
    _tuned.table.cache_clear()
    assert _tuned.table("swiglu") == data["archs"]
    assert _tuned.devices("swiglu", "sm_90") == [H100, H200] and _tuned.devices("swiglu", "sm_80") == []


def test_the_heuristic_reads_the_nearest_device_and_problem(tables: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tune = tune_module()
    path = _tuned.path("swiglu")
    tune.write_table(path, "swiglu", "sm_90", H200, {**META, "sms": 132}, [
        entry(["bfloat16", 4096, 14336], [1, 16384, 0, 8, 0]),
        entry(["bfloat16", 1, 11008], [1, 4096, 0, 4, 0]),
    ])
    on_device(monkeypatch, "sm_90", H200, 132)
    assert sw.swiglu_config(8192, 14336, "bfloat16", 0) == sw.SwigluConfig(1, 16384, 0, 8)  # type: ignore[arg-type]
    assert sw.swiglu_config(2, 11008, "bfloat16", 0) == sw.SwigluConfig(1, 4096, 0, 4)  # type: ignore[arg-type]
    # Fitted for a taller problem: the row block is cut to this one's rows.
    path.unlink()
    tune.write_table(path, "swiglu", "sm_90", H200, {**META, "sms": 132}, [entry(["bfloat16", 4096, 14336], [8, 2048, 0, 8, 0])])
    _tuned.table.cache_clear()
    assert sw.swiglu_config(2, 14336, "bfloat16", 0) == sw.SwigluConfig(2, 2048, 0, 8)  # type: ignore[arg-type]
    # An unfitted sm_90 device takes the fitted one nearest in SM count.
    tune.write_table(path, "swiglu", "sm_90", "NVIDIA H100 PCIe", {**META, "sms": 114}, [entry(["bfloat16", 4096, 14336], [2, 2048, 0, 0, 0])])
    _tuned.table.cache_clear()
    on_device(monkeypatch, "sm_90", "NVIDIA H100 NVL", 116)
    assert sw.swiglu_config(4096, 14336, "bfloat16", 0) == sw.SwigluConfig(2, 2048, 0, 0)  # type: ignore[arg-type]
    on_device(monkeypatch, "sm_90", "NVIDIA H200 NVL", 130)
    assert sw.swiglu_config(4096, 14336, "bfloat16", 0) == sw.SwigluConfig(8, 2048, 0, 8)  # type: ignore[arg-type]
    # Another architecture, or a dtype no entry has: the rule.
    on_device(monkeypatch, "sm_100", "NVIDIA B200", 148)
    assert sw.swiglu_config(4096, 14336, "bfloat16", 0) == sw.swiglu_rule(4096, 14336, "bfloat16")  # type: ignore[arg-type]
    on_device(monkeypatch, "sm_90", H200, 132)
    assert sw.swiglu_config(4096, 14336, "float32", 0) == sw.swiglu_rule(4096, 14336, "float32")  # type: ignore[arg-type]
    # A fitted cluster stays with its tile and goes when the tile is cut.
    path.unlink()
    tune.write_table(path, "swiglu", "sm_90", H200, {**META, "sms": 132}, [entry(["bfloat16", 4096, 11008], [1, 16384, 0, 8, 2])])
    _tuned.table.cache_clear()
    assert sw.swiglu_config(4096, 11008, "bfloat16", 0) == sw.SwigluConfig(1, 16384, 0, 8, 2)  # type: ignore[arg-type]
    assert sw.swiglu_config(4096, 5000, "bfloat16", 0) == sw.SwigluConfig(1, 8192, 0, 8, 0)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["{not json", '{"format": 99, "archs": {}}', '{"format": 1, "archs": {"sm_90": {"X": {"sms": 1}}}}',
                                  '{"format": 1, "archs": {"sm_90": {"X": {"sms": 1, "entries": [{"problem": [1, 2], "config": [1]}]}}}}',
                                  '{"format": 1, "archs": {"sm_90": {"X": [1, 2]}}}'])
def test_a_malformed_table_falls_back_to_the_rule_with_a_warning(tables: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    _tuned.path("swiglu").write_text(text)
    on_device(monkeypatch, "sm_90", H200, 132)
    with pytest.warns(RuntimeWarning, match="malformed"):
        config = sw.swiglu_config(4096, 14336, "bfloat16", 0)  # type: ignore[arg-type]
    assert config == sw.swiglu_rule(4096, 14336, "bfloat16")  # type: ignore[arg-type]


def test_a_missing_table_is_the_rule_without_a_warning(tables: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_device(monkeypatch, "sm_90", H200, 132)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sw.swiglu_config(4096, 14336, "bfloat16", 0) == sw.swiglu_rule(4096, 14336, "bfloat16")  # type: ignore[arg-type]


def test_an_interrupted_sweep_resumes_from_its_results(tmp_path: Path) -> None:
    tune = tune_module()
    problems = [("bfloat16", 4096, 14336), ("float32", 1, 11008)]
    candidates = {json.dumps(list(p)): [(4, 1024, 0, 0), (1, 16384, 0, 8)] for p in problems}
    rule = {json.dumps(list(p)): (4, 1024, 0, 0) for p in problems}
    results = tmp_path / "tune-swiglu.jsonl"
    lines = [
        {"problem": list(problems[0]), "config": [4, 1024, 0, 0], "us": 700.0},
        {"problem": list(problems[0]), "config": [1, 16384, 0, 8], "us": 460.0},
        {"problem": list(problems[1]), "config": [4, 1024, 0, 0], "error": "ValueError: no"},
    ]
    # Killed while writing its fourth line: that line is torn.
    results.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"problem": ["float32", 1, 110')
    resumed = tune.load_results(results)
    assert len(resumed) == 3
    entries, incomplete = tune.fit(problems, candidates, rule, resumed)
    assert [e["config"] for e in entries] == [[1, 16384, 0, 8]] and entries[0]["rule_us"] == 700.0
    assert incomplete == [json.dumps(list(problems[1]))]
    with open(results, "a") as out:  # the rerun appends the missing result after the torn line
        out.write("\n" + json.dumps({"problem": list(problems[1]), "config": [1, 16384, 0, 8], "us": 3.0}) + "\n")
    entries, incomplete = tune.fit(problems, candidates, rule, tune.load_results(results))
    assert incomplete == [] and entries[1]["config"] == [1, 16384, 0, 8] and entries[1]["rule_us"] is None


def test_the_build_describes_every_fitted_device(tables: Path) -> None:
    tune = tune_module()
    tune.write_table(_tuned.path("swiglu"), "swiglu", "sm_90", H100, {**META, "sms": 132}, [entry(["bfloat16", 4096, 14336], [1, 16384, 0, 8, 0])])
    targets = _tuned.describe_targets("sm_90", _describe.ARCHS["sm_90"], list(_registry.tunings()))
    assert targets == [_describe.Target("sm_90", 114), _describe.Target("sm_90", 132), _describe.Target("sm_90", 132, H100)]
    assert _tuned.describe_targets("sm_80", _describe.ARCHS["sm_80"], list(_registry.tunings())) == [_describe.Target("sm_80", 108)]


def test_the_backward_reads_its_own_table(tables: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tune = tune_module()
    tune.write_table(_tuned.path("swiglu"), "swiglu", "sm_90", H100, META, [entry(["bfloat16", 4096, 14336], [1, 16384, 0, 8, 0])])
    on_device(monkeypatch, "sm_90", H100, 132)
    assert sw.swiglu_config(4096, 14336, "bfloat16", 0) == sw.SwigluConfig(1, 16384, 0, 8)  # type: ignore[arg-type]
    rule = sw.swiglu_rule(4096, 14336, "bfloat16")  # type: ignore[arg-type]
    assert sw.swiglu_config(4096, 14336, "bfloat16", 0, backward=True) == rule  # type: ignore[arg-type]
    tune.write_table(_tuned.path("swiglu_backward"), "swiglu_backward", "sm_90", H100, META,
                     [entry(["bfloat16", 4096, 14336], [2, 2048, 0, 4, 0])])
    _tuned.table.cache_clear()
    assert sw.swiglu_config(4096, 14336, "bfloat16", 0, backward=True) == sw.SwigluConfig(2, 2048, 0, 4)  # type: ignore[arg-type]


def test_every_tuning_declares_problems_its_candidates_and_rule_agree_on() -> None:
    tunable = _registry.tunings()
    assert {"swiglu", "swiglu_backward"} <= set(tunable)
    assert all(name == tuning.name for name, tuning in tunable.items())
    for name, tuning in tunable.items():
        assert tuning.problems, name
        for problem in tuning.problems:
            candidates = list(tuning.candidates(problem))
            assert tuple(tuning.rule(problem)) in [tuple(c) for c in candidates], (name, problem)
            assert len(candidates) == len(set(candidates)) and tuning.nbytes(problem) > 0


def test_a_softmax_fit_carries_only_to_the_same_kernel_family_and_row_class(tables: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from tilegym_cutile_rs.ops.softmax import heuristic as sm

    tune = tune_module()
    tune.write_table(_tuned.path("softmax"), "softmax", "sm_90", H100, META, [
        {"problem": ["bfloat16", 4096, 50257], "config": [1, 4096, 2, 8, 0], "us": 200.0, "rule": [1, 8192, 4, 8, 0], "rule_us": 250.0},
        {"problem": ["bfloat16", 8192, 1000], "config": [16, 1024, 4, 0, 0], "us": 10.0, "rule": [8, 1024, 0, 0, 0], "rule_us": 12.0},
    ])
    on_device(monkeypatch, "sm_90", H100, 132)
    bf16 = torch.bfloat16
    assert sm.softmax_config(8192, 50257, bf16, device=0) == sm.SoftmaxConfig(1, 4096, 2, 8)  # same family and class
    assert sm.softmax_config(4096, 1000, bf16, device=0) == sm.SoftmaxConfig(16, 1024, 4, 0)
    assert sm.softmax_config(8, 1000, bf16, device=0) == sm.SoftmaxConfig(8, 1024, 4, 0)  # row block cut to the rows
    # Another row-length class, another kernel family (a power of two: the exact kernels) or
    # strided rows: the rule.
    assert sm.softmax_config(4096, 2000, bf16, device=0) == sm.softmax_rule(4096, 2000, bf16)
    assert sm.row_family(bf16, 8192, 1024) != sm.row_family(bf16, 8192, 1000)
    assert sm.softmax_config(8192, 1024, bf16, device=0) == sm.softmax_rule(8192, 1024, bf16)
    assert sm.softmax_config(4096, 50264, bf16, device=0) == sm.softmax_rule(4096, 50264, bf16)  # whole vectors: not gathered
    strided = sm.row_family(bf16, 4096, 50264, 50267)  # gathered like the fit's rows, but strided: the fits are contiguous
    assert strided == sm.row_family(bf16, 4096, 50257)
    assert sm.softmax_config(4096, 50264, bf16, strided, device=0) == sm.softmax_rule(4096, 50264, bf16, strided)


def test_softmaxs_rule_is_data() -> None:
    # The H200 tables are read from rules.json, not typed into the heuristic.
    from tilegym_cutile_rs.ops.softmax import heuristic as sm

    rules = json.loads((Path(sm.__file__).parent / "rules.json").read_text())
    assert [list(r) for r in sm.SINGLE_TILE[4]] == rules["single_tile"]["4"] and sm.MIN_CTAS == rules["min_ctas"]
    source = Path(sm.__file__).read_text()
    assert "SINGLE_TILE = _rows(" in source and "(256, 1024, 1, 0)" not in source


def test_a_config_of_another_form_falls_back_to_the_rule_with_a_warning(tables: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tune = tune_module()
    tune.write_table(_tuned.path("swiglu"), "swiglu", "sm_90", H200, META, [entry(["bfloat16", 4096, 14336], [1, 16384])])
    on_device(monkeypatch, "sm_90", H200, 132)
    with pytest.warns(RuntimeWarning, match="not of the op's form"):
        config = sw.swiglu_config(4096, 14336, "bfloat16", 0)  # type: ignore[arg-type]
    assert config == sw.swiglu_rule(4096, 14336, "bfloat16")  # type: ignore[arg-type]


def test_a_config_that_writes_nothing_fails_its_check_after_a_good_one() -> None:
    """Verification poisons the outputs first: a config that leaves them untouched cannot pass
    on the values an earlier, correct config wrote."""
    import torch

    y = torch.zeros(4)

    def launch(config: tuple[int, ...]) -> None:
        if config == (1,):
            y.copy_(torch.arange(4.0))

    run = _tuned.checked_runs(launch, lambda: torch.testing.assert_close(y, torch.arange(4.0)), (y,))
    good, silent = run((1,)), run((2,))
    good.verify()
    with pytest.raises(AssertionError):
        silent.verify()


def test_an_attention_fit_keeps_its_rows_and_takes_the_rules_splits_elsewhere(tables: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tilegym_cutile_rs.ops import attention_sink as at

    tune = tune_module()
    prefill = at._problem("bfloat16", 1, 4096, 4096, 8, 8, 128, 0)
    fitted = at.AttentionSinkConfig(16, 8, 128, 1, 1, 8, 4)
    short = at._problem("bfloat16", 1, 128, 4096, 8, 8, 128, 0)
    fitted_short = at.AttentionSinkConfig(16, 8, 64, 3, 0, 8, 0)
    tune.write_table(_tuned.path("attention_sink"), "attention_sink", "sm_90", H100, META,
                     [entry(list(prefill), list(fitted)), entry(list(short), list(fitted_short))])
    on_device(monkeypatch, "sm_90", H100, 132)
    assert prefill == ("bfloat16", 1, 4096, 4096, 8, 8, 128, 8192)  # no window: one that sees every key
    assert at.attention_sink_config(1, 4096, 4096, 8, 8, 128, 0, 132, "bfloat16", 0) == fitted
    assert at.attention_sink_config(1, 128, 4096, 8, 8, 128, 0, 132, "bfloat16", 0) == fitted_short  # its own splits
    # A longer prompt: the same tiles, the rule's split count for them (one: the grid is full).
    assert at.attention_sink_config(1, 8192, 8192, 8, 8, 128, 0, 132, "bfloat16", 0) == fitted
    # A group of 4 heads: 4 heads a tile, twice the positions, as many rows.
    assert at.attention_sink_config(1, 4096, 4096, 16, 4, 128, 0, 132, "bfloat16", 0) == fitted._replace(block_q=32, heads_per_tile=4)
    # A shorter cache of the short query: the rule's splits for the fitted tiles.
    near = at.attention_sink_config(1, 128, 2048, 8, 8, 128, 0, 132, "bfloat16", 0)
    assert near == fitted_short._replace(splits=at._splits(1, 128, 2048, 8, 8, 0, 16, 8, 64, 132))
    # float16 without a fit of its own takes bfloat16's; an empty call, the rule.
    assert at.attention_sink_config(1, 4096, 4096, 8, 8, 128, 0, 132, "float16", 0) == fitted
    for empty in ((0, 4096), (1, 0)):
        rule = at.attention_sink_rule(empty[0], empty[1], 4096, 8, 8, 128, 0, 132)
        assert at.attention_sink_config(empty[0], empty[1], 4096, 8, 8, 128, 0, 132, "bfloat16", 0) == rule
    # float16's own fit, once it has one, wins.
    fitted_f16 = fitted._replace(occupancy=1)
    tune.write_table(_tuned.path("attention_sink"), "attention_sink", "sm_90", H100, META, [entry(["float16", *prefill[1:]], list(fitted_f16))])
    _tuned.table.cache_clear()
    assert at.attention_sink_config(1, 4096, 4096, 8, 8, 128, 0, 132, "float16", 0) == fitted_f16


def test_float16_takes_bfloat16s_fit_until_it_has_its_own_and_float32_never(tables: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tune = tune_module()
    tune.write_table(_tuned.path("swiglu"), "swiglu", "sm_90", H100, META, [entry(["bfloat16", 4096, 14336], [1, 16384, 0, 8, 0])])
    on_device(monkeypatch, "sm_90", H100, 132)
    assert sw.swiglu_config(4096, 14336, "float16", 0) == sw.SwigluConfig(1, 16384, 0, 8)  # type: ignore[arg-type]
    assert sw.swiglu_config(4096, 14336, "float32", 0) == sw.swiglu_rule(4096, 14336, "float32")  # type: ignore[arg-type]
    tune.write_table(_tuned.path("swiglu"), "swiglu", "sm_90", H100, META, [entry(["float16", 4096, 14336], [2, 8192, 0, 4, 0])])
    _tuned.table.cache_clear()
    assert sw.swiglu_config(4096, 14336, "float16", 0) == sw.SwigluConfig(2, 8192, 0, 4)  # type: ignore[arg-type]
