"""The type checker's settings stay honest: what they leave out is named, and the clean packages stay in.

.ci/run runs mypy with pyproject.toml's [tool.mypy]; these checks keep that list true as modules move.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "backend" / "gpufleet"
# Type-clean: no override may leave their errors out.
CLEAN = ("lifecycle", "scheduling", "wire", "config", "devices")
_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?")


def _mypy() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]


def _left_out() -> list[str]:
    return [m for o in _mypy().get("overrides", []) if o.get("ignore_errors") for m in o["module"]]


def _exists(module: str) -> bool:
    rel = Path(*module.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def test_the_clean_packages_are_never_left_out() -> None:
    covering = [m for m in _left_out() for pkg in CLEAN
                if m in ("gpufleet", "gpufleet.*", f"gpufleet.{pkg}") or m.startswith(f"gpufleet.{pkg}.")]
    assert covering == []
    assert _mypy().get("ignore_errors") is not True


def test_each_module_left_out_is_named_and_exists() -> None:
    left_out = _left_out()
    assert [m for m in left_out if "*" in m] == [], "name each module, so a new one starts clean"
    assert [m for m in left_out if not _exists(m)] == []


def test_every_ignore_comment_names_its_error_codes() -> None:
    bare = [f"{path.relative_to(ROOT)}:{n}" for path in sorted(PACKAGE.rglob("*.py"))
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if (m := _IGNORE.search(line)) and not m.group("codes")]
    assert bare == []


def test_the_checker_is_in_the_test_extra_and_checks_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(re.match(r"mypy\b", d) for d in project["optional-dependencies"]["test"])
    assert _mypy()["files"] == ["backend/gpufleet"]
    assert ".venv/bin/mypy" in (ROOT / ".ci" / "run").read_text()
