"""The three ways ranks share a training (``parallel_mode``), what each costs, and which one a set of GPUs calls for.

Torch-free: the launcher (before torch loads), validation and recommendation
use it. How each mode runs is in ``engine/parallel.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

PARALLEL_MODES = ("equal", "proportional", "independent")

MODE_WORDS = {
    "equal": "one job with equal micro-batches",
    "proportional": "one job with speed-proportional micro-batches",
    "independent": "independent training per vendor with a merge",
}

# What each mode costs on GPUs of several vendors (one gloo process group across them).
MODE_COST = {
    "equal": ("every step all-reduces the gradients through gloo over host memory, and the slowest GPU "
              "sets the pace"),
    "proportional": ("every step all-reduces the gradients through gloo over host memory; each GPU gets a "
                     "micro-batch in proportion to its measured speed, so no GPU waits for a slower one"),
    "independent": ("each vendor's GPUs train their own replica on their own shard with their own collective; "
                    "only the parameters cross vendors, through gloo, every merge_every steps (local SGD), "
                    "which may cost some accuracy per sample against one job"),
}


def recommended_mode(vendors: Sequence[str], models: Sequence[str | None] = ()) -> str:
    """The mode gpufleet would use for a set: one vendor and model: equal; one vendor of mixed models:
    proportional; several vendors: independent (one job would all-reduce through gloo every step)."""
    if len(set(vendors)) > 1:
        return "independent"
    if len(set(models)) > 1:
        return "proportional"
    return "equal"


def proportional_shares(speeds: Sequence[float], global_batch: int) -> list[int]:
    """Micro-batch sizes summing to ``global_batch``, in proportion to ``speeds``; each at least 1.

    Rounded by largest remainder, so ``[5, 3, 2]`` of 100 is ``[50, 30, 20]``.
    """
    if not speeds:
        raise ValueError("need the speed of at least one rank")
    if any(not s > 0 for s in speeds):
        raise ValueError(f"every rank's speed must be > 0, got {list(speeds)}")
    if global_batch < len(speeds):
        raise ValueError(f"a global batch of {global_batch} cannot give {len(speeds)} ranks one sample each")
    total = float(sum(speeds))
    exact = [global_batch * s / total for s in speeds]
    shares = [int(x) for x in exact]
    left = global_batch - sum(shares)
    for i in sorted(range(len(speeds)), key=lambda i: exact[i] - int(exact[i]), reverse=True)[:left]:
        shares[i] += 1
    # A very slow rank still gets one sample, taken from the largest share.
    for i, b in enumerate(shares):
        if b == 0:
            shares[shares.index(max(shares))] -= 1
            shares[i] = 1
    return shares


def group_backends(kinds: Sequence[str], on_cpu: bool) -> list[str]:
    """Each vendor group's own collective, in order of the group's first rank; gloo where ranks run on CPU."""
    order = list(dict.fromkeys(kinds))
    if on_cpu or order == ["cpu"]:
        return ["gloo"] * len(order)
    return [{"cuda": "nccl", "hip": "nccl", "xpu": "xccl"}.get(k, "gloo") for k in order]


def mixed_vendor_warning(kinds: Sequence[str], parallel_mode: str) -> str | None:
    """The cost of a training on these backends, in words; None for one backend."""
    names = list(dict.fromkeys(kinds))
    if len(names) < 2:
        return None
    return (f"GPUs of several vendors ({', '.join(names)}): NCCL, RCCL and oneCCL do not talk to each other, so "
            f"the ranks share one gloo process group through host memory; parallel_mode {parallel_mode}: "
            f"{MODE_COST[parallel_mode]}")
