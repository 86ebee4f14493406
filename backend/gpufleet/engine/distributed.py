"""Process groups, DDP/FSDP wrapping and the distributed data loader.

Names follow the seed's ``DistributedTrainer`` where they fit; what it got
wrong is fixed here: the port is a free one (never 12355), the backend fits
the device (NCCL on CUDA, gloo on CPU), collectives time out after the
configured seconds (not PyTorch's 10-30 minutes), the per-rank batch comes
from the global batch without dividing by zero, and ``cleanup`` always
destroys the process group.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from gpufleet.devices.ops import backend_ops
from gpufleet.engine import rankenv
from gpufleet.engine.config import TrainingConfigError, TrainConfig
from gpufleet.engine.data import BadDataError
from gpufleet.rankpath.gpufleet_share import cap


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS reports free right now (for MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ResumableBatchSampler:
    """Micro-batches of indices for one rank, epoch after epoch, forever.

    ``set_epoch`` is called on the DistributedSampler at every epoch so each
    epoch has a new shuffle that every rank agrees on. The tail that does not
    fill a micro-batch is dropped, so every optimizer step sees exactly the
    global batch. ``start_batch`` (micro-batches already consumed) makes a
    resumed run continue with the very next batch.
    """

    def __init__(self, sampler: DistributedSampler, micro_batch_size: int, start_batch: int = 0,
                 grad_accum_steps: int = 1):
        self.sampler = sampler
        self.micro_batch_size = micro_batch_size
        # Whole optimizer steps per epoch, so the epoch's tail is the same
        # samples whatever the split into ranks and micro-batches.
        steps = len(sampler) // (micro_batch_size * grad_accum_steps)
        self.batches_per_epoch = steps * grad_accum_steps
        if self.batches_per_epoch == 0:
            raise BadDataError(
                f"each rank gets {len(sampler)} samples per epoch, fewer than one step's share "
                f"({micro_batch_size * grad_accum_steps}); use more data or a smaller global_batch_size"
            )
        self.start_batch = start_batch

    def __iter__(self) -> Iterator[torch.Tensor]:
        epoch, skip = divmod(self.start_batch, self.batches_per_epoch)
        mb = self.micro_batch_size
        while True:
            self.sampler.set_epoch(epoch)
            # One index tensor per epoch; each micro-batch is a view of it, so
            # fetching a batch builds no Python list.
            idx = torch.tensor(list(self.sampler), dtype=torch.long)
            for b in range(skip, self.batches_per_epoch):
                yield idx[b * mb:(b + 1) * mb]
            epoch, skip = epoch + 1, 0


def _identity(batch: Any) -> Any:
    return batch


class DistributedTrainer:
    """Per-rank plumbing for ``devices`` (one torch device string per rank)."""

    def __init__(self, devices: list[str], config: TrainConfig, *, collective_timeout_s: float = 60.0,
                 master_addr: str = "127.0.0.1", master_port: int | None = None,
                 use_process_group: bool | None = None, rendezvous_timeout_s: float | None = None,
                 process_group_backend: str | None = None):
        if not devices:
            raise TrainingConfigError("devices", "at least one device is needed")
        self.devices = list(devices)
        self.world_size = len(devices)
        # None: a process group only with more than one rank. True forces one
        # (and the DDP wrapper) for a single rank, to test that path on one GPU.
        self.use_process_group = self.world_size > 1 if use_process_group is None else use_process_group
        self.config = config
        self.collective_timeout_s = collective_timeout_s
        # Ranks of several vendors share no vendor library: the launcher says gloo.
        self.process_group_backend = process_group_backend
        self.master_addr = master_addr
        # Set for a training across hosts: every rank is a client of the TCPStore
        # the rank-0 host's launcher keeps open, and waits this long for it.
        self.rendezvous_timeout_s = rendezvous_timeout_s
        # Chosen in the parent before the ranks start, so all ranks agree on it.
        self.master_port = master_port if master_port is not None else (
            find_free_port(master_addr) if self.use_process_group else 0)
        self.micro_batch_size, self.grad_accum_steps = config.batch_layout(self.world_size)
        self.rank = 0
        self.device = torch.device(devices[0])

    @property
    def distributed(self) -> bool:
        return self.use_process_group

    def setup(self, rank: int, clock: Any = None) -> torch.device:
        """Join the process group (when there is more than one rank) and pick
        this rank's device. One device runs without any process group.
        ``clock`` (engine/startup.py) is told when each part ends."""
        self.rank = rank
        self.device = torch.device(self.devices[rank])
        ops = backend_ops(self.device)
        ops.set_device()
        if ops.is_accelerator and (share := rankenv.share_mb()) is not None:
            cap(share, torch)  # before the recipe's first line: an overrun is this rank's OutOfMemoryError
        if clock is not None:
            if ops.is_accelerator:
                torch.zeros(1, device=self.device)  # the context is made on first use: make it now
            clock.mark("device")
        if self.distributed and not dist.is_initialized():
            os.environ["MASTER_ADDR"] = self.master_addr
            os.environ["MASTER_PORT"] = str(self.master_port)
            kwargs: dict[str, Any] = {}
            backend = self.process_group_backend or ops.dist_backend
            if backend == "nccl":
                # Binds the communicator to this device up front (no guessing
                # from the current device, no extra warm-up collective).
                kwargs["device_id"] = self.device
            timeout_s = self.collective_timeout_s
            if self.rendezvous_timeout_s is not None:
                kwargs["store"] = dist.TCPStore(
                    self.master_addr, self.master_port, self.world_size, is_master=False,
                    timeout=timedelta(seconds=self.rendezvous_timeout_s))
                # The group's own wait for its peers (gloo's full mesh, the first collectives while a host
                # still starts) is the rendezvous too: a host that came back slowly is waited for as long as
                # GPUFLEET_RENDEZVOUS_TIMEOUT_S says, not failed at the collective timeout.
                timeout_s = max(timeout_s, self.rendezvous_timeout_s)
            dist.init_process_group(
                backend=backend, rank=rank, world_size=self.world_size,
                timeout=timedelta(seconds=timeout_s), **kwargs,
            )
        if clock is not None:
            clock.mark("process_group")
        return self.device

    def resolved_strategy(self) -> str:
        strategy = self.config.strategy
        if not self.distributed:
            return "single"
        return "ddp" if strategy == "auto" else strategy

    def create_distributed_dataloader(self, dataset: Any, rank: int | None = None,
                                      start_batch: int = 0) -> DataLoader:
        """Micro-batches for this rank; ``start_batch`` = micro-batches already consumed."""
        rank = self.rank if rank is None else rank
        sampler = DistributedSampler(dataset, num_replicas=self.world_size, rank=rank, shuffle=True,
                                     seed=self.config.seed, drop_last=True)
        batches = ResumableBatchSampler(sampler, self.micro_batch_size, start_batch, self.grad_accum_steps)
        return DataLoader(dataset, batch_sampler=batches, collate_fn=_identity, num_workers=0,
                          pin_memory=backend_ops(self.device).kind == "cuda")

    def cleanup(self) -> None:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
