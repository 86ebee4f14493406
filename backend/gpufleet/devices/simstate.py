"""The simulated fleet's changing state, shared by every process on the host.

The state lives in ``<data_dir>/sim/state.json`` (``settings.sim_state_dir``)
so that a test, the worker and the telemetry sampler in different processes
all see the same simulated GPUs. Writers take an ``flock`` on ``state.lock``
and replace the file atomically (write a temporary file, then ``os.replace``),
so readers never lock and never see half a file.

GPU numbers are fleet indexes (``GPUInfo.index``), for NVIDIA GPUs the NVML index.

Public API (every function takes the store's settings, ``StoreSettings``, or the state directory):

- foreign processes: :func:`add_foreign_process`, :func:`remove_foreign_process`
- gpufleet training processes: :func:`register_process`,
  :func:`unregister_process` (an entry whose pid has exited is ignored)
- faults: :func:`refuse_field` / :func:`allow_field`, :func:`lose_gpu` /
  :func:`restore_gpu`, :func:`inject_xid`, :func:`set_ecc_errors`
- reading: :func:`read_state`, :func:`live_processes`, :func:`describe_process`
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import numbers
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.config import StoreSettings
from gpufleet.devices.simmemory import modeled

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
LOCK_FILE = "state.lock"

# Foreign processes get pids above Linux's largest possible pid (2**22), so a
# simulated stranger can never be mistaken for a real process on this machine.
FIRST_FOREIGN_PID = 5_000_000

# The fields refuse_field() knows, each named after what NVML is asked for.
REFUSABLE_FIELDS = (
    "name",
    "uuid",
    "pci",
    "memory",
    "compute_capability",
    "utilization",
    "temperature",
    "power",
    "power_limit",
    "clocks",
    "processes",
    "pcie_throughput",
    "nvlink",
    "topology",
    "p2p",
    "ecc",
    "events",
)

PROCESS_KINDS = ("compute", "graphics")

StateTarget = StoreSettings | Path | str


@dataclass
class SimProcess:
    pid: int
    gpu_index: int
    used_memory: int  # bytes
    name: str
    user: str | None = None
    kind: str = "compute"
    foreign: bool = True
    training_id: str | None = None
    context: int | None = None  # set: memory modeled as context + the rank's reserved (simmemory)
    rank: int = 0


@dataclass
class SimState:
    foreign: list[SimProcess] = field(default_factory=list)
    gpufleet: list[SimProcess] = field(default_factory=list)
    # gpu index -> {field: reason}, reason a snake_case NVML error name
    refused: dict[int, dict[str, str]] = field(default_factory=dict)
    lost: set[int] = field(default_factory=set)
    # [{"seq": n, "gpu": i, "xid": code, "time": unix}]
    xids: list[dict[str, Any]] = field(default_factory=list)
    # gpu index -> {"corrected": n, "uncorrected": n}
    ecc: dict[int, dict[str, int]] = field(default_factory=dict)
    next_pid: int = FIRST_FOREIGN_PID
    # GPUs whose processes hold memory but run no kernels (set_idle).
    idle: set[int] = field(default_factory=set)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "foreign": [asdict(p) for p in self.foreign],
            "gpufleet": [asdict(p) for p in self.gpufleet],
            "refused": {str(k): v for k, v in self.refused.items() if v},
            "lost": sorted(self.lost),
            "xids": self.xids,
            "ecc": {str(k): v for k, v in self.ecc.items()},
            "next_pid": self.next_pid,
            "idle": sorted(self.idle),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SimState:
        return cls(
            foreign=[SimProcess(**p) for p in d.get("foreign", [])],
            gpufleet=[SimProcess(**p) for p in d.get("gpufleet", [])],
            refused={int(k): dict(v) for k, v in d.get("refused", {}).items()},
            lost={int(i) for i in d.get("lost", [])},
            xids=list(d.get("xids", [])),
            ecc={int(k): dict(v) for k, v in d.get("ecc", {}).items()},
            next_pid=int(d.get("next_pid", FIRST_FOREIGN_PID)),
            idle={int(i) for i in d.get("idle", [])},
        )


def state_dir(target: StateTarget) -> Path:
    if isinstance(target, StoreSettings):
        return target.sim_state_dir
    return Path(target)


def state_path(target: StateTarget) -> Path:
    return state_dir(target) / STATE_FILE


# Readers call read_state() several times per GPU per second; re-parse only
# when the file was replaced (a new inode) or changed.
_cache_lock = threading.Lock()
_cache: dict[Path, tuple[tuple[int, int, int], SimState]] = {}


def read_state(target: StateTarget) -> SimState:
    """The current state; an absent file is the empty state.

    A file that cannot be parsed (edited by hand) is logged and read as empty,
    so a sampler keeps running.
    """
    path = state_path(target)
    try:
        st = path.stat()
    except FileNotFoundError:
        return SimState()
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    with _cache_lock:
        hit = _cache.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
    try:
        state = SimState.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return SimState()
    except (ValueError, TypeError, KeyError) as exc:
        log.warning("simulated GPU state %s is unreadable (%s); using an empty state", path, exc)
        return SimState()
    with _cache_lock:
        _cache[path] = (key, state)
    return state


@contextlib.contextmanager
def mutate(target: StateTarget) -> Iterator[SimState]:
    """Read-modify-write under an exclusive lock, then replace the file atomically."""
    d = state_dir(target)
    d.mkdir(parents=True, exist_ok=True)
    with open(d / LOCK_FILE, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            path = d / STATE_FILE
            try:
                state = SimState.from_json(json.loads(path.read_text()))
            except FileNotFoundError:
                state = SimState()
            yield state
            fd, tmp = tempfile.mkstemp(dir=d, prefix=".state-", suffix=".json")
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(state.to_json(), f)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def check_gpu(gpu_index: int) -> None:
    if not isinstance(gpu_index, int) or isinstance(gpu_index, bool) or gpu_index < 0:
        raise ValueError(f"gpu_index must be an integer >= 0, got {gpu_index!r}")


def _check_memory(used_memory: int) -> int:
    # Estimates often arrive as floats or numpy numbers; bytes are whole.
    if isinstance(used_memory, bool) or not isinstance(used_memory, numbers.Real) or used_memory < 0:
        raise ValueError(f"used_memory must be a number of bytes >= 0, got {used_memory!r}")
    return int(used_memory)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a running process (a zombie counts as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # The state letter follows the parenthesised command name.
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


# ---------------------------------------------------------------------------
# Processes


def add_foreign_process(
    target: StateTarget,
    gpu_index: int,
    used_memory: int,
    *,
    user: str = "someone",
    name: str = "python",
    kind: str = "compute",
    pid: int | None = None,
) -> int:
    """Put a process gpufleet did not start on a GPU; returns its pid.

    Without ``pid`` a simulated pid is chosen that no real process can have.
    """
    check_gpu(gpu_index)
    used_memory = _check_memory(used_memory)
    if kind not in PROCESS_KINDS:
        raise ValueError(f"kind must be one of {PROCESS_KINDS}, got {kind!r}")
    with mutate(target) as state:
        if pid is None:
            pid = state.next_pid
            state.next_pid += 1
        state.foreign = [p for p in state.foreign if not (p.pid == pid and p.gpu_index == gpu_index)]
        state.foreign.append(SimProcess(pid, gpu_index, used_memory, name, user, kind, True))
    return pid


def remove_foreign_process(target: StateTarget, pid: int) -> bool:
    """Take a foreign process off every GPU; False if it was not there."""
    with mutate(target) as state:
        before = len(state.foreign)
        state.foreign = [p for p in state.foreign if p.pid != pid]
        return len(state.foreign) != before


def register_process(
    target: StateTarget,
    gpu_index: int,
    pid: int,
    used_memory: int,
    name: str = "gpufleet-train",
    *,
    training_id: str | None = None, context: int | None = None, rank: int = 0,
) -> None:
    """Record that gpufleet process ``pid`` uses ``used_memory`` bytes on a GPU
    (with ``context``: the context plus rank ``rank``'s reserved memory, as simmemory models it).

    Registering the same ``(gpu_index, pid)`` again updates it. Readers ignore the entry once
    ``pid`` has exited, so a killed rank never leaves phantom memory behind.
    """
    check_gpu(gpu_index)
    used_memory = _check_memory(used_memory)
    with mutate(target) as state:
        state.gpufleet = [p for p in state.gpufleet if not (p.pid == pid and p.gpu_index == gpu_index)]
        state.gpufleet.append(
            SimProcess(pid, gpu_index, used_memory, name, None, "compute", False, training_id, context, rank)
        )


def unregister_process(target: StateTarget, gpu_index: int | None, pid: int) -> None:
    """Forget gpufleet process ``pid`` on ``gpu_index`` (``None``: on every GPU)."""
    with mutate(target) as state:
        state.gpufleet = [
            p
            for p in state.gpufleet
            if not (p.pid == pid and (gpu_index is None or p.gpu_index == gpu_index))
            # Prune entries of exited processes while we hold the lock.
            and pid_alive(p.pid)
        ]


def live_processes(target: StateTarget | SimState, gpu_index: int) -> list[SimProcess]:
    """Processes on a GPU now: foreign ones, and gpufleet ones still running."""
    state = target if isinstance(target, SimState) else read_state(target)
    procs = [p for p in state.foreign if p.gpu_index == gpu_index]
    procs += [modeled(p) for p in state.gpufleet if p.gpu_index == gpu_index and pid_alive(p.pid)]
    return procs


def describe_process(target: StateTarget, pid: int) -> SimProcess | None:
    """The simulated process ``pid`` (user, name, training), or None."""
    state = read_state(target)
    for p in state.foreign + state.gpufleet:
        if p.pid == pid and (p.foreign or pid_alive(pid)):
            return p
    return None


# ---------------------------------------------------------------------------
# Faults


def _nvml_error_names() -> set[str]:
    import pynvml

    return {n.removeprefix("NVML_ERROR_").lower() for n in dir(pynvml) if n.startswith("NVML_ERROR_")}


def refuse_field(target: StateTarget, gpu_index: int, field_name: str, reason: str = "not_supported") -> None:
    """Make NVML refuse one field of a GPU with the error named by ``reason``.

    ``reason`` is an NVML error in snake case: ``not_supported``,
    ``no_permission``, ``unknown``, ``timeout``… (``NVML_ERROR_<REASON>``).
    Detection then reports that field as ``None``.
    """
    check_gpu(gpu_index)
    if field_name not in REFUSABLE_FIELDS:
        raise ValueError(f"unknown field {field_name!r}; one of {', '.join(REFUSABLE_FIELDS)}")
    names = _nvml_error_names()
    if reason not in names or reason == "success":
        raise ValueError(f"unknown NVML error {reason!r}; e.g. not_supported, no_permission, unknown")
    with mutate(target) as state:
        state.refused.setdefault(gpu_index, {})[field_name] = reason


def allow_field(target: StateTarget, gpu_index: int, field_name: str) -> None:
    """Undo :func:`refuse_field`."""
    with mutate(target) as state:
        state.refused.get(gpu_index, {}).pop(field_name, None)


def lose_gpu(target: StateTarget, gpu_index: int) -> None:
    """The GPU falls off the bus: every NVML call on it raises ``NVMLError_GpuIsLost``."""
    check_gpu(gpu_index)
    with mutate(target) as state:
        state.lost.add(gpu_index)


def set_idle(target: StateTarget, gpu_index: int, idle: bool = True) -> None:
    """The processes on a GPU hold their memory but run nothing: its utilization reads 0
    (a notebook left open, a job waiting on I/O). ``idle=False`` makes them work again."""
    check_gpu(gpu_index)
    with mutate(target) as state:
        (state.idle.add if idle else state.idle.discard)(gpu_index)


def restore_gpu(target: StateTarget, gpu_index: int) -> None:
    with mutate(target) as state:
        state.lost.discard(gpu_index)


def inject_xid(target: StateTarget, gpu_index: int, xid: int = 79) -> int:
    """Raise an XID error on a GPU (79: fallen off the bus, 48: double-bit ECC…).

    Event sets that registered for ``nvmlEventTypeXidCriticalError`` receive it
    from ``nvmlEventSetWait_v2``. Returns the event's sequence number.
    """
    check_gpu(gpu_index)
    if not isinstance(xid, int) or xid <= 0:
        raise ValueError(f"xid must be a positive integer, got {xid!r}")
    with mutate(target) as state:
        seq = (state.xids[-1]["seq"] + 1) if state.xids else 1
        state.xids.append({"seq": seq, "gpu": gpu_index, "xid": xid, "time": time.time()})
        # Keep the file small: only recent events matter to waiting samplers.
        state.xids = state.xids[-1000:]
    return seq


def set_ecc_errors(target: StateTarget, gpu_index: int, corrected: int = 0, uncorrected: int = 0) -> None:
    """Set a GPU's ECC error counters (what ``nvmlDeviceGetTotalEccErrors`` returns)."""
    check_gpu(gpu_index)
    if corrected < 0 or uncorrected < 0:
        raise ValueError("ECC error counts must be >= 0")
    with mutate(target) as state:
        state.ecc.setdefault(gpu_index, {}).update(corrected=int(corrected), uncorrected=int(uncorrected))
