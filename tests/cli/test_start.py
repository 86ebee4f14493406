"""The CLI loads only what the invoked command needs, and still offers every command."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import typer
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


def _modules_after(*argv: str) -> tuple[set[str], str]:
    res = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120, check=False)
    return set(json.loads(res.stderr.strip().splitlines()[-1])), res.stdout


def test_command_owners_match_what_each_module_registers():
    seen: dict[str, set[str]] = {}
    for module in cli.COMMAND_MODULES:
        if module == "drain":
            continue  # it adds to the `gpus` group of devices (checked below), not to the app
        app = typer.Typer()
        importlib.import_module(f"gpufleet.commands.{module}").register(app)
        for name in {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}:
            seen.setdefault(name, set()).add(module)
    full = cli.app  # every module registered, drain included
    gpus = next(g.typer_instance for g in full.registered_groups if g.name == "gpus")
    assert {"drain", "undrain"} <= {c.name for c in gpus.registered_commands}
    seen["gpus"].add("drain")
    assert {k: set(v) for k, v in cli.COMMAND_OWNERS.items()} == seen


def test_run_starts_without_the_server_the_database_or_torch():
    loaded, out = _modules_after("run", "--help")
    assert "Run your own training script" in out
    heavy = {"gpufleet.config", "gpufleet.db", "gpufleet.api.app", "sqlalchemy", "celery", "fastapi", "torch",
             "gpufleet.commands.train", "gpufleet.commands.users", "gpufleet.commands.devices"}
    assert not heavy & loaded, heavy & loaded


def test_help_still_lists_every_command():
    loaded, out = _modules_after("--help")
    for name in [*cli.COMMAND_OWNERS, "serve", "db", "secret"]:
        assert name in out, name
    assert {f"gpufleet.commands.{m}" for m in cli.COMMAND_MODULES} <= loaded


def test_a_named_command_gets_its_options_and_the_library_app_has_all():
    assert cli.modules_for(["gpus", "drain", "--help"]) == ("devices", "drain")
    assert cli.modules_for(["serve", "--port", "9000"]) == () == cli.modules_for(["secret"])
    assert cli.modules_for(["no-such-command"]) == cli.COMMAND_MODULES
    names = {c.name or c.callback.__name__ for c in cli.app.registered_commands}
    names |= {g.name for g in cli.app.registered_groups}
    assert set(cli.COMMAND_OWNERS) | {"serve", "db", "secret"} <= names
