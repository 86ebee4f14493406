"""``python -m gpufleet.engine.launch SPEC.json``: run one training.

Sets the visible devices before anything touches a GPU, starts one rank per
device, streams progress as JSON lines to ``spec.progress_file`` and exits
with a code from ``exitcodes``. One rank runs in this process.

- One rank dies: the others are terminated within seconds (a short grace,
  then SIGTERM, then SIGKILL), never left waiting for a collective timeout.
- SIGTERM/SIGINT: ranks agree to stop at their next report, checkpoint and
  exit (code 14); after ``stop_grace_s`` (or a second signal) they are killed.
- Several ranks fork from a rank server (``engine/rankserver.py``) that imported
  torch, the trainer and the recipes once; a warm launcher's started before its
  training was known, so a forked rank first takes this launcher's environment.
- Ranks die with their parent (PR_SET_PDEATHSIG): this launcher, or the rank
  server, which dies with it. No rank outlives the launcher.
- ``--parent-fd N``: the read end of a pipe whose write end only the worker
  holds. When the worker dies (even by SIGKILL) the pipe reads EOF and the
  launcher exits at once, taking its ranks with it: a training never runs on
  after its supervisor, while its lease expires and another attempt starts.

This module is torch-free at import time on purpose: torch is imported only
after ``CUDA_VISIBLE_DEVICES`` is set.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from gpufleet.engine import exitcodes, rankenv, rankserver
from gpufleet.engine.config import TrainingConfigError
from gpufleet.engine.gang_launch import open_store, rank_view
from gpufleet.engine.lifeline import die_with_parent as _die_with_parent
from gpufleet.engine.lifeline import launcher_main
from gpufleet.engine.modes import group_backends, mixed_vendor_warning
from gpufleet.engine.progress import ProgressWriter
from gpufleet.engine.spec import LaunchSpec

# Wait this long for the other ranks to notice a dead peer on their own before
# SIGTERM, and again before SIGKILL: well inside the 10 s promise.
FAILURE_GRACE_S = 1.0
POLL_S = 0.25
# How long ranks may take to exit once rank 0 has reported the training done.
EXIT_GRACE_S = 30.0
# "spawn": each rank imports torch itself; "forkserver": from the rank server (use_rank_server).
_rank_start = "spawn"


def use_rank_server() -> None:
    """Start this launcher's ranks from multiprocessing's forkserver, already started and preloaded."""
    global _rank_start
    _rank_start = "forkserver"


def classify(exc: BaseException) -> str:
    """The kind of a rank's failure, which decides the exit code."""
    from gpufleet.engine.compat import out_of_memory_error
    from gpufleet.engine.drills import InjectedFault

    text = f"{type(exc).__name__}: {exc}".lower()
    if isinstance(exc, out_of_memory_error()) or "out of memory" in text:
        return "oom"
    if isinstance(exc, TrainingConfigError):
        return "bad_data"
    if isinstance(exc, InjectedFault):
        return "error"
    if "timed out" in text or "timeout" in text:
        return "timeout"
    if any(s in text for s in ("connection closed", "connection reset", "broken pipe", "peer")):
        return "peer_lost"
    return "error"


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def build_trainer(spec: LaunchSpec, run_devices: list[str], *, rank: int, progress: ProgressWriter | None,
                  should_stop: Any, master_port: int | None = None, **rendezvous: Any) -> Any:
    """The one place a launcher builds its :class:`~gpufleet.engine.trainer.Trainer`:
    the spec's recipe and validated config on ``run_devices``, as rank ``rank``, with the
    drills its environment asks for (``engine/drills.py``)."""
    from gpufleet.engine import drills, rungwait
    from gpufleet.engine.recipes import get_recipe
    from gpufleet.engine.trainer import Trainer

    recipe = get_recipe(spec.recipe)
    config = recipe.resolve_config(spec.config)
    return Trainer(recipe, config, devices=run_devices, rank=rank, checkpoint_dir=spec.checkpoint_dir,
                   data_root=spec.data_root, resume=spec.resume, progress=progress,
                   collective_timeout_s=spec.collective_timeout_s, master_port=master_port,
                   should_stop=should_stop, rank_groups=spec.vendor_groups(),
                   group_backends=group_backends(spec.kinds, spec.ranks_on_cpu),
                   process_group_backend=spec.process_group_backend, report_at=spec.rung_steps or (),
                   hooks=drills.from_environment(rank) + rungwait.gates(spec, should_stop), **rendezvous)


def _rank_main(rank: int, payload: dict[str, Any], stop_event: Any) -> None:
    """One rank, in its own spawned process (or forked from the warm launcher's rank server)."""
    if "env" in payload:
        # Forked from a rank server that started before this training's environment was known: this
        # launcher's environment, as a spawned rank inherits it, before anything here reads a variable.
        os.environ.clear()
        os.environ.update(payload["env"])
    _die_with_parent()
    requested = {"stop": False}
    from gpufleet.engine import checkpoint

    checkpoint.set_attempt(payload["spec"].get("attempt"))

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: requested.update(stop=True))
    state_dir = Path(payload["state_dir"])
    spec = LaunchSpec.from_dict(payload["spec"])
    # Across vendors each rank sees only its own GPU, through its backend's variable,
    # set before this process touches a device (a runtime reads it when it initialises).
    os.environ.update(spec.rank_visible_env(rank))
    os.environ["GPUFLEET_RANK_SPAWNED"] = "1"  # its parent is the launcher (engine/startup.py)
    trainer = None
    try:
        grank, devices, rendezvous = rank_view(spec, payload["run_devices"], rank)  # global rank across hosts
        progress = ProgressWriter(spec.progress_file) if grank == 0 else None
        trainer = build_trainer(spec, devices, rank=grank, progress=progress,
                                should_stop=lambda: requested["stop"] or stop_event.is_set(),
                                master_port=payload["master_port"], **rendezvous)
        result = trainer.train()
        if grank == 0:
            evaluation = trainer.evaluate() if result.status == "succeeded" and trainer.strategy != "fsdp" else {}
            if evaluation and progress:
                progress.write("eval", step=result.step, metrics=evaluation)
            _write_json(state_dir / "result.json", {"status": result.status, "step": result.step,
                                                    "checkpoint": result.checkpoint})
    except BaseException as exc:  # noqa: BLE001 - whatever ended the rank is its error, reported
        _write_json(state_dir / f"rank-{rank}.json", {
            "rank": rank, "kind": classify(exc), "message": f"{type(exc).__name__}: {exc}",
            "time": time.time(), "traceback": traceback.format_exc(),
        })
        traceback.print_exc()
        sys.stderr.flush()
        # Exit at once: the launcher sees this rank gone and stops the others
        # now, instead of after interpreter teardown and process-group clean-up
        # that may block on the peers this failure left waiting.
        os._exit(1)
    if trainer is not None:
        trainer.close()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: its thread and destructor clean-up after a
    # process group can hang a finished rank (seen with gloo); everything this
    # rank owed is written and fsynced by now.
    os._exit(0)


def _root_cause(state_dir: Path, procs: Any, failed_rank: int | None) -> dict[str, Any]:
    """The error that started it: the earliest real error of a rank; else a rank
    that died without one (a crash or a kill); only then a peer noticing that
    another rank died."""
    errors = []
    for p in state_dir.glob("rank-*.json"):
        try:
            errors.append(json.loads(p.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    real = sorted((e for e in errors if e["kind"] != "peer_lost"), key=lambda e: e["time"])
    if real:
        return real[0]
    reported = {e["rank"] for e in errors}
    silent = [r for r, p in enumerate(procs.processes) if r not in reported and p.exitcode not in (0, None)]
    if silent:
        rank = failed_rank if failed_rank in silent else silent[0]
        code = procs.processes[rank].exitcode
        how = f"killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with exit code {code}"
        return {"rank": rank, "kind": "error", "message": f"the rank process {how} without a Python error"}
    if errors:
        return min(errors, key=lambda e: e["time"])
    return {"rank": failed_rank, "kind": "error", "message": "the rank process failed"}


def first_rank(spec: LaunchSpec) -> int:
    """The global rank of this launcher's first rank (0 but on the other hosts of a training across hosts)."""
    return int(spec.gang["first_rank"]) if spec.gang else 0


def _check_devices(spec: LaunchSpec, run_devices: list[str]) -> None:
    import torch

    kind = run_devices[0].split(":")[0]
    if kind == "cpu":
        return
    mod = getattr(torch, kind, None)
    count = mod.device_count() if mod is not None and mod.is_available() else 0
    if count < spec.world_size:
        raise TrainingConfigError("devices",
                                  f"{spec.devices} asked for, but only {count} {kind} device(s) are usable here")


def run(spec: LaunchSpec, echo: Any = None) -> int:
    """Run the training described by ``spec``; returns the exit code."""
    progress = ProgressWriter(spec.progress_file, echo)
    started = time.time()

    def end(code: int, **fields: Any) -> int:
        progress.write("end", status=exitcodes.describe(code), exit_code=code,
                       elapsed_s=time.time() - started, **fields)
        progress.close()
        return code

    try:
        from gpufleet.engine.paths import resolve_data_path
        from gpufleet.engine.recipes import get_recipe

        recipe = get_recipe(spec.recipe)
        config = recipe.resolve_config(spec.config)
        micro, accum = config.batch_layout(spec.global_world_size)
        if config.data_path is not None:
            resolve_data_path(spec.data_root, config.data_path)
        run_devices = spec.run_devices()
        _check_devices(spec, run_devices)
    except TrainingConfigError as exc:
        progress.write("error", rank=None, kind="config", message=str(exc))
        return end(exitcodes.BAD_DATA)

    note = None
    first = first_rank(spec)  # this host's ranks are global ranks from here
    if spec.ranks_on_cpu:
        note = ("simulated GPUs cannot run kernels: each rank runs on CPU with gloo; "
                + ", ".join(f"rank {first + r} <-> {d}" for r, d in enumerate(spec.devices)))
    progress.write("start", recipe=spec.recipe, training_id=spec.training_id, world_size=spec.world_size,
                   devices=spec.devices, run_devices=run_devices, simulated=spec.ranks_on_cpu, note=note,
                   visible_devices=spec.visible_devices_env(),
                   micro_batch_size=micro, grad_accum_steps=accum, pid=os.getpid(), config=config.to_dict())
    if note:
        print(f"gpufleet launch: {note}", file=sys.stderr, flush=True)
    if warning := mixed_vendor_warning(spec.kinds, config.parallel_mode):
        progress.write("warning", code="mixed-vendors", message=warning, process_group_backend="gloo")
        print(f"gpufleet launch: {warning}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="gpufleet-launch-") as tmp:
        state_dir = Path(tmp)
        try:
            if spec.world_size == 1 and not spec.gang:
                code, fields = _run_inprocess(spec, run_devices, progress)
            else:
                code, fields = _run_spawned(spec, run_devices, progress, state_dir)
        except Exception as exc:  # noqa: BLE001 - the launcher itself broke
            progress.write("error", rank=None, kind="launcher", message=f"{type(exc).__name__}: {exc}")
            return end(exitcodes.LAUNCHER_ERROR)
    return end(code, **fields)


class _StopFlag:
    """Counts SIGTERM/SIGINT; the first asks for a checkpointed stop."""

    def __init__(self, on_first: Any = None):
        self.count = 0
        self.first_at: float | None = None
        self.on_first = on_first

    def __call__(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.count == 1:
            self.first_at = time.monotonic()
            if self.on_first is not None:
                self.on_first()

    def install(self) -> dict[int, Any]:
        return {s: signal.signal(s, self) for s in (signal.SIGTERM, signal.SIGINT)}


def _result_fields(state_dir: Path) -> dict[str, Any]:
    p = state_dir / "result.json"
    return json.loads(p.read_text()) if p.exists() else {}


def _end_fields(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k in ("step", "checkpoint")}


def _run_inprocess(spec: LaunchSpec, run_devices: list[str], progress: ProgressWriter) -> tuple[int, dict[str, Any]]:
    from gpufleet.engine import checkpoint

    checkpoint.set_attempt(spec.attempt)
    flag = _StopFlag()
    previous = flag.install()
    trainer = build_trainer(spec, run_devices, rank=0, progress=progress, should_stop=lambda: flag.count > 0)
    try:
        result = trainer.train()
        if result.status == "succeeded":
            evaluation = trainer.evaluate()
            if evaluation:
                progress.write("eval", step=result.step, metrics=evaluation)
            return exitcodes.SUCCEEDED, {"step": result.step, "checkpoint": result.checkpoint}
        return exitcodes.INTERRUPTED, {"step": result.step, "checkpoint": result.checkpoint}
    except Exception as exc:  # noqa: BLE001 - classified and reported as the rank's error
        kind = classify(exc)
        progress.write("error", rank=0, kind=kind, message=f"{type(exc).__name__}: {exc}")
        return exitcodes.KIND_TO_CODE[kind], {"step": trainer.step}
    finally:
        trainer.close()
        for s, h in previous.items():
            signal.signal(s, h)


def _run_spawned(spec, run_devices, progress, state_dir) -> tuple[int, dict[str, Any]]:
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessException

    from gpufleet.engine.distributed import find_free_port
    from gpufleet.engine.startup import process_start

    if _rank_start == "spawn" and spec.world_size > 1 and rankserver.start_or_say("gpufleet launch"):
        use_rank_server()
    ctx = mp.get_context(_rank_start)
    stop_event = ctx.Event()
    flag = _StopFlag(on_first=stop_event.set)
    previous = flag.install()
    store = open_store(spec)  # noqa: F841 - the rank-0 host's rendezvous, open while this launcher runs
    payload = {"spec": json.loads(spec.to_json()), "run_devices": run_devices, "state_dir": str(state_dir),
               "master_port": int(spec.gang["master_port"]) if spec.gang else find_free_port()}
    if _rank_start == "forkserver":  # the launch began at this process's start, unless a warm one was handed it
        payload["env"] = {rankenv.LAUNCH_BEGAN_ENV: repr(process_start(os.getpid()) or time.time()), **os.environ}
    procs = mp.start_processes(_rank_main, args=(payload, stop_event), nprocs=spec.world_size,
                               join=False, start_method=_rank_start)
    progress.write("ranks", pids=[p.pid for p in procs.processes], start=_rank_start)
    finished_at: float | None = None
    try:
        while True:
            try:
                if procs.join(timeout=POLL_S, grace_period=FAILURE_GRACE_S):
                    break
            except ProcessException as exc:
                if flag.count:
                    # A rank that died while we were stopping: still an interruption.
                    return exitcodes.INTERRUPTED, {"message": str(exc).strip()[:500]}
                cause = _root_cause(state_dir, procs, exc.error_index)
                # Local to this launcher; across hosts a person knows the rank by its global number.
                grank = None if cause["rank"] is None else cause["rank"] + first_rank(spec)
                progress.write("error", rank=grank, kind=cause["kind"], message=f"rank {grank}: {cause['message']}")
                return exitcodes.KIND_TO_CODE.get(cause["kind"], exitcodes.RANK_FAILED), {}
            if (state_dir / "result.json").exists():
                # The training is over and checkpointed; a rank that then hangs
                # in clean-up (process-group teardown) must not hold the job.
                finished_at = finished_at or time.monotonic()
                if time.monotonic() - finished_at > EXIT_GRACE_S:
                    _kill_all(procs)
                    break
            if flag.count and (flag.count > 1 or time.monotonic() - flag.first_at > spec.stop_grace_s):
                _kill_all(procs)
                progress.write("error", rank=None, kind="interrupted",
                               message="ranks did not stop in time after SIGTERM; killed without a checkpoint")
                return exitcodes.INTERRUPTED, {}
        result = _result_fields(state_dir)
        if result.get("status") == "interrupted" or flag.count:
            return exitcodes.INTERRUPTED, _end_fields(result)
        return exitcodes.SUCCEEDED, _end_fields(result)
    finally:
        _kill_all(procs)
        for s, h in previous.items():
            signal.signal(s, h)


def _kill_all(procs: Any) -> None:
    for p in procs.processes:
        if p.is_alive():
            p.kill()
    for p in procs.processes:
        p.join(timeout=5)


def _run_and_say(spec: LaunchSpec) -> int:
    # Before torch is imported, so the ranks only ever see this training's GPUs.
    os.environ.update(spec.visible_devices_env())
    code = run(spec)
    print(f"gpufleet launch: {exitcodes.describe(code)} (exit {code})", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    # Not bound to the parent by a death signal: the warm pool starts launchers
    # from its keeper thread, and that signal follows the thread, not the
    # process. The worker's pipe (--parent-fd) is the lifeline.
    return launcher_main(argv, "gpufleet.engine.launch", LaunchSpec.read, _run_and_say, die_with_worker=False,
                         bad_spec=exitcodes.BAD_DATA)


if __name__ == "__main__":
    # Through the imported module, so the ranks unpickle
    # gpufleet.engine.launch._rank_main rather than a function of __main__.
    from gpufleet.engine.launch import main as _main

    sys.exit(_main())
