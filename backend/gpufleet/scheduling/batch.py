"""Placing many small trainings on shared GPUs (the seed's JobScheduler).

"Train these 120 models on the group, max 4 per GPU": each model goes to one
GPU, a GPU takes at most ``max_models_per_gpu`` models and no more than its
memory. Unlike the seed's sketch, what does not fit is returned as
``waiting`` (it stays queued) instead of being truncated away.

Plain dataclasses in and out; the scheduler feeds it the locked GPU states.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

STRATEGIES = ("round_robin", "load_balance", "affinity")


@dataclass
class Slot:
    """One GPU's current load."""

    index: int
    memory_total: int | None = None
    models: int = 0
    reserved: int = 0
    recipes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.models < 0 or self.reserved < 0:
            raise ValueError("models and reserved must be >= 0")

    def fits(self, memory: int | None, max_models: int) -> bool:
        if self.models >= max_models:
            return False
        if memory and self.memory_total is not None and self.reserved + memory > self.memory_total:
            return False
        return True

    def take(self, recipe: str, memory: int | None) -> None:
        self.models += 1
        self.reserved += memory or 0
        self.recipes.append(recipe)


@dataclass(frozen=True)
class Item:
    key: Hashable
    recipe: str
    memory: int | None = None


def pick(
    slots: Sequence[Slot],
    recipe: str,
    memory: int | None,
    strategy: str,
    max_models: int,
    cursor: int = 0,
) -> Slot | None:
    """The slot this model goes to under ``strategy``, or None if none fits."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    fitting = [s for s in slots if s.fits(memory, max_models)]
    if not fitting:
        return None
    if strategy == "round_robin":
        # The first fitting GPU at or after the cursor, wrapping around.
        n = len(slots)
        order = {s.index: (pos - cursor) % n for pos, s in enumerate(slots)}
        return min(fitting, key=lambda s: order[s.index])
    if strategy == "affinity":
        # Same recipe together (shared data and kernels), then the least loaded.
        return min(fitting, key=lambda s: (-s.recipes.count(recipe), s.models, s.reserved, s.index))
    return min(fitting, key=lambda s: (s.models, s.reserved, s.index))


def plan(
    items: Sequence[Item],
    slots: Sequence[Slot],
    strategy: str,
    max_models: int,
) -> tuple[dict[int, list[Hashable]], list[Hashable]]:
    """Assign items in order; returns ``({gpu_index: [keys]}, waiting_keys)``.

    ``slots`` are updated in place with what was placed.
    """
    if max_models < 1:
        raise ValueError("max_models must be >= 1")
    assignments: dict[int, list[Hashable]] = {s.index: [] for s in slots}
    waiting: list[Hashable] = []
    cursor = 0
    for item in items:
        slot = pick(slots, item.recipe, item.memory, strategy, max_models, cursor)
        if slot is None:
            waiting.append(item.key)
            continue
        slot.take(item.recipe, item.memory)
        assignments[slot.index].append(item.key)
        cursor = (list(slots).index(slot) + 1) % max(len(slots), 1)
    return assignments, waiting
