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
# STAGES picks what runs, in order (default "tests tilegym benchmarks"), so that each call on
# a lent machine stays under its time limit: "tests" our GPU tests, "tilegym" TileGym's own
# files (TILEGYM_TESTS; their memory-heavy perf cases in a serial pass of their own),
# "benchmarks" the BENCHMARKS. The install and the check run in every call.
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
# (pandas, matplotlib, ...) serve its benchmarks, not the ops tested here. Without TileGym in
# the wheelhouse the TileGym tests skip, which fails the run below.
if compgen -G "$wheelhouse/tilegym-*.whl" >/dev/null; then
  "$python" -m pip install --no-index --find-links "$wheelhouse" --no-deps tilegym cuda-tile
fi
# gpt-oss carries OpenAI's Triton attention with sinks, a benchmark peer; its model-serving
# requirements are not needed for that module.
if compgen -G "$wheelhouse/gpt_oss-*.whl" >/dev/null; then
  "$python" -m pip install --no-index --find-links "$wheelhouse" --no-deps gpt-oss
fi
# Liger-Kernel, a benchmark peer (swiglu, rms_norm): Triton kernels on the torch and Triton
# the machine has; without this its wheel sat in the wheelhouse and its columns went missing.
if compgen -G "$wheelhouse/liger_kernel-*.whl" >/dev/null; then
  "$python" -m pip install --no-index --find-links "$wheelhouse" --no-deps liger-kernel
fi

# transformers (TileGym's pinned 5.3.0) and its requirements: the model-patch tests run
# TileGym's Llama and GPT-OSS patches on small models (tests/test_model_patches_gpu.py).
if compgen -G "$wheelhouse/transformers-*.whl" >/dev/null; then
  "$python" -m pip install --no-index --find-links "$wheelhouse" transformers
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

stages=" ${STAGES:-tests tilegym benchmarks} "
if [[ $stages == *" tests "* ]]; then
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
if [[ $stages == *" tilegym "* && -n ${TILEGYM_TESTS:-} ]]; then
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
  # The perf cases hold the card's memory in TileGym's float32 references: a serial pass of
  # their own, after the rest (which PYTEST_ADDOPTS may spread over workers).
  for pass in rest perf; do
    if [[ $pass == rest ]]; then select="(cutile-rs or cutile_rs) and not test_perf"; addopts=${PYTEST_ADDOPTS:-}; else
      select="(cutile-rs or cutile_rs) and test_perf"; addopts=""; fi
    echo "-- $pass: -k '$select'"
    (cd "$TILEGYM_TESTS" && PATH=${no_cargo_path%:} TILEGYM_CUTILE_RS_REGISTER=1 PYTEST_ADDOPTS=$addopts \
       "$python" -m pytest -p tilegym_cutile_rs "${tilegym_files[@]}" -k "$select" -q -ra \
       --junitxml="$results/junit-tilegym-$pass.xml") || rc=$?
    # A failing case (exit 1) is the verdict's to judge below; anything else (an interrupted
    # or broken run) fails the job.
    if (( ${rc:-0} > 1 )); then status=$rc; fi
    unset rc
  done
  card_gib=$("$python" -c "import torch; print(torch.cuda.get_device_properties(0).total_memory / 2**30)")
  "$python" scripts/tilegym_junit.py "$results"/junit-tilegym-{rest,perf}.xml --card-gib "$card_gib" || status=1
fi

# BENCHMARKS names the scripts to run, as benchmarks/<name>.py or benchmarks/<name>_bench.py
# (e.g. "softmax swiglu first_call softmax_profile"); by default every
# benchmarks/*_bench.py but the build one, so an op's benchmark runs once its file exists.
# BENCH_ARGS go to each. Tables go to $RESULTS_DIR/<script>.md.
default_benchmarks=$(cd benchmarks && ls ./*_bench.py | sed 's|^\./||; s|\.py$||' | grep -v '^build_bench$' | tr '\n' ' ')
[[ $stages == *" benchmarks "* ]] || BENCHMARKS=""
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
