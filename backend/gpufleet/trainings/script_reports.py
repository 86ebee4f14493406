"""What a script training's ranks tell the launcher: their reports, and the checkpoints they write.

``gpufleet.report`` writes one file per rank; :class:`ReportMerger` turns
them into ``step`` progress lines (rank 0's values, every rank's time per
step). A script's checkpoints are its own files in ``GPUFLEET_CHECKPOINT_DIR``;
:class:`CheckpointWatch` notices each new resume point and writes a
``checkpoint`` line with the checkpoint's own step: the number in its name
(``step-0000200.pt`` is step 200, even when rank 0 has reported step 201 by
the time the file has settled), else the step rank 0 had reported when the
file appeared. So the events say where a stopped training will resume, and
whether it checkpointed in its grace.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from gpufleet.engine.progress import ProgressWriter
from gpufleet.engine.resumepoint import newest_resume_point, step_in_name

def step_fields(report_line: dict[str, Any]) -> dict[str, Any]:
    """The fields of a ``step`` progress line that one ``gpufleet.report`` line gives."""
    return {k: v for k, v in report_line.items() if k not in ("type", "step_time")}


class ReportMerger:
    """Turns the ranks' ``gpufleet.report`` files into ``step`` progress lines.

    Rank 0's line gives the step's loss and scalars; every rank's time per
    step goes into ``rank_step_times``. A step is written once every rank
    that reports at all has reached it, or after ``MERGE_WAIT_S``.
    """

    MERGE_WAIT_S = 1.0

    def __init__(self, report_file: str, ranks: int | range, progress: ProgressWriter):
        """``ranks``: the ranks this launcher runs (``range(n)``, or a node's share of a training over several
        nodes, whose first rank's line stands in for rank 0's); an int ``n`` is ``range(n)``."""
        ranks = range(ranks) if isinstance(ranks, int) else ranks
        n = len(ranks)
        self.paths = [Path(f"{report_file}.rank{r}") for r in ranks]
        self.offsets = [0] * n
        self.partial = [b""] * n
        self.progress = progress
        self.newest = [-1] * n
        self.times: list[dict[int, float]] = [{} for _ in range(n)]
        self.pending: list[tuple[float, dict[str, Any]]] = []

    def _read(self, r: int) -> list[dict[str, Any]]:
        try:
            with open(self.paths[r], "rb") as fh:
                fh.seek(self.offsets[r])
                data = fh.read()
        except FileNotFoundError:
            return []
        self.offsets[r] += len(data)
        chunks = (self.partial[r] + data).split(b"\n")
        self.partial[r] = chunks.pop()
        out = []
        for c in chunks:
            try:
                out.append(json.loads(c))
            except ValueError:
                continue
        return out

    @property
    def rank0_step(self) -> int | None:
        """The newest step rank 0 reported (read, merged or not): a checkpoint seen after it is of that step."""
        return self.newest[0] if self.newest[0] >= 0 else None

    def poll(self, final: bool = False) -> None:
        now = time.monotonic()
        for r in range(len(self.paths)):
            for line in self._read(r):
                step = int(line.get("step", -1))
                self.newest[r] = max(self.newest[r], step)
                if line.get("step_time") is not None:
                    self.times[r][step] = float(line["step_time"])
                if r == 0:
                    self.pending.append((now, line))
        while self.pending:
            since, line = self.pending[0]
            step = int(line["step"])
            waiting = [r for r in range(1, len(self.paths)) if -1 < self.newest[r] < step]
            if waiting and not final and now - since < self.MERGE_WAIT_S:
                break
            self.pending.pop(0)
            times = [self.times[r].pop(step, None) for r in range(len(self.paths))]
            for t in self.times:  # older steps a rank reported that rank 0 did not
                for old in [s for s in t if s < step]:
                    del t[old]
            record = step_fields(line)
            if all(t is not None for t in times):
                record["rank_step_times"] = times
            self.progress.write("step", **record)


class CheckpointWatch:
    """A ``checkpoint`` progress line for each new resume point in the checkpoint dir, once.

    A script that writes its checkpoint in place (``torch.save(state, "ckpt.pt")``)
    changes the file's time more than once while it writes: the file counts
    once it has kept its time and size for ``SETTLE_S`` (or at the last poll),
    and a file rewritten at the step it was already reported for is not news.
    """

    SETTLE_S = 0.5

    def __init__(self, ckpt_dir: str, progress: ProgressWriter):
        self.dir = Path(ckpt_dir)
        self.progress = progress
        self.seen = self._newest()  # what an earlier attempt left is not this attempt's checkpoint
        # (what changed, since when, the step rank 0 had reported then)
        self.pending: tuple[tuple[str, float, int], float, int | None] | None = None
        self.reported: tuple[str, int | None] | None = None

    def _newest(self) -> tuple[str, float, int] | None:
        path = newest_resume_point(self.dir)
        if not path:
            return None
        try:
            st = Path(path).stat()
        except OSError:
            return None
        return path, st.st_mtime, st.st_size

    def poll(self, step: int | None, final: bool = False) -> None:
        """``step``: the last step rank 0 reported, the checkpoint's step when its name has none.
        ``final``: the ranks have ended, so nothing is being written any more."""
        newest = self._newest()
        if newest is None or newest == self.seen:
            self.pending = None
            return
        now = time.monotonic()
        if self.pending is None or self.pending[0] != newest:
            self.pending = (newest, now, step)  # still being written, perhaps: look again
            if not final:
                return
        if not final and now - self.pending[1] < self.SETTLE_S:
            return
        step_then, self.seen, self.pending = self.pending[2], newest, None
        named = step_in_name(newest[0])
        step = named if named is not None else step_then
        if self.reported == (newest[0], step):
            return  # the same checkpoint written again
        self.reported = (newest[0], step)
        self.progress.write("checkpoint", step=step, path=newest[0], source="script")
