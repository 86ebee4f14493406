"""The kinds of work a worker runs (a recipe training, a member's script, an interactive session):
one class each, found by the row's ``kind`` in one registry.

What a kind *is* (its noun, whether it runs a member's code, where it may run) is described at the bottom
of the house, in :mod:`gpufleet.workkinds`, where every layer reads it; this is what the worker *does*
with one, registered under the same name.

What differs between kinds lives here and nowhere else on the worker's side:
which launcher module runs, what spec it reads, its environment, the folders
its sandbox gives it, whether it runs a member's own code, how it is asked to
stop, what is cleaned up after it and how an out-of-memory end is worded. The
supervisor, the watch and the isolation ask the kind; they never test
``kind == ...``. A new kind is one :func:`gpufleet.workkinds.describe` and one
new :class:`WorkKind` subclass passed to :func:`register`.
"""

from __future__ import annotations

import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from sqlalchemy import select

from gpufleet import memberfs, workkinds
from gpufleet.config import Settings, StoreSettings, WorkerSettings
from gpufleet.db.models import Training, TrainingEvent
from gpufleet.db.session import session_scope
from gpufleet.jobs import isolation, rendezvous, script_attempt, session_attempt, share_watch
from gpufleet.jobs.launch_config import launch_config
from gpufleet.jobs.launcher import launch
from gpufleet.trainings.environment import EnvPolicy
from gpufleet.jobs.logs import BoundedLog
from gpufleet.jobs.metrics_sink import MetricsSink
from gpufleet.lifecycle.transitions import get_training

RECIPE_LAUNCHER = "gpufleet.engine.launch"


def checkpoint_dir(settings: WorkerSettings, training_id: uuid.UUID) -> Path:
    return Path(settings.checkpoint_root) / str(training_id)  # type: ignore[arg-type]


def run_dir(settings: StoreSettings, training_id: uuid.UUID) -> Path:
    return settings.data_dir / "jobs" / str(training_id)


def training_roots(store_settings: StoreSettings, worker_settings: WorkerSettings) -> list[Path]:
    """The folders a training's own directories are made in: its run dir, checkpoints, a script's work dir
    and output dir."""
    some = uuid.UUID(int=0)
    return [run_dir(store_settings, some).parent, checkpoint_dir(worker_settings, some).parent,
            script_attempt.work_dir(store_settings, some).parent,
            script_attempt.output_dir(store_settings, some).parent]


@dataclass
class Plan:
    """What a launch needs, prepared before anything starts."""

    sandbox: isolation.Isolation
    spec_path: Path
    progress_path: Path
    gang: dict | None = None


@dataclass
class AttemptStart:
    """What every kind is given to prepare an attempt: the claimed row and the devices it holds."""

    settings: Settings
    training: Training
    worker_id: str
    devices: list[str]
    ranks_on_cpu: bool

    @property
    def run_dir(self) -> Path:
        return run_dir(self.settings, self.training.id)

    @property
    def checkpoint_dir(self) -> Path:
        return checkpoint_dir(self.settings, self.training.id)


class WorkKind:
    """One kind of work. Subclasses set the class attributes and override what they do differently."""

    name: ClassVar[str]
    launcher: ClassVar[str]  # the module the worker runs as ``python -m``
    # Why an out-of-memory end is never retried with a smaller micro-batch; None: the row's allow_rebalance says.
    oom_refusal: ClassVar[str | None] = None
    # Whether it computes from its start: an interactive session waits for its person, so a simulated GPU
    # it holds idles (low utilisation and power) until something runs on it.
    busy_from_start: ClassVar[bool] = True

    @property
    def runs_member_code(self) -> bool:
        """A member's own code: a worker that cannot switch accounts refuses it (gpufleet.jobs.isolation)."""
        return workkinds.of(self.name).runs_member_code

    def work_dir(self, settings: StoreSettings, training_id: uuid.UUID) -> Path | None:
        """A folder of its own besides the run and checkpoint folders (a script's unpacked code)."""
        return None

    def prepare(self, start: AttemptStart, sandbox: isolation.Isolation) -> Plan:
        """Write the launcher's spec (and whatever the launch needs); raises when the row cannot run."""
        raise NotImplementedError

    def launch_env(self, settings: Settings, t: Training, plan: Plan) -> dict[str, str] | None:
        """The launcher's environment; None: the trainings' allow-list (gpufleet.trainings.environment)."""
        return None

    def before_launch(self, sink: MetricsSink, ckpt_dir: Path, earlier: list[Path]) -> None:
        """Bring the stored curve in line with where this attempt starts."""

    def start(self, settings: Settings, t: Training, plan: Plan, sink: MetricsSink, earlier: list[Path],
              logf: BoundedLog) -> tuple[subprocess.Popen, int]:
        self.before_launch(sink, checkpoint_dir(settings, t.id), earlier)
        return launch(plan.spec_path, logf, t.id, self.launcher, self.launch_env(settings, t, plan), plan.sandbox,
                      policy=EnvPolicy.of(settings))

    def ask_to_stop(self, progress_path: Path) -> None:
        """What comes before the SIGTERM the launcher's group gets when the attempt is asked to stop."""

    def ended(self, settings: StoreSettings, training_id: uuid.UUID) -> None:
        """Clean up after the training's last attempt (not after one that is retried)."""


class RecipeKind(WorkKind):
    """A training of a recipe shipped with gpufleet: the server's own code, resumed from its checkpoints."""

    name = "recipe"
    launcher = RECIPE_LAUNCHER

    def prepare(self, start: AttemptStart, sandbox: isolation.Isolation) -> Plan:
        gang = rendezvous.leader_prepare(start.settings, start.training, start.worker_id)
        spec_path, progress_path = _recipe_spec(start, gang)
        return Plan(sandbox, spec_path, progress_path, gang)

    def launch_env(self, settings: Settings, t: Training, plan: Plan) -> dict[str, str] | None:
        return rendezvous.launch_env(settings, settings, t.id) if plan.gang else None

    def before_launch(self, sink: MetricsSink, ckpt_dir: Path, earlier: list[Path]) -> None:
        sink.trim_after_resume(ckpt_dir, earlier)


class ScriptKind(WorkKind):
    """A member's own script, unpacked into a work folder and run by the script launcher."""

    name = "script"
    launcher = script_attempt.MODULE
    oom_refusal = ("not retried: an OOM rebalance does not apply to scripts (their batch size is set by their own "
                   "code); lower it or declare more memory")

    def work_dir(self, settings: StoreSettings, training_id: uuid.UUID) -> Path | None:
        return script_attempt.work_dir(settings, training_id)

    def prepare(self, start: AttemptStart, sandbox: isolation.Isolation) -> Plan:
        settings, t = start.settings, start.training
        sandbox.write.append(script_attempt.output_dir(settings, t.id))  # GPUFLEET_OUTPUT_DIR, the account's too
        script_attempt.open_env_cache(settings, settings, t, sandbox)
        spec_path, progress_path = script_attempt.write_spec(settings, settings, t, start.devices, start.ranks_on_cpu,
                                                             start.run_dir, start.checkpoint_dir,
                                                             settings.stop_grace_s)
        return Plan(sandbox, spec_path, progress_path)

    def launch_env(self, settings: Settings, t: Training, plan: Plan) -> dict[str, str] | None:
        return script_attempt.launch_env(settings, t.id)

    def before_launch(self, sink: MetricsSink, ckpt_dir: Path, earlier: list[Path]) -> None:
        sink.fill_from_earlier(earlier)  # its checkpoints are its own files: the curve keeps what was reported

    def ask_to_stop(self, progress_path: Path) -> None:
        script_attempt.mark_stop(progress_path)  # the marker first, then the signal the ranks get

    def ended(self, settings: StoreSettings, training_id: uuid.UUID) -> None:
        script_attempt.cleanup(settings, training_id)


class SessionKind(WorkKind):
    """An interactive session (a notebook or a shell) holding GPUs for its owner."""

    name = "session"
    launcher = session_attempt.MODULE
    busy_from_start = False

    def prepare(self, start: AttemptStart, sandbox: isolation.Isolation) -> Plan:
        return Plan(sandbox, *session_attempt.write_spec(start.settings, start.settings, start.settings,
                                                         start.training, start.devices, start.ranks_on_cpu,
                                                         start.run_dir, sandbox))

    def launch_env(self, settings: Settings, t: Training, plan: Plan) -> dict[str, str] | None:
        return session_attempt.launch_env(settings, t.id)


_KINDS: dict[str, WorkKind] = {}


def register(kind: WorkKind) -> WorkKind:
    """Make ``kind`` the one that runs rows of ``kind.name``, a described kind (gpufleet.workkinds)."""
    workkinds.of(kind.name)
    _KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    _KINDS.pop(name, None)


def work_kind(name: str) -> WorkKind:
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(f"no kind of work is named {name!r}; known: {', '.join(sorted(_KINDS))}") from None


def registered() -> list[str]:
    return sorted(_KINDS)


for _kind in (RecipeKind(), ScriptKind(), SessionKind()):
    register(_kind)


def sandbox_for(settings: Settings, training_id: uuid.UUID) -> isolation.Isolation:
    """The isolation of a training's launcher, planned for its owner and its kind, read from its row."""
    with session_scope(settings) as sess:
        t = get_training(sess, training_id)
        if t is None:
            raise isolation.IsolationRefused(f"training {training_id} does not exist")
        owner, kind = t.owner, work_kind(t.kind)
    return isolation.for_owner(settings, training_id, owner, kind.runs_member_code, run_dir(settings, training_id),
                               checkpoint_dir(settings, training_id), kind.work_dir(settings, training_id))


def retries_of(settings: StoreSettings, tid: uuid.UUID, kind: str) -> int:
    with session_scope(settings) as sess:
        rows = sess.execute(
            select(TrainingEvent.data).where(TrainingEvent.training_id == tid, TrainingEvent.kind == "retry")
        ).scalars()
        return sum(1 for d in rows if d and d.get("retry_kind") == kind)


def _recipe_spec(start: AttemptStart, gang: dict | None) -> tuple[Path, Path]:
    from gpufleet.engine.spec import LaunchSpec

    settings, t = start.settings, start.training
    rdir = start.run_dir
    rdir.mkdir(parents=True, exist_ok=True)
    progress = rdir / f"progress-{t.attempt}.jsonl"
    memberfs.remove(progress)
    timeouts = retries_of(settings, t.id, "timeout")
    spec = LaunchSpec(
        recipe=t.recipe,
        config=launch_config(settings, t),  # the row's config, with first shares for proportional
        devices=start.devices,
        checkpoint_dir=str(start.checkpoint_dir),
        progress_file=str(progress),
        data_root=str(settings.data_root),
        resume=True,
        # Each collective-timeout retry doubles the timeout (the seed's table).
        collective_timeout_s=settings.collective_timeout_s * 2**timeouts,
        training_id=str(t.id),
        ranks_on_cpu=start.ranks_on_cpu,
        # A cancel kills the group after CANCEL_GRACE_S anyway; a stopping
        # worker gives its ranks the whole grace to checkpoint.
        stop_grace_s=settings.stop_grace_s,
        attempt=t.attempt,
        gang=gang,
        # A sweep's trial waits at the rungs it has not yet been let past (engine/rungwait.py).
        rung_steps=[s for s in t.rung_steps or [] if s > (t.passed_rung_step or 0)] or None,
        share_mb=share_watch.share_mb(t),  # on a share, the ranks cap PyTorch's allocator at it
    )
    path = rdir / f"spec-{t.attempt}.json"
    spec.write(path)
    return path, progress
