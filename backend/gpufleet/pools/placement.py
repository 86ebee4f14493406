"""Where a piece of work runs, decided once: the team's hosts or a pool.

A training request, a sweep's trial and anything else that becomes a
``trainings`` row asks :func:`where` for its place and then asks that place
to check or create it; nothing else tests ``req.pool``. :func:`create_placed`
adds the one rule that moves work between the two: a request that allows a
pool (``or_pool``) goes there when the team's hosts can never hold it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from gpufleet.config import Settings
from gpufleet.lifecycle.models import Training
from gpufleet.pools import service
from gpufleet.pools.errors import PoolError
from gpufleet.trainings import service as trainings
from gpufleet.trainings.admission.checks import FleetCannotHold
from gpufleet.trainings.service import TrainingView
from gpufleet.wire.training_requests import TrainingCreate


class Place:
    """Where a training runs, as its request names it."""

    # Whether a trial's ranks can wait at a rung for the sweep's verdict there (a worker's rung gate).
    waits_at_rungs = False

    def check(self, sess: Session, settings: Settings, req: TrainingCreate, owner: str, *,
              admin: bool = False, exclusive: bool = True) -> None:
        """Validate ``req`` here as its create would; nothing is written."""
        raise NotImplementedError

    def create(self, sess: Session, settings: Settings, req: TrainingCreate, owner: str, *, admin: bool = False,
               exclusive: bool = True, selection: dict[str, Any] | None = None, why: str = "") -> Training:
        """The training's row, queued here with its first event; the caller commits."""
        raise NotImplementedError

    def create_view(self, sess: Session, settings: Settings, req: TrainingCreate, owner: str, *,
                    admin: bool = False) -> TrainingView:
        """:meth:`create`, as the trainings API answers it."""
        return TrainingView(training=self.create(sess, settings, req, owner, admin=admin))


class TeamHosts(Place):
    """The team's own hosts: gpufleet's scheduler places the training on their GPUs."""

    waits_at_rungs = True

    def check(self, sess: Session, settings: Settings, req: TrainingCreate, owner: str, *,
              admin: bool = False, exclusive: bool = True) -> None:
        trainings.prepare(sess, settings, req, owner, exclusive=exclusive, admin=admin)

    def create(self, sess: Session, settings: Settings, req: TrainingCreate, owner: str, *, admin: bool = False,
               exclusive: bool = True, selection: dict[str, Any] | None = None, why: str = "") -> Training:
        [row] = trainings.create_trainings(sess, settings, [req], owner, exclusive=exclusive, admin=admin,
                                           selection=selection)
        return row

    def create_view(self, sess: Session, settings: Settings, req: TrainingCreate, owner: str, *,
                    admin: bool = False) -> TrainingView:
        return trainings.create(sess, settings, req, owner, admin=admin)  # with its queue place


class InPool(Place):
    """A pool (``req.pool``): its own scheduler places the training, through the pool's kind."""

    def check(self, sess: Session, settings: Settings, req: TrainingCreate, owner: str, *,
              admin: bool = False, exclusive: bool = True) -> None:
        service.check_request(sess, settings, req, owner, admin=admin)

    def create(self, sess: Session, settings: Settings, req: TrainingCreate, owner: str, *, admin: bool = False,
               exclusive: bool = True, selection: dict[str, Any] | None = None, why: str = "") -> Training:
        return service.create_training(sess, settings, req, owner, admin=admin, why=why)


TEAM_HOSTS, IN_POOL = TeamHosts(), InPool()


def where(req: TrainingCreate) -> Place:
    """The place ``req`` names: its pool, else the team's hosts."""
    return IN_POOL if req.pool else TEAM_HOSTS


def create_placed(sess: Session, settings: Settings, req: TrainingCreate, owner: str, *,
                  admin: bool = False) -> TrainingView:
    """Where a training request goes: its pool, the team's hosts, or, when those can never hold it and the
    request allows it (``or_pool``), that pool. The caller commits; a refusal writes nothing."""
    if req.or_pool is None or req.pool:  # (a pool with or_pool too is refused by its check, naming or_pool)
        return where(req).create_view(sess, settings, req, owner, admin=admin)
    try:  # a pool that does not exist is a mistake to say now, not when the hosts fall short
        service.get(sess, req.or_pool)
    except PoolError as exc:
        raise PoolError(str(exc), exc.status, "or_pool") from None
    try:
        return TEAM_HOSTS.create_view(sess, settings, req, owner, admin=admin)
    except FleetCannotHold as exc:
        there = req.model_copy(update={"pool": req.or_pool, "or_pool": None})
        try:
            row = IN_POOL.create(sess, settings, there, owner, admin=admin,
                                 why=f", as the request allowed: the team's hosts can never hold it ({exc})")
        except PoolError as refused:
            raise PoolError(f"the team's hosts can never hold it ({exc}), and pool {req.or_pool!r} cannot either: "
                            f"{refused}", refused.status, refused.field) from None
        return TrainingView(training=row)
