"""Every exported function that can fail runs its body inside ffi_guard (panics and
errors become status codes and cutile_last_error), read from the FFI sources the
cdef manifest is generated from. The three pointer getters cannot fail."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CANNOT_FAIL = {"cutile_abi_fingerprint", "cutile_ops_list", "cutile_last_error"}
EXPORT = re.compile(r'#\[no_mangle\]\s*pub (?:unsafe )?extern "C" fn (\w+)\s*\(([^)]*)\)\s*(?:->\s*[^{]+)?\{\s*(\w+)', re.S)


def exports() -> dict[str, tuple[tuple[str, ...], str]]:
    """Each C export's parameter names, in order, and the first name its body calls."""
    sources = [*ROOT.glob("crates/ops/src/**/*.rs"), *ROOT.glob("crates/cutile_kernels/src/*.rs")]
    if not sources:
        pytest.skip("needs the source checkout")
    found = {}
    for src in sources:
        for name, params, first in EXPORT.findall(src.read_text()):
            found[name] = (tuple(p.split(":")[0].strip() for p in params.split(",") if ":" in p), first)
    return found


def exported() -> dict[str, str]:
    return {name: first for name, (_, first) in exports().items()}


def test_every_failing_export_is_guarded() -> None:
    found = exported()
    assert "cutile_softmax" in found and "cutile_cache_enable" in found
    unguarded = {n: first for n, first in found.items() if n not in CANNOT_FAIL and first != "ffi_guard"}
    assert unguarded == {}


def test_the_manifest_lists_every_export() -> None:
    from tilegym_cutile_rs import _library

    assert set(exported()) == set(_library.manifest().FUNCTIONS)


def test_the_manifest_names_every_parameter_as_the_sources_do() -> None:
    # The names Python's launches are checked against (_op.check_arguments) are the Rust exports' own.
    from tilegym_cutile_rs import _library

    assert dict(_library.manifest().PARAMS) == {name: params for name, (params, _) in exports().items()}
