"""Settings in sections per component: each package is given only the sections gpufleet.config.READS names for
it, every setting belongs to exactly one section, the GPUFLEET_* names are what they were, and the README lists
each setting under its section.

What a function is given is read from its annotations (and every other place a module names a settings type:
a dataclass's field, a cast, an alias of the class), not from how the code spells a read, so ``s = settings``,
``getattr(settings, name)`` or a parameter called ``cfg`` change nothing: a package's code names only its
sections, and the whole ``Settings`` (and ``get_settings()``/``load_settings()``) only in the processes'
assemblers (gpufleet.config.ASSEMBLERS) and the few entry points in ``ROOTS``. The functions that still take the
whole object are listed in ``settings_whole.txt`` beside this file; the list may only shrink.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field as _field
from pathlib import Path

import pytest

from gpufleet.config import ASSEMBLERS, READS, SECTIONS, Settings, load_settings

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "backend" / "gpufleet"
WHOLE = "the whole Settings"
LOADER = "get_settings()/load_settings()"
# The types of gpufleet.config a module may name, by their class names: Settings, and each section's class.
TYPES: dict[str, str] = {"Settings": WHOLE, **{cls.__name__: name for name, cls in SECTIONS.items()}}
LOADERS = {"get_settings", "load_settings"}
# The entry points outside the assemblers that build the settings of a process or take them whole to hand
# each component its sections: the worker process and the Celery app it consumes with.
ROOTS = {
    "jobs/worker.py:run_worker",
    "jobs/worker.py:main",
    "jobs/celery_app.py:make_celery",
    "jobs/celery_app.py:__getattr__",
}
PENDING_FILE = Path(__file__).with_name("settings_whole.txt")


def _owner() -> dict[str, str]:
    """Each field and property of Settings -> the name of the section that declares it."""
    owner: dict[str, str] = {}
    for name, cls in SECTIONS.items():
        for attr in cls.model_fields:
            owner[attr] = name
        for attr, value in vars(cls).items():
            if isinstance(value, property):
                owner[attr] = name
    return owner


@dataclass
class Found:
    """What one module's code is given of the settings: (line, scope, what) for each place it names a settings
    type or a loader, and the settings it reads off a section it was given that the section does not hold."""

    takes: set[tuple[int, str, str]] = _field(default_factory=set)
    strays: set[tuple[int, str, str]] = _field(default_factory=set)


def _imported(tree: ast.Module) -> tuple[dict[str, str], set[str]]:
    """The names a module binds to gpufleet.config's types and loaders (local name -> section, WHOLE or LOADER),
    and the names it binds to gpufleet.config itself (the ``config`` of ``config.Settings``)."""
    names: dict[str, str] = {}
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[:2] == ["gpufleet", "config"]:
            for alias in node.names:
                kind = TYPES.get(alias.name) or (LOADER if alias.name in LOADERS else None)
                if kind:
                    names[alias.asname or alias.name] = kind
        elif isinstance(node, ast.ImportFrom) and node.module == "gpufleet":
            modules |= {alias.asname or alias.name for alias in node.names if alias.name == "config"}
        elif isinstance(node, ast.Import):
            modules |= {alias.asname or alias.name for alias in node.names if alias.name.startswith("gpufleet.config")}
    return names, modules


class _Reader(ast.NodeVisitor):
    """Walks a module with the qualified name of the function or class each node is in."""

    def __init__(self, names: dict[str, str], modules: set[str], package: str) -> None:
        self.names, self.modules, self.scope, self.found = names, modules, ["<module>"], Found()
        self.owner = _owner()
        # The whole Settings, where a function still takes it, is read only for the package's sections.
        self.whole_as = set(READS.get(package, ()))

    def sections(self, annotation: ast.AST | None) -> set[str]:
        """The sections a parameter so annotated may be read for."""
        kinds = self.kinds(annotation)
        return (kinds - {WHOLE}) | self.whole_as if WHOLE in kinds else kinds

    def kind(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.names.get(node.id)
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) in self.modules:
            return TYPES.get(node.attr) or (LOADER if node.attr in LOADERS else None)
        return None

    def kinds(self, annotation: ast.AST | None) -> set[str]:
        """The settings types an annotation names (a quoted one parsed)."""
        out = set()
        for node in ast.walk(annotation) if annotation is not None else ():
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                try:
                    out |= self.kinds(ast.parse(node.value, mode="eval"))
                except SyntaxError:
                    pass
            elif self.kind(node):
                out.add(self.kind(node))
        return out

    def here(self) -> str:
        return ".".join(self.scope[1:]) or self.scope[0]

    def note(self, annotation: ast.AST | None) -> None:
        if annotation is not None:
            self.found.takes |= {(annotation.lineno, self.here(), kind) for kind in self.kinds(annotation)}

    def generic_visit(self, node: ast.AST) -> None:
        kind = self.kind(node)
        if kind:
            self.found.takes.add((node.lineno, self.here(), kind))
        if isinstance(node, ast.AnnAssign):
            self.note(node.annotation)
        super().generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self._class_reads(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]
        for arg in filter(None, args):
            self.note(arg.annotation)
            if arg.annotation is None and "settings" in arg.arg.lower():
                self.found.takes.add((node.lineno, self.here(), f"an unannotated parameter {arg.arg!r}"))
        self.note(node.returns)
        given = {arg.arg: self.sections(arg.annotation) for arg in filter(None, args) if self.kinds(arg.annotation)}
        self._reads(node, given)
        self.generic_visit(node)
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _reads(self, node: ast.AST, given: dict[str, set[str]], holder: str | None = None) -> None:
        """Settings read off a section parameter (or an alias of it, or ``self.<holder>``) that are not its."""
        aliases = dict(given)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Assign) and ast.unparse(sub.value) in aliases:
                aliases |= {t.id: aliases[ast.unparse(sub.value)] for t in sub.targets if isinstance(t, ast.Name)}
        for sub in ast.walk(node):
            target = ast.unparse(sub.value) if isinstance(sub, ast.Attribute) else None
            if target in aliases and sub.attr in self.owner and self.owner[sub.attr] not in aliases[target]:
                self.found.strays.add((sub.lineno, self.here(),
                                       f"{target}.{sub.attr} (section {self.owner[sub.attr]})"))
            if (isinstance(sub, ast.Call) and ast.unparse(sub.func) == "getattr" and sub.args
                    and ast.unparse(sub.args[0]) in aliases):
                self.found.strays.add((sub.lineno, self.here(), f"getattr({ast.unparse(sub.args[0])}, ...)"))

    def _class_reads(self, node: ast.ClassDef) -> None:
        """A section a method keeps (``self.settings = settings``) is read in the class's methods as it is."""
        kept: dict[str, set[str]] = {}
        for method in (n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            args = {a.arg: self.sections(a.annotation) for a in [*method.args.args, *method.args.kwonlyargs]
                    if self.kinds(a.annotation)}
            for sub in ast.walk(method):
                if isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Name) and sub.value.id in args:
                    kept |= {ast.unparse(t): args[sub.value.id] for t in sub.targets
                             if isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self"}
        if kept:
            self._reads(node, kept)


def given(source: str, package: str = "") -> Found:
    """What a module of ``package`` is given of the settings (see Found)."""
    tree = ast.parse(source)
    reader = _Reader(*_imported(tree), package)
    reader.visit(tree)
    return reader.found


def pending() -> set[str]:
    lines = PENDING_FILE.read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def violations(module: str, source: str, waiting: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """What the module at ``module`` (a path under gpufleet/) names that its package is not given: a section
    READS does not list for it, the whole Settings or a loader outside ROOTS (the whole Settings also where
    ``waiting`` lists the function), or a setting read off a section it does not hold."""
    package = module.split("/")[0].removesuffix(".py")
    if package in ASSEMBLERS:
        return []
    allowed = set(READS.get(package, ()))
    found = given(source, package)
    out = []
    for line, scope, what in sorted(found.takes):
        where = f"{module}:{scope}"
        if what in allowed or where in ROOTS or (what == WHOLE and where in waiting):
            continue
        out.append(f"{where} (line {line}) takes {what}")
    out += [f"{module}:{scope} (line {line}) reads {what}" for line, scope, what in sorted(found.strays)
            if f"{module}:{scope}" not in ROOTS]
    return out


def test_every_setting_belongs_to_exactly_one_section() -> None:
    declared = [field for cls in SECTIONS.values() for field in cls.model_fields]
    assert len(declared) == len(set(declared)), "a field is declared by two sections"
    assert set(declared) == set(Settings.model_fields)
    assert all(issubclass(Settings, cls) for cls in SECTIONS.values())
    assert all(set(sections) <= set(SECTIONS) for sections in READS.values())


@pytest.mark.parametrize(("variable", "value", "field", "expected"), [
    ("GPUFLEET_DB_POOL_SIZE", "7", "db_pool_size", 7),
    ("GPUFLEET_PORT", "8123", "port", 8123),
    ("GPUFLEET_HOST_NAME", "box-7", "host_name", "box-7"),
    ("GPUFLEET_GPU__MAX_MODELS_PER_GPU", "3", "gpu", 3),
    ("GPUFLEET_MAX_QUEUED_PER_USER", "9", "max_queued_per_user", 9),
    ("GPUFLEET_LEASE_S", "12", "lease_s", 12.0),
    ("GPUFLEET_RUN_ACCOUNT", "lab-run", "run_account", "lab-run"),
    ("GPUFLEET_RETENTION_DAYS", "3", "retention_days", 3),
    ("GPUFLEET_WEBHOOKS_PER_USER", "4", "webhooks_per_user", 4),
    ("GPUFLEET_SESSION_MAX_HOURS", "5", "session_max_hours", 5.0),
])
def test_each_sections_variables_keep_their_flat_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                       variable: str, value: str, field: str, expected: object) -> None:
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(tmp_path))
    monkeypatch.setenv(variable, value)
    got = getattr(load_settings(), field)
    assert (got.max_models_per_gpu if field == "gpu" else got) == expected




def _modules() -> dict[str, str]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = str(path.relative_to(PACKAGE))
        if module.split("/")[0] != "config":
            out[module] = path.read_text()
    return out


def test_each_package_is_given_only_its_sections() -> None:
    waiting = pending()
    found = {module: bad for module, source in _modules().items() if (bad := violations(module, source, waiting))}
    assert not found, ("given outside the package's sections (gpufleet.config.READS; the whole Settings only in"
                       f" ROOTS): {found}")


def test_the_list_of_functions_given_the_whole_settings_only_shrinks() -> None:
    """Each function tests/settings_whole.txt names still takes the whole Settings: one given its sections
    leaves the list, and nothing new joins it unnoticed (each entry is a package's, never an assembler's)."""
    whole = {f"{module}:{scope}" for module, source in _modules().items()
             for _, scope, what in given(source).takes if what == WHOLE}
    stale = sorted(pending() - whole)
    assert not stale, f"given their sections now, so off tests/settings_whole.txt: {stale}"
    assert not [entry for entry in pending() if entry.split("/")[0].removesuffix(".py") in ASSEMBLERS]


PROBES = {
    "an alias of the class": "from gpufleet.config import Settings as Conf\n\ndef f(cfg: Conf):\n    return cfg\n",
    "a parameter called cfg": "from gpufleet.config import Settings\n\ndef f(cfg: Settings):\n    s = cfg\n"
                              "    return s.retention_days\n",
    "a quoted annotation read by getattr": "from gpufleet.config import Settings\n\n"
                                           "def f(x: 'Settings | None', name):\n    return getattr(x, name)\n",
    "the class under another name": "from gpufleet.config import Settings\nConf = Settings\n",
    "a dataclass's field": "from gpufleet.config import Settings\n\nclass Round:\n    settings: Settings\n",
    "the module's attribute": "from gpufleet import config\n\ndef f(c: config.Settings):\n    return c\n",
    "a loader": "from gpufleet.config import get_settings\n\ndef f():\n    return get_settings().port\n",
    "another package's section": "from gpufleet.config.telemetry import TelemetrySettings\n\n"
                                 "def f(settings: TelemetrySettings):\n    return settings\n",
    "an unannotated parameter": "def f(settings):\n    return settings.webhook_timeout_s\n",
}


@pytest.mark.parametrize("probe", PROBES)
def test_the_check_sees_a_settings_type_however_it_is_spelled(probe: str) -> None:
    assert violations("notify/probe.py", PROBES[probe]), probe
    assert not violations("api/probe.py", PROBES[probe])  # an assembler is given everything


def test_the_check_reads_what_a_section_parameter_is_read_for() -> None:
    head = "from gpufleet.config import WebhookSettings\n\n"
    fine = head + "def f(settings: WebhookSettings) -> float:\n    return settings.webhook_timeout_s\n"
    assert violations("notify/probe.py", fine) == []
    assert violations("users/probe.py", fine) == ["users/probe.py:f (line 3) takes webhooks"]
    stray = head + "def f(cfg: WebhookSettings):\n    s = cfg\n    return s.retention_days, getattr(cfg, 'x')\n"
    assert violations("notify/probe.py", stray) == [
        "notify/probe.py:f (line 5) reads getattr(cfg, ...)",
        "notify/probe.py:f (line 5) reads s.retention_days (section telemetry)"]
    kept = head + ("class Hook:\n    def __init__(self, settings: WebhookSettings):\n"
                   "        self.settings = settings\n\n"
                   "    def ttl(self):\n        return self.settings.retention_days\n")
    assert violations("notify/probe.py", kept) == [
        "notify/probe.py:Hook (line 8) reads self.settings.retention_days (section telemetry)"]


def test_a_waiting_function_may_take_the_whole_settings_but_read_only_its_sections_and_not_load_it() -> None:
    source = ("from gpufleet.config import Settings, get_settings\n\ndef f(settings: Settings):\n"
              "    return settings.webhook_timeout_s\n\ndef g(cfg: Settings):\n"
              "    s = cfg\n    return s.retention_days\n\n"
              "def h():\n    return get_settings()\n")
    waiting = {"notify/probe.py:f", "notify/probe.py:g", "notify/probe.py:h"}
    assert violations("notify/probe.py", source, waiting) == [
        "notify/probe.py:h (line 11) takes " + LOADER,
        "notify/probe.py:g (line 8) reads s.retention_days (section telemetry)"]


def _readme_sections() -> dict[str, set[str]]:
    text = (ROOT / "README.md").read_text()
    config = text[text.index("## Configuration"):text.index("\n## ", text.index("## Configuration") + 5)]
    out: dict[str, set[str]] = {}
    for block in re.split(r"\n\*\*", config)[1:]:
        name = block.split("**", 1)[0]
        rows = [line for line in block.splitlines() if line.startswith("| `")]
        out[name] = {v for row in rows for v in re.findall(r"`(GPUFLEET_[A-Z0-9_]+)`", row.split("|")[1])}
    return out


def test_the_readme_lists_every_setting_under_its_section() -> None:
    tables = _readme_sections()
    assert set(SECTIONS) <= set(tables)
    for name, cls in SECTIONS.items():
        for field in cls.model_fields:
            variable = f"GPUFLEET_{field.upper()}"
            if field == "gpu":
                variable = "GPUFLEET_GPU__MODE"
            assert variable in tables[name], f"{variable} is not in the README's {name!r} table"
        others = {f"GPUFLEET_{f.upper()}" for s, c in SECTIONS.items() if s != name for f in c.model_fields}
        assert not tables[name] & others, f"the README's {name!r} table lists {tables[name] & others}"
