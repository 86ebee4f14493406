"""The simulated NVML's driver version and its per-cgroup memory limits, mixed into ``SimNVML``.

Real NVML grew ``nvmlDeviceSetMemoryLimits_v1`` / ``nvmlDeviceGetMemoryLimits_v1`` (a soft and a
hard limit of one GPU's memory for one cgroup, named by its sysfs path in ``nameSpace``); an older
driver has no such entry point, and the real ``pynvml`` then raises ``NVMLError_FunctionNotFound``
when the function is called. The simulator does the same by its driver version: the functions
answer from ``MEMORY_LIMITS_FROM`` (the driver branch the simulator assumes ships them; NVML 13's
bindings, nvidia-ml-py 13.580, are the first to carry them) and raise ``FunctionNotFound`` below it.
gpufleet's own probe (``devices/limits.py``) never reads the version: it calls the function.

The version is the state dir's (:func:`set_driver_version`), so every process of a simulated host
sees the same driver, as on a real one. The limits set are kept there too, and read back with the
memory the cgroup's processes hold now (``currentUsed``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pynvml

import gpufleet.devices.simstate as simstate

DRIVER_VERSION = "560.35.03"
MEMORY_LIMITS_FROM = 580
_DRIVER_FILE = "driver_version"
_LIMITS_FILE = "memory_limits.json"


def set_driver_version(target: simstate.StateTarget, version: str) -> None:
    """The driver version every simulated NVML of this state dir reports (``"580.65.06"``)."""
    major = version.split(".", 1)[0]
    if not major.isdigit():
        raise ValueError(f"a driver version starts with its branch number (e.g. 580.65.06), not {version!r}")
    path = simstate.state_dir(target) / _DRIVER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(version)
    os.replace(tmp, path)


def driver_version(target: simstate.StateTarget) -> str:
    try:
        return (simstate.state_dir(target) / _DRIVER_FILE).read_text().strip() or DRIVER_VERSION
    except OSError:
        return DRIVER_VERSION


def _limits_path(target: simstate.StateTarget) -> Path:
    return simstate.state_dir(target) / _LIMITS_FILE


def memory_limits(target: simstate.StateTarget) -> dict[str, dict[str, int]]:
    """Every limit set, by ``"<gpu index>:<cgroup path>"``."""
    try:
        return dict(json.loads(_limits_path(target).read_text()))
    except (OSError, ValueError):
        return {}


def _in_cgroup(pid: int, namespace: str) -> bool:
    try:
        rows = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return False
    # cgroup v2's row is "0::/the/path", under /sys/fs/cgroup.
    return any(namespace.rstrip("/") == "/sys/fs/cgroup" + row.split(":", 2)[-1].rstrip("/") for row in rows)


def _text(value: Any) -> str:
    # pynvml's structures give a char* field back as str; ctypes' own as bytes.
    return value.decode() if isinstance(value, bytes) else str(value or "")


class SimLimitsMixin:
    """``nvmlSystemGetDriverVersion`` and the memory-limit functions of the simulated driver.

    Needs ``state_dir``, ``_check_init`` and ``_dev`` of ``SimNVML``.
    """

    state_dir: Path
    _check_init: Any
    _dev: Any

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        return driver_version(self.state_dir)

    def _limits_offered(self) -> None:
        self._check_init()
        if int(driver_version(self.state_dir).split(".", 1)[0]) < MEMORY_LIMITS_FROM:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def nvmlDeviceSetMemoryLimits_v1(self, device: Any, limits: Any) -> None:
        self._limits_offered()
        gpu, _ = self._dev(device, "memory_limits")
        namespace = _text(limits.nameSpace)
        if not namespace.startswith("/sys/fs/cgroup/") or limits.hardLimit < limits.softLimit:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        table = memory_limits(self.state_dir)
        key = f"{gpu.index}:{namespace}"
        if limits.softLimit == 0 and limits.hardLimit == pynvml.NVML_DEVICE_MEMORY_LIMIT_MAX:
            table.pop(key, None)  # NVML's way to clear a limit
        else:
            table[key] = {"soft": int(limits.softLimit), "hard": int(limits.hardLimit)}
        tmp = _limits_path(self.state_dir).with_suffix(".tmp")
        tmp.write_text(json.dumps(table))
        os.replace(tmp, _limits_path(self.state_dir))

    def nvmlDeviceGetMemoryLimits_v1(self, device: Any, limits: Any) -> None:
        self._limits_offered()
        gpu, state = self._dev(device, "memory_limits")
        namespace = _text(limits.nameSpace)
        got = memory_limits(self.state_dir).get(f"{gpu.index}:{namespace}")
        limits.softLimit = got["soft"] if got else 0
        limits.hardLimit = got["hard"] if got else pynvml.NVML_DEVICE_MEMORY_LIMIT_MAX
        limits.currentUsed = sum(p.used_memory for p in simstate.live_processes(state, gpu.index)
                                 if _in_cgroup(p.pid, namespace))
