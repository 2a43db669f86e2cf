"""Build: setuptools-rust compiles crates/cutile_kernels (every op) into
tilegym_cutile_rs/libcutile_kernels.so; its build script generates the cdef
manifest (cutile_kernels.h) with cbindgen, and build_rust below turns that
header into the cffi out-of-line ABI module `_cdef.py`, so nothing parses C
at import. The wheel is tagged py3-none-<platform>: nothing in it depends on
the Python ABI.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py as _build_py
from setuptools_rust import Binding, RustExtension
from setuptools_rust.build import build_rust as _build_rust

try:
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # setuptools < 70
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel

PACKAGE = "tilegym_cutile_rs"
# The oldest glibc the library links against: cibuildwheel's default image, manylinux_2_28.
GLIBC = "2.28"
LIBRARY = "libcutile_kernels.so"
HEADER = "cutile_kernels.h"
# The CPU architecture the wheel is for (x86_64, aarch64); default: this machine's. Another
# one cross-builds through cargo-zigbuild (scripts/build-wheel-aarch64.sh does for aarch64).
TARGET_ARCH = os.environ.get("TILEGYM_CUTILE_RS_TARGET_ARCH") or platform.machine()


def _stable_copy(src: Path, name: str, stamp: str, only: list[str] | None = None, root: Path | None = None) -> Path:
    """Copy a build input (a directory, or the files `only` of it) from the (temporary,
    per-build) isolated environment to a fixed place: under `root`, by default the cargo
    target dir. cargo reruns build scripts and recompiles crates whenever a path they were
    built with changes (cuda-bindings reads CUDA_TOOLKIT_PATH/LIBCLANG_PATH), so a fresh
    temp path each build would rebuild cutile from scratch on every `pip wheel`."""
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path(__file__).resolve().parent / "target"))
    dest = (root or target / "build-inputs") / name
    marker = dest / ".stamp"
    if not (marker.is_file() and marker.read_text() == stamp):
        shutil.rmtree(dest, ignore_errors=True)
        if only is None:
            shutil.copytree(src, dest, symlinks=True)
        else:
            dest.mkdir(parents=True)
            for file in only:
                shutil.copy2(src / file, dest / file)
        marker.write_text(stamp)
    return dest


def _hermetic_build_env() -> None:
    """Point the cuda-bindings build at PyPI's CUDA headers and libclang unless the user chose their own."""
    if not (os.environ.get("CUDA_TOOLKIT_PATH") or os.environ.get("CUDA_HOME")):
        try:
            cu13 = Path(str(md.distribution("nvidia-cuda-runtime").locate_file("nvidia/cu13")))
        except md.PackageNotFoundError:
            sys.exit("error: no CUDA headers: set CUDA_TOOLKIT_PATH or `pip install nvidia-cuda-runtime nvidia-cuda-crt nvidia-curand`")
        stamp = " ".join(f"{d}=={md.version(d)}" for d in ("nvidia-cuda-runtime", "nvidia-cuda-crt", "nvidia-curand"))
        os.environ["CUDA_TOOLKIT_PATH"] = str(_stable_copy(cu13 / "include", "cu13/include", stamp).parent)
    if not os.environ.get("LIBCLANG_PATH"):
        try:
            import clang.native  # PyPI `libclang`
        except ImportError:
            return  # bindgen searches the system (Debian's libclang-dev)
        native = Path(clang.native.__file__).parent
        os.environ["LIBCLANG_PATH"] = str(_stable_copy(native, "libclang", f"libclang=={md.version('libclang')}"))
        # PyPI's libclang ships no clang resource headers (stddef.h): use the C compiler's.
        if "BINDGEN_EXTRA_CLANG_ARGS" not in os.environ:
            cc = os.environ.get("CC", "cc")
            try:
                inc = subprocess.run([cc, "-print-file-name=include"], capture_output=True, text=True, check=True).stdout.strip()
            except (OSError, subprocess.CalledProcessError):
                sys.exit(f"error: bindgen needs a C compiler's headers; `{cc}` was not found (install gcc or set CC)")
            os.environ["BINDGEN_EXTRA_CLANG_ARGS"] = f"-isystem {inc}"


def _use_zigbuild() -> bool:
    """On Linux, link against glibc GLIBC with cargo-zigbuild (PyPI cargo-zigbuild and
    ziglang, both build requirements) so that a wheel built on any machine, whatever its
    own glibc, is manylinux_GLIBC; a native link picks up the build machine's newer
    symbol versions. Sets CARGO and CARGO_BUILD_TARGET for setuptools-rust, which reads
    them when its commands start. Links natively (a linux_<arch> wheel) off Linux, with
    TILEGYM_CUTILE_RS_ZIGBUILD=0, when CARGO_BUILD_TARGET is already set, or when the two
    packages are not installed (a `--no-build-isolation` build without them). A wheel for
    another CPU (TARGET_ARCH) always goes through cargo-zigbuild, which links for any target.

    Both run from stable copies under ~/.cache/tilegym-cutile-rs-build: cargo-zigbuild names its linker
    wrappers (the CC and linker cargo fingerprints every crate with) after its own path,
    and zig's libc headers land in build scripts' dependency files, so with pip's
    per-build temporary paths every build recompiled every crate (docs/benchmarks.md)."""
    cross = TARGET_ARCH != platform.machine()
    if sys.platform != "linux" or (os.environ.get("TILEGYM_CUTILE_RS_ZIGBUILD", "1") == "0" and not cross):
        return False
    if os.environ.get("CARGO_BUILD_TARGET"):
        return False
    exe = shutil.which("cargo-zigbuild")
    try:
        import ziglang
    except ImportError:
        return False
    if exe is None:
        if cross:
            sys.exit(f"error: building for {TARGET_ARCH} on {platform.machine()} needs cargo-zigbuild and ziglang (build requirements)")
        return False
    stamp = f"cargo-zigbuild=={md.version('cargo-zigbuild')} ziglang=={md.version('ziglang')}"
    # Outside the source tree: zig names its libc headers relative to the working directory
    # when they are under it, and build scripts run elsewhere (bindgen then misses stdlib.h).
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tilegym-cutile-rs-build"
    zig_dir = _stable_copy(Path(ziglang.__file__).parent, "ziglang", stamp, root=cache)
    exe_dir = _stable_copy(Path(exe).parent, "cargo-zigbuild", stamp, only=[Path(exe).name], root=cache)
    os.environ["CARGO_ZIGBUILD_ZIG_COMMAND"] = str(zig_dir / "zig")
    os.environ["CARGO"] = str(exe_dir / Path(exe).name)
    os.environ["CARGO_BUILD_TARGET"] = f"{TARGET_ARCH}-unknown-linux-gnu.{GLIBC}"
    return True


ZIGBUILD = _use_zigbuild()


def _require_cargo() -> None:
    if shutil.which("cargo") is None:
        sys.exit(
            "error: building tilegym-cutile-rs from source needs a Rust toolchain (cargo >= 1.89), "
            "which was not found on PATH. Install it with `curl --proto '=https' --tlsv1.2 -sSf "
            "https://sh.rustup.rs | sh` (then `source ~/.cargo/env`), or install a prebuilt wheel."
        )


def _function_params(header: str) -> dict[str, tuple[str, ...]]:
    """The functions a header declares, each with its parameter names in order, parsed by
    pycparser (the C parser cffi itself uses)."""
    import pycparser
    from pycparser import c_ast

    # cbindgen's header has no preprocessor beyond `#define`s and one comment, which cffi handles itself.
    plain = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    plain = "\n".join(line for line in plain.splitlines() if not line.lstrip().startswith("#"))
    # Names matter here, not sizes: the <stdint.h> types it uses become plain typedefs.
    stdint = sorted(set(re.findall(r"\b(?:u?int(?:8|16|32|64|ptr)_t|size_t|bool)\b", plain)))
    tree = pycparser.CParser().parse("".join(f"typedef int {t};\n" for t in stdint) + plain)
    functions = [d for d in tree.ext if isinstance(d, c_ast.Decl) and isinstance(d.type, c_ast.FuncDecl)]
    return {f.name: tuple(p.name for p in (f.type.args.params if f.type.args else ()) if p.name) for f in functions}


def write_cdef_module(header: Path, package_dir: Path) -> None:
    """Turn the generated header into `_cdef.py` (cffi out-of-line ABI mode) and `_abi_manifest.py`."""
    import cffi

    text = header.read_text()
    ffi = cffi.FFI()
    ffi.cdef(text)
    ffi.set_source(f"{PACKAGE}._cdef", None)
    ffi.emit_python_code(str(package_dir / "_cdef.py"))
    params = dict(sorted(_function_params(text).items()))
    (package_dir / "_abi_manifest.py").write_text(
        '"""Generated at build time from cutile_kernels.h. Do not edit."""\n\n'
        f"FINGERPRINT = {hashlib.sha256(text.encode()).hexdigest()!r}\n"
        f"FUNCTIONS = {tuple(params)!r}\n"
        "# Each function's parameter names, in order: what a launch's arguments are checked against.\n"
        f"PARAMS = {params!r}\n"
        f"HEADER = {HEADER!r}\n"
    )


def write_exports_module(package_dir: Path) -> None:
    """Write `_exports.py`: each op module's `__all__`, imported by name, so that the package
    re-exports every op explicitly and a type checker sees their real signatures. Read from
    the sources' syntax (nothing is imported at build time); an op adds a module, no list."""
    ops = Path(__file__).resolve().parent / "python" / PACKAGE / "ops"
    lines, names = [], []
    for source in sorted([*ops.glob("*.py"), *ops.glob("*/__init__.py")]):
        module = source.parent.name if source.name == "__init__.py" else source.stem
        if module.startswith("_") or module == "ops":
            continue
        exported = _literal_all(source)
        lines += [f"from .ops.{module} import {name} as {name}" for name in exported]
        names += exported
    (package_dir / "_exports.py").write_text(
        '"""Generated at build time from each op module\'s __all__ (setup.py). Do not edit."""\n\n'
        + "".join(f"{line}\n" for line in lines)
        + f"\n__all__ = {sorted(names)!r}\n"
    )


def _literal_all(source: Path) -> list[str]:
    import ast

    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return [str(v) for v in ast.literal_eval(node.value)]
    sys.exit(f"error: {source} has no literal __all__: an op module lists what it exports")


class build_py(_build_py):
    def run(self) -> None:
        # A module deleted from the sources must not live on in an earlier build's build/lib:
        # the wheel would ship it and the exports module (built from that tree) would list it.
        shutil.rmtree(Path(self.build_lib) / PACKAGE, ignore_errors=True)
        super().run()


class build_rust(_build_rust):
    def run(self) -> None:
        _require_cargo()
        _hermetic_build_env()
        super().run()

    def get_dylib_ext_path(self, ext: RustExtension, target_fname: str) -> str:
        # One file name for every Python: libcutile_kernels.so, not an EXT_SUFFIX name.
        path = Path(super().get_dylib_ext_path(ext, target_fname))
        return str(path.with_name(LIBRARY))

    def install_extension(self, ext, dylib_paths, build_artifact_dir) -> None:  # type: ignore[no-untyped-def]
        super().install_extension(ext, dylib_paths, build_artifact_dir)
        package_dir = Path(self.get_dylib_ext_path(ext, ext.name)).parent
        write_cdef_module(package_dir / HEADER, package_dir)
        write_exports_module(package_dir)
        # The version has one home, pyproject.toml; the release workflow checks the tag against it.
        (package_dir / "_version.py").write_text(
            f'"""Generated at build time from pyproject.toml. Do not edit."""\n\n__version__ = {self.distribution.get_version()!r}\n'
        )


class bdist_wheel(_bdist_wheel):
    def get_tag(self) -> tuple[str, str, str]:
        _, _, plat = super().get_tag()
        if ZIGBUILD and plat.startswith("linux_"):
            plat = f"manylinux_{GLIBC.replace('.', '_')}_{TARGET_ARCH}"
        return "py3", "none", plat


setup(
    package_dir={"": "python"},
    packages=find_packages("python"),
    package_data={PACKAGE: ["py.typed"], f"{PACKAGE}.tuned": ["*.json"], f"{PACKAGE}.ops.softmax": ["rules.json"]},
    rust_extensions=[
        RustExtension(
            f"{PACKAGE}.libcutile_kernels",
            path="crates/cutile_kernels/Cargo.toml",
            binding=Binding.NoBinding,
            cargo_manifest_args=["--locked"],
            debug=False,
            generated_files={HEADER: PACKAGE},
        )
    ],
    cmdclass={"build_py": build_py, "build_rust": build_rust, "bdist_wheel": bdist_wheel},
    zip_safe=False,
)
