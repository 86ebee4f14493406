"""A queued pool training becomes one job of the pool's scheduler, submitted as its owner.

Each attempt gets a folder under the pool's checkpoint root (a path both this
host and the nodes see), owned by the member's account: the launch spec, the
job's own files (Slurm: its batch script), the job's output, the ranks'
progress lines and the checkpoints. The job runs :mod:`gpufleet.pools.node` on
each of its nodes, which takes the GPUs the scheduler granted and starts
gpufleet's own launcher, as on a team host. How the job is sent is the pool's
kind's (:meth:`gpufleet.pools.place.PlaceKind.submit`).

The pool is a place, not a kind of work: a recipe and a member's script both
run there. What differs between them on a pool (the spec their node reads, what
comes before the stop signal) is one :class:`OnPool` per kind, found by the
row's ``kind``; what a pool does with any job (the layout over nodes, the
folder, the submit) is written once.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from sqlalchemy import select, update

from gpufleet import memberfs
from gpufleet.config import CodeSettings, Settings, StoreSettings
from gpufleet.db.pools import Pool, PoolJob
from gpufleet.db.session import session_scope, write_session
from gpufleet.lifecycle import places
from gpufleet.lifecycle.models import Training
from gpufleet.lifecycle.transitions import record_event, transition
from gpufleet.pools.attempt import Attempt, layout, progress_file
from gpufleet.pools.place import PlaceError
from gpufleet.pools.errors import PoolError
from gpufleet.pools.service import kind_of, member_account
from gpufleet.scheduling.quotas import over_quota
from gpufleet.engine.spec import LaunchSpec
from gpufleet.trainings import code, script
from gpufleet.users.runas import RunAccount

log = logging.getLogger(__name__)


def _own(root: memberfs.Dir, rel: str, acct: RunAccount, mode: int = 0o755) -> None:
    """A folder of the member's below the pool's root, made and handed over on its own descriptor: a link or
    a file she put in its place is refused, never followed (root would hand its target to the member)."""
    try:
        root.make_dir(rel, acct.uid, acct.gid, mode)
    except OSError as exc:
        raise PoolError(f"{rel} under {root.path} is not a folder (a link or a file is in its place: "
                        f"{exc.strerror}); remove it and resubmit") from None


def _unpack(store_settings: StoreSettings, code_settings: CodeSettings, a: Attempt, root: memberfs.Dir,
            work: str) -> None:
    """The code as uploaded, as ``work``: unpacked where only this host's root writes, given to the member,
    then moved into the member's folder (where nothing is written through a name the member controls)."""
    root.make_dir(".staging", mode=0o700)
    fresh = f".staging/{a.training.id}-{a.number}"
    root.remove(fresh)
    try:
        with session_scope(store_settings) as sess:
            # .staging is root's alone (0700): the path is resolved where no member can put a link.
            code.prepare_workdir(store_settings, code_settings, sess, a.training.code_hash or "", root.path / fresh)
        root.give_tree(fresh, a.account.uid, a.account.gid)
        root.remove(work)  # the last attempt's copy: every attempt starts from the code as uploaded
        root.move(fresh, work)
    finally:
        root.remove(fresh)


class OnPool:
    """What one kind of work runs on a pool's node. Subclasses write the spec their node start reads."""

    name: ClassVar[str]

    def write_spec(self, a: Attempt, root: memberfs.Dir, path: Path) -> None:
        raise NotImplementedError

    def ask_to_stop(self, pool: Pool, training_id: uuid.UUID, attempt: int) -> None:
        """What comes before the TERM the pool sends the job's ranks when the training is asked to stop."""


class RecipeOnPool(OnPool):
    """A recipe: gpufleet's launcher, spread over the job's nodes when one does not hold it."""

    name = "recipe"

    def write_spec(self, a: Attempt, root: memberfs.Dir, path: Path) -> None:
        settings, t = a.settings, a.training
        node_count, per_node = layout(a.pool, t.world_size)
        gang = None
        if node_count > 1:
            # Filled in on each node from the job's environment (gpufleet.pools.node): this task's first rank,
            # the batch host's address, a port from the job's id, and which task opens the store.
            gang = {"world_size": t.world_size, "first_rank": 0, "master_addr": "", "master_port": 0,
                    "store_master": False, "rendezvous_timeout_s": settings.rendezvous_timeout_s}
        spec = LaunchSpec(
            recipe=t.recipe, config=dict(t.config), devices=[f"cuda:{i}" for i in range(per_node)],
            checkpoint_dir=str(a.home / "checkpoints"), progress_file=str(a.progress),
            data_root=str(settings.data_root), resume=True, collective_timeout_s=settings.collective_timeout_s,
            training_id=str(t.id), stop_grace_s=settings.stop_grace_s, attempt=a.number, gang=gang)
        root.write_new(a.rel(path), spec.to_json())


class ScriptOnPool(OnPool):
    """A member's own script: its code unpacked into the training's folder, its environment built on the node
    (into a cache of the member's under the pool's root), run by the script launcher as on a team host."""

    name = "script"

    def write_spec(self, a: Attempt, root: memberfs.Dir, path: Path) -> None:
        settings, t = a.settings, a.training
        if not t.code_hash or not t.argv:
            raise PoolError("the training has no code or argv")
        work, output = a.home / "work", a.home / "output"
        _unpack(settings, settings, a, root, a.rel(work))
        _own(root, a.rel(output), a.account)
        cache = None
        if (t.env or {}).get(script.REQUIREMENTS_KEY):
            root.make_dir(".envs", mode=0o755)
            cache = Path(a.pool.checkpoint_root) / ".envs" / (t.owner or "local")  # the nodes see it; hers
            _own(root, a.rel(cache), a.account)
        node_count, per_node = layout(a.pool, t.world_size)
        spec = script.attempt_spec(
            settings, settings, t, workdir=work, progress=a.progress, checkpoint_dir=a.home / "checkpoints",
            output_dir=output, gpu_indexes=list(range(per_node)), backend="cuda", ranks_on_cpu=False,
            stop_grace_s=settings.stop_grace_s, env_cache=cache, files_root=Path(a.pool.checkpoint_root),
            python=a.pool.python)  # the nodes' interpreter (`pools add --python`), never this host's
        # Over several nodes each node's task takes its share and the rendezvous from the job (pools/node.py).
        root.write_new(a.rel(path), replace(spec, world_size=t.world_size, nnodes=node_count).to_json())

    def ask_to_stop(self, pool: Pool, training_id: uuid.UUID, attempt: int) -> None:
        with memberfs.Dir.root(pool.checkpoint_root) as root:  # the script's report() sees it, as on a team host
            root.mark(f"{training_id}/{progress_file(pool, training_id, attempt).name}.stop")


ON_POOL: dict[str, OnPool] = {k.name: k for k in (RecipeOnPool(), ScriptOnPool())}


def on_pool(kind: str) -> OnPool:
    try:
        return ON_POOL[kind]
    except KeyError:
        raise PoolError(f"a pool runs {' and '.join(sorted(ON_POOL))} trainings, not {kind}s",
                        field="kind") from None


def write_attempt(settings: Settings, t: Training, pool: Pool, acct: RunAccount) -> tuple[Attempt, Path]:
    """The next attempt's folder and spec, the member's; the attempt and its spec. Every name below the pool's
    root is reached through no link (gpufleet.memberfs)."""
    attempt = Attempt(settings, pool, t, t.attempt + 1, acct)
    home, tid = attempt.home, str(t.id)
    with memberfs.Dir.root(pool.checkpoint_root) as root:
        _own(root, tid, acct)
        _own(root, f"{tid}/checkpoints", acct)
        spec_path = home / f"spec-{attempt.number}.json"
        on_pool(t.kind).write_spec(attempt, root, spec_path)
        root.give(attempt.rel(spec_path), acct.uid, acct.gid, 0o644)
    return attempt, spec_path


def submit_one(settings: Settings, t: Training, pool: Pool, acct: RunAccount) -> PoolJob:
    """Write the attempt's files and send them to the pool's scheduler as the member; the job's row (not added)."""
    kind = kind_of(pool)
    attempt, spec = write_attempt(settings, t, pool, acct)
    output = attempt.home / kind.output_name(attempt.number)
    job_id = kind.submit(attempt, t.kind, spec, output)
    return PoolJob(training_id=t.id, pool_id=pool.id, attempt=attempt.number, job_id=job_id, account=acct.name,
                   state="pending", output=str(output), output_offset=0)


def lease_owner(pool: Pool, job_id: str) -> str:
    """Who holds a pool training's lease while its job lives: the pool's kind and the job (``slurm:42``)."""
    return f"{pool.kind}:{job_id}"


def waiting(settings: StoreSettings) -> list[uuid.UUID]:
    """Queued pool trainings whose current attempt has no live job."""
    with session_scope(settings) as sess:
        live = select(PoolJob.id).where(PoolJob.training_id == Training.id, PoolJob.attempt == Training.attempt,
                                        PoolJob.ended_at.is_(None))
        return list(sess.scalars(select(Training.id).where(
            places.elsewhere(), Training.status == "queued", ~live.exists())
            .order_by(Training.priority.desc(), Training.created_at)))


def submit_waiting(settings: Settings) -> int:
    """Submit every waiting pool training; returns how many were sent."""
    sent = 0
    for tid in waiting(settings):
        with write_session(settings) as sess:
            t = sess.scalar(select(Training).where(Training.id == tid, Training.status == "queued")
                            .with_for_update())
            if t is None or sess.scalar(select(PoolJob.id).where(
                    PoolJob.training_id == t.id, PoolJob.attempt == t.attempt, PoolJob.ended_at.is_(None))):
                continue  # cancelled meanwhile, or another API process sent it
            if (why := over_quota(sess, t, settings.booking_quota_counts)) is not None:
                # Past its owner's quota: it stays queued, saying why, and is sent once GPUs are given back.
                # (No borrowing: gpufleet cannot take back what a pool runs.)
                if t.wait_reason != why:
                    t.wait_reason = why
                continue
            pool = sess.scalar(select(Pool).where(Pool.name == t.pool))
            try:
                if pool is None:
                    raise PoolError(f"pool {t.pool!r} was removed")
                job = submit_one(settings, t, pool, member_account(sess, settings, t.owner))
            except (PoolError, PlaceError, OSError) as exc:
                transition(sess, t.id, ["queued"], "failed", reason=f"could not submit to pool {t.pool}: {exc}",
                           kind="error")
                continue
            label = kind_of(pool).label
            sess.add(job)
            sess.execute(update(Training).where(Training.id == t.id)
                         .values(attempt=job.attempt, lease_owner=lease_owner(pool, job.job_id),
                                 wait_reason=f"submitted to {label} as job {job.job_id} (account {job.account})")
                         .execution_options(synchronize_session=False))
            record_event(sess, t.id, "info", status="queued",
                         reason=f"attempt {job.attempt}: submitted to {label} pool {pool.name} as job {job.job_id}, "
                                f"as Unix account {job.account}",
                         data={"pool": pool.name, "job_id": job.job_id, "account": job.account})
            sent += 1
    return sent
