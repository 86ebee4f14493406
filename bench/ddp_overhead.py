"""Overhead of gpufleet's training loop against a bare hand-written DDP loop.

Same model (the ``mlp`` recipe), same data, same global batch, same steps
(forward, backward with DDP's all-reduce, gradient clipping, AdamW); two gloo
ranks on CPU by default. Both loops run in the same ranks and process group,
alternating round by round in one invocation, so load from elsewhere on the
machine hits both alike; the ratio ours/bare of the median samples/s is
printed (goal: >= 0.97 on CPU, >= 0.99 on a GPU). A single-process run of our loop (one device, no
process group) is printed for reference, then a scaling table of our loop
over world sizes 1, 2 and 4 (where cores allow): the harness the seeds'
2/4/8-GPU scaling benchmark runs on a GPU host with ``--device cuda``.

    python bench/ddp_overhead.py [--steps 40] [--rounds 20] [--device cpu|cuda] [--size small|gpu]

Timing happens inside the ranks after a warm-up, so process start-up and
imports are not counted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

# OpenMP threads that spin while waiting collapse throughput by 20x on a
# machine whose cores are shared with other work (measured: 684 vs 12,781
# samples/s single-process on a loaded 2-core box). Passive waiting is set
# before torch loads, for every loop alike; a dedicated host is unaffected.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gpufleet.engine.distributed import DistributedTrainer, find_free_port
from gpufleet.engine.recipes import get_recipe
from gpufleet.engine.trainer import Trainer

# --size: "small" (the default), or "gpu", a model big enough that a GPU's step is
# dominated by compute, where a host that waits for the device every step shows
# (1024-4096-4096-1024, batch 4096: 0.957-0.966 of bare DDP on an H100 before the
# loop stopped syncing per step). Spawned ranks read the choice from SIZE_ENV.
SIZES = {"small": dict(in_features=64, hidden=[512, 512], out_features=64, global_batch_size=256),
         "gpu": dict(in_features=1024, hidden=[4096, 4096], out_features=1024, global_batch_size=4096)}
SIZE_ENV = "GPUFLEET_BENCH_DDP_SIZE"
CONFIG = dict(SIZES[os.environ.get(SIZE_ENV, "small")], task="regression", synthetic_samples=65536, lr=1e-3,
              grad_clip=1.0, log_every=50, checkpoint_every=10**9)
GOAL = {"cpu": 0.97, "cuda": 0.99}
WARMUP = 10


def _devices(kind: str, world: int) -> list[str]:
    return ["cpu"] * world if kind == "cpu" else [f"{kind}:{i}" for i in range(world)]


def _ours_trainer(rank: int, world: int, kind: str, port: int, use_pg: bool | None = None) -> Trainer:
    r = get_recipe("mlp")
    cfg = r.resolve_config({**CONFIG, "max_steps": WARMUP})
    dt = DistributedTrainer(_devices(kind, world), cfg, master_port=port, use_process_group=use_pg)
    t = Trainer(r, cfg, dist_trainer=dt, rank=rank)
    t.train()  # warm-up: allocations, DDP buckets, first epoch's shuffle
    return t


def _time_ours(t: Trainer, steps: int, world: int) -> float:
    t.config.max_steps += steps
    _sync(t.ops, world)
    t0 = time.perf_counter()
    t.train()
    _sync(t.ops, world)
    return t.config.global_batch_size * steps / (time.perf_counter() - t0)


class _Bare:
    """The loop people write by hand from the PyTorch DDP tutorial: index the
    tensors, forward, loss, backward, clip, step. Same model, data and batch."""

    def __init__(self, rank: int, world: int, device: torch.device):
        from torch.nn.parallel import DistributedDataParallel as DDP

        r = get_recipe("mlp")
        cfg = r.resolve_config(CONFIG)
        torch.manual_seed(cfg.seed)
        model, dataset, _ = r.build(cfg)
        self.x, self.y = dataset.arrays
        self.model = DDP(model.to(device), device_ids=[device.index] if device.type != "cpu" else None)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=0.0)
        self.cfg, self.rank, self.world, self.device = cfg, rank, world, device
        self.per_rank = cfg.global_batch_size // world
        self.perm = torch.randperm(len(self.x), generator=torch.Generator().manual_seed(cfg.seed))
        self.i = 0
        self.run(WARMUP)

    def run(self, steps: int) -> None:
        b, dev = self.cfg.global_batch_size, self.device
        for _ in range(steps):
            start = (self.i * b + self.rank * self.per_rank) % (len(self.perm) - b)
            idx = self.perm[start:start + self.per_rank]
            x, y = self.x[idx].to(dev, non_blocking=True), self.y[idx].to(dev, non_blocking=True)
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.i += 1


def _pair(rank: int, world: int, kind: str, steps: int, rounds: int, port: int, out) -> None:
    """Both loops in the same ranks and process group, alternating round by
    round, so load from elsewhere on the machine hits both alike."""
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` prints where a rank is
    # Both loops under DDP in one process group, a world of one included (the
    # bare loop's DDP needs the group; ours would otherwise skip it).
    t = _ours_trainer(rank, world, kind, port, use_pg=True)
    bare = _Bare(rank, world, t.device)
    ours_sps, bare_sps = [], []
    for rnd in range(rounds):
        order = ("ours", "bare") if rnd % 2 == 0 else ("bare", "ours")
        for which in order:
            if which == "ours":
                ours_sps.append(_time_ours(t, steps, world))
            else:
                _sync(t.ops, world)
                t0 = time.perf_counter()
                bare.run(steps)
                _sync(t.ops, world)
                bare_sps.append(t.config.global_batch_size * steps / (time.perf_counter() - t0))
    if rank == 0:
        out.put((ours_sps, bare_sps))
    t.close()
    os._exit(0)  # interpreter teardown after gloo can hang; nothing is left to do


def _ours(rank: int, world: int, kind: str, steps: int, port: int, out) -> None:
    t = _ours_trainer(rank, world, kind, port)
    sps = _time_ours(t, steps, world)
    if rank == 0:
        out.put(sps)
    t.close()
    if world > 1:
        os._exit(0)  # a spawned rank: skip interpreter teardown (see _pair)


def _sync(ops, world: int) -> None:
    ops.synchronize()
    if dist.is_initialized() and world > 1:
        dist.barrier()


def _spawn(fn, world: int, args: tuple):
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    port = find_free_port()
    if world == 1 and fn is _ours:
        _ours(0, 1, *args, port, out)  # one device: no process group, as in production
    else:
        mp.start_processes(fn, args=(world, *args, port, out), nprocs=world, start_method="spawn")
    return out.get()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--size", default="small", choices=sorted(SIZES))
    ap.add_argument("--no-scaling", action="store_true")
    args = ap.parse_args()
    if args.size != os.environ.get(SIZE_ENV, "small"):
        os.environ[SIZE_ENV] = args.size  # for the spawned ranks, which import this module afresh
        CONFIG.update(SIZES[args.size])
    torch.set_num_threads(max(1, (os.cpu_count() or 1)))
    print(f"model: mlp {CONFIG['in_features']}-{CONFIG['hidden']}-{CONFIG['out_features']}, "
          f"global batch {CONFIG['global_batch_size']}, {args.steps} timed steps, device {args.device}, "
          f"world {args.world}, {os.cpu_count()} cpu cores, OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")
    ours, bare = _spawn(_pair, args.world, (args.device, args.steps, args.rounds))
    for rnd, (o, b) in enumerate(zip(ours, bare)):
        print(f"round {rnd + 1}: ours {o:,.0f} samples/s   bare {b:,.0f} samples/s   ratio {o / b:.3f}")
    single = _spawn(_ours, 1, (args.device, args.steps))
    mo, mb = statistics.median(ours), statistics.median(bare)
    print(f"\nours (median)   {mo:12,.0f} samples/s")
    print(f"bare DDP        {mb:12,.0f} samples/s")
    print(f"single process  {single:12,.0f} samples/s (our loop, one device, no process group)")
    paired = statistics.median(o / b for o, b in zip(ours, bare))
    print(f"ratio ours/bare {paired:.3f}  (goal >= {GOAL[args.device]}; median of the per-round ratios)")
    print(f"ratio ours/bare {mo / mb:.3f}  (ratio of the medians)")
    if args.no_scaling:
        return
    if args.device == "cuda":
        worlds = [w for w in (1, 2, 4, 8) if w <= torch.cuda.device_count()]
    else:
        worlds = [w for w in (1, 2, 4) if w <= max(2, os.cpu_count() or 1)]
    print("\nscaling (our loop, same global batch)")
    print(f"{'world':>5} {'samples/s':>12} {'speed-up':>9} {'efficiency':>10}")
    base = None
    for w in worlds:
        sps = _spawn(_ours, w, (args.device, args.steps))
        base = base or sps
        print(f"{w:>5} {sps:12,.0f} {sps / base:9.2f} {sps / base / w:10.2f}")


if __name__ == "__main__":
    main()
