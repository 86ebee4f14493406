"""Where a rank's start-up goes: from the launcher's start to the end of the first step.

Each phase is measured in the rank, in seconds, and reaches the training's
events once (rank 0 writes a ``startup`` progress line, carried to every rank
in the first report's all-reduce, so it costs no collective of its own):

- ``launcher``: the launcher process's start (a warm launcher's: when it was
  handed the training) to this rank's process start (0 when the launcher runs
  the only rank itself);
- ``imports``: this process's start (interpreter, imports) to the trainer's set-up;
- ``device``: picking and initialising the device;
- ``process_group``: joining the process group (0 with one rank);
- ``model``: building the model, wrapping it (DDP/FSDP), resuming, the data loader;
- ``first_step``: the first optimizer step, waited for on the device.
"""

from __future__ import annotations

import os
import time

from gpufleet.engine import rankenv

PHASES = ("launcher", "imports", "device", "process_group", "model", "first_step")


def _boot_time() -> float:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


def process_start(pid: int) -> float | None:
    """Wall-clock start of process ``pid`` (from /proc, 10 ms resolution), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return _boot_time() + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class StartupClock:
    """Marks the end of each phase; ``seconds()`` gives them in PHASES order."""

    def __init__(self) -> None:
        me, parent = process_start(os.getpid()), process_start(os.getppid())
        now = time.time()
        # A warm launcher (engine/warm.py) started long before its training: the launch began when
        # it was handed the training, for the ranks it spawns and for the one rank it runs itself.
        handed = rankenv.launch_began()
        spawned = rankenv.spawned_by_launcher()
        if handed is not None and not spawned:
            me = handed
        self.began = me if me is not None else now
        launcher = (handed or parent) if spawned else None
        self.marks: dict[str, float] = {"launcher": self.began - launcher if launcher else 0.0,
                                        "imports": max(0.0, now - self.began)}
        self._last = now

    def mark(self, phase: str) -> None:
        now = time.time()
        self.marks[phase] = self.marks.get(phase, 0.0) + now - self._last
        self._last = now

    def skip(self) -> None:
        """Time since the last mark belongs to no phase."""
        self._last = time.time()

    def seconds(self) -> list[float]:
        return [round(self.marks.get(p, 0.0), 3) for p in PHASES]
