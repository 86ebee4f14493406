"""The house's shape, checked: each package on one layer, no import circle (between modules or
between packages), no import from a lower layer to a higher one, no long file, no long function.

Every import counts, those inside functions too: an import deferred to call
time is still a dependency, and a circle through one is still a circle. So do
the imports no ``import`` statement names: ``importlib.import_module("gpufleet.x")``
and a name the package root loads on first use (``gpufleet.TrainingBackend``).
Length is counted in statements as well as lines, so packing code onto fewer
lines does not make it shorter.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "backend" / "gpufleet"

# Lowest first, each top-level package or module of gpufleet once. A module may import its own
# layer or lower ones.
LAYERS = [
    {"config", "datadir", "secretfiles", "yamlsource", "yamltext", "logsetup", "events", "db", "reporting", "rankpath", "bounds",
     "memberfs"},
    {"devices"},
    {"telemetry", "engine", "users", "notify"},
    {"wire"},
    {"lifecycle"},
    {"scheduling"},
    {"trainings", "interactive"},
    {"pools"},
    {"sweeps"},
    {"jobs"},
    {"api", "client", "commands", "cli"},
]
# The package root is the facade for training code (`gpufleet.report`,
# `gpufleet.TrainingBackend`, loaded on first use); everything may read its version.
FACADE = "gpufleet"
MAX_LINES = 400
MAX_STATEMENTS = 300
# A function past this reads as several steps; name them (jobs/supervisor.py:run_attempt is the model).
MAX_FUNCTION_LINES = 80
MAX_FUNCTION_STATEMENTS = 80
# A migration is the record of a schema step as it was applied, so it is never rewritten for length.
MIGRATIONS = PACKAGE.parents[1] / "alembic" / "versions"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _lazy_names() -> dict[str, set[str]]:
    """The names the package root loads on first use (its ``__getattr__``), each with the modules it imports."""
    out: dict[str, set[str]] = {}
    root = ast.parse((PACKAGE / "__init__.py").read_text())
    getattr_ = next((n for n in root.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"), None)
    for branch in ast.walk(getattr_) if getattr_ else ():
        if not (isinstance(branch, ast.If) and isinstance(branch.test, ast.Compare)):
            continue
        names = {c.value for c in ast.walk(branch.test.comparators[0]) if isinstance(c, ast.Constant)}
        loads = {f"{n.module}.{a.name}" for stmt in branch.body for n in ast.walk(stmt)
                 if isinstance(n, ast.ImportFrom) and n.module for a in n.names}
        for name in names:
            out.setdefault(name, set()).update(loads)
    return out


def _imports(name: str, path: Path, modules: dict[str, Path], lazy: dict[str, set[str]] | None = None) -> set[str]:
    lazy = _lazy_names() if lazy is None else lazy
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
            if base == FACADE:
                targets += [t for alias in node.names for t in lazy.get(alias.name, ())]
        elif isinstance(node, ast.Call) and _called(node.func) in ("import_module", "__import__") and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            targets = [node.args[0].value]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == FACADE:
            targets = list(lazy.get(node.attr, ()))
        else:
            continue
        # `from gpufleet.x import y` depends on gpufleet.x.y when y is a module, else on gpufleet.x.
        out |= {_module_of(t, modules) for t in targets} - {None, name}
    return out


def _called(func: ast.expr) -> str | None:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _module_of(target: str, modules: dict[str, Path]) -> str | None:
    """``target`` when it is a module of gpufleet; a lazy name's ``gpufleet.x.y.Name``: its module."""
    if target in modules:
        return target
    parent = target.rpartition(".")[0]
    return parent if parent.startswith(f"{FACADE}.") and parent in modules else None


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules, lazy = _modules(), _lazy_names()
    return {name: _imports(name, path, modules, lazy) for name, path in modules.items()}


def _package(module: str) -> str:
    """The top-level package (or module) of gpufleet that ``module`` belongs to: ``scheduling``, ``config``."""
    return module.split(".")[1]


def _layer(module: str) -> int | None:
    return next((rank for rank, layer in enumerate(LAYERS) if _package(module) in layer), None)


def test_every_module_has_a_layer(graph: dict[str, set[str]]) -> None:
    assert [m for m in graph if m != FACADE and _layer(m) is None] == []


def test_each_package_is_on_one_layer() -> None:
    listed = [name for layer in LAYERS for name in layer]
    assert sorted({n for n in listed if listed.count(n) > 1}) == []
    assert [n for n in listed if "." in n] == [], "a layer lists whole packages, not their modules"
    present = {_package(m) for m in _modules() if m != FACADE}
    assert sorted(set(listed) - present) == [], "a layer names a package that no longer exists"


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


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Which top-level packages import which, the facade left out."""
    out: dict[str, set[str]] = {}
    for a, targets in graph.items():
        for b in targets:
            if FACADE not in (a, b) and _package(a) != _package(b):
                out.setdefault(_package(a), set()).add(_package(b))
    return out


def _gpufleet_import_targets(name: str, path: Path) -> set[str]:
    """The gpufleet modules ``path`` names in an import statement (``from gpufleet.x import y``: ``gpufleet.x``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names if alias.name.startswith(f"{FACADE}.")}
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith(f"{FACADE}."):
            out.add(node.module)
    return out


def test_every_import_of_gpufleet_names_a_module_that_exists() -> None:
    # An import inside a function runs only when it is called: one that names a module since removed passes
    # every other check and fails the first training that reaches it.
    modules = _modules()
    packages = {m.rsplit(".", i)[0] for m in modules for i in range(1, m.count("."))}  # folders without __init__
    missing = sorted(f"{name}: {target}" for name, path in modules.items()
                     for target in _gpufleet_import_targets(name, path) if target not in modules.keys() | packages)
    assert not missing, missing


def test_no_import_circle(graph: dict[str, set[str]]) -> None:
    assert _circles(graph) == []


def test_no_import_circle_between_packages(graph: dict[str, set[str]]) -> None:
    # Two packages that import each other are one package in two folders, even when no two
    # modules of them form a circle.
    assert _circles(_package_graph(graph)) == []


def test_trainings_reads_scheduling_only_through_admission(graph: dict[str, set[str]]) -> None:
    # The checks of a request against the fleet have one home, trainings.admission.
    assert sorted(f"{a} -> {b}" for a, targets in graph.items() if a.startswith("gpufleet.trainings.")
                  and not a.startswith("gpufleet.trainings.admission") for b in targets
                  if b.startswith("gpufleet.scheduling")) == []


def test_scheduling_knows_nothing_of_jobs_or_the_api(graph: dict[str, set[str]]) -> None:
    assert sorted(f"{a} -> {b}" for a, targets in graph.items() if a.startswith("gpufleet.scheduling")
                  for b in targets if b.startswith(("gpufleet.jobs", "gpufleet.api"))) == []


def test_the_workers_side_of_jobs_never_imports_the_api_processes() -> None:
    from gpufleet.jobs import API_PROCESS

    modules = _modules()
    assert {f"gpufleet.jobs.{m}" for m in API_PROCESS} <= set(modules), "jobs.API_PROCESS names a module that is gone"
    api_side = {f"gpufleet.jobs.{m}" for m in API_PROCESS}
    worker_side = {m for m in modules if m.startswith("gpufleet.jobs.") and m not in api_side}
    lazy = _lazy_names()
    assert sorted(f"{m} -> {t}" for m in worker_side for t in _imports(m, modules[m], modules, lazy)
                  if t in api_side) == []


OUTSIDE_LIBRARIES = ("fastapi", "starlette", "uvicorn", "celery", "kombu")
# The logging setup quiets one Celery warning, only where Celery is already loaded.
OUTSIDE_ALLOWED = {"gpufleet.logsetup -> celery.exceptions"}


def test_below_jobs_nothing_imports_the_web_app_or_celery() -> None:
    # The web framework belongs to api and Celery to jobs: the domain below them works without either.
    jobs = next(rank for rank, layer in enumerate(LAYERS) if "jobs" in layer)
    found = []
    for name, path in _modules().items():
        if name == FACADE or _layer(name) >= jobs:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{name} -> {t}" for t in targets if t.split(".")[0] in OUTSIDE_LIBRARIES]
    assert sorted(set(found) - OUTSIDE_ALLOWED) == []


def _statements(node: ast.AST) -> int:
    return sum(1 for n in ast.walk(node) if isinstance(n, ast.stmt))


def test_no_file_is_over_400_lines() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_no_file_is_over_300_statements() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if MIGRATIONS not in p.parents
            and (n := _statements(ast.parse(p.read_text()))) > MAX_STATEMENTS}
    assert long == {}


def _long_functions(source: str, limit: int = MAX_FUNCTION_LINES,
                    statements: int = MAX_FUNCTION_STATEMENTS) -> dict[str, int]:
    """Functions (methods, nested ones) longer than ``limit`` lines, from ``def`` to their last line, or
    holding more than ``statements`` statements (their own ``def`` not counted), however few lines they take."""
    return {node.name: max(n, s) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and ((n := node.end_lineno - node.lineno + 1) > limit or (s := _statements(node) - 1) > statements)}


def test_no_function_is_over_80_lines() -> None:
    long = {f"{p.relative_to(PACKAGE)}:{name}": n for p in PACKAGE.rglob("*.py") if MIGRATIONS not in p.parents
            for name, n in _long_functions(p.read_text()).items()}
    assert long == {}


def test_the_function_rule_can_fail() -> None:
    def body(n: int) -> str:
        return "".join(f"        x{i} = {i}\n" for i in range(n))

    # A method of exactly the limit passes; one line more does not.
    source = f"class A:\n    def fits(self):\n{body(MAX_FUNCTION_LINES - 1)}    def long(self):\n{body(MAX_FUNCTION_LINES)}"
    assert _long_functions(source) == {"long": MAX_FUNCTION_LINES + 1}
    # Many statements on one line are as long as they are on many.
    packed = "def packed():\n    " + "; ".join(f"x{i} = {i}" for i in range(400)) + "\n"
    assert _long_functions(packed) == {"packed": 400}
    assert _statements(ast.parse(packed)) == 401


def test_the_import_rule_sees_import_module_and_the_roots_lazy_names(tmp_path: Path) -> None:
    modules = _modules()
    lazy = _lazy_names()
    assert "gpufleet.engine.backend" in lazy["TrainingBackend"]
    for source in ('import importlib\nm = importlib.import_module("gpufleet.jobs.worker")\n',
                   'from importlib import import_module\nm = import_module("gpufleet.jobs.worker")\n'):
        (tmp_path / "m.py").write_text(source)
        assert _imports("gpufleet.devices.m", tmp_path / "m.py", modules, lazy) == {"gpufleet.jobs.worker"}
    (tmp_path / "m.py").write_text("import gpufleet\nB = gpufleet.TrainingBackend\n")
    assert "gpufleet.engine.backend" in _imports("gpufleet.devices.m", tmp_path / "m.py", modules, lazy)
    (tmp_path / "m.py").write_text("from gpufleet import make_backend\n")
    assert "gpufleet.engine.backend" in _imports("gpufleet.config.m", tmp_path / "m.py", modules, lazy)


# The modules that read a value from the process environment, and why; everything else is
# given Settings (gpufleet.config) or, inside a rank, asks engine/rankenv.py. Passing the
# environment on to a child process (a copy, an allow-list) is not reading it.
ENVIRONMENT_READERS = {
    "gpufleet.config.store": "the data dir's default place (XDG_DATA_HOME), while the settings are built",
    "gpufleet.yamlsource": "the settings' YAML file (GPUFLEET_CONFIG), read while the settings are built",
    "gpufleet.datadir": "the socket's place, which the CLI needs before (and without) the server's settings",
    "gpufleet.client.client": "the client's own setting, GPUFLEET_SERVER: it never loads the server's settings",
    "gpufleet.client.credentials": "the client's own setting, GPUFLEET_TOKEN",
    "gpufleet.client.localsocket": "the client's own setting, GPUFLEET_SERVER_ACCOUNT (who may answer on a socket)",
    "gpufleet.commands.signin": "whether this desktop can open a browser (DISPLAY, BROWSER)",
    "gpufleet.commands.sessions": "the user's own shell (SHELL) for a session's terminal",
    "gpufleet.engine.rankenv": "a rank process: what its launcher or torchrun set",
    "gpufleet.engine.rankpreload": "a warm launcher's rank server: the launcher it must die with",
    "gpufleet.rankpath.gpufleet_report": "a user's interpreter, with the standard library only",
    "gpufleet.pools.node": "a Slurm task on a cluster node: the job id and the GPUs Slurm granted (SLURM_*, CUDA_*)",
    "gpufleet.trainings.venv": "a launcher puts its training's environment first on PATH and PYTHONPATH",
}


def _reads_environment(source: str) -> bool:
    """``os.environ.get(...)``, ``os.getenv(...)``, ``os.environ[...]`` read, or ``... in os.environ``."""
    def is_environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                (node.func.attr == "get" and is_environ(node.func.value)) or node.func.attr == "getenv"):
            return True
        if isinstance(node, ast.Subscript) and is_environ(node.value) and isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) \
                and any(is_environ(c) for c in node.comparators):
            return True
    return False


def test_settings_are_read_from_the_environment_in_known_places() -> None:
    modules = _modules()
    readers = {name for name, path in modules.items() if _reads_environment(path.read_text())}
    assert sorted(readers) == sorted(ENVIRONMENT_READERS)


def test_the_environment_rule_sees_each_kind_of_read() -> None:
    for source in ("import os\nx = os.environ.get('A')", "import os\nx = os.getenv('A')",
                   "import os\nx = os.environ['A']", "import os\nx = 'A' in os.environ"):
        assert _reads_environment(source), source
    assert not _reads_environment("import os, subprocess\nsubprocess.run(['x'], env=dict(os.environ))")
    assert not _reads_environment("import os\nos.environ['A'] = '1'")


def test_the_checker_sees_a_circle_and_an_upward_import(graph: dict[str, set[str]]) -> None:
    # The rules above must be able to fail: a made-up pair of modules that break both.
    fake = {"gpufleet.devices.a": {"gpufleet.jobs.b"}, "gpufleet.jobs.b": {"gpufleet.devices.a"}}
    assert [f"{a} -> {b}" for a, ts in fake.items() for b in ts if _layer(b) > _layer(a)] == \
        ["gpufleet.devices.a -> gpufleet.jobs.b"]
    assert _circles(fake) == [["gpufleet.devices.a", "gpufleet.jobs.b"]]
    # Two packages importing each other through different modules: no module circle, a package one.
    crossed = {"gpufleet.lifecycle.a": {"gpufleet.engine.b"}, "gpufleet.engine.c": {"gpufleet.lifecycle.d"},
               "gpufleet.engine.b": set(), "gpufleet.lifecycle.d": set()}
    assert _circles(crossed) == []
    assert _circles(_package_graph(crossed)) == [["engine", "lifecycle"]]
    # And the real graph is read: the app imports its routers.
    assert "gpufleet.api.routes.trainings" in graph["gpufleet.api.app"]
