"""The per-rank training loop of the built-in recipes.

``Trainer(recipe, config, devices=[...], rank=r).train()`` runs one rank. The
model is driven through ``gpufleet.TrainingBackend`` (``engine/backend.py``:
forward/backward, accumulation, AMP, clipping, optimizer and LR steps, state),
the same backend a user's own loop runs on; the Trainer adds the data order,
metrics, checkpoints with RNG state and stop requests. Step hooks
(:class:`StepHook`, given by whoever builds the Trainer) run before and after
each step: the launcher installs the drills there (``engine/drills.py``). With
one device it runs without a process group or a DDP wrapper and writes the
same checkpoints, so a run can move between one and many devices. The
launcher starts one Trainer per rank; a notebook can run a one-device
Trainer directly.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from gpufleet.devices.device import VISIBILITY
from gpufleet.devices.ops import backend_ops
from gpufleet.engine import checkpoint as ckpt
from gpufleet.engine.backend import make_backend
from gpufleet.engine.config import TrainingConfigError, TrainConfig
from gpufleet.engine.distributed import DistributedTrainer
from gpufleet.engine.parallel import rank_layout, rank_precision, rank_sync
from gpufleet.engine.progress import ProgressWriter, step_line
from gpufleet.engine.recipes import Recipe
from gpufleet.engine.schedule import lr_lambda
from gpufleet.engine.startup import PHASES, StartupClock


@dataclass
class TrainResult:
    status: str  # "succeeded" | "interrupted"
    step: int
    last_metrics: dict[str, Any]
    checkpoint: str | None


class StepHook(Protocol):
    """Called at points of every step of :meth:`Trainer.train` (the launcher's drills are hooks)."""

    def before_step(self, trainer: Trainer) -> None: ...

    def after_compute(self, trainer: Trainer, seconds: float) -> None:
        """This rank's own part of the step is done, ``seconds`` after the step began: before the
        gradient sum where the rank sums them itself (engine/parallel.py), after the optimizer
        step otherwise (DDP and FSDP sum inside the backward)."""


class Trainer:
    def __init__(self, recipe: Recipe, config: TrainConfig, *, devices: list[str] | None = None,
                 rank: int = 0, checkpoint_dir: str | Path | None = None, data_root: str | Path | None = None,
                 resume: bool = True, progress: ProgressWriter | None = None,
                 should_stop: Callable[[], bool] | None = None, collective_timeout_s: float = 60.0,
                 master_port: int | None = None, dist_trainer: DistributedTrainer | None = None,
                 master_addr: str = "127.0.0.1", rendezvous_timeout_s: float | None = None,
                 rank_groups: list[int] | None = None, group_backends: list[str | None] | None = None,
                 process_group_backend: str | None = None, hooks: Sequence[StepHook] = (),
                 report_at: Sequence[int] = ()):  # steps reported whatever log_every says (a sweep's rungs)
        self.recipe, self.config = recipe, config
        self.hooks, self.report_at = list(hooks), frozenset(report_at)
        self.dt = dist_trainer or DistributedTrainer(devices or ["cpu"], config,
                                                     collective_timeout_s=collective_timeout_s,
                                                     master_addr=master_addr, master_port=master_port,
                                                     rendezvous_timeout_s=rendezvous_timeout_s,
                                                     process_group_backend=process_group_backend)
        # Ranks of several vendors (the launcher's groups): see engine/parallel.py.
        self.rank_groups, self.group_backends = rank_groups, group_backends
        self.sync = None
        self.rank = rank
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.data_root, self.resume = data_root, resume
        self.progress = progress if rank == 0 else None
        self.should_stop = should_stop or (lambda: False)
        self.step = 0
        self.consumed_batches = 0
        self.last_checkpoint: str | None = None
        self._checkpoint_step = -1
        self._boundary_step = -1
        self.last_metrics: dict[str, Any] = {}
        self._setup_done = False
        self.clock: StartupClock | None = None

    # -- set-up -------------------------------------------------------------

    def setup(self) -> None:
        self.clock = StartupClock()
        self.device = self.dt.setup(self.rank, clock=self.clock)
        self.ops = backend_ops(self.device)
        if self.ops.kind == "cpu" and self.dt.world_size > 1:
            # CPU ranks share the cores: more threads than cores only thrash.
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // self.dt.world_size))
        cfg = self.config
        # Same seed on every rank: identical initial weights with no broadcast.
        torch.manual_seed(cfg.seed)
        np.random.seed(cfg.seed % 2**32)
        random.seed(cfg.seed)
        model, self.dataset, self.loss_fn = self.recipe.build(cfg, self.data_root)
        self.raw_model: nn.Module = model
        self.strategy = self.dt.resolved_strategy()
        mixed = len(set(self.rank_groups or [0])) > 1
        self.sync = rank_sync(cfg, self.rank, self.dt.world_size, distributed=self.dt.distributed,
                              mixed_vendors=mixed, groups=self.rank_groups, group_backends=self.group_backends)
        if self.sync is not None and self.hooks:
            self.sync.on_computed = self._computed
        self.precision = rank_precision(cfg.precision, self.device)
        self.backend = make_backend(
            model, self.loss_fn,
            lambda params: torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay),
            strategy="single" if self.sync else self.strategy, device=self.device, grad_clip=cfg.grad_clip,
            precision=self.precision,
            grad_accum=self.dt.grad_accum_steps, lr_lambda=lr_lambda(cfg),
            ddp_bucket_mb=cfg.ddp_bucket_mb, fsdp_sharding=cfg.fsdp_sharding)
        b = self.backend
        self.model, self.optimizer, self.scheduler, self.scaler = b.model, b.optimizer, b.scheduler, b.scaler
        self.ops.reset_peak_memory_stats()
        if self.resume and self.checkpoint_dir is not None:
            found = ckpt.newest_checkpoint(self.checkpoint_dir)
            if found is not None:
                self._load(found)
        self._make_loader()
        self.clock.mark("model")
        self._setup_done = True
        if mixed:
            # Each rank says what it runs on (device, visibility variable, precision, process group).
            layout = rank_layout(self.rank, self.device, self.precision, tuple(VISIBILITY.values()))
            everyone = [None] * self.dt.world_size
            dist.all_gather_object(everyone, layout)
            if self.progress:
                self.progress.write("layout", per_rank=everyone, parallel_mode=cfg.parallel_mode,
                                    shares=self.sync.shares if self.sync else None)

    def _make_loader(self) -> None:
        if self.sync is not None and self.sync.sliced:
            self.loader = self.sync.loader(self.dataset, self.consumed_batches, backend_ops(self.device).kind == "cuda")
        else:
            self.loader = self.dt.create_distributed_dataloader(self.dataset, self.rank, self.consumed_batches)
        self._batches = iter(self.loader)

    def _samples_per_batch(self) -> int:
        """Samples of the whole job per consumed micro-batch of this rank."""
        if self.sync is not None and self.sync.sliced:
            return self.config.global_batch_size  # one slice of each global batch per step
        return self.dt.micro_batch_size * self.dt.world_size

    def _load(self, path: Path) -> None:
        state = ckpt.load_checkpoint(path)
        recipe = state["meta"].get("recipe")
        if recipe != self.recipe.name:
            raise TrainingConfigError("resume",
                                      f"checkpoint {path} is from recipe {recipe!r}, not {self.recipe.name!r}")
        s = state["state"]
        try:
            self.backend.load_state_dict({"model": state["model"], "optimizer": state["optimizer"],
                                          "step": s["step"], "scheduler": s["scheduler"], "scaler": s["scaler"]})
        except (RuntimeError, KeyError, ValueError) as exc:
            raise TrainingConfigError("resume", f"checkpoint {path} does not fit this model "
                                        f"(was the config changed?): {str(exc)[:300]}") from None
        self.step = int(s["step"])
        # Micro-batches are counted globally (per-rank count x accumulation is
        # the same whatever the layout), so a run can resume on another world size.
        self.consumed_batches = int(s["samples_seen"]) // self._samples_per_batch()
        if self.sync is not None:
            try:
                self.sync.load_state_dict(s.get("parallel"))
            except ValueError as exc:
                raise TrainingConfigError("resume", f"checkpoint {path}: {exc}") from None
        rng = s["rng"]
        mine = rng[self.rank] if self.rank < len(rng) else rng[0]
        torch.set_rng_state(mine["torch"])
        np.random.set_state(("MT19937", np.array(mine["numpy"][0], dtype=np.uint32), *mine["numpy"][1:]))
        random.setstate(_to_tuple(mine["python"]))
        if mine.get("accel") is not None and self.ops.kind == "cuda":
            torch.cuda.set_rng_state(mine["accel"], self.device)
        self.last_checkpoint = str(path)
        self._checkpoint_step = self.step
        if self.progress:
            self.progress.write("resume", step=self.step, path=str(path))

    # -- the loop -----------------------------------------------------------

    def train_step(self) -> dict[str, torch.Tensor]:
        """One optimizer step over the global batch; returns the step's loss parts (on device)."""
        accum = self.backend.grad_accum
        totals: dict[str, torch.Tensor] = {}
        sync, t0 = self.sync, time.perf_counter()
        # A rank's mean loss counts by its share of the global batch (1 on equal ranks).
        factor = sync.metric_factor if sync is not None else 1.0
        if sync is not None:
            sync.begin_step()
        for _ in range(accum):
            batch = next(self._batches)
            self.consumed_batches += 1
            for k, v in self.backend.accumulate(batch).items():
                v = v.float() / accum if factor == 1.0 else v.float() * (factor / accum)
                totals[k] = totals[k] + v if k in totals else v
        if sync is not None:
            self.backend.optim_step(sync=lambda: sync.reduce_grads(self.backend.model))
        else:
            self.backend.optim_step()
            self._computed(time.perf_counter() - t0)
        self.step += 1
        if sync is not None:
            sync.after_step(self.backend.model, self.step)
        return totals

    def _computed(self, seconds: float) -> None:
        for hook in self.hooks:
            hook.after_compute(self, seconds)

    def train(self) -> TrainResult:
        if not self._setup_done:
            self.setup()
        cfg = self.config
        world = self.dt.world_size
        window: torch.Tensor | None = None
        names: list[str] = []
        step_times: list[float] = []
        t_window = time.perf_counter()
        status = "succeeded"
        first_report = True
        reported: int | None = None  # the newest step whose metrics this attempt reported
        while self.step < cfg.max_steps:
            for hook in self.hooks:
                hook.before_step(self)
            if world == 1 and reported == self.step and self.should_stop():
                # Stopped as a hook held it (pruned at its rung): it checkpoints there, no step past it.
                status = "interrupted"
                self.checkpoint()
                break
            t0 = time.perf_counter()
            parts = self.train_step()
            if first_report and self.clock is not None and "first_step" not in self.clock.marks:
                self.ops.synchronize()  # once: the first step as the device finished it
                self.clock.mark("first_step")
            step_times.append(time.perf_counter() - t0)
            if window is None:
                names = ["loss"] + sorted(k for k in parts if k != "loss")
                window = torch.zeros(len(names), device=self.device)
            window += torch.stack([parts[n] for n in names])
            stop_here = self.should_stop() if world == 1 else False
            if self.step % cfg.log_every == 0 or self.step in self.report_at or self.step == cfg.max_steps or stop_here:
                stop = self._report(names, window, step_times, t_window, first_report)
                first_report, reported = False, self.step
                window.zero_()
                step_times.clear()
                t_window = time.perf_counter()
                if stop:
                    status = "interrupted"
                    self.checkpoint()
                    break
            if self.step % cfg.checkpoint_every == 0 or self.step == cfg.max_steps:
                self.checkpoint()
        return TrainResult(status, self.step, self.last_metrics, self.last_checkpoint)

    def _report(self, names: list[str], window: torch.Tensor, step_times: list[float], t_window: float,
                first: bool) -> bool:
        """Average metrics over ranks with one all-reduce, which also carries
        each rank's step time, peak memory and stop request. Returns whether
        every rank should stop now."""
        world, n = self.dt.world_size, max(1, len(step_times))
        extra = torch.zeros(1 + 2 * world, dtype=torch.float64)
        extra[0] = 1.0 if self.should_stop() else 0.0
        extra[1 + self.rank] = sum(step_times) / n
        extra[1 + world + self.rank] = float(self.ops.max_memory_allocated() or 0)
        # The first report also carries every rank's start-up phases (no collective of their own).
        startup = torch.zeros(len(PHASES) * world if first and self.clock else 0, dtype=torch.float64)
        if len(startup):
            startup[self.rank * len(PHASES):(self.rank + 1) * len(PHASES)] = torch.tensor(self.clock.seconds())
        vec = torch.cat([window.double() / n, extra.to(self.device), startup.to(self.device)])
        if self.dt.distributed:
            dist.all_reduce(vec)
        vec = vec.cpu()
        k = len(names)
        means = (vec[:k] / world).tolist()
        stop = bool(vec[k] > 0)
        rank_times = vec[k + 1:k + 1 + world].tolist()
        peaks = [int(x) for x in vec[k + 1 + world:k + 1 + 2 * world].tolist()]
        if len(startup) and self.progress:
            per_rank = vec[k + 1 + 2 * world:].view(world, len(PHASES)).tolist()
            self.progress.write("startup", phases=list(PHASES), per_rank=per_rank)
        elapsed = time.perf_counter() - t_window
        metrics = {
            "step": self.step,
            "loss": means[0],
            "parts": dict(zip(names[1:], means[1:])),
            "samples_per_s": self.config.global_batch_size * len(step_times) / elapsed if elapsed > 0 else None,
            "lr": self.scheduler.get_last_lr()[0],
            "rank_step_times": rank_times,
        }
        if self.sync is not None and self.sync.shares is not None:
            metrics["rank_shares"] = self.sync.shares
        self.last_metrics = metrics
        if self.progress:
            self.progress.write("step", **metrics)
            if not sys.stdout.isatty():
                # Into the training log (a terminal shows the progress bar instead).
                print(step_line(self.step, self.config.max_steps, metrics["loss"], metrics["parts"],
                                metrics["samples_per_s"]), flush=True)
            if first or self.step >= self.config.max_steps or stop:
                self.progress.write("peak_memory", step=self.step, per_rank=peaks, device_kind=self.ops.kind)
        return stop

    def checkpoint(self) -> str | None:
        """Save ``step-N/`` (rank 0 writes; under FSDP every rank helps gather).

        A checkpoint is a boundary of engine/parallel.py's modes first:
        speed-proportional shares are re-tuned, independent replicas merged.
        """
        if self.sync is not None and self._boundary_step != self.step:
            self._boundary_step = self.step
            if self.sync.at_checkpoint(self.backend.model, self.optimizer):
                self._make_loader()
        if self.checkpoint_dir is None or self._checkpoint_step == self.step:
            return self.last_checkpoint
        state = self.backend.state_dict()  # under FSDP every rank takes part in the gather
        rng = _rng_state(self.ops)
        rngs = [rng]
        if self.dt.distributed:
            rngs = [None] * self.dt.world_size
            dist.all_gather_object(rngs, rng)
        path = None
        if self.rank == 0:
            train_state = {
                "scheduler": state["scheduler"],
                "scaler": state["scaler"],
                "step": self.step,
                "samples_seen": self.consumed_batches * self._samples_per_batch(),
                "rng": rngs,
            }
            if self.sync is not None:
                train_state["parallel"] = self.sync.state_dict()
            meta = {"recipe": self.recipe.name, "config": self.config.to_dict(),
                    "world_size": self.dt.world_size, "strategy": self.strategy,
                    "metrics": self.last_metrics}
            path = str(ckpt.write_checkpoint(self.checkpoint_dir, self.step, model_state=state["model"],
                                             optim_state=state["optimizer"], train_state=train_state, meta=meta,
                                             keep=self.config.keep_checkpoints))
            if self.progress:
                self.progress.write("checkpoint", step=self.step, path=path)
        if self.dt.distributed:
            dist.barrier()  # nobody races ahead (or exits) while rank 0 still writes
        self.last_checkpoint = path or str(self.checkpoint_dir / f"step-{self.step}")
        self._checkpoint_step = self.step
        return self.last_checkpoint

    def evaluate(self) -> dict[str, float]:
        if self.recipe.evaluate_fn is None:
            return {}
        return self.recipe.evaluate_fn(self.raw_model, self.dataset, self.config)

    def close(self) -> None:
        self.dt.cleanup()


def _rng_state(ops) -> dict[str, Any]:
    np_state = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": [np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "python": _to_list(random.getstate()),
        "accel": torch.cuda.get_rng_state(ops.device) if ops.kind == "cuda" else None,
    }


def _to_list(x: Any) -> Any:
    return [_to_list(v) for v in x] if isinstance(x, (tuple, list)) else x


def _to_tuple(x: Any) -> Any:
    return tuple(_to_tuple(v) for v in x) if isinstance(x, list) else x
