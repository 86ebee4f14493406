"""A new recipe training's memory estimate, and the refusal when no GPU could ever hold it."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from gpufleet.config import WorkerSettings
from gpufleet.lifecycle.models import Training
from gpufleet.scheduling.memory import EstimateLimitError
from gpufleet.scheduling.plan import estimate_training, never_fit_reason
from gpufleet.engine.config import TrainConfig, TrainingConfigError
from gpufleet.trainings.admission.checks import FleetCannotHold, TrainingRequestError

log = logging.getLogger(__name__)


def check_estimate(sess: Session, settings: WorkerSettings, row: Training, config: TrainConfig) -> None:
    """Store the memory estimate (what the scheduler reserves and checks) on the new row.

    A figure the person gave is kept as what to reserve. An estimator that
    cannot run leaves the row without one; the training still runs.
    """
    try:
        estimate_training(sess, row, data_root=settings.data_root, config=config)
    except (TrainingConfigError, EstimateLimitError) as exc:  # the recipe's own checks, or a model past the size limits
        raise TrainingRequestError(f"config.{getattr(exc, 'field', None) or 'recipe'}", str(exc)) from None
    except Exception:  # an estimate is advice, never a reason to refuse
        log.warning("could not estimate the memory of training %s (%s)", row.name, row.recipe, exc_info=True)
    refused = never_fit_reason(sess, row.memory_estimate, row.requested_host)
    if refused is not None:
        given = row.estimate is None or row.memory_estimate != row.estimate.get("total")
        refusal = TrainingRequestError if row.requested_host else FleetCannotHold
        raise refusal("memory_mb" if given else "config", f"{row.name}: {refused}")
