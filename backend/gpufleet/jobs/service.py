"""Creating and cancelling trainings: the domain side of the REST routes.

Everything is checked before anything is written: a bad request raises
:class:`TrainingRequestError` naming the field and what to fix, and the
database is untouched.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from gpufleet.config import Settings
from gpufleet.db.models import FINAL_STATUSES, GPU, Host, Training
from gpufleet.jobs.lifecycle import get_training, record_event, transition
from gpufleet.scheduling.batch import STRATEGIES
from gpufleet.scheduling.hosts import UnknownHost

log = logging.getLogger(__name__)


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


@dataclass
class TrainingRequest:
    """What a person asks for; validated against the fleet by :func:`prepare`."""

    name: str
    recipe: str
    config: dict[str, Any] = field(default_factory=dict)
    gpu_ids: list[int] | None = None
    host: str | None = None
    distributed: bool | None = None
    world_size: int | None = None
    priority: int = 0
    max_restarts: int = 2
    checkpoint_every: int | None = None
    allow_rebalance: bool = False
    memory_mb: int | None = None
    exclusive: bool = True
    # kind "script": a user's own code (gpufleet.trainings.script).
    kind: str = "recipe"
    code: str | None = None
    argv: list[str] | None = None
    env: dict[str, str] | None = None
    memory: str | int | None = None
    python: str | None = None

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise TrainingRequestError("name", "name must not be empty")
        if self.kind not in ("recipe", "script"):
            raise TrainingRequestError("kind", f"kind {self.kind!r} is not recipe or script")
        if self.kind == "recipe" and any(v is not None for v in (self.code, self.argv, self.env, self.memory)):
            raise TrainingRequestError("kind", "code, argv, env and memory belong to kind 'script'")
        if self.gpu_ids is not None:
            if not self.gpu_ids:
                raise TrainingRequestError("gpu_ids", "gpu_ids is empty; omit it to let the server choose")
            neg = [i for i in self.gpu_ids if i < 0]
            if neg:
                raise TrainingRequestError("gpu_ids", f"GPU ids are >= 0; got {neg[0]}")
            dup = sorted({i for i in self.gpu_ids if self.gpu_ids.count(i) > 1})
            if dup:
                raise TrainingRequestError("gpu_ids", f"GPU {dup[0]} is listed twice in gpu_ids {self.gpu_ids}")
        if self.world_size is not None and self.world_size < 1:
            raise TrainingRequestError("world_size", f"world_size must be >= 1, got {self.world_size}")
        if self.max_restarts < 0:
            raise TrainingRequestError("max_restarts", "max_restarts must be >= 0")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise TrainingRequestError("checkpoint_every", "checkpoint_every must be >= 1")

    @property
    def count(self) -> int:
        if self.gpu_ids:
            if self.world_size is not None and self.world_size != len(self.gpu_ids):
                raise TrainingRequestError(
                    "world_size",
                    f"world_size {self.world_size} does not match the {len(self.gpu_ids)} GPU(s) in "
                    f"gpu_ids {self.gpu_ids}; give one rank per GPU or omit world_size",
                )
            return len(self.gpu_ids)
        if self.world_size is not None:
            return self.world_size
        if self.distributed:
            raise TrainingRequestError(
                "world_size", "distributed training without gpu_ids needs world_size (how many GPUs)"
            )
        return 1


def _resolve_config(settings: Settings, req: TrainingRequest, world_size: int) -> dict[str, Any]:
    from gpufleet.training.config import ConfigError
    from gpufleet.training.paths import resolve_data_path
    from gpufleet.training.recipes import get_recipe

    values = dict(req.config or {})
    if req.checkpoint_every is not None:
        values["checkpoint_every"] = req.checkpoint_every
    try:
        recipe = get_recipe(req.recipe)
    except ConfigError as exc:
        raise TrainingRequestError("recipe", str(exc)) from None
    try:
        cfg = recipe.resolve_config(values)
        cfg.batch_layout(world_size)
        if cfg.data_path is not None:
            resolve_data_path(settings.data_root, cfg.data_path)
    except ConfigError as exc:
        problems = [(f"config.{f}" if f else "config", m) for f, m in exc.problems]
        raise TrainingRequestError(problems[0][0], str(exc), problems=problems) from None
    return cfg.to_dict()


def _resolve_host(sess: Session, req: TrainingRequest) -> Host | None:
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
                "gpu_ids", "no GPU host has registered yet, so gpu_ids cannot be checked; start a worker or omit gpu_ids"
            )
        if len(hosts) > 1:
            raise TrainingRequestError("host", f"gpu_ids are per host; say which host ({names})")
        return hosts[0]
    return None


def _check_gpus(sess: Session, host: Host, gpu_ids: list[int]) -> None:
    have = sorted(sess.execute(select(GPU.index).where(GPU.host_id == host.id)).scalars())
    for i in gpu_ids:
        if i not in have:
            shown = f"{have[0]}–{have[-1]}" if have and have == list(range(have[0], have[-1] + 1)) else str(have)
            raise TrainingRequestError(
                "gpu_ids", f"GPU {i} does not exist on host {host.name}; it has GPUs {shown}"
            )
    _check_backends(sess, host, gpu_ids)


def _check_backends(sess: Session, host: Host, gpu_ids: list[int]) -> None:
    """Refuse a rank on a GPU whose backend gpufleet cannot train on, or a set that spans vendors."""
    from gpufleet.scheduling.vendormix import mixed_vendor_message, unsupported_backend_reason

    rows = sess.execute(select(GPU.index, GPU.backend, GPU.vendor)
                        .where(GPU.host_id == host.id, GPU.index.in_(gpu_ids))).all()
    for index, backend, vendor in sorted(rows):
        why = unsupported_backend_reason(backend, vendor)
        if why:
            raise TrainingRequestError("gpu_ids", f"GPU {index} on host {host.name} cannot hold a rank: {why}")
    mixed = mixed_vendor_message([vendor for _, _, vendor in rows])
    if mixed:
        raise TrainingRequestError("gpu_ids", mixed)


def _check_world_size(sess: Session, count: int, host: str | None) -> None:
    """Refuse a world size no host can hold, instead of letting it wait forever."""
    from gpufleet.scheduling.validate import world_size_never_fits

    per_host = dict(sess.execute(
        select(Host.name, func.count(GPU.id)).join(GPU, GPU.host_id == Host.id).group_by(Host.name)
    ).all())
    why = world_size_never_fits(count, per_host, host)
    if why:
        raise TrainingRequestError("world_size", why)


def prepare(sess: Session, settings: Settings, req: TrainingRequest, owner: str) -> Training:
    """Validate ``req`` against the recipe and the fleet and build the row (not added)."""
    count = req.count
    if req.distributed is False and count > 1:
        raise TrainingRequestError(
            "distributed", f"{count} GPUs need distributed=true (one DDP rank per GPU), or give one GPU"
        )
    if not req.exclusive and count != 1:
        raise TrainingRequestError("world_size", "a shared (batch) training runs on exactly one GPU")
    host = _resolve_host(sess, req)
    if req.gpu_ids and host is not None:
        _check_gpus(sess, host, req.gpu_ids)
    if not req.gpu_ids and count > 1:
        _check_world_size(sess, count, req.host)
    if req.kind == "script":
        return _prepare_script(sess, settings, req, owner, count, host)
    config = _resolve_config(settings, req, count)
    return Training(
        id=uuid.uuid4(),
        name=req.name.strip(),
        owner=owner,
        recipe=req.recipe,
        config=config,
        status="queued",
        priority=req.priority,
        gpu_ids=list(req.gpu_ids) if req.gpu_ids else None,
        distributed=count > 1,
        world_size=count,
        requested_host=req.host,
        host_id=host.id if (host is not None and req.gpu_ids) else None,
        auto_select=not req.gpu_ids,
        requested_count=count,
        exclusive=req.exclusive,
        memory_estimate=req.memory_mb * 2**20 if req.memory_mb else None,
        max_restarts=req.max_restarts,
        allow_rebalance=req.allow_rebalance,
        checkpoint_every=config.get("checkpoint_every"),
        max_steps=config.get("max_steps"),
        restarts=0,
        attempt=0,
        event_seq=0,
        step=0,
        cancel_requested=False,
    )


def _prepare_script(sess: Session, settings: Settings, req: TrainingRequest, owner: str, count: int,
                    host: Host | None) -> Training:
    from gpufleet.trainings import script

    if not req.exclusive:
        raise TrainingRequestError("exclusive", "a script training holds its GPUs exclusively")
    try:
        f = script.resolve(sess, settings, code=req.code, argv=req.argv, env=req.env,
                           memory=req.memory if req.memory is not None else
                           (req.memory_mb * 2**20 if req.memory_mb else None),
                           python=req.python, auto_select=not req.gpu_ids)
    except script.ScriptError as exc:
        raise TrainingRequestError(exc.field, str(exc), exc.status) from None
    if f.memory_estimate:
        _refuse_never_fits(sess, f.memory_estimate, count, host)
    return Training(
        id=uuid.uuid4(), name=req.name.strip(), owner=owner, recipe=script.SCRIPT_RECIPE, kind="script",
        code_hash=f.code_hash, argv=f.argv, env=f.env, memory_declared=f.memory_declared, config={},
        status="queued", priority=req.priority, gpu_ids=list(req.gpu_ids) if req.gpu_ids else None,
        distributed=count > 1, world_size=count, requested_host=req.host,
        host_id=host.id if (host is not None and req.gpu_ids) else None, auto_select=not req.gpu_ids,
        requested_count=count, exclusive=True, memory_estimate=f.memory_estimate, estimate=f.estimate,
        estimate_key=f"script:{f.code_hash}", max_restarts=req.max_restarts, allow_rebalance=False,
        checkpoint_every=None, max_steps=None, restarts=0, attempt=0, event_seq=0, step=0, cancel_requested=False,
    )


def _refuse_never_fits(sess: Session, memory: int, count: int, host: Host | None) -> None:
    """A script whose memory no GPU of the fleet (or of its host) has can never run: say so now."""
    from sqlalchemy import func

    from gpufleet.scheduling.types import fmt_bytes

    where = [GPU.host_id == host.id] if host is not None else []
    largest = sess.scalar(select(func.max(GPU.memory_total)).where(GPU.enabled.is_(True), *where))
    if largest and memory > largest:
        place = f"on host {host.name}" if host is not None else "in the fleet"
        raise TrainingRequestError(
            "memory", f"this training can never be placed: it needs {fmt_bytes(memory)} per GPU; the largest GPU "
                      f"{place} has {fmt_bytes(largest)}")


def create_trainings(
    sess: Session,
    settings: Settings,
    reqs: list[TrainingRequest],
    owner: str,
    *,
    selection: dict[str, Any] | None = None,
) -> list[Training]:
    """Validate every request, then write them all with a ``queued`` event each.

    All or nothing: one bad request writes none. The caller commits.
    """
    rows = []
    for i, req in enumerate(reqs):
        try:
            rows.append(prepare(sess, settings, req, owner))
        except TrainingRequestError as exc:
            if len(reqs) > 1:
                raise TrainingRequestError(
                    f"items[{i}].{exc.field}" if exc.field else f"items[{i}]", f"item {i}: {exc}",
                    problems=[(f"items.{i}.{f}", f"item {i}: {m}") for f, m in exc.problems],
                ) from None
            raise
    for row in rows:
        if selection is not None:
            row.selection = dict(selection)
        if row.kind != "script":
            _estimate(sess, settings, row)
        sess.add(row)
    sess.flush()
    for row in rows:
        where = f"GPUs {row.gpu_ids}" if row.gpu_ids else f"{row.world_size} GPU(s) chosen by the server"
        record_event(sess, row.id, "status", status="queued", user=owner, reason=f"submitted for {where}")
    return rows


def _estimate(sess: Session, settings: Settings, row: Training) -> None:
    """Store the memory estimate (what the scheduler reserves and checks) on the new row.

    A figure the person gave is kept as what to reserve. An estimator that
    cannot run leaves the row without one; the training still runs.
    """
    try:
        from gpufleet.scheduling.plan import estimate_training
    except ImportError:
        return
    from gpufleet.scheduling.memory import EstimateLimitError
    from gpufleet.scheduling.plan import never_fit_reason
    from gpufleet.training.config import ConfigError

    try:
        estimate_training(sess, row, data_root=settings.data_root)
    except (ConfigError, EstimateLimitError) as exc:  # the recipe's own checks, or a model past the size limits
        raise TrainingRequestError(f"config.{getattr(exc, 'field', None) or 'recipe'}", str(exc)) from None
    except Exception:  # noqa: BLE001 - an estimate is advice, never a reason to refuse
        log.warning("could not estimate the memory of training %s (%s)", row.name, row.recipe, exc_info=True)
    refused = never_fit_reason(sess, row.memory_estimate, row.requested_host)
    if refused is not None:
        given = row.estimate is None or row.memory_estimate != row.estimate.get("total")
        raise TrainingRequestError("memory_mb" if given else "config", f"{row.name}: {refused}")


def check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise TrainingRequestError("strategy", f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")


def cancel(sess: Session, training_id: uuid.UUID, user: str) -> Training:
    """Cancel a training; idempotent. The caller commits.

    Queued and scheduled trainings end here (their GPUs are released in this
    transaction). A running one gets ``cancel_requested``; its supervisor
    kills the process group and writes ``cancelled`` within seconds.
    """
    for _ in range(5):  # the status may move under us; re-read and retry
        t = get_training(sess, training_id)
        if t is None:
            raise TrainingRequestError("id", f"training {training_id} does not exist", status=404)
        if t.status in FINAL_STATUSES or (t.status == "running" and t.cancel_requested):
            return t
        if t.status in ("queued", "scheduled"):
            if transition(sess, t.id, [t.status], "cancelled", reason=f"cancelled by {user}",
                          user=user, kind="cancel"):
                return get_training(sess, t.id)  # type: ignore[return-value]
            continue
        if t.status == "running":
            res = sess.execute(
                update(Training)
                .where(Training.id == t.id, Training.status == "running")
                .values(cancel_requested=True)
                .execution_options(synchronize_session=False)
            )
            if res.rowcount == 1:
                record_event(sess, t.id, "cancel", status="running", user=user,
                             reason=f"cancel requested by {user}; stopping every rank")
                return get_training(sess, t.id)  # type: ignore[return-value]
    raise TrainingRequestError("id", "the training changed state during the cancel; try again", status=409)
