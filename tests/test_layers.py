"""The house's shape, checked: each package on one layer, no import circle (between modules or
between packages), no import from a lower layer to a higher one, no long file, no long function.

Every import counts, those inside functions too: an import deferred to call
time is still a dependency, and a circle through one is still a circle. So do
the imports no ``import`` statement names: ``importlib.import_module("gpufleet.x")``
(or ``pkgutil.resolve_name``, ``__import__``), a name the package root loads on
first use (``gpufleet.TrainingBackend``) and any other module's names loaded on
first use (``wire.HOMES``). A module named by a string built at run time is an
import no checker can follow, so only the few in ``DYNAMIC_LOADS`` may do it.
No module reads another's ``_private`` names. Length is counted in statements
and syntax nodes as well as lines, so packing code onto fewer lines does not
make it shorter. The checks themselves are in tests/support/houserules.py, and
tests/test_house_rules.py shows each of them failing on a made-up package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support import houserules

PACKAGE = Path(__file__).resolve().parents[1] / "backend" / "gpufleet"

# Lowest first, each top-level package or module of gpufleet once. A module may import its own
# layer or lower ones.
LAYERS = [
    {"config", "datadir", "secretfiles", "yamlsource", "yamltext", "logsetup", "events", "db", "reporting", "rankpath",
     "bounds", "memberfs", "workkinds"},
    {"devices"},
    {"telemetry", "engine", "users", "notify"},
    {"wire"},
    {"lifecycle"},
    {"scheduling"},
    {"trainings", "interactive", "bookings"},
    {"pools"},
    {"sweeps"},
    {"ckptstore"},
    {"jobs"},
    {"api", "client", "commands", "cli"},
]
# The package root is the facade for training code (`gpufleet.report`,
# `gpufleet.TrainingBackend`, loaded on first use); everything may read its version. What it loads
# sits on the layer of the training side (engine) or below, so no name of it brings in the server.
FACADE = houserules.FACADE
FACADE_REACHES = "engine"
MAX_LINES = 400
MAX_STATEMENTS = 300
# A function past this reads as several steps; name them (jobs/supervisor.py:run_attempt is the model).
MAX_FUNCTION_LINES = 80
MAX_FUNCTION_STATEMENTS = 80
# And as many syntax nodes (names, calls, operators...; ast.walk less the load/store markers) as a long
# function of honest lines holds: the largest today has about 700 (jobs/metrics_sink.py:_handle, 71 lines),
# while a `return` of 400 tests joined by `or` on one line has about 1,600.
MAX_FUNCTION_NODES = 800
# A migration is the record of a schema step as it was applied, so it is never rewritten for length.
MIGRATIONS = PACKAGE.parents[1] / "alembic" / "versions"


def _modules() -> dict[str, Path]:
    return houserules.modules(PACKAGE)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return houserules.graph(_modules())


def _package(module: str) -> str:
    """The top-level package (or module) of gpufleet that ``module`` belongs to: ``scheduling``, ``config``."""
    return module.split(".")[1]


def _layer(module: str) -> int | None:
    package = FACADE_REACHES if module == FACADE else _package(module)
    return next((rank for rank, layer in enumerate(LAYERS) if package in layer), None)


def test_every_module_has_a_layer(graph: dict[str, set[str]]) -> None:
    assert [m for m in graph if m != FACADE and _layer(m) is None] == []


def test_each_package_is_on_one_layer() -> None:
    listed = [name for layer in LAYERS for name in layer]
    assert sorted({n for n in listed if listed.count(n) > 1}) == []
    assert [n for n in listed if "." in n] == [], "a layer lists whole packages, not their modules"
    present = {_package(m) for m in _modules() if m != FACADE}
    assert sorted(set(listed) - present) == [], "a layer names a package that no longer exists"


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Each import from a lower layer to a higher one (the package root on the layer of what it loads)."""
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                  if b != FACADE and _layer(b) > _layer(a))


def test_no_import_reaches_up_a_layer(graph: dict[str, set[str]]) -> None:
    assert upward(graph) == []


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
    lazy = houserules.lazy_names(modules)
    assert sorted(f"{m} -> {t}" for m in worker_side
                  for t in houserules.imports(houserules.File(m, modules[m], modules), lazy) if t in api_side) == []


# The loads of a module named at run time, each with what it may name. Any other is an import the graph
# above cannot see: name the module with a constant (an edge of the graph) or add a table of names that
# houserules.lazy_names reads (as wire.HOMES is read).
DYNAMIC_LOADS = {
    "gpufleet.cli:with_groups": "a command module of COMMAND_GROUPS (every gpufleet.commands module is its edge)",
    "gpufleet:__getattr__": "a lazy name of the root, from the module its branch imported",
    "gpufleet.db:__getattr__": "a lazy name of db, from the module its branch imported",
    "gpufleet.wire:__getattr__": "a shape of HOMES, which the graph reads as wire's imports",
    "gpufleet.devices:__getattr__": "a name of HOMES, which the graph reads as devices' imports",
    "gpufleet.trainings.script_warm:_run": "a member's own script module (`python -m`), never one of gpufleet",
}


def test_no_module_is_loaded_by_a_name_built_at_run_time() -> None:
    modules = _modules()
    found = [f for name, path in modules.items()
             for f in houserules.dynamic_imports(houserules.File(name, path, modules))]
    assert sorted(f for f in found if f.partition(": ")[0] not in DYNAMIC_LOADS) == []
    assert sorted(set(DYNAMIC_LOADS) - {f.partition(": ")[0] for f in found}) == [], "an allowed load is gone"


def test_no_module_reads_another_modules_private_names() -> None:
    # A name shared between modules is public: a `_name` that another module needs is named without the
    # underscore where it lives, or moved to the module that uses it.
    modules = _modules()
    assert [f for name, path in modules.items()
            for f in houserules.private_uses(houserules.File(name, path, modules))] == []


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


def test_no_file_is_over_400_lines() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_no_file_is_over_300_statements() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if MIGRATIONS not in p.parents
            and (n := houserules.statements(ast.parse(p.read_text()))) > MAX_STATEMENTS}
    assert long == {}


def _long_functions(source: str) -> dict[str, int]:
    return houserules.long_functions(source, MAX_FUNCTION_LINES, MAX_FUNCTION_STATEMENTS, MAX_FUNCTION_NODES)


def test_no_function_is_over_80_lines() -> None:
    long = {f"{p.relative_to(PACKAGE)}:{name}": n for p in PACKAGE.rglob("*.py") if MIGRATIONS not in p.parents
            for name, n in _long_functions(p.read_text()).items()}
    assert long == {}


def test_the_function_rule_can_fail() -> None:
    def body(n: int) -> str:
        return "".join(f"        x{i} = {i}\n" for i in range(n))

    # A method of exactly the limit passes; one line more does not.
    source = (f"class A:\n    def fits(self):\n{body(MAX_FUNCTION_LINES - 1)}"
              f"    def long(self):\n{body(MAX_FUNCTION_LINES)}")
    assert _long_functions(source) == {"long": MAX_FUNCTION_LINES + 1}
    # Many statements on one line are as long as they are on many.
    packed = "def packed():\n    " + "; ".join(f"x{i} = {i}" for i in range(400)) + "\n"
    assert list(_long_functions(packed)) == ["packed"]
    assert houserules.statements(ast.parse(packed)) == 401
    # And one statement is as long as the expression it holds: a `return` of 400 tests joined by `or`.
    one = "def one(kind):\n    return " + " or ".join(f'kind == "kind-of-work-{i:03}"' for i in range(400)) + "\n"
    assert len(one) > 10_000 and len(one.splitlines()) == 2
    assert _long_functions(one) == {"one": houserules.syntax_nodes(ast.parse(one).body[0])}
    assert houserules.syntax_nodes(ast.parse(one).body[0]) > MAX_FUNCTION_NODES


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
    "gpufleet.commands.bookings": "the user's own time zone (TZ) that a booking's times are given and shown in",
    "gpufleet.engine.rankenv": "a rank process: what its launcher or torchrun set",
    "gpufleet.engine.rankpreload": "a warm launcher's rank server: the launcher it must die with",
    "gpufleet.rankpath.gpufleet_report": "a user's interpreter, with the standard library only",
    "gpufleet.pools.node": "a task on a pool's node: the job, its task and the GPUs granted "
                           "(SLURM_*, GPUFLEET_NODE_*, CUDA_*)",
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
