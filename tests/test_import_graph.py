"""No import circle among the package's modules: every `import` of a package module, at the top
of a module or inside a function, is an edge, and the graph has no cycle. (The op registry,
`_registry.ops()`, finds op modules by listing the `ops` package at run time: plugins that import
the framework, not an edge of this graph.)"""

from __future__ import annotations

import ast
from pathlib import Path

import tilegym_cutile_rs

PACKAGE = "tilegym_cutile_rs"
ROOT = Path(tilegym_cutile_rs.__file__).parent


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join((PACKAGE, *parts[:-1])) if parts[-1] == "__init__" else ".".join((PACKAGE, *parts))
        found[name] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules `name` imports: `from X import m` of a module m is an edge to m; of
    any other name, an edge to X."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                module = f"{base}.{alias.name}"
                if module in known:
                    edges.add(module)
                elif base in known:
                    edges.add(base)
    edges.discard(name)
    return edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def test_no_import_circle_among_the_package_modules() -> None:
    g = graph()
    assert g[f"{PACKAGE}._op"] >= {f"{PACKAGE}._device", f"{PACKAGE}._describe"}  # the parser sees edges
    assert cycles(g) == [], {" -> ".join(c): {m: sorted(g[m] & set(c)) for m in c} for c in cycles(g)}


def test_the_checker_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# The Rust library crate (crates/ops/src), from this checkout: each file a module, each path it
# names (`crate::a::b`, `super::x`, `self::y`) an edge to the deepest module the path reaches.
CRATE = Path(__file__).resolve().parent.parent / "crates" / "ops" / "src"


def rust_modules() -> dict[str, Path]:
    found = {}
    for path in CRATE.rglob("*.rs"):
        parts = list(path.relative_to(CRATE).with_suffix("").parts)
        if parts[-1] in ("mod", "lib"):
            parts.pop()
        found["::".join(parts)] = path
    return found


def rust_uses(name: str, path: Path, known: set[str]) -> set[str]:
    import re

    text = re.sub(r"//[^\n]*", "", path.read_text())  # comments and doc comments name modules too
    here = name.split("::") if name else []
    bases = {"crate": [], "self": here, "super": here[:-1]}
    paths = [(head, rest.strip(":").split("::")) for head, rest in re.findall(r"\b(crate|super|self)((?:::[a-z_][a-z0-9_]*)+)", text)]
    for head, group in re.findall(r"\b(crate|super|self)::\{([^}]*)\}", text):  # `crate::{a, b::c}`
        paths += [(head, item.strip().split("::")) for item in group.split(",") if item.strip()]
    edges = set()
    for head, segments in paths:
        base = bases[head]
        for n in range(len(segments), 0, -1):
            candidate = "::".join(base + segments[:n])
            if candidate in known:
                if candidate != name:
                    edges.add(candidate)
                break
    return edges


def test_no_module_circle_in_the_rust_library() -> None:
    found = rust_modules()
    g = {name: rust_uses(name, path, set(found)) for name, path in found.items()}
    assert "abi::ffi" in g["cache"] and {"spec", "warm_start"} <= g["launch"]  # the parser sees edges
    assert "ops::matmul::kernel" in g["ops::matmul::launch"]
    assert cycles(g) == [], {" -> ".join(c): {m: sorted(g[m] & set(c)) for m in c} for c in cycles(g)}
