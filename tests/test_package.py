"""CPU tests of the packaging: the wheel, the generated manifest and the loader."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import cffi
import pytest
import tilegym_cutile_rs
from tilegym_cutile_rs import _library

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"


def _elf(path: Path) -> tuple[list[str], set[str]]:
    """(NEEDED entries, defined global function symbols) of a shared library."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as f:
        elf = ELFFile(f)
        needed = [t.needed for s in elf.iter_sections() if isinstance(s, DynamicSection) for t in s.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
        dynsym = elf.get_section_by_name(".dynsym")
        symbols = {
            s.name
            for s in dynsym.iter_symbols()
            if s["st_info"]["type"] == "STT_FUNC" and s["st_info"]["bind"] == "STB_GLOBAL" and s["st_shndx"] != "SHN_UNDEF"
        }
    return needed, symbols


def _wheels() -> list[Path]:
    wheel_dir = Path(os.environ.get("TILEGYM_WHEEL_DIR", ROOT / "dist"))
    return sorted(wheel_dir.glob("tilegym_cutile_rs-*.whl"))


def test_wheel_tag_and_contents() -> None:
    wheels = _wheels()
    if not wheels:
        pytest.skip("no wheel built (set TILEGYM_WHEEL_DIR or run `pip wheel . -w dist`)")
    for wheel in wheels:
        # One wheel for every CPython: py3-none-<platform>.
        _, _, py, abi, plat = wheel.stem.split("-")
        assert (py, abi) == ("py3", "none"), wheel.name
        assert plat.startswith(("linux_", "manylinux")), wheel.name
        names = set(zipfile.ZipFile(wheel).namelist())
        for member in ("libcutile_kernels.so", "_cdef.py", "_abi_manifest.py", "cutile_kernels.h", "__init__.py"):
            assert f"tilegym_cutile_rs/{member}" in names, f"{member} missing from {wheel.name}"


def test_library_needs_no_libcuda_and_exports_exactly_the_manifest() -> None:
    needed, symbols = _elf(_library.library_path())
    assert not [n for n in needed if "libcuda" in n], needed
    exported = {s for s in symbols if s.startswith("cutile_")}
    manifest = set(_library.manifest().FUNCTIONS)
    assert "cutile_softmax" in manifest
    assert exported == manifest


def test_manifest_matches_packaged_header_and_library() -> None:
    import hashlib

    man = _library.manifest()
    header = (_library.PACKAGE_DIR / man.HEADER).read_text()
    assert hashlib.sha256(header.encode()).hexdigest() == man.FINGERPRINT
    lib = _library.library()
    assert _library.ffi().string(lib.cutile_abi_fingerprint()).decode() == man.FINGERPRINT
    assert _library.ffi().sizeof("TensorDesc") == 104
    assert _library.ffi().offsetof("TensorDesc", "strides") == 56
    assert _library.ffi().offsetof("TensorDesc", "dtype") == 96
    # The library's ops are the Python package's, each with its own module.
    from tilegym_cutile_rs import _registry

    assert _library.ops() == list(_registry.ops()) and _library.ops()


def _cdef_gen(source: Path) -> str:
    cargo = shutil.which("cargo")
    if cargo is None:
        pytest.skip("cargo not on PATH")
    out = subprocess.run(
        [cargo, "run", "--locked", "--quiet", "-p", "cdef_gen", "--", str(source)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_ffi_signature_change_changes_generated_declarations() -> None:
    v1, v2 = _cdef_gen(FIXTURES / "ffi_v1.rs"), _cdef_gen(FIXTURES / "ffi_v2.rs")
    assert v1 != v2
    for header, factor in ((v1, "float"), (v2, "double")):
        ffi = cffi.FFI()
        ffi.cdef(header)  # what the build feeds cffi; it must parse as is
        assert ffi.typeof("ScaleArgs").fields[0][1].type.cname == factor
    assert "int32_t cutile_scale(int32_t n, const struct ScaleArgs *args);" in v1
    assert "int32_t cutile_scale(int64_t n, const struct ScaleArgs *args, uint64_t stream);" in v2


def _run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=env
    )


def test_import_and_load_spawn_nothing_and_need_no_cargo() -> None:
    env = dict(os.environ, PATH=str(Path(sys.executable).parent))
    assert shutil.which("cargo", path=env["PATH"]) is None
    out = _run_python(
        """
        import sys
        events = []
        def hook(name, args):
            if name in ("subprocess.Popen", "os.system", "os.posix_spawn", "os.exec", "os.fork", "os.spawn"):
                events.append(name)
        sys.addaudithook(hook)
        import tilegym_cutile_rs
        from tilegym_cutile_rs import _library
        lib = _library.library()
        _library.library()
        print("events", events)
        print("fingerprint", _library.ffi().string(lib.cutile_abi_fingerprint()).decode())
        """,
        env,
    )
    assert out.returncode == 0, out.stderr
    assert "events []" in out.stdout
    assert _library.manifest().FINGERPRINT in out.stdout


def test_fingerprint_mismatch_raises_naming_both() -> None:
    out = _run_python(
        """
        from tilegym_cutile_rs import _abi_manifest, _library
        from tilegym_cutile_rs.errors import ABIMismatchError
        real = _abi_manifest.FINGERPRINT
        _abi_manifest.FINGERPRINT = "0" * 64
        try:
            _library.library()
        except ABIMismatchError as e:
            msg = str(e)
            assert real in msg and "0" * 64 in msg and "reinstall" in msg, msg
            print("raised")
        """
    )
    assert out.returncode == 0, out.stderr
    assert "raised" in out.stdout


def _load_override(libpath: str, error: str) -> str:
    """Load the library with $TILEGYM_CUTILE_RS_LIBRARY=libpath in a fresh
    interpreter; the message of the `error` it raised, after "raised:"."""
    out = _run_python(
        f"""
        from tilegym_cutile_rs import _library
        from tilegym_cutile_rs.errors import {error}
        try:
            _library.library()
        except {error} as e:
            print("raised:", e)
        """,
        dict(os.environ, TILEGYM_CUTILE_RS_LIBRARY=libpath),
    )
    assert out.returncode == 0, out.stderr
    assert "raised:" in out.stdout, out.stdout + out.stderr
    return out.stdout


def test_foreign_library_override_is_refused() -> None:
    # A real shared library that is not ours (libgcc_s, which ours links): the
    # fingerprint check applies to overrides too.
    resolved = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    libpath = next(line.split("=>")[1].strip() for line in resolved.splitlines() if "libgcc_s.so.1 " in line)
    assert "cutile_abi_fingerprint" in _load_override(libpath, "ABIMismatchError")


def test_missing_library_override_is_a_clear_error() -> None:
    assert "does not exist" in _load_override("/nonexistent/libcutile_kernels.so", "LibraryError")


def test_ops_are_exported_from_their_modules() -> None:
    import importlib

    from tilegym_cutile_rs import _registry

    for name in _registry.ops():
        module = importlib.import_module(f"tilegym_cutile_rs.ops.{name}")
        assert module.__all__, name
        for export in module.__all__:
            assert getattr(tilegym_cutile_rs, export) is getattr(module, export)
            assert export in tilegym_cutile_rs.__all__ and export in dir(tilegym_cutile_rs)
    with pytest.raises(AttributeError):
        tilegym_cutile_rs.no_such_op  # noqa: B018


def _glibc_versions(path: Path) -> set[tuple[int, ...]]:
    """The GLIBC_x.y symbol versions a shared library requires."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    with path.open("rb") as f:
        elf = ELFFile(f)
        versions = set()
        for section in elf.iter_sections():
            if isinstance(section, GNUVerNeedSection):
                for _, aux in section.iter_versions():
                    for a in aux:
                        if a.name.startswith("GLIBC_"):
                            versions.add(tuple(int(p) for p in a.name[6:].split(".")))
    return versions


def test_library_needs_glibc_2_28_at_most() -> None:
    # manylinux_2_28: setup.py links with cargo-zigbuild against glibc 2.28 whatever the build machine has.
    versions = _glibc_versions(_library.library_path())
    assert versions and max(versions) <= (2, 28), sorted(versions)[-3:]
    for wheel in _wheels():
        assert "manylinux_2_28_" in wheel.name, wheel.name


def test_sdist_builds_the_same_wheel() -> None:
    sdist_dir = ROOT / "dist-sdist"
    from_sdist = sorted(sdist_dir.glob("tilegym_cutile_rs-*.whl"))
    if not from_sdist or not _wheels():
        pytest.skip("scripts/test.sh builds dist/ and dist-sdist/; run it first")
    assert list(sdist_dir.glob("tilegym_cutile_rs-*.tar.gz")), "the sdist itself is missing"
    a, b = zipfile.ZipFile(_wheels()[0]), zipfile.ZipFile(from_sdist[0])
    assert _wheels()[0].name == from_sdist[0].name
    # The same files, but for the shipped kernels scripts/ship_kernels.py adds to release wheels.
    def files(wheel: zipfile.ZipFile) -> list[str]:
        return sorted(n for n in wheel.namelist() if not n.startswith("tilegym_cutile_rs/kernels/"))

    assert files(a) == files(b)
    assert "tilegym_cutile_rs/kernels/index.json" in a.namelist() and "tilegym_cutile_rs/kernels/index.json" not in b.namelist()
    for member in ("tilegym_cutile_rs/_abi_manifest.py", "tilegym_cutile_rs/cutile_kernels.h", "tilegym_cutile_rs/_cdef.py"):
        assert a.read(member) == b.read(member), member


def test_stale_library_in_a_source_checkout_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "python" / "tilegym_cutile_rs"
    pkg.mkdir(parents=True)
    (tmp_path / "crates" / "cutile_kernels" / "src").mkdir(parents=True)
    (tmp_path / "crates" / "cutile_kernels" / "Cargo.toml").write_text("")
    (tmp_path / "Cargo.toml").write_text("")
    (tmp_path / "Cargo.lock").write_text("")
    kernel = tmp_path / "crates" / "cutile_kernels" / "src" / "lib.rs"
    kernel.write_text("")
    lib = pkg / "libcutile_kernels.so"
    lib.write_text("")
    monkeypatch.setattr(_library, "PACKAGE_DIR", pkg)
    old, new = 1_000_000_000, 1_000_000_100
    for p in (tmp_path / "Cargo.toml", tmp_path / "Cargo.lock", tmp_path / "crates" / "cutile_kernels" / "Cargo.toml", kernel):
        os.utime(p, (old, old))
    os.utime(lib, (new, new))
    _library.check_fresh(lib)  # built after its sources: fine
    os.utime(kernel, (new + 1, new + 1))
    with pytest.raises(tilegym_cutile_rs.StaleLibraryError, match=r"crates/cutile_kernels/src/lib.rs.*pip install -e \."):
        _library.check_fresh(lib)


def test_every_public_op_has_a_real_signature_for_type_checkers(tmp_path: Path) -> None:
    # What an IDE or type checker sees of the installed package, statically: each op
    # re-exported by name with its annotated signature (not a module __getattr__'s Any).
    from mypy import api
    from tilegym_cutile_rs import _registry

    names = [n for name in _registry.ops() for n in __import__(f"tilegym_cutile_rs.ops.{name}", fromlist=["__all__"]).__all__]
    user = tmp_path / "user.py"
    user.write_text("import tilegym_cutile_rs\n" + "".join(f"reveal_type(tilegym_cutile_rs.{n})\n" for n in names))
    stdout, stderr, _ = api.run([str(user), "--no-incremental", "--cache-dir", str(tmp_path / "cache")])
    revealed = [line for line in stdout.splitlines() if "Revealed type" in line]
    assert len(revealed) == len(names), stdout + stderr
    for name, line in zip(names, revealed, strict=True):
        assert "Any" not in line.split("Revealed type is", 1)[1], f"{name}: {line}"
    softmax = next(line for name, line in zip(names, revealed, strict=True) if name == "softmax")
    assert "def (x: torch._tensor.Tensor, dim: int =, *, config: " in softmax, softmax
    assert "SoftmaxConfig" in softmax and softmax.endswith('autotune: bool =) -> torch._tensor.Tensor"'), softmax


def test_the_version_has_one_home() -> None:
    # pyproject.toml's version, written into the package at build time, is what pip sees.
    import importlib.metadata

    assert tilegym_cutile_rs.__version__ == importlib.metadata.version("tilegym-cutile-rs")
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    assert tilegym_cutile_rs.__version__ == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_warmup_without_ops_names_the_ops_each_shape_convention_fits() -> None:
    import torch
    from tilegym_cutile_rs import _registry

    specs = _registry.ops()

    def takers(shape: tuple[int, ...], dtype: torch.dtype) -> set[str]:
        return {name for name, spec in specs.items() if spec.warms_up(shape, dtype)}

    assert takers((4096, 4096), torch.float32) == {"matmul", "rms_norm", "softmax", "swiglu"}
    assert takers((1, 32, 4096, 128), torch.bfloat16) == {"rms_norm", "rope", "softmax", "swiglu"}
    assert takers((1, 128, 2048, 8, 8, 64), torch.bfloat16) == {"attention_sink", "rms_norm", "softmax", "swiglu"}
    assert "attention_sink" not in takers((1, 128, 2048, 8, 8, 64), torch.float32)  # 16-bit only
    assert "rms_norm" not in takers((4, 32768), torch.bfloat16)  # rows up to 16384
