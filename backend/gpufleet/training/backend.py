"""``gpufleet.TrainingBackend``: one training loop from one device to DDP to FSDP.

A user's loop is written once against the protocol::

    backend = make_backend(model, loss_fn, lambda p: torch.optim.AdamW(p, lr=3e-4), strategy="ddp")
    for batch in data:                      # this rank's share of the global batch
        out = backend.forward_backward(batch)   # {"loss": float, ...}
        backend.optim_step()

and runs unchanged on one device (``strategy="single"``), with DDP or with
FSDP (``"ddp"`` / ``"fsdp"``) by changing that one argument. Under
``gpufleet run`` or ``torchrun`` the process group comes from the torchrun
environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``);
the device is ``LOCAL_RANK``'s GPU, or the CPU (gloo) when there is none.
Device handling, wrapping and checkpoint state are gpufleet's own
(``devices.ops``, ``training.distributed``, ``training.checkpoint``).

``loss_fn(model, batch)`` returns the loss tensor or a dict with ``loss`` and
other (detached) metrics, as a recipe's does. Gradients are averaged over
ranks, so with equal shards every strategy computes the same steps as one
device on the whole batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
import torch.distributed as dist
from torch import nn

from gpufleet.devices.ops import backend_ops, move_to_device

STRATEGIES = ("single", "ddp", "fsdp")
LossFn = Callable[[nn.Module, Any], "torch.Tensor | dict[str, Any]"]
OptimizerFactory = Callable[[Any], torch.optim.Optimizer]


@runtime_checkable
class TrainingBackend(Protocol):
    """What a training loop needs from the machinery under it."""

    model: nn.Module
    step: int

    def forward_backward(self, batch: Any) -> dict[str, float]: ...

    def optim_step(self) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def save_checkpoint(self, path: str | Path) -> None: ...

    def load_checkpoint(self, path: str | Path) -> None: ...


def default_device() -> torch.device:
    """This rank's accelerator (``LOCAL_RANK``), or the CPU."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        return torch.device("cuda", local)
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return torch.device("xpu", local)
    return torch.device("cpu")


def init_distributed(device: torch.device, timeout_s: float = 600.0) -> None:
    """Join the process group described by the torchrun environment, unless joined already."""
    if dist.is_initialized():
        return
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        raise RuntimeError("DDP and FSDP need the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR, "
                           "MASTER_PORT): run under `gpufleet run` or `torchrun`, or call init_process_group")
    ops = backend_ops(device)
    ops.set_device()
    dist.init_process_group(backend=ops.dist_backend, timeout=timedelta(seconds=timeout_s))


class _Backend:
    strategy = "single"

    def __init__(self, model: nn.Module, loss_fn: LossFn, optimizer: OptimizerFactory, *,
                 device: torch.device | str | None = None, grad_clip: float | None = None):
        self.device = torch.device(device) if device is not None else default_device()
        self.loss_fn = loss_fn
        self.grad_clip = grad_clip
        self.step = 0
        self.model = self._wrap(model.to(self.device))
        self.optimizer = optimizer(self.model.parameters())

    def _wrap(self, model: nn.Module) -> nn.Module:
        return model

    @property
    def module(self) -> nn.Module:
        """The user's model, unwrapped."""
        return self.model

    def forward_backward(self, batch: Any) -> dict[str, float]:
        self.model.train()
        out = self.loss_fn(self.model, move_to_device(batch, self.device))
        loss = out["loss"] if isinstance(out, dict) else out
        loss.backward()
        metrics = {"loss": float(loss.detach())}
        if isinstance(out, dict):
            for k, v in out.items():
                if k != "loss":
                    metrics[k] = float(v.detach()) if isinstance(v, torch.Tensor) else float(v)
        return metrics

    def optim_step(self) -> None:
        if self.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1

    def state_dict(self) -> dict[str, Any]:
        """Full, unwrapped model and optimizer state on CPU (a collective under FSDP: call on every rank)."""
        from gpufleet.training.checkpoint import gather_state

        model_state, optim_state = gather_state(self.model, self.optimizer)
        return {"model": model_state, "optimizer": optim_state, "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from gpufleet.training.checkpoint import apply_state

        apply_state(self.model, self.optimizer, state["model"], state["optimizer"])
        self.step = int(state.get("step", 0))

    def save_checkpoint(self, path: str | Path) -> None:
        """Write the state to ``path`` atomically from rank 0; every rank must call it."""
        state = self.state_dict()
        if _rank() == 0:
            p = Path(path)
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(f".{p.name}.tmp")
            torch.save(state, tmp)
            os.replace(tmp, p)
        if dist.is_initialized():
            dist.barrier()

    def load_checkpoint(self, path: str | Path) -> None:
        self.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))


class SingleDeviceBackend(_Backend):
    strategy = "single"


class DDPBackend(_Backend):
    strategy = "ddp"

    def _wrap(self, model: nn.Module) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel as DDP

        init_distributed(self.device)
        ids = [self.device.index] if backend_ops(self.device).is_accelerator else None
        return DDP(model, device_ids=ids)

    @property
    def module(self) -> nn.Module:
        return self.model.module


class FSDPBackend(_Backend):
    strategy = "fsdp"

    def _wrap(self, model: nn.Module) -> nn.Module:
        from torch.distributed.fsdp import fully_shard

        init_distributed(self.device)
        for child in model.children():
            if any(p.requires_grad for p in child.parameters()):
                fully_shard(child)
        fully_shard(model)
        return model


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def make_backend(model: nn.Module, loss_fn: LossFn, optimizer: OptimizerFactory, strategy: str = "single",
                 **kw: Any) -> TrainingBackend:
    """The backend for ``strategy`` (``single`` | ``ddp`` | ``fsdp``); the loop stays the same."""
    cls = {"single": SingleDeviceBackend, "ddp": DDPBackend, "fsdp": FSDPBackend}.get(strategy)
    if cls is None:
        raise ValueError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    return cls(model, loss_fn, optimizer, **kw)
