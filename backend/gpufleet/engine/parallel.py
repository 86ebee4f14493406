"""How the Trainer's ranks share the work when they are not equal: GPUs of unequal speed, or of several vendors.

``parallel_mode`` (a config field) picks one of three ways; :func:`rank_sync`
gives the Trainer the one object that carries it out, or None for the plain
path (DDP/FSDP with equal micro-batches on GPUs of one vendor).

- ``equal``: one job, equal micro-batches. On GPUs of one vendor this is DDP
  over NCCL/RCCL/oneCCL. Across vendors no vendor library reaches every rank:
  the ranks sum their gradients themselves over gloo, through host memory,
  every step (:class:`RankSync` with fixed equal shares).
- ``proportional``: one job; rank ``r`` trains on ``b_r`` samples of each
  global batch ``B`` (its slice of the one global order, so together the
  ranks see what one process would) and its gradients are weighted by
  ``b_r / B`` before the sum, which is exactly the gradient of the mean over
  ``B``. The shares start from ``rank_shares`` (or equal) and are re-tuned
  from each rank's measured local step time (forward and backward, before the
  ranks meet) by the proportional controller of ``engine/hetero.py``, only
  at checkpoint boundaries; the shares are saved in the checkpoint, so a
  resume replays them exactly.
- ``independent``: each vendor group (the ranks of one backend) trains its
  own replica on its own shard of the data, summing gradients only within the
  group (its own vendor's collective on real GPUs); every ``merge_every``
  steps and at the end the replicas' parameters are averaged over all ranks
  (local SGD), and at each checkpoint the optimizer state too, so the
  checkpoint is one ordinary model that resumes exactly.

Every gradient sum runs after the loss scaler has unscaled (a rank on fp16
with a scaler adds like values to a rank on bf16), and a sum that is not
finite skips the update on every rank alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler

from gpufleet.engine.config import TrainConfig
from gpufleet.engine.data import BadDataError
from gpufleet.engine.hetero import (
    ShareTuner,
    proportional_shares,
    rank_slices,
)


class SlicedBatchSampler:
    """This rank's slice of each global batch of the one shuffled order that every rank shares.

    The order is a one-replica DistributedSampler's (a new shuffle per epoch,
    the same one a single process would draw), so the union of the ranks'
    slices is exactly the batch one process trains on. ``start_step`` global
    batches are skipped (a resume).
    """

    def __init__(self, dataset: Any, seed: int, global_batch: int, piece: slice, start_step: int = 0):
        self.sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=seed, drop_last=True)
        self.global_batch, self.piece = global_batch, piece
        self.per_epoch = len(self.sampler) // global_batch
        if self.per_epoch == 0:
            raise BadDataError(f"the data has {len(self.sampler)} samples, fewer than one global batch "
                               f"({global_batch}); use more data or a smaller global_batch_size")
        self.start_step = start_step

    def __iter__(self) -> Iterator[torch.Tensor]:
        epoch, skip = divmod(self.start_step, self.per_epoch)
        b, lo, hi = self.global_batch, self.piece.start, self.piece.stop
        while True:
            self.sampler.set_epoch(epoch)
            idx = torch.tensor(list(self.sampler), dtype=torch.long)
            for step in range(skip, self.per_epoch):
                yield idx[step * b + lo:step * b + hi]
            epoch, skip = epoch + 1, 0


def _identity(batch: Any) -> Any:
    return batch


def _sum_flat(tensors: list[torch.Tensor], group: Any, scale: float = 1.0) -> torch.Tensor:
    """Sum ``tensors`` (times ``scale``) over ``group`` in one all-reduce, written back in place; returns the sum.

    gloo reaches every vendor's ranks only through host memory, so an
    accelerator's tensors are staged through the CPU for it.
    """
    flat = torch.cat([t.detach().reshape(-1) for t in tensors])
    if scale != 1.0:
        flat.mul_(scale)
    staged = flat.device.type != "cpu" and dist.get_backend(group) == "gloo"
    buf = flat.cpu() if staged else flat
    dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group)
    if staged:
        flat.copy_(buf)
    pos = 0
    with torch.no_grad():
        for t in tensors:
            t.copy_(flat[pos:pos + t.numel()].view_as(t))
            pos += t.numel()
    return flat


class RankSync:
    """One rank's share of the work and its gradient and replica exchanges (see the module's text)."""

    def __init__(self, config: TrainConfig, rank: int, world_size: int, groups: list[int],
                 group_backends: list[str | None] | None = None):
        self.config, self.rank, self.world = config, rank, world_size
        self.mode = config.parallel_mode
        B = config.global_batch_size
        self.tuner: ShareTuner | None = None
        self.group: Any = None  # the gradient-sum group: None = every rank
        if self.mode == "independent":
            self.members = [r for r, g in enumerate(groups) if g == groups[rank]]
            self.micro = B // world_size
            for g in sorted(set(groups)):  # every rank creates every group, in one order
                ranks = [r for r, x in enumerate(groups) if x == g]
                backend = (group_backends or [None] * (g + 1))[g]
                made = dist.new_group(ranks=ranks, backend=backend)
                if g == groups[rank]:
                    self.group = made
        else:
            start = config.rank_shares if self.mode == "proportional" and config.rank_shares \
                else proportional_shares([1.0] * world_size, B)
            self.tuner = ShareTuner(start)
        # Told when this rank's share of a step is computed (the Trainer's step hooks).
        self.on_computed: Callable[[float], None] | None = None
        self._t0 = 0.0
        self._local: list[float] = []

    # -- what this rank trains on ---------------------------------------------

    @property
    def sliced(self) -> bool:
        """Whether the rank trains on its slice of the global order (one job) rather than its own shard."""
        return self.tuner is not None

    @property
    def shares(self) -> list[int] | None:
        return list(self.tuner.shares) if self.tuner is not None else None

    @property
    def micro_batch(self) -> int:
        return self.tuner.shares[self.rank] if self.tuner is not None else self.micro

    @property
    def weight(self) -> float:
        """This rank's gradient weight before the sum."""
        if self.tuner is None:
            return 1.0 / len(self.members)
        return self.tuner.shares[self.rank] / self.config.global_batch_size

    @property
    def metric_factor(self) -> float:
        """Times a rank's mean loss, so that the Trainer's mean over ranks is the mean over the global batch."""
        return self.weight * self.world if self.tuner is not None else 1.0

    def loader(self, dataset: Any, start_step: int, pin_memory: bool) -> DataLoader:
        """Micro-batches for this rank from global step ``start_step`` on (sliced modes)."""
        piece = rank_slices(self.tuner.shares)[self.rank]
        sampler = SlicedBatchSampler(dataset, self.config.seed, self.config.global_batch_size, piece, start_step)
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=_identity, num_workers=0, pin_memory=pin_memory)

    # -- one step -------------------------------------------------------------

    def begin_step(self) -> None:
        self._t0 = time.perf_counter()

    def reduce_grads(self, model: nn.Module) -> bool:
        """Sum the weighted gradients over the rank's group; False when the sum is not finite."""
        local = time.perf_counter() - self._t0
        if self.on_computed is not None:
            self.on_computed(local)  # a drill's slow rank finishes its share later, as a slower GPU would
        self._local.append(time.perf_counter() - self._t0)
        params = [p for p in model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if self.tuner is None and len(self.members) == 1:
            return bool(all(torch.isfinite(p.grad).all() for p in params))
        flat = _sum_flat([p.grad for p in params], self.group, self.weight)
        return bool(torch.isfinite(flat).all())

    def after_step(self, model: nn.Module, step: int) -> None:
        """Independent groups: average the replicas every ``merge_every`` steps and at the last step."""
        if self.mode == "independent" and (step % self.config.merge_every == 0 or step == self.config.max_steps):
            self.average(model)

    def average(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
        """Replace parameters (and floating buffers; with ``optimizer``, its state too) by their mean over every
        rank."""
        tensors = [t for t in list(model.parameters()) + list(model.buffers()) if t.is_floating_point()]
        if optimizer is not None:
            for p in model.parameters():
                st = optimizer.state.get(p, {})
                tensors += [st[k] for k in sorted(st) if isinstance(st[k], torch.Tensor) and st[k].is_floating_point()]
        _sum_flat(tensors, None, 1.0 / self.world)

    # -- checkpoint boundaries ------------------------------------------------

    def at_checkpoint(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> bool:
        """Before a checkpoint: re-tune the shares (proportional) or merge the replicas (independent).

        Returns whether this rank's slice changed (its loader must be rebuilt).
        """
        if self.mode == "independent":
            self.average(model, optimizer)
            return False
        mine = sum(self._local) / len(self._local) if self._local else 0.0
        self._local.clear()
        if self.mode != "proportional":
            return False
        times = [torch.zeros(1, dtype=torch.float64) for _ in range(self.world)]
        dist.all_gather(times, torch.tensor([mine], dtype=torch.float64))
        before = list(self.tuner.shares)
        measured = [float(t) for t in times]
        if all(t > 0 for t in measured):
            self.tuner.record(measured)
        self.tuner.at_checkpoint()
        return self.tuner.shares != before

    def state_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, **(self.tuner.state_dict() if self.tuner is not None else {})}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """The saved shares, when they fit this run (a resume on another world size starts from equal shares)."""
        if self.tuner is None or not state or state.get("mode") != self.mode:
            return
        shares = state.get("shares") or []
        if len(shares) == len(self.tuner.shares) and sum(shares) == sum(self.tuner.shares):
            self.tuner.load_state_dict(state)


def rank_precision(precision: str, device: torch.device) -> str:
    """The precision a rank runs: bf16 where its GPU has it, else fp16 (with a loss scaler); others unchanged."""
    if precision != "bf16" or device.type == "cpu":
        return precision
    mod = getattr(torch, device.type, None)
    supported = getattr(mod, "is_bf16_supported", None)
    return "bf16" if supported is None or supported() else "fp16"


def rank_layout(rank: int, device: torch.device, precision: str, env_names: tuple[str, ...]) -> dict[str, Any]:
    """What this rank runs on, as it sees it: for the launcher's ``layout`` line."""
    from gpufleet.engine.rankenv import visible_devices

    return {"rank": rank, "device": str(device), "precision": precision,
            "process_group": dist.get_backend() if dist.is_initialized() else None,
            "visible": visible_devices(env_names)}


def rank_sync(config: TrainConfig, rank: int, world_size: int, *, distributed: bool, mixed_vendors: bool,
              groups: list[int] | None, group_backends: list[str | None] | None = None) -> RankSync | None:
    """The RankSync for this rank, or None where DDP/FSDP with equal shares does the job (one vendor, ``equal``)."""
    if not distributed or (config.parallel_mode == "equal" and not mixed_vendors):
        return None
    return RankSync(config, rank, world_size, groups or [0] * world_size, group_backends)
