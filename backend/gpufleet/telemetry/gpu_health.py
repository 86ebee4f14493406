"""A GPU's health from its samples: out of scheduling on a fatal XID, a pending row remap or uncorrectable ECC.

The agent checks each round's samples (:class:`HealthWatch`) and marks a GPU
``unhealthy`` in the database with the reason (``health: …``) when a fault
appears: a new XID of the fatal kinds (the driver's XID events, counted by
the sampler), a row remap pending or failed, or uncorrectable volatile ECC
errors. The scheduler places nothing on a GPU that is not ``ok``. A GPU
whose fault was a state (remap, ECC) is ``ok`` again once the state clears (a
GPU reset); one marked for an XID stays out until an admin clears it
(:func:`clear_health`). Writes happen only when something changes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpufleet.config import StoreSettings
from gpufleet.db.models import GPU, Host
from gpufleet.db.session import write_session
from gpufleet.telemetry.sample import GPUSample

log = logging.getLogger(__name__)

HEALTH_PREFIX = "health: "
# XIDs after which a GPU must not take work until it is looked at (NVIDIA's XID catalogue).
FATAL_XIDS = {
    48: "double-bit ECC error", 63: "row remap recorded", 64: "row remap failed", 74: "NVLink error",
    79: "fell off the bus", 92: "high single-bit ECC error rate", 94: "contained ECC error",
    95: "uncontained ECC error", 119: "GSP timeout", 120: "GSP error",
}


def state_faults(s: GPUSample) -> list[str]:
    """Faults that last while the GPU is in a bad state (they clear with a GPU reset)."""
    out = []
    if s.row_remap_pending:
        out.append("a row remap is pending (reset the GPU)")
    if s.row_remap_failure:
        out.append("row remapping failed")
    if s.ecc_errors:
        out.append(f"{s.ecc_errors} uncorrectable ECC errors")
    return out


def xid_fault(xid: int) -> str:
    return f"XID {xid} ({FATAL_XIDS.get(xid, 'fatal')})"


@dataclass
class _Seen:
    xids: int = 0  # fatal XIDs already acted on
    faults: tuple[str, ...] = ()


class HealthWatch:
    def __init__(self, settings: StoreSettings) -> None:
        self.settings = settings
        self.seen: dict[int, _Seen] = {}

    def check(self, samples: list[GPUSample]) -> None:
        """Mark or recover this host's GPUs as their samples say; a failed write is tried next round."""
        for s in samples:
            if s.lost:
                continue
            seen = self.seen.setdefault(s.index, _Seen())
            faults = tuple(state_faults(s))
            new_xid = (s.fatal_xid_count or 0) > seen.xids
            if new_xid or set(faults) - set(seen.faults):
                reasons = list(faults) + ([xid_fault(s.last_fatal_xid or 0)] if new_xid else [])
                self._write(s, "unhealthy", HEALTH_PREFIX + "; ".join(reasons))
                log.error("GPU %d of %s is out of scheduling: %s", s.index, s.host, "; ".join(reasons))
            elif seen.faults and not faults:
                self._write(s, "ok", None)
            seen.xids, seen.faults = s.fatal_xid_count or 0, faults

    def _write(self, s: GPUSample, status: str, reason: str | None) -> None:
        host = select(Host.id).where(Host.name == s.host).scalar_subquery()
        q = update(GPU).where(GPU.host_id == host, GPU.index == s.index)
        if status == "ok":  # a recovery never lifts an XID's mark, nor another cause's
            q = q.where(GPU.status == "unhealthy", GPU.status_reason.like(f"{HEALTH_PREFIX}%"),
                        ~GPU.status_reason.like("%XID%"))
        with write_session(self.settings) as sess:
            sess.execute(q.values(status=status, status_reason=reason))


def held(status: str | None, reason: str | None) -> bool:
    """Whether a GPU row carries a health mark that a re-registration must keep."""
    return status == "unhealthy" and (reason or "").startswith(HEALTH_PREFIX)


class HealthClearError(ValueError):
    """The GPU does not exist."""


def clear_health(sess: Session, host: str, index: int) -> tuple[str, str | None]:
    """Put a GPU its samples marked unhealthy back in scheduling: (its status now, the fault it was out for).

    A GPU with no health mark is left as it is (the fault is then None).
    """
    gpu = sess.scalar(select(GPU).join(Host, Host.id == GPU.host_id).where(Host.name == host, GPU.index == index))
    if gpu is None:
        raise HealthClearError(f"GPU {index} of host {host!r} is not registered")
    if not held(gpu.status, gpu.status_reason):
        return gpu.status, None
    reason = (gpu.status_reason or "").removeprefix(HEALTH_PREFIX)
    gpu.status, gpu.status_reason = "ok", None
    return "ok", reason
