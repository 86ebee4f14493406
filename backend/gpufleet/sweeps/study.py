"""Optuna's side of a sweep: its study in gpufleet's database, the sampler and the pruner.

Optuna keeps its tables (``studies``, ``trials``, ...) and its own Alembic
version table, which would collide with gpufleet's ``alembic_version`` in one
schema. So on PostgreSQL the study lives in the same database, in the schema
``optuna``; on the embedded SQLite default in ``<data_dir>/optuna.db`` beside
``gpufleet.db``. Every call here is idempotent, so a driver that dies between
Optuna's commit and gpufleet's simply does the step again.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState

from gpufleet.config import StoreSettings
from gpufleet.wire.sweep_requests import SpaceRange, SweepCreate

optuna.logging.set_verbosity(optuna.logging.WARNING)
log = logging.getLogger(__name__)

SCHEMA = "optuna"
_STORAGES: dict[str, optuna.storages.RDBStorage] = {}
_LOCK = threading.Lock()


def storage_for(settings: StoreSettings) -> optuna.storages.RDBStorage:
    """The process's Optuna storage for this database (tables made on first use)."""
    url = settings.effective_database_url
    with _LOCK:
        if url not in _STORAGES:
            _STORAGES[url] = _open(settings)
        return _STORAGES[url]


def _open(settings: StoreSettings) -> optuna.storages.RDBStorage:
    if settings.is_sqlite:
        return optuna.storages.RDBStorage(f"sqlite:///{settings.data_dir / 'optuna.db'}",
                                          engine_kwargs={"connect_args": {"timeout": 30}})
    import sqlalchemy

    url = settings.effective_database_url
    boot = sqlalchemy.create_engine(url)
    with boot.begin() as conn:
        conn.execute(sqlalchemy.text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
    boot.dispose()
    return optuna.storages.RDBStorage(url, engine_kwargs={
        "connect_args": {"options": f"-csearch_path={SCHEMA}"}, "pool_pre_ping": True})


def sampler_for(spec: SweepCreate) -> optuna.samplers.BaseSampler:
    if spec.method == "grid":
        values = {n: [encode(v) for v in vs] for n, vs in spec.grid_values().items()}
        return optuna.samplers.GridSampler(values, seed=spec.seed)
    if spec.method == "tpe":
        return optuna.samplers.TPESampler(seed=spec.seed)
    return optuna.samplers.RandomSampler(seed=spec.seed)


def pruner_for(spec: SweepCreate) -> optuna.pruners.BasePruner:
    if spec.asha is None:
        return optuna.pruners.NopPruner()
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=spec.asha.min_steps,
                                                  reduction_factor=spec.asha.reduction_factor)


def create(settings: StoreSettings, name: str, spec: SweepCreate) -> None:
    optuna.create_study(storage=storage_for(settings), study_name=name, direction=spec.direction,
                        sampler=sampler_for(spec), pruner=pruner_for(spec), load_if_exists=True)


def load(settings: StoreSettings, name: str, spec: SweepCreate) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=storage_for(settings), sampler=sampler_for(spec),
                             pruner=pruner_for(spec))


def distributions(spec: SweepCreate) -> dict[str, BaseDistribution]:
    if spec.method == "grid":
        return {n: CategoricalDistribution([encode(v) for v in vs]) for n, vs in spec.grid_values().items()}
    out: dict[str, BaseDistribution] = {}
    for n, e in spec.space.items():
        if not isinstance(e, SpaceRange):
            out[n] = CategoricalDistribution([encode(v) for v in e])
        elif e.integer:
            out[n] = IntDistribution(int(e.low), int(e.high), log=e.log, step=int(e.step or 1))
        else:
            out[n] = FloatDistribution(float(e.low), float(e.high), log=e.log,
                                       step=float(e.step) if e.step else None)
    return out


def encode(value: Any) -> Any:
    """A choice as Optuna stores it: scalars as they are, lists and mappings as JSON text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return "json:" + json.dumps(value, sort_keys=True)


def decode(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("json:"):
        return json.loads(value[5:])
    return value


def ask(study: optuna.Study, spec: SweepCreate) -> tuple[int, dict[str, Any]]:
    """A new trial: its number and parameters (decoded)."""
    trial = study.ask(distributions(spec))
    return trial.number, {n: decode(v) for n, v in trial.params.items()}


def open_trials(study: optuna.Study) -> dict[int, dict[str, Any]]:
    """Trials Optuna handed out that are still running: number -> parameters (to adopt after a crash)."""
    return {t.number: {n: decode(v) for n, v in t.params.items()}
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}


def tell(study: optuna.Study, number: int, state: TrialState, value: float | None = None) -> None:
    """Finish a trial once: a second call (a driver that repeats a step) changes nothing."""
    storage = study._storage  # Optuna's documented Study has no per-trial read by number
    tid = storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    if storage.get_trial(tid).state != TrialState.RUNNING:
        return
    try:
        if state == TrialState.COMPLETE:
            study.tell(number, value)
        else:
            study.tell(number, state=state)
    except RuntimeError as exc:
        # The grid sampler asks the study to stop once every point has a result; outside
        # Study.optimize that raises, after the trial's result is stored. Nothing to stop here.
        if "Study.stop" not in str(exc):
            raise


def report(study: optuna.Study, number: int, step: int, value: float) -> None:
    storage = study._storage
    tid = storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    if storage.get_trial(tid).state == TrialState.RUNNING:
        storage.set_trial_intermediate_value(tid, step, value)
