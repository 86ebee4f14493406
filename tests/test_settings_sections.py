"""Settings in sections per component: each package reads only the sections gpufleet.config.READS gives it,
every setting belongs to exactly one section, the GPUFLEET_* names are what they were, and the README lists each
setting under its section."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gpufleet.config import ASSEMBLERS, READS, SECTIONS, Settings, load_settings

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "backend" / "gpufleet"
# The expressions a settings object is reached by in gpufleet's code.
HOLDERS = {"settings", "self.settings", "self._settings", "get_settings()", "cfg.settings"}


def _section_of() -> dict[str, str]:
    """Each field and property of Settings -> the name of the section that declares it."""
    owner: dict[str, str] = {}
    for name, cls in SECTIONS.items():
        for field in cls.model_fields:
            owner[field] = name
        for attr, value in vars(cls).items():
            if isinstance(value, property):
                owner[attr] = name
    return owner


def reads(source: str) -> list[tuple[int, str]]:
    """The settings (fields and properties) a module's source reads off a settings object, with their lines."""
    known = _section_of()
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in known:
            holder = ast.unparse(node.value)
            if holder in HOLDERS or re.fullmatch(r"load_settings\(.*\)", holder):
                out.append((node.lineno, node.attr))
    return out


def violations(package: str, source: str) -> list[str]:
    known = _section_of()
    allowed = READS.get(package, ())
    return [f"line {line}: {attr} (section {known[attr]})" for line, attr in reads(source)
            if known[attr] not in allowed]


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


def test_every_package_reads_only_the_sections_it_is_given() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        package = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if package in ASSEMBLERS or package == "config":
            continue
        bad = violations(package, path.read_text())
        if bad:
            found[str(path.relative_to(PACKAGE))] = bad
    assert not found, f"read outside the package's sections (gpufleet.config.READS): {found}"


def test_the_check_sees_a_read_of_another_packages_section() -> None:
    source = "def f(settings):\n    return settings.retention_days + get_settings().webhook_timeout_s\n"
    assert reads(source) == [(2, "retention_days"), (2, "webhook_timeout_s")]
    assert violations("notify", source) == ["line 2: retention_days (section telemetry)"]
    assert len(violations("not-a-listed-package", source)) == 2
    assert violations("notify", "def f(sample):\n    return sample.retention_days\n") == []


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
