"""The package's import structure (no OpenCL): no import cycles between the modules of clglow/
and onnxifi/ (counting imports inside functions too, so none is hidden behind a late import),
and no private name (a leading underscore) of one clglow module used by another (onnxifi's
private modules still share names among themselves: PRIVATE_CHECKED lists what is enforced).

Why: a cycle closed by a function-level import and a private helper borrowed across modules
are the two ways a shared seam hides; both are to become public in the module that owns them
(e.g. lower/common.py, lower/index_space.py).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("clglow", "onnxifi")


def _modules() -> dict:
    """module name -> (path, parsed tree) for every .py file of PACKAGES."""
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = p.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = (p, ast.parse(p.read_text(encoding="utf-8")))
    return out


MODULES = _modules()


def _base(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names."""
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    if path.name != "__init__.py":
        parts = parts[:-1]
    parts = parts[:len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _imports(module: str) -> list:
    """[(imported module, name or None, line)] of every import statement in `module`, at any depth."""
    path, tree = MODULES[module]
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out += [(a.name, None, n.lineno) for a in n.names]
        elif isinstance(n, ast.ImportFrom):
            base = _base(module, path, n)
            for a in n.names:
                sub = f"{base}.{a.name}"
                out.append((sub, None, n.lineno) if sub in MODULES else (base, a.name, n.lineno))
    return out


def _graph() -> dict:
    return {m: {t for t, _, _ in _imports(m) if t in MODULES and t != m} for m in MODULES}


def _cycles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on: set = set()
    comps: list = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    return comps


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _private_uses(module: str) -> list:
    """Private names of other package modules that `module` imports or reads as attributes."""
    path, tree = MODULES[module]
    found = []
    aliases = {}  # local name -> package module it stands for
    for target, name, line in _imports(module):
        if target.split(".")[0] not in PACKAGES or target == module:
            continue
        if name is not None and name.startswith("_") and not name.startswith("__"):
            found.append(f"{module}:{line} imports {target}.{name}")
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            base = _base(module, path, n)
            for a in n.names:
                if f"{base}.{a.name}" in MODULES:
                    aliases[a.asname or a.name] = f"{base}.{a.name}"
        elif isinstance(n, ast.Import):
            for a in n.names:
                if a.name in MODULES:
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    for n in ast.walk(tree):
        if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
                and aliases[n.value.id] != module and n.attr.startswith("_") and not n.attr.startswith("__")):
            found.append(f"{module}:{n.lineno} uses {aliases[n.value.id]}.{n.attr}")
    return found


PRIVATE_CHECKED = ("clglow",)


@pytest.mark.parametrize("pkg", PRIVATE_CHECKED)
def test_no_private_names_across_modules(pkg):
    found = [f for m in MODULES if m.split(".")[0] == pkg for f in _private_uses(m)]
    assert found == [], "\n".join(found)
