"""Fitted config tables: what `benchmarks/tune.py` measured on a GPU, kept as data.

An op that can be tuned declares one `Tuning` per heuristic in its `OpSpec.tunings` (a
name, its candidates, tuning problems, rule and timing; swiglu has one for its forward and
one for its backward kernel); the tool sweeps the candidates over the problems on the GPU
and writes `tuned/<name>.json` into the package:

    {"format": 1, "table": "swiglu",
     "archs": {"sm_90": {"NVIDIA H100 80GB HBM3": {
         "sms": 132, "commit": "...", "tileiras": "13.4.92", "date": "2026-12-06",
         "entries": [{"problem": ["bfloat16", 4096, 14336], "config": [1, 16384, 0, 0],
                      "us": 460.1, "rule": [4, 1024, 0, 0], "rule_us": 720.5}, ...]}}}}

A problem is a dtype name and positive extents. The op's heuristic asks `fitted()` for
the config of its problem: the table of this device (by name) else of the fitted device of
its architecture with the nearest SM count, then the entry of the same dtype nearest in
log2 of the extents; without a table for the architecture, or a malformed one (a warning,
never an error), the op's own rule decides. While the wheel's kernels are described
(_describe), the device is the described target's, so the shipped set holds every config a
fitted table picks (docs/design.md, "Fitted configs").
"""

from __future__ import annotations

import functools
import json
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _describe
from ._paths import PACKAGE_DIR

TUNED_DIR = PACKAGE_DIR / "tuned"
FORMAT = 1

Problem = tuple[Any, ...]  # (dtype name, extent, ...)


def problem(dtype: Any, *extents: int) -> Problem:
    """A problem of torch dtype `dtype` (or its name) and `extents`: ("bfloat16", 4096, 14336)."""
    return (str(dtype).removeprefix("torch."), *extents)


def torch_dtype(name: str) -> Any:
    """The torch dtype a problem names."""
    import torch

    return getattr(torch, name)


class CheckedCall:
    """One config's run, as a `Tuning.bench` returns it: calling it launches the op once (what the
    sweep times); `verify()` launches it into outputs filled with NaN first, so no earlier
    config's result can stand in for this one's, and checks them (AssertionError when wrong).
    The sweep compiles configs in parallel but verifies them one at a time."""

    def __init__(self, launch: Callable[[], object], check: Callable[[], object], outputs: Sequence[Any]) -> None:
        self._launch, self._check, self._outputs = launch, check, tuple(outputs)

    def __call__(self) -> object:
        return self._launch()

    def verify(self) -> None:
        for out in self._outputs:
            out.fill_(float("nan"))
        self._launch()
        self._check()


def checked_runs(launch: Callable[[tuple[int, ...]], object], check: Callable[[], object],
                 outputs: Sequence[Any] = ()) -> Callable[[tuple[int, ...]], CheckedCall]:
    """A `Tuning.bench`'s result: from a config, launch it once (compiling it) and return its
    `CheckedCall`; `check` compares `outputs` with the op's reference."""

    def run(config: tuple[int, ...]) -> CheckedCall:
        launch(config)
        return CheckedCall(functools.partial(launch, config), check, outputs)

    return run


@dataclass(frozen=True)
class Tuning:
    """What an op declares so that benchmarks/tune.py can fit one of its heuristics.

    name: the table's name (`tuned/<name>.json`), unique across ops: the op's name, or the
        op's name and the kernel's role (`swiglu_backward`).
    problems: the tuning problems, (dtype name, extents...), e.g. ("bfloat16", 4096, 14336).
    candidates(problem): the configs to try (each a tuple of ints, the op's config type).
    rule(problem): the op's own config for the problem (what a device without a table takes).
    bench(problem, device): makes inputs on `device` and returns a function from a config to
        its `CheckedCall` (`checked_runs`): called, it runs the op once with the config;
        `verify()` checks the result against the op's reference (AssertionError when wrong).
    nbytes(problem): bytes one call must move (the sweep prints GB/s).
    flops(problem): for compute-bound ops, the arithmetic of one call (the sweep prints TFLOP/s).
    adapt(config, problem, fitted): the config fitted for problem `fitted` made fit for the
        nearby `problem` (e.g. a row block no taller than its rows), or None where it does not
        carry over (the rule decides); default: the config as it is.
    """

    name: str
    problems: Sequence[Problem]
    candidates: Callable[[Problem], Sequence[tuple[int, ...]]]
    rule: Callable[[Problem], tuple[int, ...]]
    bench: Callable[[Problem, Any], Callable[[tuple[int, ...]], CheckedCall]]
    nbytes: Callable[[Problem], int]
    adapt: Callable[[tuple[int, ...], Problem, Problem], tuple[int, ...] | None] = lambda config, problem, fitted: config
    flops: Callable[[Problem], int] | None = None


def path(name: str, root: Path | None = None) -> Path:
    return (root or TUNED_DIR) / f"{name}.json"


@functools.cache
def table(name: str) -> dict[str, Any]:
    """`tuned/<name>.json` checked, as {arch: {device: fit}}; {} when there is none, and
    (with a warning) when it is malformed."""
    return load(path(name))


def load(where: Path) -> dict[str, Any]:
    """The checked tables in `where` ({} with a warning when malformed, silently when absent)."""
    try:
        text = where.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        warnings.warn(f"fitted configs {where} unreadable ({exc}); the op's own rules decide", RuntimeWarning, stacklevel=2)
        return {}
    try:
        data = json.loads(text)
        return _checked(data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        warnings.warn(f"fitted configs {where} malformed ({exc}); the op's own rules decide", RuntimeWarning, stacklevel=2)
        return {}


def _checked(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"format {data.get('format') if isinstance(data, dict) else None!r}, expected {FORMAT}")
    archs = data["archs"]
    if not isinstance(archs, dict):
        raise TypeError("'archs' is not an object")
    for arch, devices in archs.items():
        if not arch.startswith("sm_") or not isinstance(devices, dict):
            raise ValueError(f"architecture {arch!r}")
        for device, fit in devices.items():
            if not isinstance(fit.get("sms"), int) or not isinstance(fit.get("entries"), list):
                raise ValueError(f"{arch} {device}: 'sms' and 'entries' are required")
            for entry in fit["entries"]:
                problem, config = entry["problem"], entry["config"]
                if not (isinstance(problem, list) and problem and isinstance(problem[0], str)
                        and all(isinstance(v, int) and v > 0 for v in problem[1:])):
                    raise ValueError(f"{arch} {device}: problem {problem!r}")
                if not (isinstance(config, list) and config and all(isinstance(v, int) for v in config)):
                    raise ValueError(f"{arch} {device}: config {config!r}")
    return archs


def devices(table_name: str, arch: str) -> list[str]:
    """The devices of `arch` that table `table_name` has a fit for."""
    return sorted(table(table_name).get(arch, {}))


def _device_fit(table_name: str, arch: str, name: str | None, sms: int) -> dict[str, Any] | None:
    fits = table(table_name).get(arch)
    if not fits:
        return None
    if name in fits:
        return fits[name]  # type: ignore[no-any-return]
    return fits[min(fits, key=lambda d: (abs(fits[d]["sms"] - sms), d))]  # type: ignore[no-any-return]


def distance(a: Problem, b: Problem) -> float:
    """How far apart two problems of one dtype are: the sum of |log2| of their extents' ratios."""
    return sum(abs(math.log2(x / y)) for x, y in zip(a[1:], b[1:], strict=True))


def nearest(entries: Sequence[dict[str, Any]], problem: Problem) -> dict[str, Any] | None:
    """The entry of `problem`'s dtype and rank nearest to it, or None."""
    same = [e for e in entries if e["problem"][0] == problem[0] and len(e["problem"]) == len(problem)]
    return min(same, key=lambda e: (distance(tuple(e["problem"]), problem), e["problem"])) if same else None


def current_device(index: int) -> tuple[str, str | None, int]:
    """(architecture, device name or None, SM count) of device `index`, or of the target
    being described (index -1): its fitted device if it names one."""
    from . import _device

    if index < 0:
        target = _describe.target()
        return target.arch, target.device, target.sms
    import torch

    major, minor = torch.cuda.get_device_capability(index)
    return f"sm_{major}{minor}", torch.cuda.get_device_name(index), _device.sm_count(index)


def fitted(table_name: str, problem: Problem, index: int | None, rule: Callable[[], tuple[int, ...]],
           adapt: Callable[[tuple[int, ...], Problem, Problem], tuple[int, ...] | None] | None = None,
           stand_in: str | None = None) -> tuple[int, ...]:
    """The config table `table_name` fits to `problem` on device `index` (None: the current
    CUDA device, and the rule where there is none), through `adapt` (as `Tuning.adapt`), else
    `rule()`. Where the table has no entry of the problem's dtype, those of dtype `stand_in`
    serve (e.g. bfloat16's for float16: the same kernels on operands of the same size). A
    problem with an empty extent (nothing to launch) takes the rule."""
    if any(v <= 0 for v in problem[1:]):
        return rule()
    if index is None:
        import torch

        if not torch.cuda.is_available():
            return rule()
        index = torch.cuda.current_device()
    arch, name, sms = current_device(index)
    fit = _device_fit(table_name, arch, name, sms)
    entry = nearest(fit["entries"], problem) if fit else None
    if entry is None and fit and stand_in is not None:
        entry = nearest(fit["entries"], (stand_in, *problem[1:]))
    if entry is None:
        return rule()
    config = tuple(entry["config"])
    ruled = rule()
    if len(config) != len(ruled):
        warnings.warn(f"fitted config {config} in {path(table_name)} is not of the op's form {ruled}; the op's own rule decides",
                      RuntimeWarning, stacklevel=2)
        return ruled
    adapted = adapt(config, problem, tuple(entry["problem"])) if adapt is not None else config
    return ruled if adapted is None else adapted


def describe_targets(arch: str, sms: Sequence[int], tables: Sequence[str]) -> list[_describe.Target]:
    """The targets the wheel's build describes for `arch`: each common SM count (a device
    without a table of its own takes the nearest fitted one), and each device one of
    `tables` has a fit for."""
    named = sorted({d for t in tables for d in devices(t, arch)})
    return [_describe.Target(arch, n) for n in sms] + [
        _describe.Target(arch, _fitted_sms(tables, arch, d), d) for d in named
    ]


def _fitted_sms(tables: Sequence[str], arch: str, device: str) -> int:
    return next(int(table(t)[arch][device]["sms"]) for t in tables if device in table(t).get(arch, {}))
