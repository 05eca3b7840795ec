"""The package's shape, checked from its source (no OpenCL): the seams issue 18 asks for stay.

- no import cycle among clglow's and onnxifi's modules (function-level imports count: a
  cycle closed inside a function is still a cycle);
- no private name (one leading underscore) of one module imported or used by another;
- no function over FUNCTION_LINES lines;
- no code in clglow/ branching on `type == "cpu"` outside the target profile.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("clglow", "onnxifi")
FUNCTION_LINES = 100


def _modules() -> Dict[str, Path]:
    """Dotted module name -> file, for every .py of the packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _package_of(name: str) -> str:
    return name if (MODULES.get(name) and MODULES[name].name == "__init__.py") else name.rpartition(".")[0]


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = _package_of(module).split(".")
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking_lines(tree: ast.Module) -> Set[int]:
    """Lines inside `if TYPE_CHECKING:` blocks (imports for annotations only, never executed)."""
    lines: Set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            for child in n.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(module: str) -> Iterator[Tuple[str, List[str], int]]:
    """(imported module, names taken from it, line) for each intra-package import of `module`."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    for n in ast.walk(tree):
        if getattr(n, "lineno", 0) in skip:
            continue
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name.split(".")[0] in PACKAGES:
                    yield a.name, [], n.lineno
        elif isinstance(n, ast.ImportFrom):
            target = _absolute(module, n)
            if target.split(".")[0] in PACKAGES:
                yield target, [a.name for a in n.names], n.lineno


def _edges() -> Dict[str, Set[str]]:
    """module -> the modules it imports (a `from pkg import sub` names the submodule itself;
    the parent packages Python runs first are not counted, as pylint's cyclic-import does not)."""
    edges: Dict[str, Set[str]] = {m: set() for m in MODULES}
    for m in MODULES:
        for target, names, _ in _imports(m):
            subs = [f"{target}.{x}" for x in names if f"{target}.{x}" in MODULES]
            if subs:
                edges[m].update(subs)
            if len(subs) < len(names) or not names:
                if target in MODULES:
                    edges[m].add(target)
        edges[m].discard(m)
    return edges


def _cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_import_cycles():
    cycles = _cycles(_edges())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_private_name_crosses_modules():
    found = []
    for m, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases: Dict[str, str] = {}  # local name -> imported intra-package module
        for target, names, line in _imports(m):
            for x in names:
                if f"{target}.{x}" in MODULES:
                    aliases[x] = f"{target}.{x}"
                elif _private(x):
                    found.append(f"{path.relative_to(ROOT)}:{line} imports {x} from {target}")
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                for a in n.names:
                    if a.name in MODULES and a.asname:
                        aliases[a.asname] = a.name
        for n in ast.walk(tree):
            if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
                    and _private(n.attr)):
                found.append(f"{path.relative_to(ROOT)}:{n.lineno} uses {aliases[n.value.id]}.{n.attr}")
    assert not found, "private names used across modules:\n" + "\n".join(found)


def test_functions_are_short():
    long = []
    for path in MODULES.values():
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (n.end_lineno or n.lineno) - n.lineno + 1
                if lines > FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{n.lineno} {n.name} ({lines} lines)")
    assert not long, f"functions over {FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_device_type_is_read_in_the_target_profile_only():
    """Kernel families and policies come from the Target (its family and capabilities), never
    from a `.type == "cpu"` test elsewhere."""
    found = []
    for m, path in MODULES.items():
        if m in ("clglow.target", "clglow.runtime.selection", "clglow.runtime.device"):
            continue  # the profile itself; device selection by type ("gpu" first, `cpu` selectors)
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if ".type == \"cpu\"" in code or ".type != \"cpu\"" in code or "type == 'cpu'" in code:
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "device-type tests outside the target profile:\n" + "\n".join(found)


def test_the_checks_can_fail():
    """The cycle finder and the private-name scan catch what they are for (on made-up edges)."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    assert _private("_x") and not _private("__all__") and not _private("x")
