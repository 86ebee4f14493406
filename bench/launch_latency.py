"""Launch latency: from ``POST /api/v1/trainings`` to the first reported step,
with the worker's warm launchers and without them, against starting the
launcher directly with the same spec.

Each server path is the embedded default end to end: a real HTTP server (the
trainings router), the scheduler loop woken by the request, the filesystem
broker, the Celery worker started the way ``serve`` starts it, the supervisor,
the launcher, and the first ``training_metrics`` row visible through the API.
Two such stacks run side by side on one simulated H100 each: one whose worker
keeps a warm launcher (``GPUFLEET_WARM_POOL_SIZE=1``: torch and gpufleet
already imported), one with the pool off (every launcher starts cold). Before
a warm round the bench waits until the pool has refilled (trials that come one
after another find it so); the refill of the member a round took runs during
that round, as it would in use.
The direct baseline writes the same LaunchSpec and runs
``python -m gpufleet.engine.launch`` itself, timing until the first ``step``
line appears in the progress file: what a cold start costs without gpufleet.

    python bench/launch_latency.py [--rounds 5] [--recipe mlp] [--ranks 1]

``--ranks N``: trainings of N ranks (N simulated GPUs; the ranks run on the
CPU with gloo). A cold launcher first starts a rank server, which imports
torch once, and forks them from it; a warm one forks them from the server it
started before the training came.

Rounds alternate between the three paths; medians are printed, and the ratio
warm / cold (goal: at most 0.5).

``--script``: a script trial instead (a small gloo DDP script that calls
``gpufleet.report``), timed at the launcher from its start to its first
reported step: the script launcher started cold, as a worker without a warm
launcher starts it, against the same spec handed to a warm launcher, which
becomes its launcher and forks its ranks from its rank server.

``--script --member`` (as root, with bubblewrap): the same, as a member runs
it: a Unix account made for the bench, each trial in that member's sandbox.
Cold, the launcher starts in a sandbox made for the trial, as the worker
starts it without a warm launcher; warm, the trial is handed to the member's
warm launcher, whose sandbox was made ahead and finds the trial's folders
bound into its slots (``jobs/slots.py``). The account is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from gpufleet.config import load_settings
from gpufleet.db.session import upgrade_database

if TYPE_CHECKING:
    from gpufleet.jobs.isolation import Isolation

CONFIG = {"max_steps": 30, "global_batch_size": 8, "log_every": 1, "checkpoint_every": 1000}
# Both sides poll at this rate; the API's answer costs more CPU than a file
# read, so polling much faster would slow the launcher it measures.
POLL_S = 0.05
# A launch that shows no first step in this long is stuck: the bench says so and where, rather than waiting
# for whoever runs it to give up.
STUCK_S = 240.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def direct(recipe: str, workdir: Path, data_root: Path, ranks: int) -> float:
    """Seconds from starting the launcher to its first step line."""
    progress = workdir / "direct.jsonl"
    progress.unlink(missing_ok=True)
    shutil.rmtree(workdir / "direct-ckpt", ignore_errors=True)
    spec = {"recipe": recipe, "config": CONFIG, "devices": [f"cuda:{i}" for i in range(ranks)], "ranks_on_cpu": True,
            "checkpoint_dir": str(workdir / "direct-ckpt"), "progress_file": str(progress),
            "data_root": str(data_root), "resume": False}
    (workdir / "direct.json").write_text(json.dumps(spec))
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet.engine.launch", str(workdir / "direct.json")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return _first_step(progress, proc, t0)
    finally:
        proc.wait()


def _first_step(progress: Path, proc: subprocess.Popen, t0: float, log: Path | None = None) -> float:
    """Seconds from ``t0`` to the first step line in ``progress``, written by ``proc``'s training (whose
    output is in ``log``, shown when it fails)."""
    def said() -> str:
        return f"; its output:\n{log.read_text()[-3000:]}" if log is not None and log.exists() else ""

    while True:
        if progress.exists() and '"type": "step"' in progress.read_text():
            return time.perf_counter() - t0
        if proc.poll() is not None:
            raise RuntimeError(f"the launcher exited with {proc.returncode} before its first step{said()}")
        if time.perf_counter() - t0 > STUCK_S:
            _end(proc)
            raise RuntimeError(f"no first step {STUCK_S:.0f} s after the launch{said()}")
        time.sleep(POLL_S)


def _end(proc: subprocess.Popen) -> None:
    """Kill the launcher, and its ranks where it leads a process group of its own."""
    proc.kill()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # not a group's leader: its ranks die with it
        pass
    proc.wait()


def _ended(proc: subprocess.Popen, log: Path) -> None:
    """Wait for a trial that reported its first step to end; one still running STUCK_S later is stuck
    (as a warm rank was, after its last step, in its script's destructors), and the bench says so."""
    try:
        proc.wait(STUCK_S)
    except subprocess.TimeoutExpired:
        _end(proc)
        raise RuntimeError(f"the trial had not ended {STUCK_S:.0f} s after its first step; its output:\n"
                           f"{log.read_text()[-3000:] if log.exists() else ''}") from None


def via_server(http: httpx.Client, recipe: str, data_dir: Path, ranks: int) -> tuple[float, float]:
    """Seconds from POST to the first metrics row the API returns, and gpufleet's own share of them.

    The share is measured on both sides of the launcher, so the launcher's own
    (noisy) start-up is not in it: POST to the worker's claim (the launcher is
    started right after), plus the first step line's time to the row being
    visible through the API.
    """
    wall0, t0 = time.time(), time.perf_counter()
    r = http.post("/api/v1/trainings", json={"name": "latency", "recipe": recipe, "config": CONFIG,
                                             "gpu_ids": list(range(ranks))})
    r.raise_for_status()
    tid = r.json()["id"]
    while True:
        m = http.get(f"/api/v1/trainings/{tid}/metrics", params={"max_points": 2}).json()
        if m["total"] > 0:
            elapsed, wall1 = time.perf_counter() - t0, time.time()
            break
        if time.perf_counter() - t0 > 120:
            t = http.get(f"/api/v1/trainings/{tid}").json()
            raise RuntimeError(f"training {tid} has no step after 120 s: {t['status']} {t['status_reason']}")
        time.sleep(POLL_S)
    # Let it finish so the next round finds the GPU free.
    while http.get(f"/api/v1/trainings/{tid}").json()["status"] not in ("succeeded", "failed", "cancelled"):
        time.sleep(0.05)
    from datetime import datetime

    events = http.get(f"/api/v1/trainings/{tid}/events").json()["data"]
    claimed = next(datetime.fromisoformat(e["time"]).timestamp() for e in events if e["status"] == "running")
    progress = data_dir / "jobs" / tid / "progress-1.jsonl"
    first_step = next(json.loads(x)["time"] for x in progress.read_text().splitlines() if '"type": "step"' in x)
    return elapsed, (claimed - wall0) + (wall1 - first_step)


class Stack:
    """One embedded server (API, scheduler loop, worker) on a data dir of its own."""

    def __init__(self, workdir: Path, name: str, pool: int, ranks: int) -> None:
        import uvicorn
        from fastapi import FastAPI

        from gpufleet.api.routes.trainings import router
        from gpufleet.jobs.embedded import start_embedded_worker
        from gpufleet.jobs.scheduler_loop import start as start_scheduler
        from gpufleet.jobs.worker import ensure_host

        self.ranks = ranks
        self.settings = load_settings(data_dir=workdir / name, simulate=f"{ranks}xH100-80GB", host_name=f"bench-{name}",
                                      auth="off", warm_pool_size=pool)
        upgrade_database(self.settings)
        ensure_host(self.settings)
        app = FastAPI()
        app.state.settings = self.settings
        app.include_router(router)
        port = _free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                                    lifespan="off"))
        threading.Thread(target=self.server.run, daemon=True).start()
        self.stop = threading.Event()
        start_scheduler(self.settings, self.stop)
        self.worker = start_embedded_worker(self.settings)
        while not self.server.started:
            time.sleep(0.05)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300)  # a loaded machine answers slowly
        self.taken = 0  # warm launchers taken so far

    def run(self, recipe: str) -> tuple[float, float]:
        if self.settings.warm_pool_size:
            # A member ready for this round: one more "is ready" than rounds taken.
            log = self.settings.logs_dir / "worker.log"
            while (log.read_text(errors="replace").count("is ready") if log.exists() else 0) <= self.taken:
                time.sleep(POLL_S)
            self.taken += 1
        return via_server(self.http, recipe, self.settings.data_dir, self.ranks)

    def close(self) -> None:
        self.stop.set()
        self.http.close()
        self.worker.kill()
        self.worker.wait()
        self.server.should_exit = True


# A script as a member writes it: torch, gloo DDP, and gpufleet.report each step.
SCRIPT = """\
import torch, torch.distributed as dist
import gpufleet
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1, 11):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    gpufleet.report(step=step, loss=loss)
dist.barrier()
dist.destroy_process_group()
"""


class _Member:
    """A Unix account made for the bench (removed by ``close``), and each trial's folders and sandbox as
    the worker makes them for a member's script (``jobs/isolation.plan``)."""

    def __init__(self, workdir: Path) -> None:
        import pwd

        from gpufleet.datadir import PRIVATE_UMASK
        from gpufleet.jobs.isolation import Isolation
        from gpufleet.jobs.kinds import training_roots
        from gpufleet.jobs.slots import SlotBase
        from gpufleet.users.runas import RunAccount

        os.umask(PRIVATE_UMASK)  # the worker's, under which it makes a member's folders and slots
        self.name = f"gfbench{os.getpid() % 100000}"
        home = workdir / "home"
        subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/usr/sbin/nologin",
                        self.name], check=True)
        entry = pwd.getpwnam(self.name)
        home.mkdir()
        os.chown(home, entry.pw_uid, entry.pw_gid)
        workdir.chmod(0o755)
        self.account = RunAccount(entry.pw_name, entry.pw_uid, entry.pw_gid, (), str(home), "same-name")
        self.settings = load_settings(data_dir=workdir / "data", checkpoint_root=workdir / "ckpts")
        base = SlotBase.make(self.settings.data_dir / "warm-slots", training_roots(self.settings, self.settings))
        if base is None:
            raise SystemExit("this host cannot make the warm sandbox's slots (mount): run as root")
        self.slots = base
        probe = self.plan(workdir / "r", workdir / "c", workdir / "w")
        if not probe.sandboxed:
            raise SystemExit("no sandbox here: --member needs root and bubblewrap")
        self.pool_iso = Isolation(account=self.account, sandboxed=True, keep=probe.keep, read=probe.read,
                                  hidden=probe.hidden, home=probe.home)

    def plan(self, run: Path, ckpt: Path, work: Path) -> Isolation:
        from gpufleet.jobs.isolation import plan

        return plan(self.settings, self.account, True, run, ckpt, work)

    def close(self) -> None:
        self.slots.close()
        for _ in range(50):  # the pool's last sandbox may still be ending
            if subprocess.run(["userdel", self.name], capture_output=True).returncode == 0:
                return
            time.sleep(0.2)
        print(f"could not remove Unix account {self.name}: remove it with userdel", file=sys.stderr)


def script_rounds(workdir: Path, rounds: int, ranks: int, member: bool = False) -> None:
    """A script trial's launch, cold (``python -m gpufleet.trainings.script_launch``, as the worker starts it
    with no warm launcher) against handed to a warm launcher (its ranks forked from its rank server);
    ``member``: as a member's trial, in her sandbox (:class:`_Member`)."""
    from gpufleet.engine.warm import SCRIPT_MODULE
    from gpufleet.jobs import kinds, script_attempt, warmpool
    from gpufleet.jobs.isolation import Isolation
    from gpufleet.trainings.environment import training_environment
    from gpufleet.trainings.script_launch import ScriptSpec

    env = training_environment(os.environ, PYTHONUNBUFFERED="1")
    who = _Member(workdir) if member else None
    pool = warmpool.WarmPool(1, env, who.pool_iso, slots=who.slots) if who else warmpool.WarmPool(1, env)
    isos: dict[str, Isolation] = {}

    def spec(name: str) -> tuple[Path, Path]:
        if who is not None:  # the member's trial: folders where the worker makes them, handed to her account
            tid = f"{name}-{time.monotonic_ns()}"
            run, ckpt = kinds.run_dir(who.settings, tid), kinds.checkpoint_dir(who.settings, tid)
            work = script_attempt.work_dir(who.settings, tid)
        else:
            run, ckpt, work = workdir / name, workdir / name / "ckpt", workdir / "work"
            shutil.rmtree(run, ignore_errors=True)
        for d in (run, ckpt, work):
            d.mkdir(parents=True, exist_ok=True)
        (work / "train.py").write_text(SCRIPT)
        s = ScriptSpec(training_id=name, argv=[sys.executable, "train.py"], workdir=str(work),
                       progress_file=str(run / "progress.jsonl"), checkpoint_dir=str(ckpt),
                       gpu_indexes=list(range(ranks)), world_size=ranks, ranks_on_cpu=True)
        s.write(run / "spec.json")
        iso = who.plan(run, ckpt, work) if who is not None else Isolation(write=[run, ckpt, work])
        iso.prepare()
        isos[name] = iso
        return run / "spec.json", run / "progress.jsonl"

    def cold() -> float:
        path, progress = spec("cold")
        iso = isos["cold"]
        log = workdir / "cold.log"
        t0 = time.perf_counter()
        with log.open("wb") as out:
            proc = subprocess.Popen(iso.command([sys.executable, "-m", SCRIPT_MODULE, str(path)]),
                                    env=iso.env(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                    **iso.popen_kwargs())
        try:
            return _first_step(progress, proc, t0, log)
        finally:
            _ended(proc, log)

    def warm() -> float:
        deadline = time.monotonic() + STUCK_S
        while pool.ready_count() < 1:  # trials one after another find the pool refilled
            if time.monotonic() > deadline:
                raise RuntimeError(f"the warm pool had no ready launcher in {STUCK_S:.0f} s "
                                   f"({pool.started} started)")
            time.sleep(POLL_S)
        path, progress = spec("warm")
        iso = isos["warm"]
        log = workdir / "warm.log"
        t0 = time.perf_counter()
        taken = pool.take(iso.env(dict(env, GPUFLEET_TRAINING_ID="warm")), str(path), iso.write, module=SCRIPT_MODULE)
        assert taken is not None
        proc, lifeline = taken

        def pump() -> None:  # the launcher's output: kept for a failure's message, never blocking it
            with log.open("wb") as out:
                for chunk in iter(lambda: proc.stdout.read1(65536), b""):  # type: ignore[union-attr]
                    out.write(chunk)
                    out.flush()

        threading.Thread(target=pump, daemon=True).start()
        try:
            return _first_step(progress, proc, t0, log)
        finally:
            try:
                _ended(proc, log)
            finally:
                os.close(lifeline)

    try:
        cold(), warm()  # warm-up: the page cache
        colds, warms = [], []
        for i in range(rounds):
            colds.append(cold())
            warms.append(warm())
            print(f"round {i + 1}: cold {colds[-1]:.3f}s  warm {warms[-1]:.3f}s", flush=True)
    finally:
        pool.close()
        if who is not None:
            who.close()
    c, w = statistics.median(colds), statistics.median(warms)
    whose = "a member's script trial, in her sandbox," if member else "a script trial"
    print(f"{whose} of {ranks} rank(s), launch to its first reported step (median of {rounds})")
    print(f"script launcher started cold:    {c:.3f}s")
    print(f"handed to a warm launcher:       {w:.3f}s")
    print(f"warm / cold: {w / c:.2f}x (goal: at most 0.5x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--recipe", default="mlp")
    ap.add_argument("--ranks", type=int, default=1, help="ranks (simulated GPUs) per training")
    ap.add_argument("--script", action="store_true", help="a script trial, cold vs warm, at the launcher")
    ap.add_argument("--member", action="store_true", help="with --script: as a member's Unix account, sandboxed")
    args = ap.parse_args()
    if args.member and not args.script:
        ap.error("--member goes with --script")
    if args.script:
        workdir = Path(tempfile.mkdtemp(prefix="gpufleet-latency-"))
        try:
            script_rounds(workdir, args.rounds, args.ranks, args.member)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return

    workdir = Path(tempfile.mkdtemp(prefix="gpufleet-latency-"))
    stacks: list[Stack] = []
    try:
        cold = Stack(workdir, "cold", pool=0, ranks=args.ranks)
        stacks.append(cold)
        warm = Stack(workdir, "warm", pool=1, ranks=args.ranks)
        stacks.append(warm)
        data_root = cold.settings.data_root
        # Warm-up: each worker's first task, the page cache.
        cold.run(args.recipe)
        warm.run(args.recipe)
        direct(args.recipe, workdir, data_root, args.ranks)
        base: list[float] = []
        colds: list[float] = []
        warms: list[float] = []
        for i in range(args.rounds):
            base.append(direct(args.recipe, workdir, data_root, args.ranks))
            colds.append(cold.run(args.recipe)[0])
            warms.append(warm.run(args.recipe)[0])
            print(f"round {i + 1}: direct {base[-1]:.3f}s  cold {colds[-1]:.3f}s  warm {warms[-1]:.3f}s", flush=True)
        b, c, w = statistics.median(base), statistics.median(colds), statistics.median(warms)
        print(f"{args.ranks} rank(s) per training")
        print(f"launcher directly (baseline):  {b:.3f}s to the first step (median of {args.rounds})")
        print(f"POST /trainings, pool off:      {c:.3f}s to the first step (median of {args.rounds})")
        print(f"POST /trainings, warm launcher: {w:.3f}s to the first step (median of {args.rounds})")
        print(f"warm / cold: {w / c:.2f}x (goal: at most 0.5x)   cold - direct: {c - b:+.3f}s")
    finally:
        for stack in stacks:
            stack.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
