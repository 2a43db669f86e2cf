"""The code the tests and benchmarks run in fresh interpreters (strings handed to
`python -c`) names only what the installed package has. Such a body is never seen by a
linter or by the CPU tests that skip the GPU: a missing `cache.stats` once failed every
shipped-kernel GPU test and went unnoticed until a GPU run."""

from __future__ import annotations

import ast
import importlib
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tilegym_cutile_rs"
SOURCES = sorted(p for p in [*ROOT.glob("tests/*.py"), *ROOT.glob("benchmarks/*.py")] if p.name != Path(__file__).name)


def _template_as_code(text: str) -> str:
    """A str.format template as code: `{{`/`}}` are braces, `{name}` a placeholder."""
    text = re.sub(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_.\[\]'\"]*)\}(?!\})", "_placeholder", text)
    return text.replace("{{", "{").replace("}}", "}")


def _parse_body(text: str) -> ast.Module | None:
    """`text` as a module, if it is code (as written, or as a format template)."""
    for candidate in (text, _template_as_code(text)):
        try:
            return ast.parse(textwrap.dedent(candidate))
        except SyntaxError:
            continue
    return None


def _f_string_text(node: ast.JoinedStr) -> str:
    """An f-string's text with each replacement field as a placeholder name."""
    return "".join(v.value if isinstance(v, ast.Constant) else "_placeholder" for v in node.values)  # type: ignore[misc]


def bodies(path: Path) -> list[tuple[int, ast.Module]]:
    """(line, code) of every multi-line string in `path` that parses as Python: the bodies it
    hands to fresh interpreters (a prelude and a body may be separate strings, joined at run time)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = _f_string_text(node)
        else:
            continue
        if "\n" in text.strip():
            tree = _parse_body(text)
            if tree is not None:
                found.append((node.lineno, tree))
    return found


def importing() -> list[Path]:
    """The tests and benchmarks with a body that imports the package."""
    return [p for p in SOURCES if any(bound_names([tree]) for _, tree in bodies(p))]


def _resolve(module: str, attr: str) -> Any:
    """`module.attr`: an attribute, or a submodule of a package."""
    mod = importlib.import_module(module)
    if hasattr(mod, attr):
        return getattr(mod, attr)
    return importlib.import_module(f"{module}.{attr}")


def bound_names(trees: list[ast.Module], missing: list[str] | None = None) -> dict[str, Any]:
    """The names the bodies' imports of the package bind, to what they are; an import of
    something the package lacks goes to `missing`."""
    bound: dict[str, Any] = {}
    missing = [] if missing is None else missing
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                        try:
                            mod = importlib.import_module(alias.name)
                        except ImportError:
                            missing.append(alias.name)
                            continue
                        bound[alias.asname or PACKAGE] = mod if alias.asname else importlib.import_module(PACKAGE)
            elif isinstance(node, ast.ImportFrom) and node.module and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
                for alias in node.names:
                    if alias.name == "_placeholder":
                        continue  # a name filled in at run time: not checkable here
                    try:
                        bound[alias.asname or alias.name] = _resolve(node.module, alias.name)
                    except ImportError:
                        missing.append(f"{node.module}.{alias.name}")
    return bound


def missing_names(trees: list[ast.Module]) -> list[str]:
    """What the bodies import from the package or read off what they imported (`cache.stats`,
    `_registry.ops`) that the installed package lacks."""
    missing: list[str] = []
    bound = bound_names(trees, missing)
    for tree in trees:
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)):
                continue
            chain: list[str] = []
            base: ast.expr = node
            while isinstance(base, ast.Attribute):
                chain.insert(0, base.attr)
                base = base.value
            if not (isinstance(base, ast.Name) and base.id in bound):
                continue
            obj, path = bound[base.id], base.id
            for attr in chain:
                path += f".{attr}"
                if not hasattr(obj, attr):
                    missing.append(path)
                    break
                obj = getattr(obj, attr)
    return sorted(set(missing))


def test_bodies_are_found() -> None:
    # The shipped-kernel GPU tests' prelude and bodies and the first-call benchmark's template at least.
    where = {str(p.relative_to(ROOT)) for p in importing()}
    assert {"tests/test_shipped_gpu.py", "tests/test_robustness_gpu.py", "benchmarks/first_call_bench.py"} <= where, where


@pytest.mark.parametrize("path", importing(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_body_names_only_what_the_package_has(path: Path) -> None:
    assert missing_names([tree for _, tree in bodies(path)]) == [], path


def test_a_missing_attribute_is_caught() -> None:
    # The very bodies that failed on the GPU: a prelude importing `cache`, and a separate body
    # calling a counter the module lacks.
    prelude = _parse_body("import json\nfrom tilegym_cutile_rs import cache, _registry\n")
    body = _parse_body("print(json.dumps(cache.no_such_counter()))\nprint(_registry.ops())\n")
    assert prelude is not None and body is not None
    assert missing_names([prelude, body]) == ["cache.no_such_counter"]
