"""Pools: adding and reading them, and sending a training to one.

A pool is a place an existing scheduler owns (a Slurm partition). A training
sent there is an ordinary ``trainings`` row with ``pool`` set: the team's own
scheduler leaves it alone, and :mod:`gpufleet.pools.submit` and
:mod:`gpufleet.jobs.pool_watch` carry it through the pool's scheduler. What
differs between schedulers is the pool's kind (:mod:`gpufleet.pools.place`);
nothing here asks which one it is.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.config import CodeSettings, Settings, StoreSettings
from gpufleet.db.pools import Pool
from gpufleet.lifecycle.models import Training
from gpufleet.lifecycle.transitions import record_first_event
from gpufleet.pools.attempt import layout
from gpufleet.pools.kinds import place_kind
from gpufleet.pools.place import NodeReport, PlaceError, PlaceKind
from gpufleet.pools.errors import PoolError
from gpufleet.trainings.admission.checks import TrainingRequestError
from gpufleet.wire.training_requests import TrainingCreate
from gpufleet.trainings.service import prepare
from gpufleet.users import runas

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


@dataclass(frozen=True)
class PoolSpec:
    name: str
    kind: str = "slurm"
    options: dict[str, Any] = field(default_factory=dict)  # the kind's own settings (Slurm: partition, account)
    gpus_per_node: int | None = None
    gpu_model: str | None = None
    gpu_memory: int | None = None
    checkpoint_root: str | None = None
    python: str | None = None


def kind_of(pool: Pool) -> PlaceKind:
    """The pool's kind of place; a pool of a kind this server no longer knows is refused, saying so."""
    try:
        return place_kind(pool.kind)
    except PlaceError as exc:
        raise PoolError(f"pool {pool.name!r}: {exc}", status=409) from None


def add(sess: Session, settings: StoreSettings, spec: PoolSpec) -> Pool:
    """Add a pool after checking its kind's settings and that its scheduler answers (Slurm: has the partition)."""
    try:
        kind = place_kind(spec.kind)
        options = kind.options(spec.options)
    except PlaceError as exc:
        raise PoolError(str(exc), field="kind") from None
    except ValueError as exc:
        raise PoolError(str(exc), field="options") from None
    if not _NAME.match(spec.name):
        raise PoolError(f"pool name {spec.name!r}: use 1-63 lowercase letters, digits, '-' or '_'", field="name")
    if sess.scalar(select(Pool.id).where(Pool.name == spec.name)) is not None:
        raise PoolError(f"a pool named {spec.name!r} exists already; remove it first or pick another name",
                        status=409, field="name")
    root = spec.checkpoint_root or str(Path(settings.data_dir) / "pools" / spec.name)
    if not os.path.isabs(root):
        raise PoolError(f"checkpoint root {root!r} must be an absolute path on the cluster's shared file system",
                        field="checkpoint_root")
    try:
        kind.check(options)
    except PlaceError as exc:
        raise PoolError(str(exc), status=409) from None
    except ValueError as exc:
        raise PoolError(str(exc), field="options") from None
    python = spec.python or sys.executable
    check_python(python)
    Path(root).mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    pool = Pool(name=spec.name, kind=kind.name, options=options, gpus_per_node=spec.gpus_per_node,
                gpu_model=spec.gpu_model, gpu_memory=spec.gpu_memory,
                checkpoint_root=root, python=python)
    sess.add(pool)
    sess.flush()
    return pool


# Who the check runs as when the server is root: an account with no rights of its own, as a member has.
UNPRIVILEGED = "nobody"


def check_python(python: str) -> None:
    """``python`` must run ``gpufleet.pools.node`` for a member: every job runs it as its owner's account.
    Run here as one with no rights of its own (root's interpreter under /root, mode 0700, fails this as
    it fails the job: ``execve(): Permission denied``); the nodes need it at the same path."""
    import pwd
    import subprocess

    as_whom: dict[str, Any] = {}
    who = "this account"
    if os.geteuid() == 0:
        try:
            entry = pwd.getpwnam(UNPRIVILEGED)
        except KeyError:
            entry = None
        if entry is not None:
            as_whom = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
            who = f"account {UNPRIVILEGED}"
    try:
        done = subprocess.run([python, "-c", "import gpufleet.pools.node"], capture_output=True, text=True,
                              timeout=60, cwd="/", env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                              check=False, **as_whom)
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1] if done.returncode else ""
    except OSError as exc:
        why = exc.strerror or str(exc)
    except subprocess.TimeoutExpired:
        why = "it did not finish within 60 s"
    if why:
        raise PoolError(f"--python {python} does not run gpufleet for a member (run as {who}: {why}); each job "
                        "runs it as its owner's account on the nodes: give a Python that every account can "
                        "execute, with gpufleet installed, at the same path on this host and the nodes "
                        "(e.g. a venv on the shared file system; docs/slurm.md)", field="python")


def listed(sess: Session) -> list[Pool]:
    return list(sess.scalars(select(Pool).order_by(Pool.name)))


def get(sess: Session, name: str) -> Pool:
    pool = sess.scalar(select(Pool).where(Pool.name == name))
    if pool is None:
        have = ", ".join(p.name for p in listed(sess)) or "none"
        raise PoolError(f"no pool named {name!r} (pools: {have}); an admin adds one with `gpufleet pools add`",
                        status=404, field="pool")
    return pool


@dataclass(frozen=True)
class DeclaredGpus:
    """A pool's GPUs as its admin declared them: what a fit lays a training out over."""

    name: str
    gpu_model: str | None
    gpu_memory: int
    gpus_per_node: int
    nodes: int = 1  # the pool's nodes, as its scheduler counts them (1 when it does not answer)
    node_states: tuple[NodeReport, ...] | None = None  # its word on them (None: it did not answer)


def declared_gpus(settings: StoreSettings, name: str) -> DeclaredGpus:
    """Pool ``name``'s GPU model, memory and GPUs per node; a 422 naming the flags it lacks."""
    from gpufleet.db.session import session_scope

    with session_scope(settings) as sess:
        p = get(sess, name)
        missing = [flag for flag, value in (("--gpu-memory", p.gpu_memory), ("--gpus-per-node", p.gpus_per_node))
                   if not value]
        if missing:
            raise PoolError(f"pool {name} does not declare its GPUs ({' and '.join(missing)}), so what fits there "
                            f"cannot be worked out; an admin adds it again with them: `gpufleet pools rm {name}`, "
                            f"then `gpufleet pools add {p.kind} {name} "
                            f"{' '.join(f + ' N' for f in missing)} ...`", field="pool")
        try:
            nodes = tuple(kind_of(p).nodes(p))
            states: tuple[NodeReport, ...] | None = nodes
            count = len({n.name for n in nodes}) or 1
        except PlaceError:
            states, count = None, 1  # the fit stays within one node, which every pool has
        return DeclaredGpus(p.name, p.gpu_model, int(p.gpu_memory or 0), int(p.gpus_per_node or 0), count, states)


@dataclass(frozen=True)
class PoolFit:
    """How ``count`` ranks of ``memory`` bytes each lay out on a pool: its answer to a recommendation."""

    gpus: DeclaredGpus
    nodes: int  # nodes the job takes
    gpus_per_node: int  # GPUs it takes on each
    reason: str


def fit_on(settings: StoreSettings, name: str, memory: int, count: int) -> PoolFit:
    """Whether pool ``name``'s declared GPUs hold ``count`` ranks of ``memory`` bytes each, and over how many
    nodes; a 422 saying why they never can. Slurm owns the queue, so when it starts is Slurm's answer."""
    from gpufleet.scheduling.fit import pool_placer

    d = declared_gpus(settings, name)
    placement = pool_placer(d.name, d.gpu_model, d.gpu_memory, d.gpus_per_node, d.nodes)(memory, count)
    if placement.fits == "never":
        raise PoolError(f"this request can never be placed on pool {name}: {placement.reason}", field="count")
    nodes = -(-count // d.gpus_per_node)
    return PoolFit(d, nodes, count // nodes, placement.reason)


def training_home(sess: Session, t: Training) -> Path | None:
    """A pool training's folder on the pool's shared file system (its checkpoints and outputs); None for a
    training of the team's hosts, or one whose pool was removed."""
    if not t.pool:
        return None
    pool = sess.scalar(select(Pool).where(Pool.name == t.pool))
    return None if pool is None else Path(pool.checkpoint_root) / str(t.id)


def get_root(settings: StoreSettings, name: str) -> str:
    """Pool ``name``'s checkpoint root."""
    from gpufleet.db.session import session_scope

    with session_scope(settings) as sess:
        return get(sess, name).checkpoint_root


def remove(sess: Session, name: str) -> None:
    pool = get(sess, name)
    busy = sess.scalar(select(Training.id).where(Training.pool == name,
                                                 Training.status.in_(["queued", "scheduled", "running"])))
    if busy is not None:
        raise PoolError(f"pool {name!r} still has trainings that are queued or running; cancel them first",
                        status=409)
    sess.delete(pool)


def nodes(pool: Pool) -> list[NodeReport]:
    try:
        return kind_of(pool).nodes(pool)
    except PlaceError as exc:
        raise PoolError(f"cannot read pool {pool.name!r}'s nodes: {exc}", status=503) from None


def member_account(sess: Session, settings: CodeSettings, owner: str) -> runas.RunAccount:
    """The member's own Unix account, which the cluster runs their jobs as; refused when there is none."""
    try:
        acct = runas.for_owner(sess, settings.run_account, owner)
    except runas.RunAsError as exc:
        raise PoolError(f"{exc}; a pool runs a training as its owner's own account", status=403) from None
    if acct.source not in ("mapped", "same-name") or acct.uid == 0:
        raise PoolError(
            f"user {owner!r} has no Unix account of their own on this host, and a pool submits as the "
            "member (never as the server or a shared account): create a login account with the user's name, or "
            f"map the user to their cluster account (`gpufleet users map {owner} --unix ACCOUNT`)", status=403)
    return acct


def check_request(sess: Session, settings: Settings, req: TrainingCreate, owner: str, *,
                  admin: bool = False) -> tuple[Pool, Training]:
    """Validate a training for pool ``req.pool`` as any (nothing is written): the pool and the row (not added)."""
    pool = get(sess, req.pool or "")
    if req.host or req.gpu_ids:
        raise PoolError("a training in a pool gets its nodes and GPUs from the pool's scheduler: give world_size, "
                        "not host or gpu_ids", field="host" if req.host else "gpu_ids")
    kind = kind_of(pool)
    if req.kind not in kind.works:
        raise PoolError(f"a {kind.label} pool runs {' and '.join(kind.works)} trainings, not {req.kind}s",
                        field="kind")
    member_account(sess, settings, owner)
    count = req.world_size or 1
    node_count, _per_node = layout(pool, count)
    if node_count > 1:
        _check_node_count(pool, node_count, count)
    try:
        row, config = prepare(sess, settings, req, owner, admin=admin, on_hosts=False)
    except TrainingRequestError as exc:
        raise PoolError(str(exc), field=exc.field) from None
    if pool.gpu_memory and row.memory_estimate and row.memory_estimate > pool.gpu_memory:
        raise PoolError(f"it needs {row.memory_estimate / 2**30:.1f} GiB per GPU, and pool {pool.name!r} declares "
                        f"GPUs of {pool.gpu_memory / 2**30:.1f} GiB", field="memory")
    if node_count > 1 and config is not None and config.parallel_mode != "equal":
        raise PoolError(f"parallel_mode {config.parallel_mode} runs on one node; a training over {node_count} nodes "
                        "takes equal shares (parallel_mode equal)", field="config.parallel_mode")
    return pool, row


def create_training(sess: Session, settings: Settings, req: TrainingCreate, owner: str, *,
                    admin: bool = False, why: str = "") -> Training:
    """A training (a recipe, or a member's script) for pool ``req.pool``: validated as any, queued for
    :mod:`.submit`. ``why``: how it came to the pool, for its first event. The caller commits."""
    pool, row = check_request(sess, settings, req, owner, admin=admin)
    row.pool = pool.name
    sess.add(row)
    sess.flush()
    record_first_event(sess, row, "status", status="queued", user=owner,
                       reason=f"submitted for {row.world_size} GPU(s) in {kind_of(pool).where(pool)}{why}")
    return row


def _check_node_count(pool: Pool, wanted: int, world_size: int) -> None:
    """Refuse a layout wider than the pool (when its scheduler answers; else its own submit says it)."""
    kind = kind_of(pool)
    try:
        have = len({n.name for n in kind.nodes(pool)})
    except PlaceError:
        return
    if have and wanted > have:
        raise PoolError(f"{world_size} GPUs need {wanted} nodes of pool {pool.name!r}, and its "
                        f"{kind.queue(pool) or 'scheduler'} has {have}", field="world_size")
