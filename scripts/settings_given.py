"""How many of gpufleet's functions are given the whole Settings, and how many a section, read from their
parameters' annotations (by AST, quoted annotations included), per package.

    .venv/bin/python scripts/settings_given.py [REPO_ROOT]

tests/test_settings_sections.py holds each package to its sections; this counts where the code stands.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

SECTIONS = {"StoreSettings": "store", "ApiSettings": "api", "HostSettings": "host", "SchedulerSettings": "scheduler",
            "WorkerSettings": "worker", "CodeSettings": "code", "TelemetrySettings": "telemetry",
            "WebhookSettings": "webhooks", "SessionSettings": "sessions"}


def names(annotation: ast.AST | None) -> set[str]:
    """The names an annotation spells (``Settings``, ``config.Settings``, ``'Settings | None'``)."""
    out: set[str] = set()
    for node in ast.walk(annotation) if annotation is not None else ():
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                out |= names(ast.parse(node.value, mode="eval"))
            except SyntaxError:
                pass
        elif isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
    return out


def count(root: Path) -> tuple[Counter, Counter, set[str]]:
    whole: Counter = Counter()
    section: Counter = Counter()
    modules: set[str] = set()
    package_dir = root / "backend" / "gpufleet"
    for path in sorted(package_dir.rglob("*.py")):
        package = path.relative_to(package_dir).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            given = set().union(*(names(p.annotation) for p in
                                  filter(None, [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg])))
            if "Settings" in given:
                whole[package] += 1
                modules.add(str(path.relative_to(package_dir)))
            if given & set(SECTIONS):
                section[package] += 1
    return whole, section, modules


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    whole, section, modules = count(root)
    print(f"functions with a parameter annotated Settings: {sum(whole.values())} in {len(modules)} modules")
    print(f"functions with a parameter annotated with a section: {sum(section.values())}")
    for package in sorted(set(whole) | set(section)):
        print(f"  {package:12} Settings {whole[package]:4}   sections {section[package]:4}")


if __name__ == "__main__":
    main()
