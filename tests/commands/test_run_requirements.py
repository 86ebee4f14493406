"""`gpufleet run`'s choice of the requirement file, and refusals that name its options, not API fields."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from gpufleet.commands.remote import Client
from gpufleet.commands.run import CLI_OPTIONS, find_requirements


def test_requirements_txt_wins_then_a_locked_pyproject(tmp_path: Path) -> None:
    assert find_requirements(tmp_path, None, False) is None
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert find_requirements(tmp_path, None, False) is None  # no uv.lock: nothing to build from exactly
    (tmp_path / "uv.lock").write_text("version = 1\n")
    assert find_requirements(tmp_path, None, False) == "pyproject.toml"
    (tmp_path / "requirements.txt").write_text("tqdm\n")
    assert find_requirements(tmp_path, None, False) == "requirements.txt"
    assert find_requirements(tmp_path, None, True) is None
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "gpu.txt").write_text("tqdm\n")
    assert find_requirements(tmp_path, tmp_path / "envs" / "gpu.txt", False) == "envs/gpu.txt"


@pytest.mark.parametrize("given", ["missing.txt", "/etc/hostname"])
def test_a_requirement_file_outside_the_folder_or_missing_is_refused(tmp_path: Path, given: str) -> None:
    with pytest.raises(typer.Exit):
        find_requirements(tmp_path, Path(given), False)


def test_refusals_name_the_commands_options() -> None:
    c = Client.__new__(Client)
    c.options = CLI_OPTIONS
    said = "body.gpu_ids: GPU 9 does not exist; world_size 3 is more than memory_mb allows"
    assert c.in_options(said) == "--gpu-ids: GPU 9 does not exist; --gpus 3 is more than --memory allows"
