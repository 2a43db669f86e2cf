#!/usr/bin/env bash
# The GPU job: install the wheel, check the machine, run the GPU tests (zero
# skips allowed) and the benchmark. The same script runs in the self-hosted
# GPU workflow and, unchanged, on a GPU machine with no network:
#
#   scripts/gpu-tests.sh WHEELHOUSE [TILEIRAS_KIT]
#
#   WHEELHOUSE    directory with tilegym_cutile_rs-*.whl (with its shipped kernels,
#                 scripts/ship_kernels.py, for this GPU's architecture at least: the GPU
#                 tests run them without a toolchain), tilegym and cuda-tile (the
#                 TileGym integration tests and the cuTile Python peer), and any
#                 dependency the machine lacks (cffi, pycparser, platformdirs,
#                 hypothesis, sortedcontainers, pytest, ...); pip never goes online.
#   TILEIRAS_KIT  the toolchain, as the .tar.xz from pack-tileiras-kit.sh or an
#                 unpacked nvidia/cu13 directory. Without it, the wheelhouse
#                 must hold the [tileiras] extra's NVIDIA wheels.
#
# Results (junit.xml, check.json, benchmark tables) go to $RESULTS_DIR (default gpu-results).
# TESTS=0 skips the tests (benchmarks only); BENCHMARKS="" skips the benchmarks.
set -euo pipefail
wheelhouse=${1:?usage: scripts/gpu-tests.sh WHEELHOUSE [TILEIRAS_KIT]}
kit=${2:-}
python=${PYTHON:-python3}
results=${RESULTS_DIR:-gpu-results}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$results"
results=$(cd "$results" && pwd)
export PYTHONUNBUFFERED=1

spec=tilegym-cutile-rs
if [[ -n $kit ]]; then
  if [[ -f $kit ]]; then
    dest=${KIT_DIR:-/opt/tileiras}
    mkdir -p "$dest"
    tar xJf "$kit" -C "$dest"
    kit=$dest/nvidia/cu13
  fi
  # tileiras finds the ptxas/libNVVM of its release through these (cuTile Python too).
  export CUTILE_TILEIRAS_PATH=$kit/bin/tileiras CUDA_HOME=$kit PATH=$kit/bin:$PATH
else
  spec="tilegym-cutile-rs[tileiras]"
fi

echo "== install from $wheelhouse"
"$python" -m pip install --no-index --find-links "$wheelhouse" --upgrade --force-reinstall --no-deps "$wheelhouse"/tilegym_cutile_rs-*.whl
"$python" -m pip install --no-index --find-links "$wheelhouse" "$spec" pytest hypothesis
# TileGym imports with torch, cuda-bindings and cuda-tile; its other requirements
# (transformers, pandas, ...) serve models, not the ops tested here. Without them in
# the wheelhouse the TileGym tests skip, which fails the run below.
if compgen -G "$wheelhouse/tilegym-*.whl" >/dev/null; then
  "$python" -m pip install --no-index --find-links "$wheelhouse" --no-deps tilegym cuda-tile
fi
# gpt-oss carries OpenAI's Triton attention with sinks, a benchmark peer; its model-serving
# requirements are not needed for that module.
if compgen -G "$wheelhouse/gpt_oss-*.whl" >/dev/null; then
  "$python" -m pip install --no-index --find-links "$wheelhouse" --no-deps gpt-oss
fi

status=0
echo "== check"
"$python" -m tilegym_cutile_rs.check || status=$?
"$python" -m tilegym_cutile_rs.check --json > "$results/check.json" || true

cd "$here"
# Runs the tests with pytest marker $1 (JUnit to $2); none may be skipped, and some must run.
run_marked() {
  local marker=$1 junit=$2 counts n_skipped n_tests
  "$python" -m pytest -m "$marker" tests -ra -q --junitxml="$junit" || status=$?
  counts=$("$python" -c "import sys, xml.etree.ElementTree as ET; r = ET.parse(sys.argv[1]).getroot(); s = r if r.tag == 'testsuite' else r[0]; print(s.get('skipped'), s.get('tests'))" "$junit")
  read -r n_skipped n_tests <<<"$counts"
  echo "$marker tests: $n_tests run, $n_skipped skipped"
  if [[ $n_tests == 0 || $n_skipped != 0 ]]; then
    echo "error: $marker tests must all run on this machine ($n_skipped skipped of $n_tests)" >&2
    status=1
  fi
}

if [[ ${TESTS:-1} == 1 ]]; then
  echo "== GPU tests"
  run_marked gpu "$results/junit.xml"
  n_gpus=$("$python" -c "import torch; print(torch.cuda.device_count())")
  if (( n_gpus >= 2 )); then
    echo "== two-GPU tests ($n_gpus GPUs)"
    run_marked gpu2 "$results/junit-gpu2.xml"
  else
    echo "== two-GPU tests: not run, this machine has $n_gpus GPU"
  fi
fi

# TILEGYM_TESTS: a folder holding TileGym's own tests/ (tests/ops/test_<op>.py, as published
# in NVIDIA/TileGym). Runs the cutile-rs cases of the file of every op we provide, with our
# backend registered the documented way and no cargo on PATH (TileGym's conftest spells the
# backend cutile_rs in generated test ids, cutile-rs in its own); scripts/tilegym_junit.py
# fails the run on a failure or on a skip other than the ones the files hard-code by name.
if [[ ${TESTS:-1} == 1 && -n ${TILEGYM_TESTS:-} ]]; then
  echo "== TileGym's own tests, cutile-rs cases ($TILEGYM_TESTS)"
  mapfile -t tilegym_files < <("$python" -c "
import os, sys
from tilegym_cutile_rs.tilegym_backend import provided_ops
for op in sorted(provided_ops()):
    f = f'tests/ops/test_{op.removeprefix(\"get_\")}.py'
    if os.path.isfile(os.path.join(sys.argv[1], f)) and 'cutile-rs' in open(os.path.join(sys.argv[1], f)).read():
        print(f)" "$TILEGYM_TESTS")
  echo "files: ${tilegym_files[*]}"
  no_cargo_path=$(tr ':' '\n' <<<"$PATH" | while read -r d; do [[ -x $d/cargo ]] || printf '%s:' "$d"; done)
  (cd "$TILEGYM_TESTS" && PATH=${no_cargo_path%:} TILEGYM_CUTILE_RS_REGISTER=1 \
     "$python" -m pytest -p tilegym_cutile_rs "${tilegym_files[@]}" -k "cutile-rs or cutile_rs" -q -ra \
     --junitxml="$results/junit-tilegym.xml") || status=$?
  "$python" scripts/tilegym_junit.py "$results/junit-tilegym.xml" || status=1
fi

# BENCHMARKS names the scripts to run, as benchmarks/<name>.py or benchmarks/<name>_bench.py
# (e.g. "softmax swiglu first_call softmax_sweep softmax_profile"); by default every
# benchmarks/*_bench.py but the build one, so an op's benchmark runs once its file exists.
# BENCH_ARGS go to each. Tables go to $RESULTS_DIR/<script>.md.
default_benchmarks=$(cd benchmarks && ls ./*_bench.py | sed 's|^\./||; s|\.py$||' | grep -v '^build_bench$' | tr '\n' ' ')
for bench in ${BENCHMARKS-$default_benchmarks}; do
  script=benchmarks/$bench.py
  [[ -f $script ]] || script=benchmarks/${bench//-/_}_bench.py
  echo "== benchmark $bench ($script)"
  if [[ ! -f $script ]]; then
    echo "unknown benchmark $bench" >&2; status=1; continue
  fi
  # shellcheck disable=SC2086 # BENCH_ARGS holds several arguments
  "$python" "$script" ${BENCH_ARGS:-} | tee "$results/$(basename "$script" .py).md" || status=1
done
exit $status
