"""Test folders mirror the packages (docs/architecture.md): the tests of `gpufleet/X/` are in `tests/X/`.

A folder of tests that names no package (tests/training beside gpufleet/trainings and gpufleet/engine)
leaves a reader guessing where a change's tests go and where a new one belongs."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "backend" / "gpufleet"

# The folders that test the product as a whole or serve the others, not one package.
WHOLE = {
    "support": "what several folders share, imported as support.X",
    "e2e": "the dashboard in a browser against a live server",
    "fuzz": "the API as a whole under schemathesis",
}


def _test_folders(root: Path) -> list[Path]:
    """Every folder under `root` that holds Python (data folders, such as fixtures' files, hold none)."""
    return sorted(d for d in root.rglob("*") if d.is_dir() and d.name != "__pycache__"
                  and not any(part in WHOLE for part in d.relative_to(root).parts[:1])
                  and any(d.glob("*.py")))


def unmirrored(tests: Path, package: Path) -> list[str]:
    wrong = []
    for d in _test_folders(tests):
        rel = d.relative_to(tests)
        # A namespace package (sweeps/) has no __init__.py; a top-level module (workkinds.py) is mirrored too.
        if not any((package / rel).glob("*.py")) and not (package / rel).with_suffix(".py").is_file():
            wrong.append(f"tests/{rel.as_posix()} names no package gpufleet/{rel.as_posix()}")
        if not (d / "__init__.py").is_file():
            wrong.append(f"tests/{rel.as_posix()} is not a package (no __init__.py)")
    return wrong


def test_every_test_folder_names_a_package_of_gpufleet():
    assert unmirrored(TESTS, PACKAGE) == []


def test_the_folders_left_out_are_there_and_say_why():
    # A name left in WHOLE after its folder went would let a stray folder of that name through.
    assert all((TESTS / name / "__init__.py").is_file() for name in WHOLE)
    assert all(why for why in WHOLE.values())


def test_a_folder_named_for_no_package_is_found(tmp_path: Path):
    package = tmp_path / "gpufleet"
    for name in ("engine", "trainings", "api", "api/proxy"):
        (package / name).mkdir(parents=True)
        (package / name / "__init__.py").write_text("")
    tests = tmp_path / "tests"
    for name in ("engine", "training", "api/proxy", "api/nowhere", "notes", "engine/data"):
        (tests / name).mkdir(parents=True)
    for name in ("engine", "training", "api", "api/proxy", "api/nowhere"):
        (tests / name / "__init__.py").write_text("")
    (tests / "notes" / "test_x.py").write_text("")
    (tests / "engine" / "data" / "trace.json").write_text("{}")
    assert unmirrored(tests, package) == [
        "tests/api/nowhere names no package gpufleet/api/nowhere",
        "tests/notes names no package gpufleet/notes",
        "tests/notes is not a package (no __init__.py)",
        "tests/training names no package gpufleet/training",
    ]
