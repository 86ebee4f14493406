"""One attempt of a pool training: its folder under the pool's root, its files, its layout over the nodes.

What every kind of place writes the same way; a kind's ``submit`` gets the
:class:`Attempt` and sends it (gpufleet.pools.place).
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from pathlib import Path

from gpufleet import memberfs
from gpufleet.config import Settings
from gpufleet.db.pools import Pool
from gpufleet.lifecycle.models import Training
from gpufleet.pools.errors import PoolError
from gpufleet.users.runas import RunAccount


def training_dir(pool: Pool, training_id: uuid.UUID | str) -> Path:
    return Path(pool.checkpoint_root) / str(training_id)


def progress_file(pool: Pool, training_id: uuid.UUID | str, attempt: int) -> Path:
    return training_dir(pool, training_id) / f"progress-{attempt}.jsonl"


def layout(pool: Pool, world_size: int) -> tuple[int, int]:
    """How a training of ``world_size`` GPUs is laid out on the pool: (nodes, GPUs per node).

    One node while one holds it; else the fewest nodes that do, each with the same share (one launcher per
    node, the ranks' rendezvous taken from Slurm's environment). A share that is not even is refused, naming
    the sizes that are.
    """
    per = pool.gpus_per_node
    if not per or world_size <= per:
        return 1, world_size
    count = math.ceil(world_size / per)
    if world_size % count:
        lower, upper = count * (world_size // count), count * math.ceil(world_size / count)
        raise PoolError(f"pool {pool.name!r} has {per} GPUs per node, so {world_size} GPUs need {count} nodes, and "
                        f"a training over several nodes takes the same number of GPUs on each: ask for {lower} or "
                        f"{upper} GPUs", field="world_size")
    return count, world_size // count



@dataclass
class Attempt:
    """One attempt of a pool training: where its files go and whose they are."""

    settings: Settings
    pool: Pool
    training: Training
    number: int
    account: RunAccount

    @property
    def home(self) -> Path:
        return training_dir(self.pool, self.training.id)

    @property
    def progress(self) -> Path:
        return progress_file(self.pool, self.training.id, self.number)

    def rel(self, path: Path) -> str:
        """``path`` (in this attempt's files) as named below the pool's root."""
        return memberfs.beneath(self.pool.checkpoint_root, path)
