"""The checkpoint an attempt's ranks left that no progress line reported.

A launcher killed with its ranks at the end of a grace (a cancel's short
one, a stop that ran out, a worker too loaded to let the launcher look once
more) cannot report the checkpoint its rank 0 wrote within that grace. Once
the group is gone the worker looks at the checkpoint dir as the next
attempt's launcher will (:func:`gpufleet.engine.resumepoint.newest_resume_point`)
and hands what it finds to the sink as a ``checkpoint`` line: the event names
it, the end's reason says it, and ``resume`` names it as the file it uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet import memberfs
from gpufleet.engine.resumepoint import newest_resume_point, step_in_name

# The newest resume point and its modification time (ns), or None.
Mark = tuple[str, int] | None


def mark(ckpt_dir: Path) -> Mark:
    """What the checkpoint dir holds now (taken before the launcher starts: an earlier attempt's is not news)."""
    path = newest_resume_point(ckpt_dir)
    if not path:
        return None
    try:  # the member's folder: looked at by descriptor, through no link
        folder, name = memberfs.in_folder(path, root=ckpt_dir)
    except (OSError, ValueError):
        return None
    with folder:
        st = folder.entry(name)
    return (path, st.st_mtime_ns) if st is not None else None


def left_unreported(ckpt_dir: Path, before: Mark, reported: str | None) -> dict[str, Any] | None:
    """The ``checkpoint`` line for a resume point written since ``before`` that is not ``reported``, if any."""
    now = mark(ckpt_dir)
    if now is None or now == before or now[0] == reported:
        return None
    return {"type": "checkpoint", "step": step_in_name(now[0]), "path": now[0], "source": "found",
            "note": "found in the checkpoint dir after the ranks ended"}
