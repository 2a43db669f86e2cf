#!/usr/bin/env bash
# The CPU test job (what .ci/run and the CPU workflow run): builds the wheel
# with `pip wheel .`, installs it into .venv, then runs the Rust tests (the
# kernels lower and assemble for sm_90 with tileiras, no GPU needed) and the
# Python tests. Needs only python3 (>= 3.10) and a Rust toolchain; everything
# else comes from PyPI and crates.io.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$python" -m venv .venv
py=.venv/bin/python
# torch's CUDA wheels are 100+ MB each: a broken download resumes (pip >= 25.1), and an
# install that still fails is tried again, so one dropped connection does not fail CI.
export PIP_RETRIES=10 PIP_TIMEOUT=60 PIP_RESUME_RETRIES=20
pip_install() {
  local python=$1 try
  shift
  for try in 1 2 3; do
    "$python" -m pip install -q "$@" && return 0
    echo "pip install failed (try $try of 3)" >&2
    sleep 15
  done
  return 1
}
pip_install "$py" --upgrade pip
# torch for the Python tests.
pip_install "$py" "torch==2.11.0" "cffi==2.0.0" "build==1.6.1"
# CUDA headers + libclang for `cargo test`'s debug build, the same pins as
# pyproject's build requirements, in their own venv: torch pins an older
# nvidia-cuda-runtime.
[[ -x .venv-build/bin/python ]] || "$python" -m venv .venv-build
pip_install .venv-build/bin/python \
  "nvidia-cuda-runtime==13.4.92" "nvidia-cuda-crt==13.4.92" "nvidia-curand==10.4.4.72" "libclang==18.1.1"

echo "== pip wheel ."
rm -rf dist
"$py" -m pip wheel . --no-deps -w dist
"$py" -m pip install -q --force-reinstall --no-deps dist/tilegym_cutile_rs-*.whl
pip_install "$py" --find-links dist "tilegym-cutile-rs[tileiras,test,tilegym]" "wheel==0.45.1"
# cuobjdump and nvdisasm of the same CUDA release, beside tileiras: the GEMM lowering test reads
# the sm_90 SASS of the fitted variants (HGMMA, TMA).
pip_install "$py" "nvidia-cuda-cuobjdump==13.4.92" "nvidia-cuda-nvdisasm==13.4.92"

echo "== shipped kernels: every op's common shapes compiled for every architecture, into the wheel"
"$py" scripts/ship_kernels.py dist/tilegym_cutile_rs-*.whl --archs all
"$py" -m pip install -q --force-reinstall --no-deps dist/tilegym_cutile_rs-*.whl

echo "== the wheel: manylinux_2_28 (auditwheel), contents, metadata"
"$py" -m pip install -q "auditwheel==6.4.2" "check-wheel-contents==0.6.3" "twine==6.2.0"
.venv/bin/auditwheel show dist/tilegym_cutile_rs-*.whl | tee dist/auditwheel.txt
grep -q 'consistent with the following platform tag: "manylinux_2_28_x86_64"' dist/auditwheel.txt ||
  { echo "error: the wheel is not manylinux_2_28 (see above)" >&2; exit 1; }
.venv/bin/check-wheel-contents dist/tilegym_cutile_rs-*.whl
.venv/bin/twine check --strict dist/tilegym_cutile_rs-*.whl

echo "== sdist, and a wheel built from it"
rm -rf dist-sdist
"$py" -m build --sdist -o dist-sdist .
CARGO_TARGET_DIR=$PWD/target "$py" -m pip wheel dist-sdist/tilegym_cutile_rs-*.tar.gz --no-deps -w dist-sdist

echo "== the aarch64 wheel, cross-built (tests/test_cross_wheel.py compares it with the x86_64 one)"
bash scripts/build-wheel-aarch64.sh dist-aarch64
"$py" scripts/ship_kernels.py dist-aarch64/tilegym_cutile_rs-*.whl --from dist/tilegym_cutile_rs-*.whl

purelib() { "$1" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }
build_site=$(purelib .venv-build/bin/python)
kit=$(purelib "$py")/nvidia/cu13  # the [tileiras] extra: tileiras, ptxas, libNVVM
export CUDA_TOOLKIT_PATH=$build_site/nvidia/cu13 LIBCLANG_PATH=$build_site/clang/native
export BINDGEN_EXTRA_CLANG_ARGS="-isystem $(${CC:-cc} -print-file-name=include)"
export CUTILE_TILEIRAS_PATH=$kit/bin/tileiras PATH=$kit/bin:$PATH

echo "== lint: ruff, rustfmt, clippy; mypy --strict on the installed package"
"$py" -m pip install -q "ruff==0.14.9" "mypy==2.4.1"
.venv/bin/ruff check python tests benchmarks setup.py
# The installed package, not python/: it holds the modules the build generates.
root=$PWD
(cd "$(mktemp -d)" && "$root/.venv/bin/mypy" --config-file "$root/pyproject.toml" -p tilegym_cutile_rs)
cargo fmt --all --check
cargo clippy --locked --workspace --all-targets -- -D warnings

echo "== cargo test"
cargo test --locked --workspace

echo "== workflow files: schema and zizmor (offline)"
"$py" -m pip install -q "check-jsonschema==0.39.0" "zizmor==1.32.0"
.venv/bin/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml
.venv/bin/zizmor --offline --min-severity medium .github/workflows/

echo "== pytest"
"$py" -m pytest tests -ra
