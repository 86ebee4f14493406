"""Which GPUs are really free: ``assess_gpu(observation, policy)``.

Other schedulers count only their own reservations. Here a GPU's state also
looks at what the device says: a process gpufleet did not start, or someone
else keeping the GPU busy, makes it unavailable even though no gpufleet
training holds it. States, in the order they win:

- ``unhealthy``: lost (fell off the bus), missing from the inventory, reported
  unhealthy by the driver, new ECC or XID errors, or its host went offline;
- ``drained``: an operator took it out (``gpufleet gpus drain``);
- ``busy``: an exclusive gpufleet reservation, or the maximum number of shared
  trainings;
- ``foreign-busy``: a process gpufleet did not start holds more than the
  threshold of memory, or someone else kept utilization high for several samples;
- ``shared``: shared gpufleet trainings hold it and there is room for more;
- ``free``.

``free_memory`` is what the device reports free minus the memory gpufleet has
reserved but its trainings have not yet taken (a training that has just been
scheduled reserves before its ranks allocate).
"""

from __future__ import annotations

from typing import Any

from gpufleet.scheduling.types import (
    AvailabilityPolicy,
    AvailabilityState,
    GPUAvailability,
    GPUObservation,
    fmt_bytes,
)
from gpufleet.workkinds import noun


def _reservation_holders(obs: GPUObservation) -> list[dict[str, Any]]:
    return [
        {
            "training_id": r.training_id,
            "name": r.training_name,
            "owner": r.owner,
            "kind": r.kind,
            "exclusive": r.exclusive,
            "reserved_memory": r.reserved_memory,
        }
        for r in obs.reservations
    ]


def _foreign_holders(obs: GPUObservation) -> list[dict[str, Any]]:
    return [
        {
            "pid": p.pid,
            "user": p.user,
            "command": p.command,
            "used_memory": p.used_memory,
            "foreign": True,
        }
        for p in obs.processes
        if p.foreign
    ]


def _who(holder: dict[str, Any]) -> str:
    if holder.get("foreign"):
        user = holder.get("user") or "an unknown user"
        cmd = f" ({holder['command']})" if holder.get("command") else ""
        return f"pid {holder['pid']}{cmd} of {user}"
    name = holder.get("name") or holder.get("training_id")
    owner = f" of {holder['owner']}" if holder.get("owner") else ""
    return f"{noun(holder.get('kind'))} {name}{owner}"


def unreserved_free_memory(obs: GPUObservation) -> int:
    """Device-free memory minus reservations that the trainings have not yet taken."""
    # Memory that each training's processes already hold on this GPU is in the
    # device's "used" figure; only the rest of its reservation is still to come.
    used_by: dict[str, int] = {}
    for p in obs.processes:
        if p.training_id is not None:
            used_by[str(p.training_id)] = used_by.get(str(p.training_id), 0) + (p.used_memory or 0)
    pending = sum(
        max((r.reserved_memory or 0) - used_by.get(str(r.training_id), 0), 0)
        for r in obs.reservations
    )
    if obs.memory_free is not None:
        device_free = obs.memory_free
    else:
        # No live sample: the best figure is the size minus what is reserved.
        device_free = obs.memory_total or 0
    return max(device_free - pending, 0)


def _unhealthy_reason(obs: GPUObservation) -> str | None:
    if obs.lost:
        return "the GPU stopped answering (fell off the bus)"
    if obs.host_offline:
        return f"host {obs.host} is offline (no heartbeat from its agent)"
    if obs.status == "missing":
        return obs.status_reason or "not detected at the last agent start"
    if obs.status == "unhealthy":
        return obs.status_reason or "the driver reports an error"
    errors = []
    if obs.new_ecc_errors > 0:
        errors.append(f"{obs.new_ecc_errors} new uncorrected ECC error(s)")
    if obs.new_xid_errors > 0:
        errors.append(f"{obs.new_xid_errors} new XID error(s)")
    if errors:
        return " and ".join(errors) + "; check the GPU, then undrain it or restart the agent"
    return None


def _sustained_foreign_load(obs: GPUObservation, policy: AvailabilityPolicy) -> bool:
    # Load on a GPU that gpufleet trainings hold is theirs.
    if obs.reservations or any(p.training_id is not None for p in obs.processes):
        return False
    recent = obs.recent_utilization[-policy.sustained_samples :]
    if len(recent) < policy.sustained_samples:
        return False
    return min(recent) >= policy.foreign_utilization_threshold


def assess_gpu(obs: GPUObservation, policy: AvailabilityPolicy | None = None) -> GPUAvailability:
    """The state of one GPU, with the reason in words."""
    policy = policy or AvailabilityPolicy()
    ours = _reservation_holders(obs)
    foreign = _foreign_holders(obs)
    holders = ours + foreign
    reserved = sum(r.reserved_memory or 0 for r in obs.reservations)
    free = unreserved_free_memory(obs)

    def result(state: AvailabilityState, reason: str, free_memory: int = free) -> GPUAvailability:
        return GPUAvailability(
            host=obs.host,
            index=obs.index,
            state=state,
            reason=reason,
            vendor=obs.vendor,
            backend=obs.backend,
            name=obs.name,
            memory_total=obs.memory_total,
            free_memory=free_memory,
            reserved_memory=reserved,
            holders=tuple(holders),
            compute_capability=obs.compute_capability,
        )

    bad = _unhealthy_reason(obs)
    if bad is not None:
        return result("unhealthy", bad, 0)
    if obs.drained:
        return result("drained", "drained by an operator" + (f": {obs.drain_reason}" if obs.drain_reason else ""), 0)

    exclusive = [h for h in ours if h["exclusive"]]
    if exclusive:
        return result("busy", "reserved exclusively by " + _who(exclusive[0]), 0)

    heavy = [h for h in foreign if (h.get("used_memory") or 0) > policy.foreign_memory_threshold]
    if heavy:
        h = heavy[0]
        return result(
            "foreign-busy",
            f"{_who(h)}, not started by gpufleet, holds {fmt_bytes(h['used_memory'])} "
            f"(more than {fmt_bytes(policy.foreign_memory_threshold)})",
        )
    if _sustained_foreign_load(obs, policy):
        return result(
            "foreign-busy",
            f"someone else kept utilization at {min(obs.recent_utilization[-policy.sustained_samples:]):.0f}% "
            f"or more for the last {policy.sustained_samples} samples",
        )

    shared = [h for h in ours if not h["exclusive"]]
    if shared:
        if len(shared) >= policy.max_models_per_gpu:
            return result(
                "busy",
                f"holds the maximum of {policy.max_models_per_gpu} shared trainings",
                0,
            )
        room = policy.max_models_per_gpu - len(shared)
        return result(
            "shared",
            f"{len(shared)} shared training(s) ({', '.join(_who(h) for h in shared[:2])}); "
            f"room for {room} more with {fmt_bytes(free)} free",
        )

    if obs.memory_free is None:
        return result("free", "no reservation; no live sample, so free memory is the GPU's size")
    foreign_bytes = sum(h.get("used_memory") or 0 for h in foreign)
    note = f"; small foreign processes use {fmt_bytes(foreign_bytes)}" if foreign else ""
    return result("free", f"no reservation, {fmt_bytes(free)} free{note}")
