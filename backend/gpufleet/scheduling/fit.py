"""What fits: the largest micro-batch per rank, DDP or FSDP, and how many GPUs.

A recipe's config names its global batch: the samples of one optimizer step.
That never changes here (it is what makes the runs comparable); what the
search moves is how the batch is laid out: ``world_size`` ranks, each running
``micro_batch_size`` samples per pass, ``grad_accum_steps`` passes per step.
A smaller micro-batch holds fewer activations; FSDP holds 1/world of the
parameters, gradients and optimizer states. Each layout's memory per rank is
the estimate's (``estimate``: the traced steady state, the replayed caching
allocator, the measured context, calibrated by earlier runs), and whether a
set of GPUs holds it is the recommendation's answer on the fleet as it is
(``place``): free now, busy now but big enough, or never.

The memory grows with the micro-batch, so for each world size and strategy a
binary search over the micro-batches that divide the per-rank batch finds the
largest that fits with a few estimates, not one per size. World sizes are
tried from the fewest GPUs up, DDP before FSDP (it communicates less), and the
search stops at the first layout that runs the whole per-rank batch in one
pass on GPUs free now: more GPUs would only make it faster, and that is the
member's call. The pick is the first layout that fits now; failing that, the
first that fits once GPUs free up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpufleet.devices.device import index_list

Fits = Literal["now", "later", "never"]
_LEVEL = {"never": 0, "later": 1, "now": 2}


@dataclass(frozen=True)
class Placement:
    """Whether ``count`` GPUs hold ``memory`` bytes each: the fleet's answer for one layout."""

    fits: Fits
    host: str | None = None
    gpu_indexes: tuple[int, ...] = ()
    reason: str = ""
    pool: str | None = None  # a Slurm pool's GPUs hold it: Slurm decides when it starts


@dataclass(frozen=True)
class FitOption:
    world_size: int
    strategy: str  # single, ddp or fsdp
    micro_batch_size: int
    grad_accum_steps: int
    memory_bytes: int  # per rank, the estimate's total
    placement: Placement
    estimate: Any = None  # the MemoryEstimate behind memory_bytes


@dataclass(frozen=True)
class FitAnswer:
    global_batch_size: int
    options: list[FitOption]
    pick: FitOption | None
    why: str
    # Layouts that no GPU of the fleet can hold, in words, so the answer says what was tried.
    never: list[str] = field(default_factory=list)


def micro_batches(global_batch: int, world_size: int) -> list[int]:
    """The micro-batches that split one rank's share of the global batch evenly, smallest first."""
    per_rank = global_batch // world_size
    small = [d for d in range(1, int(per_rank**0.5) + 1) if per_rank % d == 0]
    return sorted({*small, *(per_rank // d for d in small)})


def world_sizes(global_batch: int, most: int) -> list[int]:
    """1, 2, 4, … up to ``most`` GPUs, and ``most`` itself; only those that divide the global batch."""
    sizes, n = [], 1
    while n < most:
        sizes.append(n)
        n *= 2
    sizes.append(most)
    return [w for w in sorted(set(sizes)) if global_batch % w == 0]


def fit(global_batch: int, worlds: Sequence[int], estimate: Callable[[int, str, int, int], Any],
        place: Callable[[int, int], Placement], *, strategies: Sequence[str] = ("ddp", "fsdp"),
        where: str = "any host of the fleet") -> FitAnswer:
    """Search the layouts of ``global_batch`` over ``worlds``.

    ``estimate(world_size, strategy, micro_batch_size, grad_accum_steps)`` returns a
    MemoryEstimate (its ``total`` is the bytes per rank); ``place(memory_bytes, count)``
    says whether the fleet holds it. Both are called as few times as the search needs. ``where``
    names what ``place`` answers for, in the answer's words.
    """
    options: list[FitOption] = []
    never: list[str] = []
    for world in worlds:
        done = False
        for strategy in (strategies if world > 1 else ("single",)):
            option = _best_layout(global_batch, world, strategy, estimate, place)
            if option is None:
                never.append(f"{world} GPU(s) with {strategy}: even a micro-batch of 1 holds more than any "
                             f"{world} GPU(s) of one host or node")
                continue
            options.append(option)
            if option.placement.fits == "now" and option.grad_accum_steps == 1:
                done = True
                break
            if option.placement.fits == "now" and strategy == "ddp":
                break  # DDP fits now: FSDP would only trade memory for communication
        if done:
            break
    now = [o for o in options if o.placement.fits == "now"]
    later = [o for o in options if o.placement.fits == "later"]
    pick = now[0] if now else (later[0] if later else None)
    return FitAnswer(global_batch, options, pick, _why(pick, never, where), never)


def _best_layout(global_batch: int, world: int, strategy: str, estimate: Callable[[int, str, int, int], Any],
                 place: Callable[[int, int], Placement]) -> FitOption | None:
    """The largest micro-batch that fits now on ``world`` GPUs, else the largest that fits later."""
    sizes = micro_batches(global_batch, world)
    seen: dict[int, FitOption] = {}

    def probe(i: int) -> FitOption:
        if i not in seen:
            micro = sizes[i]
            accum = global_batch // (world * micro)
            est = estimate(world, strategy, micro, accum)
            seen[i] = FitOption(world, strategy, micro, accum, int(est.total), place(int(est.total), world), est)
        return seen[i]

    def largest(level: int) -> int:
        # Memory grows with the micro-batch, so the fleet's answer only gets worse along ``sizes``.
        # The whole share in one pass is asked first: where it fits, one estimate answers.
        if _LEVEL[probe(len(sizes) - 1).placement.fits] >= level:
            return len(sizes) - 1
        lo, hi = -1, len(sizes) - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _LEVEL[probe(mid).placement.fits] >= level:
                lo = mid
            else:
                hi = mid
        return lo

    best = largest(_LEVEL["now"])
    if best < 0:
        best = largest(_LEVEL["later"])
    return probe(best) if best >= 0 else None


def _why(pick: FitOption | None, never: list[str], where: str) -> str:
    if pick is None:
        return f"nothing fits on {where}: " + "; ".join(never) if never else "no layout was tried"
    layout = (f"{pick.world_size} GPU(s), {pick.strategy}, micro-batch {pick.micro_batch_size} x "
              f"{pick.grad_accum_steps} accumulation pass(es)")
    if pick.placement.pool is not None:
        how = ("the whole per-rank batch in one pass" if pick.grad_accum_steps == 1
               else "the largest micro-batch that fits its GPUs")
        return f"{layout} fits pool {pick.placement.pool}'s GPUs ({how}); Slurm decides when it starts"
    if pick.placement.fits == "now":
        at = f"on {pick.placement.host} GPU(s) {index_list(pick.placement.gpu_indexes, ', ')}"
        how = ("the whole per-rank batch in one pass" if pick.grad_accum_steps == 1
               else "the largest micro-batch that fits one GPU" if pick.world_size == 1
               else "the largest micro-batch that fits; fewer GPUs do not hold it now")
        return f"{layout} fits now {at}: {how}"
    return f"{layout} fits once GPUs free up ({pick.placement.reason}); no layout fits on the GPUs free now"


def fleet_placer(fleet: Any, host: str | None = None) -> Callable[[int, int], Placement]:
    """``place`` for :func:`fit` on a snapshot of the fleet: the recommendation's answer, remembered."""
    from gpufleet.scheduling.recommend import recommend
    from gpufleet.scheduling.types import SelectionRequest

    answers: dict[tuple[int, int], Placement] = {}

    def place(memory: int, count: int) -> Placement:
        if (memory, count) not in answers:
            rec = recommend(SelectionRequest(memory_bytes=memory, count=count, host=host, max_candidates=1), fleet)
            if rec.candidates:
                c = rec.candidates[0]
                answers[memory, count] = Placement("now", c.host, tuple(c.gpu_indexes), "; ".join(c.reasons))
            elif rec.refused is not None:
                answers[memory, count] = Placement("never", reason=rec.refused)
            else:
                answers[memory, count] = Placement("later", reason=rec.wait_reason or "")
        return answers[memory, count]
    return place


def pool_placer(name: str, gpu_model: str | None, gpu_memory: int, gpus_per_node: int, nodes: int = 1
                ) -> Callable[[int, int], Placement]:
    """``place`` for :func:`fit` on a Slurm pool: one node's GPUs, or the same number on each of several nodes
    (up to the partition's ``nodes``), each GPU of the pool's declared memory.

    Slurm owns the pool's queue, so the answer is only whether its GPUs can hold the layout ("now" then
    means: submit it, Slurm starts it when it can), never when.
    """
    from gpufleet.scheduling.types import fmt_bytes

    label = gpu_model or "GPU"

    def place(memory: int, count: int) -> Placement:
        need = -(-count // gpus_per_node)
        if need > nodes:
            return Placement("never", reason=f"{count} GPUs need {need} nodes of pool {name} "
                                             f"({gpus_per_node} GPU(s) each), and its partition has {nodes}")
        if count % need:
            return Placement("never", reason=f"{count} GPUs do not split evenly over {need} nodes of pool {name}")
        if memory > gpu_memory:
            return Placement("never", reason=f"{fmt_bytes(memory)} per rank is more than one {label} of pool "
                                             f"{name} has ({fmt_bytes(gpu_memory)})")
        where = f" over {need} nodes" if need > 1 else ""
        return Placement("now", reason=f"{count} x {label} of pool {name}{where}; Slurm queues the job", pool=name)
    return place


def most_gpus(fleet: Any, host: str | None = None) -> int:
    """The most GPUs one host of the fleet (or ``host``) has: the largest world size to try."""
    counts = [len(h.gpus) for h in fleet.hosts if host is None or h.name == host]
    return max(counts, default=0)


def layout_values(values: dict[str, Any], strategy: str, micro: int, accum: int) -> dict[str, Any]:
    """A config's fields with one layout in place (``single`` is the recipe's ``auto`` on one rank)."""
    return {**values, "strategy": "auto" if strategy == "single" else strategy,
            "micro_batch_size": micro, "grad_accum_steps": accum}
