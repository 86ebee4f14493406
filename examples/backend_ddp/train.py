"""The same training on ``gpufleet.TrainingBackend``, reporting its loss with ``gpufleet.report``.

    gpufleet run --gpus 2 --memory 2GiB -- python train.py --strategy ddp
    gpufleet run --gpus 2 --memory 2GiB -- python train.py --strategy fsdp
    python train.py --strategy single          # one device, no gpufleet server

The loop does not change between strategies; ``gpufleet.report`` feeds the
training's loss curve (dashboard, ``/metrics``) and does nothing outside
gpufleet. Checkpoints are full, unwrapped state, so a run saved under FSDP
resumes under DDP and the other way round. When gpufleet stops the training
(stop, preemption, reclaim, max_runtime) every rank checkpoints within the
grace and it resumes from that step (``backend.stop_requested()``).
"""

import argparse
import os
import time

import torch

import gpufleet
from gpufleet import make_backend  # the public name; the module behind it is gpufleet.engine.backend


def loss_fn(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> dict[str, torch.Tensor]:
    x, y = batch
    pred = model(x)
    return {"loss": torch.nn.functional.mse_loss(pred, y), "mae": (pred - y).abs().mean().detach()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch", type=int, default=64, help="per rank")
    ap.add_argument("--strategy", default="ddp", choices=["single", "ddp", "fsdp"])
    args = ap.parse_args()

    gpufleet.watch_stop()  # SIGTERM leaves the grace to checkpoint in
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.GELU(), torch.nn.Linear(256, 1))
    backend = make_backend(model, loss_fn, lambda params: torch.optim.AdamW(params, lr=args.lr),
                           strategy=args.strategy)
    resume = os.environ.get("GPUFLEET_RESUME_FROM", "")
    if resume:
        backend.load_checkpoint(resume)
    ckpt_dir = os.environ.get("GPUFLEET_CHECKPOINT_DIR", "checkpoints")
    rank = int(os.environ.get("RANK", 0))
    true_w = torch.randn(32, 1, generator=torch.Generator().manual_seed(42))
    g = torch.Generator().manual_seed(1000 + rank)

    world = int(os.environ.get("WORLD_SIZE", 1))
    while backend.step < args.steps:
        t0 = time.perf_counter()
        x = torch.randn(args.batch, 32, generator=g)
        out = backend.forward_backward((x, x @ true_w))
        backend.optim_step()
        # total_steps gives the dashboard's progress and ETA; samples_per_s its Throughput chart.
        gpufleet.report(step=backend.step, total_steps=args.steps,
                        samples_per_s=args.batch * world / (time.perf_counter() - t0), **out)
        stopping = backend.stop_requested()
        if backend.step % 50 == 0 or stopping:
            backend.save_checkpoint(os.path.join(ckpt_dir, f"step-{backend.step:07d}.pt"))
        if stopping:
            break
    if torch.distributed.is_initialized():
        torch.distributed.barrier()  # leave together: gloo can abort a rank whose peers are gone
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
