"""What a training request must satisfy beyond its own fields: the fleet it asks for.

Each check raises :class:`TrainingRequestError` naming the field and what to
fix; none writes anything.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.db.models import GPU, Host
from gpufleet.scheduling.hosts import UnknownHost
from gpufleet.scheduling.types import fmt_bytes
from gpufleet.scheduling.validate import world_size_never_fits
from gpufleet.scheduling.vendormix import (
    script_mixed_reason,
    unsupported_backend_reason,
)
from gpufleet.wire.training_requests import TrainingCreate
from gpufleet.workkinds import Hooks


class TrainingRequestError(ValueError):
    """A training request cannot be accepted; ``field`` names the culprit.

    ``problems`` holds ``(field path, message)`` pairs when there are several
    at once (every wrong config field), so the API can list each one.
    """

    def __init__(self, field: str | None, message: str, status: int = 422,
                 problems: list[tuple[str, str]] | None = None):
        self.field = field
        self.status = status
        self.problems = list(problems or [])
        super().__init__(message)


class FleetCannotHold(TrainingRequestError):
    """No GPU, or set of GPUs, of the team's hosts can ever hold the training (not: none is free now). A request
    that allows a pool (``or_pool``) is sent there instead (``gpufleet.pools.service.create_placed``)."""


# The fields only some kinds take, checked by the request's kind (a script's are read by trainings.script).
FIELDS: Hooks[Callable[[TrainingCreate], None]] = Hooks("check of its request's own fields")


@FIELDS.add("recipe")
def _recipe_fields(req: TrainingCreate) -> None:
    if req.recipe is None:
        raise TrainingRequestError("recipe", "recipe: a training of kind 'recipe' needs the recipe's name")
    if any(v is not None for v in (req.code, req.argv, req.env, req.memory, req.requirements)):
        raise TrainingRequestError("kind", "code, argv, env, memory and requirements belong to kind 'script'")


def check_request(req: TrainingCreate) -> int:
    """The request's fields against each other; returns how many GPUs (ranks) it asks for."""
    check_fields = FIELDS.get(req.kind)
    if check_fields is not None:
        check_fields(req)
    if not req.name.strip():
        raise TrainingRequestError("name", "name must not be empty")
    if req.or_pool and (req.pool or req.host or req.gpu_ids):
        raise TrainingRequestError("or_pool", "or_pool is where the server sends a training the team's hosts can "
                                              "never hold: give it without pool, host or gpu_ids")
    ids = req.gpu_ids
    if ids is not None:
        if not ids:
            raise TrainingRequestError("gpu_ids", "gpu_ids is empty; omit it to let the server choose")
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise TrainingRequestError("gpu_ids", f"GPU {dup[0]} is listed twice in gpu_ids {ids}")
        if req.world_size is not None and req.world_size != len(ids):
            raise TrainingRequestError(
                "world_size",
                f"world_size {req.world_size} does not match the {len(ids)} GPU(s) in "
                f"gpu_ids {ids}; give one rank per GPU or omit world_size",
            )
        count = len(ids)
    elif req.world_size is not None:
        count = req.world_size
    elif req.distributed:
        raise TrainingRequestError(
            "world_size", "distributed training without gpu_ids needs world_size (how many GPUs)")
    else:
        count = 1
    if req.distributed is False and count > 1:
        raise TrainingRequestError(
            "distributed", f"{count} GPUs need distributed=true (one DDP rank per GPU), or give one GPU")
    return count


def resolve_host(sess: Session, req: TrainingCreate) -> Host | None:
    """The host the request names, or the one host its ``gpu_ids`` can be on."""
    hosts = list(sess.execute(select(Host).order_by(Host.name)).scalars())
    names = ", ".join(h.name for h in hosts) or "none yet"
    if req.host:
        host = next((h for h in hosts if h.name == req.host), None)
        if host is None:
            # The fleet-wide rule (scheduling.hosts): an unknown host is a 404 naming the known ones.
            raise TrainingRequestError("host", str(UnknownHost(req.host, [h.name for h in hosts])), status=404)
        return host
    if req.gpu_ids:
        if not hosts:
            raise TrainingRequestError(
                "gpu_ids",
                "no GPU host has registered yet, so gpu_ids cannot be checked; start a worker or omit gpu_ids",
            )
        if len(hosts) > 1:
            raise TrainingRequestError("host", f"gpu_ids are per host; say which host ({names})")
        return hosts[0]
    return None


def check_gpus(sess: Session, host: Host, gpu_ids: list[int], *, one_vendor: bool = False) -> None:
    """Every GPU exists on ``host`` and can hold a rank; a script's set is of one vendor
    (a recipe training runs across vendors: ``engine/parallel.py``)."""
    have = sorted(sess.execute(select(GPU.index).where(GPU.host_id == host.id)).scalars())
    for i in gpu_ids:
        if i not in have:
            shown = f"{have[0]}–{have[-1]}" if have and have == list(range(have[0], have[-1] + 1)) else str(have)
            raise TrainingRequestError(
                "gpu_ids", f"GPU {i} does not exist on host {host.name}; it has GPUs {shown}"
            )
    rows = sess.execute(select(GPU.index, GPU.backend, GPU.vendor)
                        .where(GPU.host_id == host.id, GPU.index.in_(gpu_ids))).all()
    for index, backend, vendor in sorted(rows):
        why = unsupported_backend_reason(backend, vendor)
        if why:
            raise TrainingRequestError("gpu_ids", f"GPU {index} on host {host.name} cannot hold a rank: {why}")
    mixed = script_mixed_reason([vendor for _, _, vendor in rows]) if one_vendor else None
    if mixed:
        raise TrainingRequestError("gpu_ids", mixed)


def check_world_size(sess: Session, count: int, host: str | None) -> None:
    """Refuse a world size no host can hold, instead of letting it wait forever."""
    per_host = dict(sess.execute(
        select(Host.name, func.count(GPU.id)).join(GPU, GPU.host_id == Host.id).group_by(Host.name)
    ).all())
    why = world_size_never_fits(count, per_host, host)
    if why:
        raise (TrainingRequestError if host else FleetCannotHold)("world_size", why)


def refuse_never_fits(sess: Session, memory: int, host: Host | None) -> None:
    """A script whose memory no GPU of the fleet (or of its host) has can never run: say so now."""
    where = [GPU.host_id == host.id] if host is not None else []
    largest = sess.scalar(select(func.max(GPU.memory_total)).where(GPU.enabled.is_(True), *where))
    if largest and memory > largest:
        place = f"on host {host.name}" if host is not None else "in the fleet"
        raise (TrainingRequestError if host is not None else FleetCannotHold)(
            "memory", f"this training can never be placed: it needs {fmt_bytes(memory)} per GPU; the largest GPU "
                      f"{place} has {fmt_bytes(largest)}")
