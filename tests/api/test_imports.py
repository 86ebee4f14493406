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


def test_the_guards_know_no_route_and_no_app():
    graph = _graph()
    for name, edges in graph.items():
        if name.startswith("gpufleet.api.security."):
            assert not {e for e in edges if e.startswith(("gpufleet.api.routes", "gpufleet.api.app"))}, (name, edges)
