"""The project's import graph: no cycles, and every import points down the layers.

The graph is computed from the source with :mod:`ast` (every ``import`` and ``from ...
import`` anywhere in a module, including function bodies and ``TYPE_CHECKING`` blocks:
a type-only import is still a dependency a reader has to follow). Layers, top to bottom
(docs/architecture.md):

    proxy.tools → proxy.control → proxy.datapath → proxy.local → proxy.auth → proxy.config
    → (coordinator, observers, quotas) → protocol

``spark_jobs`` may import only ``observers.audit_schema`` (the one shared schema).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("protocol", "quotas", "observers", "coordinator", "proxy", "spark_jobs")

#: Higher imports lower; equal ranks may import each other only without a cycle.
RANKS = {
    "proxy": 9,
    "proxy.tools": 8,
    "proxy.control": 7,
    "proxy.datapath": 6,
    "proxy.local": 5,
    "proxy.auth": 4,
    "proxy.config": 3,
    "coordinator": 2,
    "observers": 2,
    "quotas": 2,
    "spark_jobs": 3,
    "protocol": 1,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found[module_name(path)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """Project modules ``name`` imports (resolved to the longest known module name)."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for target in targets:
            parts = target.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()
            if parts and ".".join(parts) != name:
                yield ".".join(parts)


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: set(imports_of(name, path, known)) for name, path in found.items()}


def rank(module: str) -> tuple[str, int]:
    for prefix in sorted(RANKS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return prefix, RANKS[prefix]
    raise AssertionError(f"{module} is in no layer: add it to RANKS in {__file__}")


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return out


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_relative_imports_resolve() -> None:
    known = {"proxy.local.api", "proxy.local.ports", "proxy.local"}
    path = ROOT / "proxy" / "local" / "api.py"
    assert "proxy.local.ports" in set(imports_of("proxy.local.api", path, known))


def test_no_import_cycles() -> None:
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" → ".join(c) for c in found)


def test_imports_point_down_the_layers() -> None:
    wrong = []
    for module, targets in sorted(graph().items()):
        layer, mine = rank(module)
        for target in sorted(targets):
            other, theirs = rank(target)
            if theirs > mine or (theirs == mine and other != layer):
                wrong.append(f"{module} ({layer}) imports {target} ({other})")
    assert not wrong, "imports against the direction:\n" + "\n".join(wrong)


def test_spark_jobs_import_only_the_audit_schema() -> None:
    outside = {
        target
        for module, targets in graph().items()
        if module.startswith("spark_jobs")
        for target in targets
        if not target.startswith("spark_jobs")
    }
    assert outside <= {"observers.audit_schema", "observers"}


def test_the_connection_moves_bytes_and_names_no_auth_module() -> None:
    """Deciding is the dispatch's (proxy/datapath/dispatch.py): the connection carries out
    decisions, and knows no gate, authorizer or ACL class."""
    edges = graph()
    assert "proxy.datapath.dispatch" in edges["proxy.datapath.connection"]
    assert not {m for m in edges["proxy.datapath.connection"] if m == "proxy.auth" or m.startswith("proxy.auth.")}
