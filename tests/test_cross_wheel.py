"""The aarch64 wheel cross-built on x86_64 (scripts/build-wheel-aarch64.sh) against the
x86_64 one: an aarch64 library with the same C exports, no libcuda NEEDED, glibc 2.28 at
most, and the same generated declarations, fingerprint and exports."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # pyelftools comes with the [test] extra; the GPU job collects this file without it
    from elftools.elf.elffile import ELFFile

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ("_cdef.py", "_abi_manifest.py", "cutile_kernels.h", "_exports.py")


def _wheel(directory: Path) -> Path:
    found = sorted(directory.glob("tilegym_cutile_rs-*.whl"))
    if not found:
        pytest.skip(f"no wheel in {directory} (scripts/test.sh builds it)")
    return found[0]


def _library(wheel: Path) -> ELFFile:
    from elftools.elf.elffile import ELFFile

    data = zipfile.ZipFile(wheel).read("tilegym_cutile_rs/libcutile_kernels.so")
    return ELFFile(io.BytesIO(data))


def _exports(elf: ELFFile) -> set[str]:
    return {
        s.name
        for s in elf.get_section_by_name(".dynsym").iter_symbols()
        if s["st_info"]["type"] == "STT_FUNC" and s["st_info"]["bind"] == "STB_GLOBAL" and s["st_shndx"] != "SHN_UNDEF"
    }


def test_the_aarch64_wheel_matches_the_x86_64_one() -> None:
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.gnuversions import GNUVerNeedSection

    arm = _wheel(Path(os.environ.get("TILEGYM_AARCH64_WHEEL_DIR", ROOT / "dist-aarch64")))
    x86 = _wheel(Path(os.environ.get("TILEGYM_WHEEL_DIR", ROOT / "dist")))
    assert arm.name.endswith("-py3-none-manylinux_2_28_aarch64.whl"), arm.name
    assert x86.name.endswith("-py3-none-manylinux_2_28_x86_64.whl"), x86.name
    arm_lib, x86_lib = _library(arm), _library(x86)
    assert arm_lib["e_machine"] == "EM_AARCH64" and x86_lib["e_machine"] == "EM_X86_64"
    ours = {name for name in _exports(arm_lib) if name.startswith("cutile_")}
    assert ours and ours == {name for name in _exports(x86_lib) if name.startswith("cutile_")}
    needed = [t.needed for s in arm_lib.iter_sections() if isinstance(s, DynamicSection) for t in s.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    assert not [n for n in needed if "libcuda" in n], needed
    glibc = {
        tuple(int(p) for p in a.name[6:].split("."))
        for s in arm_lib.iter_sections()
        if isinstance(s, GNUVerNeedSection)
        for _, aux in s.iter_versions()
        for a in aux
        if a.name.startswith("GLIBC_")
    }
    assert glibc and max(glibc) <= (2, 28), sorted(glibc)[-3:]
    for member in GENERATED:  # one manifest, one fingerprint, one export list for both
        name = f"tilegym_cutile_rs/{member}"
        assert zipfile.ZipFile(arm).read(name) == zipfile.ZipFile(x86).read(name), member
    # The same shipped kernels (they depend on the GPU, not on the host CPU).
    kernels = [n for n in zipfile.ZipFile(x86).namelist() if n.startswith("tilegym_cutile_rs/kernels/")]
    assert "tilegym_cutile_rs/kernels/index.json" in kernels
    assert kernels == [n for n in zipfile.ZipFile(arm).namelist() if n.startswith("tilegym_cutile_rs/kernels/")]
    for name in kernels[:20] + ["tilegym_cutile_rs/kernels/index.json"]:
        assert zipfile.ZipFile(arm).read(name) == zipfile.ZipFile(x86).read(name), name
