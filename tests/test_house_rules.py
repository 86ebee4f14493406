"""The house rules' checks can fail: each hole a module could load a higher layer through, or read another
module's private names through, is planted in a made-up package (a low module of ``devices`` reaching
``jobs.worker``, ``jobs.celery_app`` and ``api.app``) and seen by tests/support/houserules.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import houserules
from test_layers import DYNAMIC_LOADS, _layer, upward

WIRE = '''
import importlib

HOMES = {"gpufleet.wire.trainings": ("TrainingPublic",)}
_MODULE_OF = {name: module for module, names in HOMES.items() for name in names}


def __getattr__(name):
    return getattr(importlib.import_module(_MODULE_OF[name]), name)
'''
ROOT = '''
def __getattr__(name):
    if name == "TrainingBackend":
        from gpufleet.engine import backend

        return backend.TrainingBackend
    raise AttributeError(name)
'''


def _tree(root: Path, files: dict[str, str]) -> dict[str, Path]:
    """A package ``gpufleet`` under ``root``: a few modules of its real layers, and ``files`` over them."""
    base = {"__init__.py": ROOT, "devices/__init__.py": "", "engine/__init__.py": "", "engine/backend.py": "",
            "wire/__init__.py": WIRE, "wire/trainings.py": "", "jobs/__init__.py": "", "jobs/worker.py": "",
            "jobs/celery_app.py": "", "api/__init__.py": "", "api/app.py": "", "client/__init__.py": ""}
    for rel, text in {**base, **files}.items():
        (root / "gpufleet" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "gpufleet" / rel).write_text(text)
    return houserules.modules(root / "gpufleet")


def _findings(known: dict[str, Path], name: str) -> tuple[set[str], list[str], list[str]]:
    """What ``name`` imports, its loads by a name built at run time, and the private names it reads."""
    file = houserules.File(name, known[name], known)
    return houserules.imports(file, houserules.lazy_names(known)), houserules.dynamic_imports(file), \
        houserules.private_uses(file)


@pytest.mark.parametrize(("source", "target"), [
    ('import importlib\nm = importlib.import_module("gpufleet." + "jobs.celery_app")\n', "gpufleet.jobs.celery_app"),
    ('from importlib import import_module\nm = import_module(".".join(["gpufleet", "api", "app"]))\n',
     "gpufleet.api.app"),
    ('import importlib\nm = importlib.import_module(f"gpufleet.{\'jobs\'}.worker")\n', "gpufleet.jobs.worker"),
    ('import importlib\nm = importlib.import_module(".worker", "gpufleet.jobs")\n', "gpufleet.jobs.worker"),
    ('import pkgutil\napp = pkgutil.resolve_name("gpufleet.api.app:app")\n', "gpufleet.api.app"),
    ('import pkgutil\napp = pkgutil.resolve_name("gpufleet.jobs.celery_app.app")\n', "gpufleet.jobs.celery_app"),
    ('m = __import__("gpufleet.jobs.worker")\n', "gpufleet.jobs.worker"),
    ('import runpy\nrunpy.run_module("gpufleet.jobs.worker")\n', "gpufleet.jobs.worker"),
    ('import gpufleet\nw = getattr(gpufleet, "jobs").worker\n', "gpufleet.jobs"),
    ('import gpufleet.jobs\nw = gpufleet.jobs.worker.run\n', "gpufleet.jobs.worker"),
    ('from gpufleet import jobs as j\nw = getattr(j, "worker")\n', "gpufleet.jobs.worker"),
], ids=["concatenated", "joined", "f-string-of-constants", "relative", "resolve_name-colon", "resolve_name-dotted",
        "__import__", "run_module", "getattr-constant", "attribute-chain", "getattr-submodule"])
def test_a_module_named_by_a_string_the_checker_can_read_is_an_edge(tmp_path: Path, source: str,
                                                                    target: str) -> None:
    known = _tree(tmp_path, {"devices/probe.py": source})
    edges, dynamic, _ = _findings(known, "gpufleet.devices.probe")
    assert target in edges and dynamic == []
    assert f"gpufleet.devices.probe -> {target}" in upward(houserules.graph(known))


@pytest.mark.parametrize("source", [
    'import importlib\n\ndef load(name):\n    return importlib.import_module("gpufleet." + name)\n',
    'from importlib import import_module as load_it\n\ndef load(name):\n    return load_it(f"gpufleet.jobs.{name}")\n',
    'import importlib\nload = importlib.import_module\n\ndef load_it(name):\n    return load(name)\n',
    'import importlib\n\ndef load(names):\n    return list(map(importlib.import_module, names))\n',
    'import pkgutil\n\ndef load(name):\n    return pkgutil.resolve_name(name)\n',
    'import importlib as il\n\ndef load(name):\n    return il.import_module(name)\n',
    'def load(name):\n    return __import__(name)\n',
    'import gpufleet\n\ndef load(name):\n    return getattr(gpufleet, name)\n',
    'from gpufleet import jobs\n\ndef load(name):\n    return vars(jobs)[name]\n',
    'import gpufleet.jobs as j\n\ndef load(name):\n    return j.__dict__[name]\n',
], ids=["concatenated", "aliased-f-string", "assigned-loader", "loader-passed-on", "resolve_name", "aliased-importlib",
        "__import__", "getattr-of-the-root", "vars", "__dict__"])
def test_a_module_named_at_run_time_is_a_finding(tmp_path: Path, source: str) -> None:
    known = _tree(tmp_path, {"devices/probe.py": source})
    _, dynamic, _ = _findings(known, "gpufleet.devices.probe")
    assert [d.partition(": ")[0] for d in dynamic] in (["gpufleet.devices.probe:load"],
                                                       ["gpufleet.devices.probe:load_it"]), dynamic
    assert not {d.partition(": ")[0] for d in dynamic} & set(DYNAMIC_LOADS)


def test_a_name_built_at_run_time_reaches_every_module_its_constant_start_could_name(tmp_path: Path) -> None:
    known = _tree(tmp_path, {"devices/probe.py": 'import importlib\n\ndef load(name):\n'
                                                 '    return importlib.import_module(f"gpufleet.jobs.{name}")\n'})
    edges, _, _ = _findings(known, "gpufleet.devices.probe")
    assert {"gpufleet.jobs.worker", "gpufleet.jobs.celery_app"} <= edges


def test_an_upward_entry_of_a_table_of_lazy_names_is_an_upward_import(tmp_path: Path) -> None:
    # wire.HOMES names the module each shape is loaded from; one more entry is one more import of wire's.
    homes = WIRE.replace('("TrainingPublic",)}', '("TrainingPublic",), "gpufleet.jobs.worker": ("Worker",)}')
    probe = "from gpufleet import wire\nW = wire.Worker\nT = wire.TrainingPublic\n"
    known = _tree(tmp_path, {"wire/__init__.py": homes, "client/probe.py": probe})
    assert houserules.lazy_names(known)["gpufleet.wire"] == {"TrainingPublic": {"gpufleet.wire.trainings"},
                                                              "Worker": {"gpufleet.jobs.worker"}}
    assert upward(houserules.graph(known)) == ["gpufleet.wire -> gpufleet.jobs.worker"]
    edges, _, _ = _findings(known, "gpufleet.client.probe")
    assert {"gpufleet.wire.trainings", "gpufleet.jobs.worker"} <= edges
    # A table of names to modules is read the same way.
    known = _tree(tmp_path, {"wire/__init__.py": WIRE.replace("HOMES = {", 'LAZY = {"Worker": "gpufleet.jobs.worker"}'
                                                              "\nHOMES = {")})
    assert "gpufleet.wire -> gpufleet.jobs.worker" in upward(houserules.graph(known))


def test_an_upward_lazy_name_of_the_package_root_is_an_upward_import(tmp_path: Path) -> None:
    root = ROOT.replace("    raise", '    if name == "worker":\n        import gpufleet.jobs.worker\n\n'
                                    '        return gpufleet.jobs.worker\n    raise')
    known = _tree(tmp_path, {"__init__.py": root, "devices/probe.py": "import gpufleet as g\nW = g.worker\n",
                             "devices/reader.py": "from gpufleet import worker\n"})
    found = upward(houserules.graph(known))
    assert "gpufleet -> gpufleet.jobs.worker" in found, "the root reaches above the training side"
    assert {"gpufleet.devices.probe -> gpufleet.jobs.worker", "gpufleet.devices.reader -> gpufleet.jobs.worker"} \
        <= set(found)
    # The root's own honest names stay where they are: on the layer of engine.
    assert _layer("gpufleet") == _layer("gpufleet.engine.backend")
    assert upward(houserules.graph(_tree(tmp_path / "honest", {}))) == []


def test_reading_another_modules_private_names_is_a_finding(tmp_path: Path) -> None:
    known = _tree(tmp_path, {
        "jobs/worker.py": "def _claim():\n    pass\n\n\ndef _mine():\n    return _claim()\n",
        "jobs/probe.py": "from gpufleet.jobs.worker import _claim\nfrom gpufleet.jobs import worker\n"
                         "import gpufleet.jobs.worker as w\n\n\ndef f():\n"
                         "    return worker._claim, w._mine, getattr(worker, '_claim'), worker.__name__\n",
        "jobs/relative.py": "from .worker import _claim as claim\n",
    })
    assert _findings(known, "gpufleet.jobs.probe")[2] == [
        "gpufleet.jobs.probe: from gpufleet.jobs.worker import _claim",
        "gpufleet.jobs.probe: gpufleet.jobs.worker._claim", "gpufleet.jobs.probe: gpufleet.jobs.worker._mine"]
    assert _findings(known, "gpufleet.jobs.relative")[2] == ["gpufleet.jobs.relative: from gpufleet.jobs.worker "
                                                             "import _claim"]
    # Its own private names, dunder names and a public name imported under a private alias are no finding.
    assert _findings(known, "gpufleet.jobs.worker")[2] == []


def test_the_real_loads_at_run_time_are_edges_of_the_graph() -> None:
    # What the allow-list lets through still counts: every command module is the CLI's import, every
    # module of HOMES is wire's.
    known = houserules.modules()
    graph = houserules.graph(known)
    assert {m for m in known if m.startswith("gpufleet.commands.")} <= graph["gpufleet.cli"]
    from gpufleet import wire

    assert set(wire.HOMES) <= graph["gpufleet.wire"]
    assert {"gpufleet.engine.backend", "gpufleet.engine.stopfile"} <= graph["gpufleet"]
