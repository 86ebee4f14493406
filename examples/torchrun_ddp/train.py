"""A plain torchrun DDP training: no gpufleet import.

Runs the same way under both:

    torchrun --standalone --nproc_per_node 2 train.py --steps 200
    gpufleet run --gpus 2 --memory 2GiB -- python train.py --steps 200

It trains a small regression model on synthetic data, checkpoints to
``$GPUFLEET_CHECKPOINT_DIR`` (or ./checkpoints) every 50 steps, and resumes
from ``$GPUFLEET_RESUME_FROM`` when gpufleet restarts it after a lost worker.
It keeps gpufleet's stop contract without importing gpufleet: on SIGTERM (or
once ``$GPUFLEET_STOP_FILE`` exists) every rank agrees to stop, rank 0
checkpoints, and the next attempt resumes from that step.
"""

import argparse
import os
import signal

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


STOP = {"asked": False}


def stop_requested() -> bool:
    path = os.environ.get("GPUFLEET_STOP_FILE", "")
    return STOP["asked"] or bool(path and os.path.exists(path))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch", type=int, default=64, help="per rank")
    args = ap.parse_args()

    # Python's default SIGTERM ends the process at once; record it instead and checkpoint in the grace.
    signal.signal(signal.SIGTERM, lambda *_: STOP.update(asked=True))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend)
    rank = dist.get_rank()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.GELU(), torch.nn.Linear(256, 1)).to(device)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    true_w = torch.randn(32, 1, generator=torch.Generator().manual_seed(42)).to(device)

    start = 0
    resume = os.environ.get("GPUFLEET_RESUME_FROM", "")
    if resume:
        state = torch.load(resume, map_location=device, weights_only=True)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
        if rank == 0:
            print(f"resumed from {resume} at step {start}", flush=True)
    ckpt_dir = os.environ.get("GPUFLEET_CHECKPOINT_DIR", "checkpoints")
    os.makedirs(ckpt_dir, exist_ok=True)

    g = torch.Generator().manual_seed(1000 + rank)
    for step in range(start + 1, args.steps + 1):
        x = torch.randn(args.batch, 32, generator=g).to(device)
        y = x @ true_w
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.5f}", flush=True)
        asked = torch.tensor([1.0 if stop_requested() else 0.0], device=device)
        dist.all_reduce(asked)  # every rank stops at the same step
        if rank == 0 and (step % 50 == 0 or asked.item() > 0):
            tmp = os.path.join(ckpt_dir, f".step-{step}.tmp")
            torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step}, tmp)
            os.replace(tmp, os.path.join(ckpt_dir, f"step-{step:07d}.pt"))
        if asked.item() > 0:
            break
    dist.barrier()  # leave together: gloo can abort a rank whose peers are gone
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
