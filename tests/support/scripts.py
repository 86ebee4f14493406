"""Training scripts a user would write for torchrun, written into a test's directory.

``DDP_SCRIPT`` imports nothing from gpufleet: it reads the torchrun
variables through ``init_process_group`` and trains a small DDP model with
gloo. ``RESUMABLE_SCRIPT`` also honours ``GPUFLEET_RESUME_FROM`` /
``GPUFLEET_CHECKPOINT_DIR`` and calls ``gpufleet.report``.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

DDP_SCRIPT = '''\
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--fail-rank", type=int, default=-1)
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
assert rank == int(os.environ["RANK"]) and dist.get_world_size() == int(os.environ["WORLD_SIZE"])
local_rank = int(os.environ["LOCAL_RANK"])
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=args.lr)
for step in range(args.steps):
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step * 10 + rank))
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.4f} local_rank {local_rank}", flush=True)
    if rank == args.fail_rank and step == 1:
        print("something went wrong in my code", file=sys.stderr, flush=True)
        # Skip interpreter teardown: gloo's threads may abort it (SIGABRT) instead of exiting with 3.
        os._exit(3)
    time.sleep(args.sleep)
if rank == 0:
    print("done", flush=True)
# Leave together: gloo can abort a rank whose peers already tore the group down.
dist.barrier()
dist.destroy_process_group()
# And leave without the interpreter's teardown: torch (2.13, CPU) can still abort there (SIGABRT,
# "terminate called without an active exception") after the group is destroyed; seen in CI about once in
# fifty two-rank runs, never on its own. Such a rank is a failed rank, to gpufleet as to torchrun.
sys.stdout.flush()
os._exit(0)
'''

RESUMABLE_SCRIPT = '''\
import argparse
import os
import time

import torch
import torch.distributed as dist

import gpufleet

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--sleep", type=float, default=0.0)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
start = 0
resume = os.environ.get("GPUFLEET_RESUME_FROM", "")
if resume:
    state = torch.load(resume, weights_only=True)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    start = state["step"]
    print(f"resumed from {resume} at step {start}", flush=True)
ckpt_dir = os.environ["GPUFLEET_CHECKPOINT_DIR"]
for step in range(start + 1, args.steps + 1):
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step * 10 + rank))
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    gpufleet.report(step=step, loss=loss, lr=0.05)
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    if rank == 0 and step % 2 == 0:
        tmp = os.path.join(ckpt_dir, f".step-{step}.tmp")
        torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step}, tmp)
        os.replace(tmp, os.path.join(ckpt_dir, f"step-{step:06d}.pt"))
    time.sleep(args.sleep)
dist.barrier()
dist.destroy_process_group()
'''


def write_project(root: Path, script: str = DDP_SCRIPT, name: str = "train.py") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(script)
    return root


def tar_of(entries: list[tuple[str, str, bytes | str]]) -> bytes:
    """A .tar.gz from (kind, name, content-or-link-target) entries; kind: file|dir|symlink|hardlink|fifo|chr."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for kind, name, payload in entries:
            ti = tarfile.TarInfo(name)
            data = b""
            if kind == "file":
                data = payload if isinstance(payload, bytes) else str(payload).encode()
                ti.size = len(data)
            elif kind == "dir":
                ti.type = tarfile.DIRTYPE
            elif kind == "symlink":
                ti.type, ti.linkname = tarfile.SYMTYPE, str(payload)
            elif kind == "hardlink":
                ti.type, ti.linkname = tarfile.LNKTYPE, str(payload)
            elif kind == "fifo":
                ti.type = tarfile.FIFOTYPE
            elif kind == "chr":
                ti.type = tarfile.CHRTYPE
            tar.addfile(ti, io.BytesIO(data) if kind == "file" else None)
    return buf.getvalue()


# Keeps the stop contract: records SIGTERM, checks the stop marker every step (all ranks agree), and
# checkpoints on a stop; otherwise only every 50 steps. Rank 0 draws its progress with carriage returns
# (as tqdm does) and reports its total steps and throughput.
STOP_AWARE_SCRIPT = '''\
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

import gpufleet

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100000)
parser.add_argument("--sleep", type=float, default=0.05)
parser.add_argument("--linger", type=float, default=0.0)  # stay this long after the stop's checkpoint
args = parser.parse_args()

gpufleet.watch_stop()
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
start = 0
resume = os.environ.get("GPUFLEET_RESUME_FROM", "")
if resume:
    state = torch.load(resume, weights_only=True)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    start = state["step"]
    if rank == 0:
        print(f"resumed from {resume} at step {start}", flush=True)
ckpt_dir = os.environ["GPUFLEET_CHECKPOINT_DIR"]


def save(step):
    tmp = os.path.join(ckpt_dir, f".step-{step}.tmp")
    torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, os.path.join(ckpt_dir, f"step-{step:06d}.pt"))


for step in range(start + 1, args.steps + 1):
    t0 = time.monotonic()
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step * 10 + rank))
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    gpufleet.report(step=step, loss=loss, lr=0.05, total_steps=args.steps,
                    samples_per_s=16 / max(time.monotonic() - t0, 1e-6))
    if rank == 0:
        sys.stdout.write(f"\\rprogress {step}/{args.steps}")
        sys.stdout.flush()
    asked = torch.tensor([1.0 if gpufleet.stop_requested() else 0.0])
    dist.all_reduce(asked)
    if asked.item() > 0:
        if rank == 0:
            save(step)
            print(f"\\ncheckpointed on stop at step {step}", flush=True)
        time.sleep(args.linger)
        break
    if rank == 0 and step % 50 == 0:
        save(step)
    time.sleep(args.sleep)
dist.barrier()
dist.destroy_process_group()
'''
