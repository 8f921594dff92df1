"""The project's modules import one another without circles, and only down the layers.

An AST walk of every module under ``engine/``, ``adapters/`` and ``app/``: every ``import`` and
``from … import`` anywhere in a module (inside functions and ``TYPE_CHECKING`` blocks too, since
a circle hidden behind a lazy import is still a circle) becomes an edge to the project module it
names. ``from pkg import name`` points at ``pkg/name.py`` when that is a module, else at ``pkg``.
No strongly connected component may hold two modules, and the layers point one way:
``app -> adapters -> engine``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "adapters", "app")
LAYER = {"engine": 0, "adapters": 1, "app": 2}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {
        module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }


def imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                if target in modules:
                    found.add(target)
                elif node.module in modules:
                    found.add(node.module)
    return found


def graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports(path, modules) - {name} for name, path in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
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
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_walk_sees_the_project() -> None:
    edges = graph()
    assert "adapters.token2wav.stream" in edges and "engine.carry" in edges
    assert "adapters.token2wav.states" in edges["adapters.token2wav.stream"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circles() -> None:
    found = cycles(graph())
    assert not found, "import circles (break each by moving what both sides need): " + "; ".join(
        " <-> ".join(c) for c in found
    )


def test_imports_point_down_the_layers() -> None:
    upward = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        for target in targets
        if LAYER[target.split(".")[0]] > LAYER[name.split(".")[0]]
    ]
    assert not upward, "engine <- adapters <- app only: " + "; ".join(sorted(upward))


FACE = {"adapters", "adapters.face", "adapters.registry"}  # all the app may know of the families


def test_the_app_sees_the_families_only_through_the_face() -> None:
    """The app reaches a family only through ``adapters.face`` and ``adapters.registry``: a
    family's own modules (its files, its model objects) stay behind its face."""
    past = [
        f"{name} imports {target}"
        for name, targets in graph().items()
        if name.split(".")[0] == "app"
        for target in targets
        if target.split(".")[0] == "adapters" and target not in FACE
    ]
    assert not past, "the app imports adapters.face and adapters.registry only: " + "; ".join(
        sorted(past)
    )
