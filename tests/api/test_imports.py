"""Imports inside the api package run one way: no module reaches, at any depth, back to itself.

Function-level imports count too: one inside a function is still a knot, only
a later one. The order the package keeps is security/ (no route), auth.py,
deps.py, the routes, and app.py, which imports them all.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gpufleet.api

ROOT = Path(gpufleet.api.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                # `from gpufleet.api.routes import auth` imports the submodule routes.auth.
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            edges.update(t for t in targets if t in modules and t != name)
        graph[name] = edges
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_api_package_has_no_import_circle():
    graph = _graph()
    assert "gpufleet.api.app" in graph and "gpufleet.api.routes.auth" in graph["gpufleet.api.app"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_circle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_guards_know_no_route_and_no_app():
    graph = _graph()
    for name, edges in graph.items():
        if name.startswith("gpufleet.api.security."):
            assert not {e for e in edges if e.startswith(("gpufleet.api.routes", "gpufleet.api.app"))}, (name, edges)
