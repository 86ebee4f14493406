"""Which rank failures no retry can fix, read from the rank's stderr as Python writes it."""

from __future__ import annotations

from gpufleet.trainings.script_errors import ErrorWatch


def _watch(*lines: str) -> ErrorWatch:
    w = ErrorWatch()
    for line in lines:
        w.feed(line)
    return w


TRACEBACK = ("Traceback (most recent call last):", '  File "/w/train.py", line 3, in <module>', "    import tqdm")


def test_an_import_error_is_deterministic_with_its_own_line_as_the_message():
    w = _watch(*TRACEBACK, "ModuleNotFoundError: No module named 'tqdm'", "some later noise on stderr")
    assert w.verdict(1, ["python", "train.py"]) == ("import", "ModuleNotFoundError: No module named 'tqdm'")


def test_a_syntax_error_names_the_file_and_line():
    w = _watch('  File "/w/train.py", line 7', "    x = (", "        ^", "SyntaxError: '(' was never closed")
    assert w.verdict(1, []) == ("syntax", "SyntaxError: '(' was never closed (/w/train.py, line 7)")


def test_a_script_python_cannot_open_is_a_missing_file():
    w = _watch("/usr/bin/python3: can't open file '/w/trian.py': [Errno 2] No such file or directory")
    assert w.verdict(2, ["python", "trian.py"])[0] == "missing_file"


def test_a_missing_file_counts_only_when_the_command_line_names_it():
    line = "FileNotFoundError: [Errno 2] No such file or directory: 'data.npy'"
    assert _watch(*TRACEBACK, line).verdict(1, ["python", "train.py", "--data=data.npy"])[0] == "missing_file"
    assert _watch(*TRACEBACK, line).verdict(1, ["python", "train.py"]) is None


def test_other_failures_and_caught_import_errors_are_retried():
    assert _watch(*TRACEBACK, "RuntimeError: NCCL error").verdict(1, []) is None
    caught = _watch("ImportError: optional speedups missing", *TRACEBACK, "RuntimeError: boom")
    assert caught.verdict(1, []) is None
    assert _watch(*TRACEBACK, "ModuleNotFoundError: No module named 'x'").verdict(-9, []) is None
