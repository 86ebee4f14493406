"""Which trainings gpufleet's own scheduler places, asked in one spot.

A training runs on the team's hosts (the scheduler reserves their GPUs, a
worker runs it and renews its lease) or in a pool another scheduler owns
(``trainings.pool`` names it; gpufleet.pools holds the kinds of pool, above
this layer). The scheduler's queue, the queue position and the recovery of
lapsed leases are the team hosts' alone, and they ask :func:`team_placed`
rather than each reading the column.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement

from gpufleet.lifecycle.models import Training


def team_placed() -> ColumnElement[bool]:
    """Rows the team's scheduler places and its workers run (a pool's scheduler places the others)."""
    return Training.pool.is_(None)


def elsewhere() -> ColumnElement[bool]:
    """Rows a pool's own scheduler places: the pools' loop submits and watches them."""
    return Training.pool.is_not(None)
