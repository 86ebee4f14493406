"""Progress bars in a training's log: carriage returns shown as their latest state.

A progress bar (tqdm and the like) redraws one terminal line with ``\\r``
and writes ``\\n`` only when it ends. Copied line by line, a whole run of
redraws reached the log as one huge line at exit. The launcher's copier cuts
a rank's output at ``\\r`` too (:class:`LineSplitter`) and writes each
redraw, at most one a second, as a line ending in ``\\r\\n``; the log's
readers keep only the newest redraw of each rank (:func:`collapse_cr`; the
dashboard does the same over what it has received), so the log shows the
bar's latest state, live.
"""

from __future__ import annotations

import re
import time

REDRAW = "\r"  # a log line ending so is a redraw, superseded by the next line of the same source
_SOURCE = re.compile(r"^((?:\[host [^\]]*\] )?\[rank \d+\] )")  # a gang's other hosts prefix their lines


class LineSplitter:
    """Bytes of one stream in; complete lines and throttled redraws out."""

    def __init__(self, redraw_every_s: float = 1.0):
        self.buf = b""
        self.pending: bytes | None = None  # the newest redraw not written yet
        self.redraw_every_s = redraw_every_s
        self.last_redraw = float("-inf")  # the first redraw is due at once

    def feed(self, data: bytes) -> list[bytes]:
        """Lines to write (each ends in ``\\n``; a redraw in ``\\r\\n``)."""
        self.buf += data
        out: list[bytes] = []
        while True:
            i = min((p for p in (self.buf.find(b"\n"), self.buf.find(b"\r")) if p >= 0), default=-1)
            if i < 0 or (self.buf[i:i + 1] == b"\r" and i == len(self.buf) - 1):
                break  # no end yet, or a \r that may be the start of \r\n
            if self.buf[i:i + 1] == b"\n" or self.buf[i:i + 2] == b"\r\n":
                n = 1 if self.buf[i:i + 1] == b"\n" else 2
                self.pending = None
                out.append(self.buf[:i] + b"\n")
                self.buf = self.buf[i + n:]
                continue
            text = self.buf[:i]
            self.buf = self.buf[i + 1:]
            if text:
                self.pending = text
        return out + self.due()

    def due(self, force: bool = False) -> list[bytes]:
        """The pending redraw, when a second passed since the last one (or ``force``)."""
        now = time.monotonic()
        if self.pending is None or (not force and now - self.last_redraw < self.redraw_every_s):
            return []
        line, self.pending, self.last_redraw = self.pending + b"\r\n", None, now
        return [line]

    def close(self) -> list[bytes]:
        rest = [self.buf.rstrip(b"\r") + b"\n"] if self.buf.rstrip(b"\r") else []
        self.buf = b""
        return (self.due(force=True) if not rest else []) + rest


def collapse_cr(text: str) -> str:
    """Drop each redraw that a later line of the same source follows.

    The newest keeps its ``\r``, so a reader that gets the text in pieces (a
    followed log) can drop it in turn when the next piece supersedes it.
    """
    lines = text.split("\n")
    keep: list[str] = []
    later: set[str] = set()
    for line in reversed(lines):
        if not line:
            keep.append(line)
            continue
        m = _SOURCE.match(line)
        source = m.group(1) if m else ""
        if line.endswith(REDRAW) and source in later:
            continue
        later.add(source)
        keep.append(line)
    return "\n".join(reversed(keep))
