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
(``devices.ops``, ``engine.distributed``, ``engine.checkpoint``).

``loss_fn(model, batch)`` returns the loss tensor or a dict with ``loss`` and
other (detached) metrics, as a recipe's does. Gradients are averaged over
ranks, so with equal shards every strategy computes the same steps as one
device on the whole batch.

The built-in recipes' Trainer runs on this same backend, with the options a
recipe config sets: ``precision`` (autocast, and a GradScaler for fp16),
``grad_accum`` (that many ``forward_backward`` calls per ``optim_step``, the
gradient all-reduce only on the last), ``grad_clip``, ``lr_lambda`` (a
LambdaLR schedule stepped with the optimizer), ``ddp_bucket_mb`` and
``fsdp_sharding``. A model with a ``post_step()`` method has it called after
every optimizer step.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
import torch.distributed as dist
from torch import nn

from gpufleet.devices.ops import backend_ops, move_to_device
from gpufleet.engine import compat, rankenv, stopfile

STRATEGIES = ("single", "ddp", "fsdp")
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
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

    def stop_requested(self) -> bool: ...


def default_device() -> torch.device:
    """This rank's accelerator (``LOCAL_RANK``), or the CPU."""
    local = rankenv.local_rank()
    if torch.cuda.is_available():
        return torch.device("cuda", local)
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return torch.device("xpu", local)
    return torch.device("cpu")


def init_distributed(device: torch.device, timeout_s: float = 600.0) -> None:
    """Join the process group described by the torchrun environment, unless joined already."""
    if dist.is_initialized():
        return
    if not rankenv.has_torchrun_world():
        raise RuntimeError("DDP and FSDP need the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR, "
                           "MASTER_PORT): run under `gpufleet run` or `torchrun`, or call init_process_group")
    ops = backend_ops(device)
    ops.set_device()
    dist.init_process_group(backend=ops.dist_backend, timeout=timedelta(seconds=timeout_s))


class _Backend:
    strategy = "single"

    def __init__(self, model: nn.Module, loss_fn: LossFn, optimizer: OptimizerFactory, *,
                 device: torch.device | str | None = None, grad_clip: float | None = None,
                 precision: str = "fp32", grad_accum: int = 1, lr_lambda: Callable[[int], float] | None = None,
                 ddp_bucket_mb: float | None = None, fsdp_sharding: str = "full_shard"):
        if precision not in PRECISIONS:
            raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
        if grad_accum < 1:
            raise ValueError(f"grad_accum must be >= 1, got {grad_accum}")
        self.device = torch.device(device) if device is not None else default_device()
        self.ops = backend_ops(self.device)
        self.loss_fn = loss_fn
        self.grad_clip = grad_clip
        self.grad_accum = grad_accum
        self.ddp_bucket_mb, self.fsdp_sharding = ddp_bucket_mb, fsdp_sharding
        self.step = 0
        self._micro = 0
        self._post_step = getattr(model, "post_step", None)
        self.model = self._wrap(model.to(self.device))
        self.optimizer = optimizer(self.model.parameters())
        self.scheduler = (torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda)
                          if lr_lambda is not None else None)
        self.amp_dtype = PRECISIONS[precision]
        self.scaler = self.ops.grad_scaler(enabled=precision == "fp16")

    def _wrap(self, model: nn.Module) -> nn.Module:
        return model

    def _no_sync(self, last_micro: bool) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    @property
    def module(self) -> nn.Module:
        """The user's model, unwrapped."""
        return self.model

    def accumulate(self, batch: Any) -> dict[str, Any]:
        """Forward and backward of one micro-batch; returns the loss parts
        detached, as tensors (no wait for the device). Gradients are
        all-reduced on the ``grad_accum``-th call only."""
        last = self._micro == self.grad_accum - 1
        batch = move_to_device(batch, self.device, non_blocking=True)
        with self._no_sync(last):
            with self.ops.autocast(self.amp_dtype):
                out = self.loss_fn(self.model, batch)
            loss = out["loss"] if isinstance(out, dict) else out
            self.scaler.scale(loss / self.grad_accum if self.grad_accum > 1 else loss).backward()
        self._micro = 0 if last else self._micro + 1
        parts = dict(out) if isinstance(out, dict) else {"loss": out}
        return {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in parts.items()}

    def forward_backward(self, batch: Any) -> dict[str, float]:
        self.model.train()
        return {k: float(v) for k, v in self.accumulate(batch).items()}

    def optim_step(self, sync: Callable[[], bool] | None = None) -> None:
        """Clip, step the optimizer (and the LR schedule), zero the gradients.

        ``sync`` (ranks that share their gradients themselves, without a DDP
        wrapper: ``engine/parallel.py``) runs once the gradients are unscaled,
        so ranks with and without a loss scaler add like values; it returns
        False when the summed gradients are not finite, and every rank then
        skips this update alike.
        """
        if self.grad_clip or sync is not None:
            self.scaler.unscale_(self.optimizer)
        if sync is None or sync():
            if self.grad_clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
            self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if self.scheduler is not None:
            self.scheduler.step()
        if self._post_step is not None:
            self._post_step()
        self._micro = 0
        self.step += 1

    def state_dict(self) -> dict[str, Any]:
        """Full, unwrapped model and optimizer state on CPU, with the LR schedule
        and loss scaler (a collective under FSDP: call on every rank)."""
        from gpufleet.engine.checkpoint import gather_state

        model_state, optim_state = gather_state(self.model, self.optimizer)
        state = {"model": model_state, "optimizer": optim_state, "step": self.step,
                 "scaler": self.scaler.state_dict()}
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from gpufleet.engine.checkpoint import apply_state

        apply_state(self.model, self.optimizer, state["model"], state["optimizer"])
        self.step = int(state.get("step", 0))
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler") is not None:
            self.scaler.load_state_dict(state["scaler"])

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

    def stop_requested(self) -> bool:
        """Whether gpufleet asked the training to stop (engine/stopfile.py), agreed by every rank.

        Ranks can see the request at different steps; one all-reduce makes them
        checkpoint at the same one. Call ``gpufleet.watch_stop()`` once at start so
        SIGTERM leaves the grace to checkpoint in rather than ending the process.
        """
        asked = stopfile.stop_requested()
        if not dist.is_initialized():
            return asked
        flag = torch.tensor([1.0 if asked else 0.0], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item() > 0)


class SingleDeviceBackend(_Backend):
    strategy = "single"


class DDPBackend(_Backend):
    strategy = "ddp"

    def _wrap(self, model: nn.Module) -> nn.Module:
        init_distributed(self.device)
        device_ids = [self.device.index] if self.ops.is_accelerator else None
        # A model whose buffers are kept equal by its own logic says so
        # and saves one broadcast per forward.
        sync_buffers = getattr(model, "ddp_sync_buffers", True)
        return compat.ddp_class()(model, **compat.ddp_kwargs(sync_buffers, device_ids, self.ddp_bucket_mb))

    def _no_sync(self, last_micro: bool) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext() if last_micro else self.model.no_sync()

    @property
    def module(self) -> nn.Module:
        return self.model.module


class FSDPBackend(_Backend):
    strategy = "fsdp"

    def _wrap(self, model: nn.Module) -> nn.Module:
        fully_shard = compat.fully_shard_fn()
        init_distributed(self.device)
        # full_shard frees gathered parameters after forward (least memory);
        # shard_grad_op keeps them until backward (ZeRO-2-like, less traffic).
        reshard = self.fsdp_sharding == "full_shard"
        for child in model.children():
            if any(p.requires_grad for p in child.parameters()):
                fully_shard(child, **compat.fully_shard_kwargs(reshard))
        fully_shard(model, **compat.fully_shard_kwargs(reshard))
        return model

    def _no_sync(self, last_micro: bool) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext() if last_micro else _fsdp_no_sync(self.model)


@contextlib.contextmanager
def _fsdp_no_sync(model: nn.Module):
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def make_backend(model: nn.Module, loss_fn: LossFn, optimizer: OptimizerFactory, strategy: str = "single",
                 **kw: Any) -> TrainingBackend:
    """The backend for ``strategy`` (``single`` | ``ddp`` | ``fsdp``); the loop stays the same."""
    cls = {"single": SingleDeviceBackend, "ddp": DDPBackend, "fsdp": FSDPBackend}.get(strategy)
    if cls is None:
        raise ValueError(f"strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    return cls(model, loss_fn, optimizer, **kw)
