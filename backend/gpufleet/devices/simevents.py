"""XID events of the simulated NVML (``nvmlEventSet*``), mixed into ``SimNVML``.

An event set only receives events injected (``simstate.inject_xid``) after it
was created, for GPUs registered with ``nvmlEventTypeXidCriticalError``;
``nvmlEventSetWait_v2`` polls the shared state until one arrives or the
timeout passes, then raises ``NVMLError_Timeout`` as NVML does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

import gpufleet.devices.simstate as simstate

# NVML's "no MIG instance" value for gpuInstanceId / computeInstanceId.
NO_INSTANCE = 0xFFFFFFFF
_EVENT_POLL_S = 0.02


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass(frozen=True)
class SimHandle:
    """A device handle (the real one is an opaque pointer)."""

    index: int

    def __repr__(self) -> str:
        return f"<simulated nvmlDevice {self.index}>"


@dataclass(eq=False)
class SimEventSet:
    masks: dict[int, int] = field(default_factory=dict)  # gpu index -> event type mask
    last_seq: int = 0
    freed: bool = False


class SimEventsMixin:
    """The event functions; the class using it provides ``state_dir``, ``_check_init`` and ``_dev``."""

    state_dir: Any
    _check_init: Callable[[], None]
    _dev: Callable[[Any, str], tuple[Any, Any]]

    def nvmlEventSetCreate(self) -> SimEventSet:
        self._check_init()
        state = simstate.read_state(self.state_dir)
        # Like NVML, a set only receives events raised after it exists.
        return SimEventSet(last_seq=state.xids[-1]["seq"] if state.xids else 0)

    def nvmlDeviceGetSupportedEventTypes(self, handle: SimHandle) -> int:
        gpu, _ = self._dev(handle, "events")
        ecc = pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError
        return pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypePState | (ecc if gpu.spec.ecc else 0)

    def nvmlDeviceRegisterEvents(self, handle: SimHandle, eventTypes: int, eventSet: SimEventSet) -> None:
        gpu, _ = self._dev(handle, "events")
        if not isinstance(eventSet, SimEventSet) or eventSet.freed:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        eventSet.masks[gpu.index] = eventSet.masks.get(gpu.index, 0) | int(eventTypes)

    def nvmlEventSetWait_v2(self, eventSet: SimEventSet, timeoutms: int) -> Any:
        """The next XID event for a registered GPU, or ``NVMLError_Timeout``."""
        self._check_init()
        if not isinstance(eventSet, SimEventSet) or eventSet.freed:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        deadline = time.monotonic() + max(timeoutms, 0) / 1000
        while True:
            for ev in simstate.read_state(self.state_dir).xids:
                if ev["seq"] <= eventSet.last_seq:
                    continue
                eventSet.last_seq = ev["seq"]
                if eventSet.masks.get(ev["gpu"], 0) & pynvml.nvmlEventTypeXidCriticalError:
                    return pynvml.nvmlFriendlyObject(
                        {
                            "device": SimHandle(ev["gpu"]),
                            "eventType": pynvml.nvmlEventTypeXidCriticalError,
                            "eventData": ev["xid"],
                            "gpuInstanceId": NO_INSTANCE,
                            "computeInstanceId": NO_INSTANCE,
                        }
                    )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _err(pynvml.NVML_ERROR_TIMEOUT)
            time.sleep(min(_EVENT_POLL_S, remaining))

    nvmlEventSetWait = nvmlEventSetWait_v2

    def nvmlEventSetFree(self, eventSet: SimEventSet) -> None:
        self._check_init()
        if not isinstance(eventSet, SimEventSet) or eventSet.freed:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        eventSet.freed = True
