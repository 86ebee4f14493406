"""The sweep driver: a step of the server's scheduler loop that moves every running sweep on.

It keeps no state of its own: each round reads a sweep, its trials and their
trainings from the database, and Optuna's study from its storage, then

1. settles trials whose training ended (a metric for Optuna, a retry alone
   after running out of memory beside others, or a failure),
2. early stopping (:mod:`.rungs`): asynchronous (the default), judges each
   running trial's value as soon as it reports a rung's step, and stops it
   there (its GPU goes to the next trial in this same round) or lets it go on
   in the same process; synchronous (``asha.sync``), decides the trials
   waiting at a rung once no other can still reach it, and resumes the
   promoted ones from their checkpoints,
3. starts trials while fewer than ``parallel`` are queued or running
   (adopting any that Optuna handed out before a crash), and
4. ends the sweep once every trial has ended, naming the best.

Every step is safe to repeat, so a server that stops anywhere in a round goes
on from the database when it starts again. It runs where the scheduler loop
leads, so one process drives a sweep at a time, and each sweep's round is one
transaction holding its row.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from optuna.trial import TrialState
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.config import Settings
from gpufleet.db.session import session_scope, write_session
from gpufleet.db.sweeps import Sweep, SweepTrial
from gpufleet.db.types import utcnow
from gpufleet.pools import placement
from gpufleet.sweeps import rungs, study as studies
from gpufleet.sweeps.service import stop_trials
from gpufleet.wire.sweep_requests import SweepCreate
from gpufleet.sweeps.trials import full_steps, metric_at, trial_request
from gpufleet.engine import exitcodes
from gpufleet.trainings import resume, service as trainings
from gpufleet.lifecycle.transitions import record_event, transition
from gpufleet.lifecycle.models import Training
from gpufleet.wire.training_requests import TrainingResume

log = logging.getLogger(__name__)

INTERVAL_S = 1.0
ACTIVE = ("queued", "scheduled", "running", "preempted")
ENDED = ("complete", "pruned", "failed", "cancelled")
_last = 0.0


def advance_all(settings: Settings, *, force: bool = False) -> int:
    """Move every running sweep on (at most once a second unless ``force``). Returns how many trials started."""
    global _last
    if not force and time.monotonic() - _last < INTERVAL_S:
        return 0
    _last = time.monotonic()
    with session_scope(settings) as sess:
        ids = list(sess.scalars(select(Sweep.id).where(Sweep.status == "running").order_by(Sweep.created_at)))
        stopping = list(sess.scalars(select(Sweep.id).join(Training, Training.sweep_id == Sweep.id).where(
            Sweep.status == "cancelled", Training.status.in_(ACTIVE), Training.cancel_requested.is_(False)).distinct()))
    for sid in stopping:  # a cancel the server stopped in the middle of
        stop_trials(settings, sid, "gpufleet")
    started = 0
    for sid in ids:
        try:
            started += advance(settings, sid)
        except Exception:  # one broken sweep must not stop the others or the scheduler
            log.warning("sweep %s: this round failed; it is tried again next round", sid, exc_info=True)
    return started


class Round:
    """One round of one sweep, in one transaction."""

    def __init__(self, settings: Settings, sess: Session, sweep: Sweep):
        self.settings, self.sess, self.sweep = settings, sess, sweep
        self.spec = SweepCreate.model_validate(sweep.spec)
        self.study = studies.load(settings, sweep.study_name, self.spec)
        self.trials = list(sess.scalars(select(SweepTrial).where(SweepTrial.sweep_id == sweep.id)
                                        .order_by(SweepTrial.number)))
        ids = [t.training_id for t in self.trials if t.training_id is not None]
        self.rows = {r.id: r for r in sess.scalars(select(Training).where(Training.id.in_(ids)))} if ids else {}
        self.started = 0

    # 1. settle ---------------------------------------------------------------

    def settle(self, trial: SweepTrial) -> None:
        t = self.rows.get(trial.training_id) if trial.training_id else None
        if t is None:
            return self.end(trial, "failed", "its training no longer exists")
        if t.status in ACTIVE:
            return self.judge(trial, t) if self.asynchronous and t.status == "running" else None
        if t.status == "succeeded":
            return self.reached(trial, t)
        if t.status == "failed" and t.exit_code == exitcodes.OUT_OF_MEMORY and not trial.oom_retried:
            return self.retry_alone(trial, t)
        return self.end(trial, "cancelled" if t.status == "cancelled" else "failed", t.status_reason)

    def reached(self, trial: SweepTrial, t: Training) -> None:
        got = metric_at(self.sess, t.id, self.spec.metric)
        if got is None:
            return self.end(trial, "failed", f"its training reported no {self.spec.metric!r}")
        trial.metric_step, trial.metric = got
        if self.asynchronous:
            self.judge(trial, t, finished=True)  # its rungs' values, for the trials that get there later
        elif trial.rung is not None:
            trial.state, trial.metric_step = "rung", t.step
            trial.reason = f"at rung {trial.rung} (step {t.step}); waits for the other trials to get there"
            return None
        studies.report(self.study, trial.number, t.step, trial.metric)
        return self.end(trial, "complete", f"finished at step {t.step}")

    def retry_alone(self, trial: SweepTrial, t: Training) -> None:
        values: dict[str, Any] = {"gpu_ids": None, "host_id": None} if t.auto_select else {}
        why = ("ran out of memory beside other trials: retried alone on a GPU (not counted against the sweep)")
        if transition(self.sess, t.id, ["failed"], "queued", reason=why, user=self.sweep.owner,
                      data={"sweep": str(self.sweep.id), "oom_retry": True}, exclusive=True, restarts=0,
                      exit_code=None, finished_at=None, cancel_requested=False, not_before=None, **values):
            trial.oom_retried, trial.reason = True, why

    def end(self, trial: SweepTrial, state: str, reason: str | None) -> None:
        optuna_state = {"complete": TrialState.COMPLETE, "pruned": TrialState.PRUNED}.get(state, TrialState.FAIL)
        studies.tell(self.study, trial.number, optuna_state, trial.metric)
        trial.state, trial.reason = state, reason

    # 2. rungs ----------------------------------------------------------------

    @property
    def asynchronous(self) -> bool:
        return self.spec.asha is not None and not self.spec.asha.sync

    def judge(self, trial: SweepTrial, t: Training, *, finished: bool = False) -> None:
        """Asynchronous halving: put each rung this trial's training has passed to the pruner, once.

        Its value at a rung is the newest it reported at or before the rung's step. Promoted, it goes on
        in the same process; pruned, its training is stopped now. One that already ``finished`` only
        records its values (later trials compete against them); nothing is left to stop.
        """
        asha = self.spec.asha
        assert asha is not None
        steps = rungs.rung_steps(asha.min_steps, asha.reduction_factor, full_steps(self.spec, trial.params))
        newest = metric_at(self.sess, t.id, self.spec.metric)
        while trial.rung is not None and newest is not None and newest[0] >= steps[trial.rung]:
            k, step = trial.rung, steps[trial.rung]
            _, value = metric_at(self.sess, t.id, self.spec.metric, step) or newest
            [(_, pruned)] = rungs.decide(self.study, self.study.pruner, {trial.number: (step, value)}, k).items()
            if pruned and not finished:  # it stays at the rung that stopped it (the reason names the same one)
                trial.metric_step, trial.metric = step, value
                return self.prune(trial, k)
            trial.rung = k + 1 if k + 1 < len(steps) else None
            if finished:
                continue
            trial.metric_step, trial.metric = step, value
            t.passed_rung_step = step  # its ranks, waiting at the rung's step, go on (jobs/rung_gate.py)
            trial.reason = f"promoted at rung {k} (step {step}, {self.spec.metric} {value:.4g}): " \
                           f"{_among(rungs.reached(self.study, k), asha.reduction_factor)}; goes on as it runs"
            record_event(self.sess, t.id, "info", reason=trial.reason, user=self.sweep.owner,
                         data={"sweep": str(self.sweep.id), "promoted_at_rung": k})
        return None

    def decide_rungs(self) -> None:
        asha = self.spec.asha
        if asha is None or not asha.sync or len(self.trials) < self.sweep.total_trials:
            return  # a trial not yet started may still reach the first rung
        waiting = sorted({t.rung for t in self.trials if t.state == "rung" and t.rung is not None})
        for k in waiting:
            if any(t.state == "running" and t.rung is not None and t.rung <= k for t in self.trials):
                return  # someone can still reach rung k (or a lower one)
            here = {t.number: t for t in self.trials if t.state == "rung" and t.rung == k}
            verdict = rungs.decide(self.study, self.study.pruner,
                                   {n: (t.metric_step or 0, t.metric or 0.0) for n, t in here.items()}, k)
            for n, pruned in verdict.items():
                (self.prune if pruned else self.promote)(here[n], k)

    def prune(self, trial: SweepTrial, k: int) -> None:
        why = (f"stopped at rung {k} (step {trial.metric_step}): its {self.spec.metric} {trial.metric:.4g} was not "
               f"in the best 1/{self.spec.asha.reduction_factor} there")  # type: ignore[union-attr]
        why += "; its GPU goes to the next trial" if self.asynchronous else "; its checkpoint stays"
        if trial.training_id is not None:
            record_event(self.sess, trial.training_id, "info", reason=why, user=self.sweep.owner,
                         data={"sweep": str(self.sweep.id), "pruned_at_rung": k})
            if self.asynchronous:  # it still runs (waiting at the rung): its supervisor ends it as pruned
                trainings.cancel(self.sess, trial.training_id, self.sweep.owner, end_as="pruned")
            elif (t := self.rows.get(trial.training_id)) is not None:  # it ended at the rung: that end was this
                transition(self.sess, t.id, ["succeeded"], "pruned", reason=why, user=self.sweep.owner,
                           finished_at=t.finished_at)
        self.end(trial, "pruned", why)

    def promote(self, trial: SweepTrial, k: int) -> None:
        asha = self.spec.asha
        assert asha is not None and trial.training_id is not None
        full = full_steps(self.spec, trial.params)
        nxt = rungs.next_rung(k, asha.min_steps, asha.reduction_factor, full)
        steps = rungs.target_steps(nxt, asha.min_steps, asha.reduction_factor, full)
        resume.resume(self.sess, trial.training_id, TrainingResume(config={"max_steps": steps}), self.sweep.owner)
        trial.state, trial.rung = "running", nxt
        trial.reason = f"promoted at rung {k}: resumes from its checkpoint to step {steps}"

    # 3. start ----------------------------------------------------------------

    def start_trials(self) -> None:
        known = {t.number for t in self.trials}
        active = sum(t.state == "running" for t in self.trials)
        orphans = [(n, p) for n, p in sorted(studies.open_trials(self.study).items()) if n not in known]
        while active < self.spec.parallel and len(self.trials) < self.sweep.total_trials:
            number, params = orphans.pop(0) if orphans else studies.ask(self.study, self.spec)
            self.trials.append(self.start_trial(number, params))
            active += 1

    def start_trial(self, number: int, params: dict[str, Any]) -> SweepTrial:
        trial = SweepTrial(id=uuid.uuid4(), sweep_id=self.sweep.id, number=number, params=params, state="running")
        asha, max_steps, waits_at = self.spec.asha, None, None
        if asha is not None:
            full = full_steps(self.spec, params)
            trial.rung = 0 if rungs.rung_steps(asha.min_steps, asha.reduction_factor, full) else None
            if asha.sync:  # it stops at its rung; asynchronous, it runs its whole length unless pruned
                max_steps = rungs.target_steps(trial.rung, asha.min_steps, asha.reduction_factor, full)
            elif self.spec.recipe is not None:
                # Its ranks wait at each rung's step for the verdict, so a pruned trial runs no step past it.
                waits_at = rungs.rung_steps(asha.min_steps, asha.reduction_factor, full) or None
        req = trial_request(self.spec, f"{self.sweep.name}-{number}", params, max_steps=max_steps)
        place = placement.where(req)
        if not place.waits_at_rungs:  # a pool's job, say: a stop at a rung cancels it
            waits_at = None
        try:
            with self.sess.begin_nested():
                # Scripts hold their GPUs exclusively (gpufleet's rule for a user's code); recipes share them.
                row = place.create(self.sess, self.settings, req, self.sweep.owner, admin=self.sweep.admin,
                                   exclusive=self.spec.script is not None,
                                   selection={"strategy": "load_balance", "sweep": str(self.sweep.id)})
                row.sweep_id, row.rung_steps, trial.training_id = self.sweep.id, waits_at, row.id
        except Exception as exc:  # noqa: BLE001 - a trial that cannot start fails alone, with the reason
            trial.state, trial.reason = "failed", f"could not start: {exc}"
            studies.tell(self.study, number, TrialState.FAIL)
        self.sess.add(trial)
        self.started += 1
        return trial

    # 4. end ------------------------------------------------------------------

    def finish(self) -> None:
        done = [t for t in self.trials if t.state == "complete" and t.metric is not None]
        if done:
            pick = min if self.spec.direction == "minimize" else max
            self.sweep.best_trial = pick(done, key=lambda t: t.metric).number  # type: ignore[arg-type,return-value]
        if len(self.trials) < self.sweep.total_trials or any(t.state not in ENDED for t in self.trials):
            return
        self.sweep.finished_at = utcnow()
        if done:
            best = next(t for t in done if t.number == self.sweep.best_trial)
            self.sweep.status = "succeeded"
            self.sweep.status_reason = f"best: trial {best.number} ({self.spec.metric} {best.metric:.4g})"
        else:
            self.sweep.status, self.sweep.status_reason = "failed", "no trial completed"


def advance(settings: Settings, sweep_id: uuid.UUID) -> int:
    """One round of one sweep; returns how many trials it started."""
    with write_session(settings) as sess:
        sweep = sess.execute(select(Sweep).where(Sweep.id == sweep_id).with_for_update()).scalar_one_or_none()
        if sweep is None or sweep.status != "running":
            return 0
        r = Round(settings, sess, sweep)
        for trial in r.trials:
            if trial.state == "running":
                r.settle(trial)
        r.decide_rungs()
        r.start_trials()
        r.finish()
        return r.started


def _among(seen: int, reduction_factor: int) -> str:
    """Why an asynchronous promotion went the way it did: it is judged among the trials there so far."""
    if seen <= 1:
        return "the first trial to get there, so none to compare with yet (later ones are held to it)"
    return f"in the best 1/{reduction_factor} of the {seen} trials that had got there so far"

