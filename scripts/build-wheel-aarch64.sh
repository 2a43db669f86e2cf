#!/usr/bin/env bash
# Cross-builds the manylinux_2_28_aarch64 wheel (Grace Hopper, Grace Blackwell) on an
# x86_64 machine, from the same sources and lock as the x86_64 one, without Docker:
#   bash scripts/build-wheel-aarch64.sh [OUT_DIR]     (default dist-aarch64)
# - rustup adds the aarch64 standard library; cargo-zigbuild (a build requirement) links
#   against glibc 2.28 for aarch64.
# - The CUDA headers come from the aarch64 builds of the header wheels pyproject.toml pins
#   (pip download for the target platform, not the host), unpacked once to a stable path.
# Then auditwheel must accept the wheel as manylinux_2_28_aarch64; tests/test_cross_wheel.py
# compares it with the x86_64 wheel (ELF machine, exports, NEEDED, generated files).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
out=${1:-dist-aarch64}
arch=aarch64

rustup target add "$arch-unknown-linux-gnu"
"$py" -m pip install -q "auditwheel==6.4.2"

headers=$PWD/target/build-inputs/cu13-$arch
pins=$("$py" - <<'PY'
import re, tomllib
reqs = tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]
print(" ".join(r for r in reqs if re.match(r"nvidia-(cuda-runtime|cuda-crt|curand)==", r)))
PY
)
if [[ ! -f $headers/.stamp || $(cat "$headers/.stamp") != "$pins" ]]; then
  rm -rf "$headers" "$headers.download"
  # shellcheck disable=SC2086 # one argument per pinned requirement
  "$py" -m pip download -q --no-deps --only-binary=:all: -d "$headers.download" \
    --platform "manylinux_2_28_$arch" --platform "manylinux_2_27_$arch" \
    --platform "manylinux_2_17_$arch" --platform "manylinux2014_$arch" $pins
  for wheel in "$headers.download"/*.whl; do
    case $wheel in *"_$arch.whl") ;; *) echo "error: $wheel is not an $arch wheel" >&2; exit 1 ;; esac
    "$py" -m zipfile -e "$wheel" "$headers"
  done
  rm -rf "$headers.download"
  echo "$pins" > "$headers/.stamp"
fi

rm -rf "$out"
CUDA_TOOLKIT_PATH=$headers/nvidia/cu13 TILEGYM_CUTILE_RS_TARGET_ARCH=$arch \
  "$py" -m pip wheel . --no-deps -w "$out"
"$py" -m auditwheel show "$out"/tilegym_cutile_rs-*.whl | tee "$out/auditwheel.txt"
grep -q "consistent with the following platform tag: \"manylinux_2_28_$arch\"" "$out/auditwheel.txt" ||
  { echo "error: the $arch wheel is not manylinux_2_28_$arch (see above)" >&2; exit 1; }
