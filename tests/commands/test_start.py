"""The CLI imports every command group explicitly, yet starts without the server, the database or torch."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import typer
import typer.main

import gpufleet.commands
from gpufleet import cli

# What `gpufleet ARGV` has imported once the command returned (help, so no server is needed).
PROBE = """
import json, sys
sys.argv = ["gpufleet", *sys.argv[1:]]
from gpufleet.cli import main
try:
    main()
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""

# What no command may load before it runs: a command imports these inside its function.
HEAVY = {"gpufleet.config", "gpufleet.db", "gpufleet.api", "gpufleet.client", "gpufleet.jobs", "gpufleet.scheduling",
         "gpufleet.engine", "sqlalchemy", "celery", "fastapi", "httpx", "pydantic", "yaml", "torch", "numpy"}


def _modules_after(*argv: str) -> tuple[set[str], str]:
    res = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120, check=False)
    return set(json.loads(res.stderr.strip().splitlines()[-1])), res.stdout


def _heavy(loaded: set[str]) -> set[str]:
    return {m for m in loaded if m in HEAVY or m.split(".")[0] in HEAVY or ".".join(m.split(".")[:2]) in HEAVY}


def test_every_command_module_is_a_group_of_the_cli_with_the_names_it_adds():
    # A module with register(app) that cli.COMMAND_GROUPS forgot would add no command; one whose names are
    # wrong there would not be loaded for its own command.
    registering = set()
    for info in pkgutil.iter_modules(gpufleet.commands.__path__):
        module = __import__(f"gpufleet.commands.{info.name}", fromlist=["register"])
        if hasattr(module, "register"):
            registering.add(info.name)
    assert registering == set(cli.COMMAND_GROUPS)
    for name, names in cli.COMMAND_GROUPS.items():
        alone = typer.Typer()
        alone.callback()(lambda: None)
        module = __import__(f"gpufleet.commands.{name}", fromlist=["register"])
        module.register(alone)
        added = set(typer.main.get_command(alone).commands)
        assert added == set(names) or (not added and names == ("trainings",)), (name, added)


def test_a_command_loads_only_the_modules_that_add_it():
    loaded, out = _modules_after("trainings", "ls", "--help")
    assert "List trainings, newest first." in out
    commands = {m.rsplit(".", 1)[1] for m in loaded if m.startswith("gpufleet.commands.")}
    assert {"trainings", "training_files"} <= commands
    assert not commands & {"devices", "sessions", "sweeps", "pools", "doctor", "users", "recommend", "run"}, commands
    assert cli.modules_for(["serve", "--port", "1"]) == []
    assert cli.modules_for(["--help"]) is None
    assert cli.modules_for(["no-such-command"]) is None


def test_run_starts_without_the_server_the_database_or_torch():
    loaded, out = _modules_after("run", "--help")
    assert "Run your own training script" in out
    assert not _heavy(loaded), _heavy(loaded)


def test_help_lists_every_command_and_loads_no_command_body():
    loaded, out = _modules_after("--help")
    names = {c.name or c.callback.__name__ for c in cli.app.registered_commands}
    names |= {g.name for g in cli.app.registered_groups}
    assert {"serve", "db", "secret", "gpus", "topology", "train", "run", "trainings", "worker", "recommend", "top",
            "users", "tokens"} <= names
    for name in names:
        assert name in out, name
    assert not _heavy(loaded), _heavy(loaded)


def test_drain_hangs_under_gpus():
    gpus = next(g.typer_instance for g in cli.app.registered_groups if g.name == "gpus")
    assert {"drain", "undrain"} <= {c.name for c in gpus.registered_commands}
