"""The house's shape, checked: no import circle, no import from a lower layer to a higher one, no long file.

Every import counts, those inside functions too: an import deferred to call
time is still a dependency, and a circle through one is still a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "backend" / "gpufleet"

# Lowest first. A module may import its own layer or lower ones.
LAYERS = [
    {"config", "config_services", "datadir", "secretfiles", "yamlsource", "logsetup", "events", "db", "reporting", "rankpath", "bounds"},
    {"devices"},
    {"telemetry", "training", "users"},
    {"trainings.models", "trainings.lifecycle", "trainings.outcome"},
    {"scheduling"},
    {"trainings"},
    {"jobs"},
    {"api", "client", "commands", "cli"},
]
# The package root is the facade for training code (`gpufleet.report`,
# `gpufleet.TrainingBackend`, loaded on first use); everything may read its version.
FACADE = "gpufleet"
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                here = here[: len(here) - node.level + 1]
                base = ".".join(here + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        # `from gpufleet.x import y` depends on gpufleet.x.y when y is a module, else on gpufleet.x.
        out |= {t for t in targets if t in modules and t != name}
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(module: str) -> int | None:
    parts = module.split(".")[1:]
    for depth in (2, 1):
        key = ".".join(parts[:depth])
        for rank, layer in enumerate(LAYERS):
            if key in layer:
                return rank
    return None


def test_every_module_has_a_layer(graph: dict[str, set[str]]) -> None:
    assert [m for m in graph if m != FACADE and _layer(m) is None] == []


def test_no_import_reaches_up_a_layer(graph: dict[str, set[str]]) -> None:
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                    if a != FACADE and b != FACADE and _layer(b) > _layer(a))
    assert upward == []


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected sets of two or more modules (Tarjan): each is an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

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
                circles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return circles


def test_no_import_circle(graph: dict[str, set[str]]) -> None:
    assert _circles(graph) == []


def test_scheduling_knows_nothing_of_jobs_or_the_api(graph: dict[str, set[str]]) -> None:
    assert sorted(f"{a} -> {b}" for a, targets in graph.items() if a.startswith("gpufleet.scheduling")
                  for b in targets if b.startswith(("gpufleet.jobs", "gpufleet.api"))) == []


def test_no_file_is_over_400_lines() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_checker_sees_a_circle_and_an_upward_import(graph: dict[str, set[str]]) -> None:
    # The rules above must be able to fail: a made-up pair of modules that break both.
    fake = {"gpufleet.devices.a": {"gpufleet.jobs.b"}, "gpufleet.jobs.b": {"gpufleet.devices.a"}}
    assert [f"{a} -> {b}" for a, ts in fake.items() for b in ts if _layer(b) > _layer(a)] == \
        ["gpufleet.devices.a -> gpufleet.jobs.b"]
    assert _circles(fake) == [["gpufleet.devices.a", "gpufleet.jobs.b"]]
    # And the real graph is read: the app imports its routers.
    assert "gpufleet.api.routes.trainings" in graph["gpufleet.api.app"]
