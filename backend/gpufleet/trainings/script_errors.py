"""Failures of a user's script that no retry can fix, read from a rank's stderr.

An import error, a syntax error or a file named on the command line that does
not exist fails the same way on every attempt, so the launcher reports it as
such (exit ``CANNOT_RUN``: failed at once, no restart spent) with the error
itself as the reason, not whatever line the rank printed last.

Python writes an uncaught exception as a traceback whose last line starts at
column 0 (``ModuleNotFoundError: No module named 'tqdm'``) and exits with 1;
a script it cannot open is ``python: can't open file '/x/train.py': [Errno 2]
...`` and exit 2. Only the last exception counts: an ImportError the script
caught and printed before failing for another reason is not this kind.
"""

from __future__ import annotations

import re

# Exception classes whose cause is in the code or its environment, never in the moment.
KINDS = {
    "ModuleNotFoundError": "import", "ImportError": "import",
    "SyntaxError": "syntax", "IndentationError": "syntax", "TabError": "syntax",
    "FileNotFoundError": "missing_file",
}
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt))(?::\s?(.*))?$")
_FRAME = re.compile(r'^\s+File "(.+?)", line (\d+)')
_CANNOT_OPEN = re.compile(r"can't open file '(.+?)': \[Errno 2\]")
_MISSING_NAME = re.compile(r"No such file or directory: '(.+?)'")


class ErrorWatch:
    """Follows one rank's stderr lines and says whether its failure is deterministic."""

    def __init__(self) -> None:
        self.exception: tuple[str, str] | None = None  # (class name, the whole line)
        self.frame: tuple[str, str] | None = None  # (file, line) of the newest traceback frame
        self.cannot_open: str | None = None

    def feed(self, line: str) -> None:
        if m := _FRAME.match(line):
            self.frame = (m.group(1), m.group(2))
        elif m := _EXCEPTION.match(line):
            self.exception = (m.group(1), line.strip())
        elif m := _CANNOT_OPEN.search(line):
            self.cannot_open = line.strip()

    def verdict(self, exit_code: int, argv: list[str]) -> tuple[str, str] | None:
        """``(kind, message)`` for a failure no retry can fix, else None."""
        if exit_code == 2 and self.cannot_open:
            return "missing_file", self.cannot_open
        if exit_code != 1 or self.exception is None:
            return None
        name, line = self.exception
        kind = KINDS.get(name)
        if kind == "missing_file":
            # Only a file the command line names: a missing file the code looks for may yet appear.
            m = _MISSING_NAME.search(line)
            if not m or not any(a == m.group(1) or a.endswith("=" + m.group(1)) for a in argv):
                return None
        if kind is None:
            return None
        if kind == "syntax" and self.frame:
            return kind, f"{line} ({self.frame[0]}, line {self.frame[1]})"
        return kind, line
