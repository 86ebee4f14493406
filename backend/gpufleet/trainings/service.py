"""Creating, cancelling and reading trainings: what the REST routes and the CLI call.

Everything is checked before anything is written: a bad request raises
:class:`TrainingRequestError` naming the field and what to fix, and the
database is untouched. Every function works in the caller's session and
leaves the commit to it, so one request is one session and one transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import String, cast, func, or_, select, update
from sqlalchemy.orm import Session

from gpufleet.config import SchedulerSettings, Settings, WorkerSettings
from gpufleet.db.models import Host
from gpufleet.db.session import rows_changed
from gpufleet.lifecycle.models import (
    FINAL_STATUSES,
    TRAINING_STATUSES,
    GPUAllocation,
    Training,
    TrainingEvent,
    TrainingMetric,
    new_training,
)
from gpufleet.lifecycle.transitions import (
    get_training,
    record_event,
    record_first_event,
    transition,
)
from gpufleet.engine.config import TrainConfig, TrainingConfigError
from gpufleet.engine.paths import resolve_data_path
from gpufleet.engine.recipes import get_recipe
from gpufleet.trainings import resume, script
from gpufleet.trainings.admission.checks import (
    TrainingRequestError,
    check_gpus,
    check_request,
    check_world_size,
    refuse_never_fits,
    resolve_host,
)
from gpufleet.trainings.admission.estimate import check_estimate
from gpufleet.trainings.admission.gang import gang_request
from gpufleet.trainings.admission.standing import standing
from gpufleet.trainings.gang_view import add_hosts
from gpufleet.wire.training_requests import TrainingBatchCreate, TrainingCreate
from gpufleet import workkinds

__all__ = ["TrainingRequestError", "TrainingView", "cancel", "create", "create_batch", "create_trainings",
           "events", "get", "metrics", "page", "views"]


# Creating ----------------------------------------------------------------


def create(sess: Session, settings: Settings, req: TrainingCreate, owner: str, *,
           admin: bool = False) -> TrainingView:
    """Validate one request against its recipe and the fleet, and queue it (``admin``: the owner is one)."""
    [row] = create_trainings(sess, settings, [req], owner, admin=admin)
    return _new_view(sess, row)


def create_batch(sess: Session, settings: Settings, body: TrainingBatchCreate,
                 owner: str) -> tuple[str, list[TrainingView]]:
    """Many small trainings sharing GPUs: each on one GPU, not exclusively. Returns the batch id too."""
    batch_id = uuid.uuid4().hex[:12]
    rows = create_trainings(sess, settings, body.requests(), owner, exclusive=False,
                            selection={"strategy": body.strategy, "batch": batch_id})
    return batch_id, [_new_view(sess, row) for row in rows]


def create_trainings(
    sess: Session,
    settings: Settings,
    reqs: list[TrainingCreate],
    owner: str,
    *,
    exclusive: bool = True,
    selection: dict[str, Any] | None = None,
    admin: bool = False,
) -> list[Training]:
    """Validate every request, then write them all with a ``queued`` event each.

    All or nothing: one bad request writes none. The caller commits.
    """
    prepared: list[tuple[Training, TrainConfig | None]] = []
    for i, req in enumerate(reqs):
        try:
            prepared.append(prepare(sess, settings, req, owner, exclusive=exclusive, admin=admin))
        except TrainingRequestError as exc:
            if len(reqs) > 1:
                raise TrainingRequestError(
                    f"items[{i}].{exc.field}" if exc.field else f"items[{i}]", f"item {i}: {exc}",
                    problems=[(f"items.{i}.{f}", f"item {i}: {m}") for f, m in exc.problems],
                ) from None
            raise
    rows = [row for row, _ in prepared]
    for row, config in prepared:
        if selection is not None:
            row.selection = dict(selection)
        if config is not None:
            check_estimate(sess, settings, row, config)
        sess.add(row)
    sess.flush()
    for row in rows:
        where = f"GPUs {row.gpu_ids}" if row.gpu_ids else f"{row.world_size} GPU(s) chosen by the server"
        record_first_event(sess, row, "status", status="queued", user=owner, reason=f"submitted for {where}")
    return rows


def prepare(sess: Session, settings: Settings, req: TrainingCreate, owner: str, *, exclusive: bool = True,
            admin: bool = False, on_hosts: bool = True) -> tuple[Training, TrainConfig | None]:
    """Validate ``req`` against the recipe and the fleet; the row (not added) and its recipe config.
    ``on_hosts=False``: it runs in a pool, whose own GPUs its place checks (gpufleet.pools), not the team's."""
    count = check_request(req)
    gang, count = gang_request(sess, req, count)
    if not exclusive and count != 1:
        raise TrainingRequestError("world_size", "a shared (batch) training runs on exactly one GPU")
    host = resolve_host(sess, req)
    if req.gpu_ids and host is not None:
        check_gpus(sess, host, req.gpu_ids, one_vendor=not workkinds.of(req.kind).mixes_vendors)
    if not req.gpu_ids and count > 1 and gang is None and on_hosts:
        # A pool's training is checked against the pool's nodes (its place), not the team's hosts.
        check_world_size(sess, count, req.host)
    common: dict[str, Any] = dict(
        owner=owner, name=req.name, world_size=count, priority=req.priority,
        preemptible=preemptible_default(settings, admin) if req.preemptible is None else req.preemptible,
        gpu_ids=list(req.gpu_ids) if req.gpu_ids else None, distributed=count > 1,
        requested_host=req.host, host_id=host.id if (host is not None and req.gpu_ids) else None,
        auto_select=not req.gpu_ids, max_restarts=req.max_restarts, gang=gang,
        max_runtime_s=req.max_runtime_s, resumed_from=resume.source_of(sess, req, owner, admin),
    )
    return PREPARE.of(req.kind)(sess, settings, req, host, exclusive, common, on_hosts)


# What a request makes, by its kind: the row (not added) and, for a recipe, its resolved config.
# on_hosts: False for a pool's training, whose GPUs its place checks (gpufleet.pools), not the team's.
PREPARE: workkinds.Hooks[Callable[[Session, Settings, TrainingCreate, Host | None, bool, dict[str, Any], bool],
                                  tuple[Training, TrainConfig | None]]] = workkinds.Hooks("training request")


@PREPARE.add("recipe")
def _prepare_recipe(sess: Session, settings: WorkerSettings, req: TrainingCreate, host: Host | None, exclusive: bool,
                    common: dict[str, Any], on_hosts: bool) -> tuple[Training, TrainConfig | None]:
    if req.recipe is None:  # check_request refuses it first
        raise TrainingRequestError("recipe", "recipe: a training of kind 'recipe' needs the recipe's name")
    config = _resolve_config(settings, req, common["world_size"])
    if common["gang"] is not None and config.parallel_mode != "equal":
        # Unequal shares and vendor groups are laid out over one host's ranks.
        raise TrainingRequestError("config.parallel_mode", f"parallel_mode {config.parallel_mode} runs on one "
                                   "host; a training across hosts takes equal shares (parallel_mode equal)")
    return new_training(
        **common, kind="recipe", recipe=req.recipe, config=config.to_dict(), exclusive=exclusive,
        memory_estimate=req.memory_mb * 2**20 if req.memory_mb else None,
        allow_rebalance=req.allow_rebalance, checkpoint_every=config.checkpoint_every,
        max_steps=config.max_steps,
    ), config


def _resolve_config(settings: WorkerSettings, req: TrainingCreate, world_size: int) -> TrainConfig:
    values = dict(req.config or {})
    if req.checkpoint_every is not None:
        values["checkpoint_every"] = req.checkpoint_every
    try:
        recipe = get_recipe(req.recipe)
    except TrainingConfigError as exc:
        raise TrainingRequestError("recipe", str(exc)) from None
    try:
        cfg = recipe.resolve_config(values)
        cfg.batch_layout(world_size)
        if cfg.data_path is not None:
            resolve_data_path(settings.data_root, cfg.data_path)
    except TrainingConfigError as exc:
        problems = [(f"config.{f}" if f else "config", m) for f, m in exc.problems]
        raise TrainingRequestError(problems[0][0], str(exc), problems=problems) from None
    return cfg


@PREPARE.add("script")
def _prepare_script(sess: Session, settings: Settings, req: TrainingCreate, host: Host | None, exclusive: bool,
                    common: dict[str, Any], on_hosts: bool) -> tuple[Training, TrainConfig | None]:
    if not exclusive:
        raise TrainingRequestError("exclusive", "a script training holds its GPUs exclusively")
    try:
        f = script.resolve(sess, settings, settings, code=req.code, argv=req.argv, env=req.env,
                           memory=req.memory if req.memory is not None else
                           (req.memory_mb * 2**20 if req.memory_mb else None),
                           python=req.python, requirements=req.requirements)
    except script.ScriptError as exc:
        raise TrainingRequestError(exc.field, str(exc), exc.status) from None
    if f.memory_estimate and on_hosts:  # a pool's GPUs are not the team's: its place checks those
        refuse_never_fits(sess, f.memory_estimate, host)
    return new_training(
        **common, recipe=script.SCRIPT_RECIPE, kind="script", code_hash=f.code_hash, argv=f.argv, env=f.env,
        memory_declared=f.memory_declared, config={}, exclusive=True, memory_estimate=f.memory_estimate,
        estimate=f.estimate, estimate_key=f"script:{f.code_hash}", allow_rebalance=False,
        checkpoint_every=None, max_steps=None,
    ), None


def preemptible_default(settings: SchedulerSettings, admin: bool) -> bool:
    """Whether a training that does not say may be preempted: the settings' default, per role."""
    return settings.admin_trainings_preemptible if admin else settings.preemptible_default


# Cancelling --------------------------------------------------------------


def cancel(sess: Session, training_id: uuid.UUID, user: str, *, end_as: str = "cancelled") -> Training:
    """Cancel a training; idempotent. The caller commits.

    Queued, scheduled and preempted trainings end here (their GPUs are
    released in this transaction). A running one gets ``cancel_requested``; its supervisor
    kills the process group and writes ``end_as`` within seconds: ``cancelled``, or
    ``pruned`` for a sweep's trial that early stopping stopped.
    """
    for _ in range(5):  # the status may move under us; re-read and retry
        t = get_training(sess, training_id)
        if t is None:
            raise TrainingRequestError("id", f"training {training_id} does not exist", status=404)
        if t.status in FINAL_STATUSES or (t.status == "running" and t.cancel_requested):
            return t
        if t.status in ("queued", "scheduled", "preempted"):
            if transition(sess, t.id, [t.status], end_as, reason=f"{end_as} by {user}",
                          user=user, kind="cancel"):
                return get_training(sess, t.id)  # type: ignore[return-value]
            continue
        if t.status == "running":
            res = sess.execute(
                update(Training)
                .where(Training.id == t.id, Training.status == "running")
                .values(cancel_requested=True, cancel_as=end_as)
                .execution_options(synchronize_session=False)
            )
            if rows_changed(res) == 1:
                record_event(sess, t.id, "cancel", status="running", user=user,
                             reason=f"cancel requested by {user}; stopping every rank")
                return get_training(sess, t.id)  # type: ignore[return-value]
    raise TrainingRequestError("id", "the training changed state during the cancel; try again", status=409)


# Reading -----------------------------------------------------------------


@dataclass
class TrainingView:
    """A training with what a reader wants beside the row: its host's name and its current GPUs."""

    training: Training
    host_name: str | None = None
    # The newest reservation: the active one, or the last one once it ended.
    gpus: list[GPUAllocation] = field(default_factory=list)
    # A training across hosts: each host's part (gpufleet.trainings.gang_view).
    hosts: list[dict[str, Any]] | None = None
    # A queued training's place in the queue (1 is next) and, for the next one, its expected start.
    queue_position: int | None = None
    expected_start: datetime | None = None


def get(sess: Session, training_id: uuid.UUID) -> Training:
    """The training, read afresh; a 404 error when there is none."""
    t = sess.get(Training, training_id, populate_existing=True)
    if t is None:
        raise TrainingRequestError("id", f"training {training_id} does not exist", status=404)
    return t


def _new_view(sess: Session, row: Training) -> TrainingView:
    """A row this transaction created: no GPUs reserved yet (the scheduler reserves after the
    commit), and its host, when it names GPUs, is the one the checks already read."""
    host = sess.get(Host, row.host_id) if row.host_id is not None else None  # in the identity map: no query
    return TrainingView(row, host.name if host is not None else None, [])


def views(sess: Session, rows: list[Training]) -> list[TrainingView]:
    """Rows with their host and current GPUs, in two queries for the whole page."""
    if not rows:
        return []
    hosts = dict(sess.execute(select(Host.id, Host.name).where(
        Host.id.in_({t.host_id for t in rows if t.host_id is not None}))).all())
    allocs: dict[uuid.UUID, list[GPUAllocation]] = {t.id: [] for t in rows}
    for a in sess.execute(
        select(GPUAllocation).where(GPUAllocation.training_id.in_(list(allocs)))
        .order_by(GPUAllocation.allocated_at.desc(), GPUAllocation.gpu_index)
    ).scalars():
        allocs[a.training_id].append(a)
    out = []
    for t in rows:
        mine = allocs[t.id]
        current: list[GPUAllocation] = []
        if mine:
            newest = mine[0].allocated_at
            current = [a for a in mine if a.released_at is None] or [
                a for a in mine if abs((a.allocated_at - newest).total_seconds()) < 1.0
            ]
        out.append(TrainingView(t, hosts.get(t.host_id) if t.host_id is not None else None,
                                sorted(current, key=lambda a: a.gpu_index)))
    add_hosts(sess, out)
    return out


def named_by(ref: str) -> Any:
    """The trainings ``ref`` names: its name, or its ID or a prefix of it (with or without dashes, any case).

    The short IDs ``trainings ls`` shows are such prefixes. Compared on the
    ID's 32 hex digits, which both databases give as text.
    """
    digits = ref.strip().lower().replace("-", "")
    by_name = Training.name == ref
    if not digits or len(digits) > 32 or any(c not in "0123456789abcdef" for c in digits):
        return by_name
    hexed = func.replace(func.lower(cast(Training.id, String)), "-", "")
    return or_(hexed.startswith(digits), by_name)


def training_names(sess: Session, ids: list[str]) -> dict[str, str]:
    """Each training's name, by its ID as text (IDs that name no training are left out)."""
    wanted = set()
    for i in ids:
        try:
            wanted.add(uuid.UUID(i))
        except ValueError:
            continue
    if not wanted:
        return {}
    rows = sess.execute(select(Training.id, Training.name).where(Training.id.in_(wanted)))
    return {str(tid): name for tid, name in rows}


def with_standing(sess: Session, settings: Settings, views: list[TrainingView]) -> list[TrainingView]:
    """``views`` with each queued one's place in the queue (trainings.admission.standing)."""
    places = standing(sess, settings, [v.training.id for v in views if v.training.status == "queued"])
    for v in views:
        v.queue_position, v.expected_start = places.get(v.training.id, (None, None))
    return views


def page(sess: Session, *, statuses: Sequence[str] | None, owner: str | None, offset: int,
         limit: int, ref: str | None = None, sessions: bool = False) -> tuple[list[TrainingView], int]:
    """One page of trainings, newest first, and how many match in all (only those ``ref`` names, when given).

    Interactive sessions are rows of the same table with statuses of their own
    (``/api/v1/sessions``): listed only when asked for (``sessions``), or named by ``ref``.
    """
    where = [named_by(ref)] if ref else []
    if not sessions and not ref:
        where.append(Training.kind.in_(workkinds.names(lambda k: k.lists_as_training)))
    if statuses:
        bad = [s for s in statuses if s not in TRAINING_STATUSES]
        if bad:
            raise TrainingRequestError(
                "status", f"unknown status {bad[0]!r}; use one of {', '.join(TRAINING_STATUSES)}")
        where.append(Training.status.in_(statuses))
    if owner:
        where.append(Training.owner == owner)
    count = sess.scalar(select(func.count()).select_from(Training).where(*where)) or 0
    rows = sess.execute(
        select(Training).where(*where).order_by(Training.created_at.desc(), Training.id)
        .offset(offset).limit(limit)
    ).scalars()
    return views(sess, list(rows)), count


def events(sess: Session, training_id: uuid.UUID, *, after_seq: int, limit: int) -> list[TrainingEvent]:
    return list(sess.execute(
        select(TrainingEvent).where(TrainingEvent.training_id == training_id, TrainingEvent.seq > after_seq)
        .order_by(TrainingEvent.seq).limit(limit)
    ).scalars())


def metrics(sess: Session, training_id: uuid.UUID, *, max_points: int,
            after_step: int) -> tuple[list[TrainingMetric], int]:
    """At most ``max_points`` metric rows after ``after_step`` (evenly downsampled), and how many are stored."""
    get(sess, training_id)
    where = [TrainingMetric.training_id == training_id, TrainingMetric.step > after_step]
    total = sess.scalar(select(func.count()).select_from(TrainingMetric).where(*where)) or 0
    stride = max(1, -(-total // max_points))
    stmt = select(TrainingMetric).where(*where).order_by(TrainingMetric.step)
    if stride > 1:
        # Every stride-th row by step order, plus the newest, computed in SQL.
        rn = func.row_number().over(order_by=TrainingMetric.step).label("rn")
        sub = select(TrainingMetric.id, rn).where(*where).subquery()
        keep = select(sub.c.id).where(((sub.c.rn - 1) % stride == 0) | (sub.c.rn == total))
        stmt = select(TrainingMetric).where(TrainingMetric.id.in_(keep)).order_by(TrainingMetric.step)
    return list(sess.execute(stmt).scalars()), total
