"""Lines fold at the terminal's width on a terminal, and never in a file or a pipe (a log, a grep)."""

from __future__ import annotations

import os
from pathlib import Path

from support.terminal import in_pipe, in_terminal


def _deep_data_dir(tmp_path: Path) -> Path:
    return tmp_path / ("a-data-directory-whose-path-alone-is-longer-than-a-terminal-line-" * 2).rstrip("-")


def test_a_long_line_is_whole_in_a_pipe(tmp_path: Path) -> None:
    data = _deep_data_dir(tmp_path)
    out = in_pipe(["db", "current"], env={**os.environ, "GPUFLEET_DATA_DIR": str(data)})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1 and str(data / "gpufleet.db") in lines[0], out.stdout


def test_a_long_line_folds_at_the_terminal_width(tmp_path: Path) -> None:
    data = _deep_data_dir(tmp_path)
    out = in_terminal(["db", "current"], env={**os.environ, "GPUFLEET_DATA_DIR": str(data)}, cols=80)
    lines = out.splitlines()
    assert len(lines) > 1 and all(len(line) <= 80 for line in lines), out
    assert str(data / "gpufleet.db") in "".join(lines)
