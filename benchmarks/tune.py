"""Fit an op's heuristic on this GPU: sweep its candidate configs over its tuning problems,
then write its fitted table into the package (tuned/<name>.json, read by the op's heuristic).

    python benchmarks/tune.py NAME [--budget SECONDS] [--results FILE] [--problems I,J] [--table FILE]

NAME is a table an op declares in its own module (`OpSpec.tunings`, each a _tuned.Tuning:
its name, problems, candidates, the op's rule, a bench that checks each config's result
against its reference, bytes per call): `swiglu`, `swiglu_backward`, `softmax`, `matmul`. Every
config of a problem is compiled first (a thread pool: tileiras runs as a child process), then
checked one at a time (its outputs poisoned with NaN first) and timed as the benchmarks time
(_timing.bench_timer: do_bench's mean, L2 flushed, or CUDA events). Each result is appended to --results as it is measured (JSON lines), and a
rerun resumes from that file. At --budget seconds the sweep stops cleanly, listing what it
did not measure. The table then gets, for every problem whose candidates were all measured,
the fastest config, its time and the rule's, under this GPU's architecture and name, with
its SM count, the commit, the tileiras version and the date; other devices' tables in the
file are kept. A problem left unmeasured keeps this device's earlier entry, if any.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def load_results(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Measured results so far, keyed by (problem, config) as JSON text; a torn last line
    (an interrupted write) is skipped."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
                found[(json.dumps(r["problem"]), json.dumps(r["config"]))] = r
            except (ValueError, KeyError, TypeError):
                continue
    return found


def fit(problems: list[tuple[Any, ...]], candidates: dict[str, list[tuple[int, ...]]], rule: dict[str, tuple[int, ...]],
        results: dict[tuple[str, str], dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """(entries, incomplete): the best config of each problem whose candidates all have a
    result (a failed config has an error and never wins), and the problems still missing some."""
    entries, incomplete = [], []
    for problem in problems:
        key = json.dumps(list(problem))
        got = [results.get((key, json.dumps(list(c)))) for c in candidates[key]]
        if any(r is None for r in got):
            incomplete.append(key)
            continue
        timed = [r for r in got if r is not None and "us" in r]
        if not timed:
            incomplete.append(key)
            continue
        best = min(timed, key=lambda r: r["us"])
        rule_result = results.get((key, json.dumps(list(rule[key]))), {})
        entries.append({"problem": list(problem), "config": best["config"], "us": best["us"],
                        "rule": list(rule[key]), "rule_us": rule_result.get("us")})
    return entries, incomplete


def write_table(path: Path, table: str, arch: str, device: str, meta: dict[str, Any], entries: list[dict[str, Any]]) -> None:
    """This device's fit into `path`, other devices' kept; entries of problems not refitted
    now keep their earlier values. Written to a temporary file and renamed."""
    from tilegym_cutile_rs import _tuned

    data: dict[str, Any] = {"format": _tuned.FORMAT, "table": table, "archs": {}}
    if path.exists():
        try:
            data["archs"] = _tuned._checked(json.loads(path.read_text()))
        except (ValueError, TypeError, KeyError) as exc:
            print(f"(replacing malformed {path}: {exc})", file=sys.stderr)
    earlier = data["archs"].get(arch, {}).get(device, {}).get("entries", [])
    refitted = {json.dumps(e["problem"]) for e in entries}
    kept = [e for e in earlier if json.dumps(e["problem"]) not in refitted]
    merged = sorted(kept + entries, key=lambda e: json.dumps(e["problem"]))
    data["archs"].setdefault(arch, {})[device] = {**meta, "entries": merged}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def commit() -> str:
    """TUNE_COMMIT (the commit of the wheel under test, where the checkout is not it), else the
    checkout's HEAD, marked "-dirty" where tracked files differ from it (a copied working tree
    over a stale .git records that, not a commit it is not)."""
    env = os.environ.get("TUNE_COMMIT")
    if env:
        return env
    try:
        def git(*args: str) -> str:
            return subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=HERE).stdout.strip()

        head = git("rev-parse", "--short", "HEAD")
        return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def timer() -> Any:
    """us per call, timed as the benchmarks time it (_timing.bench_timer: do_bench's mean over
    about 100 ms, L2 flushed): a config is fitted by what the benchmark will measure. (Fits
    before 2026-12-06's matmul fit took do_bench's median over 40 ms; on the H100 the matmul
    bench then ran 8-warp 128 x 256 configs 14% slower than that sweep had timed them.)"""
    sys.path.insert(0, str(HERE))
    from _timing import bench_timer

    ms = bench_timer()
    return lambda fn: ms(fn) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="the table to fit (an op's tuning name)")
    parser.add_argument("--budget", type=float, default=540.0, help="seconds; the sweep stops cleanly at it")
    parser.add_argument("--results", type=Path, help="JSON lines of every measurement (default: tune-NAME.jsonl)")
    parser.add_argument("--problems", help="indices of the op's tuning problems to sweep (default: all)")
    parser.add_argument("--table", type=Path, help="the fitted table to write (default: the package's tuned/NAME.json in this checkout)")
    args = parser.parse_args(argv)
    started = time.monotonic()

    import torch
    from tilegym_cutile_rs import _registry, _toolchain

    tuning = _registry.tunings().get(args.name)
    if tuning is None:
        parser.error(f"no op declares a tuning {args.name!r}; declared: {', '.join(_registry.tunings())}")
    results_path = args.results or Path(f"tune-{args.name}.jsonl")
    table_path = args.table or HERE.parent / "python" / "tilegym_cutile_rs" / "tuned" / f"{args.name}.json"
    problems = list(tuning.problems)
    chosen = [problems[int(i)] for i in args.problems.split(",")] if args.problems else problems

    device = torch.device("cuda")
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    arch, name = f"sm_{major}{minor}", torch.cuda.get_device_name(index)
    sms = torch.cuda.get_device_properties(index).multi_processor_count
    results = load_results(results_path)
    print(f"tune {args.name} on {name} ({arch}, {sms} SMs): {len(chosen)} problems, {len(results)} results resumed from {results_path}",
          flush=True)
    candidates = {json.dumps(list(p)): [tuple(c) for c in tuning.candidates(p)] for p in problems}
    rule = {json.dumps(list(p)): tuple(tuning.rule(p)) for p in problems}
    measure = timer()
    unmeasured: list[str] = []
    with open(results_path, "a") as out:
        for problem in chosen:
            key = json.dumps(list(problem))
            todo = [c for c in candidates[key] if (key, json.dumps(list(c))) not in results]
            if not todo:
                continue
            if time.monotonic() - started > args.budget:
                unmeasured.append(f"{key} ({len(todo)} configs)")
                continue
            run = tuning.bench(problem, device)

            def prepare(config: tuple[int, ...], run: Any = run) -> Any:
                try:
                    return run(config)
                except Exception as exc:  # noqa: BLE001 - a config that fails to compile or check is data
                    return f"{type(exc).__name__}: {str(exc)[:200]}"

            with ThreadPoolExecutor(max_workers=max(2, (os.cpu_count() or 4) - 2)) as pool:
                prepared = list(pool.map(prepare, todo))
            torch.cuda.synchronize()
            for config, call in zip(todo, prepared, strict=True):
                if time.monotonic() - started > args.budget:
                    unmeasured.append(f"{key} {config}")
                    continue
                record: dict[str, Any] = {"problem": list(problem), "config": list(config)}
                if not isinstance(call, str):
                    try:
                        call.verify()
                    except Exception as exc:  # noqa: BLE001 - a wrong result is data too
                        call = f"{type(exc).__name__}: {str(exc)[:200]}"
                if isinstance(call, str):
                    record["error"] = call
                else:
                    record["us"] = round(measure(call), 3)
                results[(key, json.dumps(list(config)))] = record
                out.write(json.dumps(record) + "\n")
                out.flush()
            done = [results[(key, json.dumps(list(c)))] for c in candidates[key] if (key, json.dumps(list(c))) in results]
            timed = [r for r in done if "us" in r]
            if timed:
                best = min(timed, key=lambda r: r["us"])
                at_rule = results.get((key, json.dumps(list(rule[key]))), {}).get("us")
                rate = (f"{tuning.flops(problem) / (best['us'] * 1e-6) / 1e12:.0f} TFLOP/s" if tuning.flops
                        else f"{tuning.nbytes(problem) / (best['us'] * 1e-6) / 1e9:.0f} GB/s")
                print(f"{key}: best {tuple(best['config'])} {best['us']:.1f} us ({rate}); rule {rule[key]} "
                      f"{at_rule if at_rule is None else f'{at_rule:.1f} us'}; {len(done)}/{len(candidates[key])} measured, "
                      f"{len(done) - len(timed)} failed", flush=True)
            torch.cuda.empty_cache()

    entries, incomplete = fit(problems, candidates, rule, results)
    versions = _toolchain.configure().versions
    meta = {"sms": sms, "commit": commit(), "tileiras": versions.get("tileiras") or versions.get("nvidia-cuda-tileiras", "unknown"),
            "date": datetime.date.today().isoformat()}
    if entries:
        write_table(table_path, args.name, arch, name, meta, entries)
    print(f"\n### {args.name} fitted on {name} ({arch}), commit {meta['commit']}, tileiras {meta['tileiras']}\n")
    print("| problem | rule | rule us | fitted | fitted us | rule / fitted |")
    print("| --- | --- | --- | --- | --- | --- |")
    for e in entries:
        ratio = f"{e['rule_us'] / e['us']:.2f}x" if e["rule_us"] else "-"
        rule_us = f"{e['rule_us']:.1f}" if e["rule_us"] else "failed"
        print(f"| {tuple(e['problem'])} | {tuple(e['rule'])} | {rule_us} | {tuple(e['config'])} | {e['us']:.1f} | {ratio} |")
    print(f"\ntable: {table_path if entries else 'not written (no problem complete)'}")
    if incomplete or unmeasured:
        print(f"not measured within the budget ({len(incomplete)} problems incomplete; rerun to resume): "
              + "; ".join(unmeasured[:20]) + (" ..." if len(unmeasured) > 20 else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
