"""The launcher of a script training: ``python -m gpufleet.trainings.script_launch SPEC.json``.

gpufleet starts the ranks itself rather than through ``torch.distributed.run``
(see docs/architecture.md, "Script trainings"): one process per GPU, each with
the environment ``torchrun`` would give it (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ...),
the GPUs made visible, and gpufleet's own variables
(``GPUFLEET_CHECKPOINT_DIR``, ``GPUFLEET_RESUME_FROM``, ``GPUFLEET_OUTPUT_DIR``,
``GPUFLEET_TRAINING_ID``, ``GPUFLEET_REPORT_FILE``, ``GPUFLEET_STOP_FILE``).

- The launcher leads its own process group (the worker starts it so) and its
  ranks stay in it, so one ``killpg`` reaches all; it dies with the process
  that started it, and every rank dies with the launcher (PR_SET_PDEATHSIG).
- Each line a rank writes to stdout or stderr is copied to the launcher's
  stdout (the training's log) prefixed ``[rank N]``; a progress bar's
  ``\r`` redraws go there as they come, at most one a second
  (``engine/logtext.py``).
- A rank that exits with an error stops the others (SIGTERM, then SIGKILL
  after the grace) and the launcher exits with ``RANK_FAILED`` (or
  ``OUT_OF_MEMORY`` when the rank's output says so), naming the rank.
- SIGTERM (a stop, preemption, reclaim, max_runtime, cancel, lease lost)
  creates the stop file and is passed to every rank; after the grace the
  rest are killed and the launcher exits with ``INTERRUPTED``
  (``engine/stopfile.py`` is the contract). A new checkpoint in the
  checkpoint dir is written as a ``checkpoint`` line (``script_reports``).

A training over several nodes (a Slurm pool's job: ``gpufleet.pools.node``
starts one launcher per node) gives each launcher its share: ``nnodes``, this
node's ``node_rank`` and ``first_rank``, and the rendezvous every node's
ranks meet at (``master_addr``, ``master_port``), so the ranks see the same
variables as under ``torchrun --nnodes``.

Progress lines (``start``, ``ranks``, ``peak_memory``, ``error``, ``end``)
go to the spec's progress file, the same format the recipe launcher writes;
``gpufleet.report`` writes one file per rank, which the launcher merges into
``step`` lines (rank 0's values, every rank's time per step).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from gpufleet.devices.device import DeviceSet
from gpufleet.engine import exitcodes as ec
from gpufleet.engine.lifeline import die_with_parent, launcher_main
from gpufleet.engine.logtext import LineSplitter
from gpufleet.memberfs import write_new
from gpufleet.engine.progress import ProgressWriter
from gpufleet.engine.stopfile import STOP_FILE_ENV, mark
from gpufleet.trainings import script_warm, venv
from gpufleet.trainings.script_errors import ErrorWatch
from gpufleet.trainings.script_reports import CheckpointWatch, ReportMerger, step_fields  # noqa: F401 - step_fields: the sink's
from gpufleet.trainings.script_tensorboard import TensorBoardWatch

POLL_S = 0.05
PEAK_EVERY_S = 5.0
FAILED_PEER_GRACE_S = 2.0  # after a rank failed, the others get this long to exit on SIGTERM
_OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError", "HIP out of memory", "XPU out of memory")


@dataclass
class ScriptSpec:
    training_id: str
    argv: list[str]
    workdir: str
    progress_file: str
    checkpoint_dir: str
    resume_from: str = ""
    env: dict[str, str] = field(default_factory=dict)
    gpu_indexes: list[int] = field(default_factory=list)  # device ids on this host, one rank each
    backend: str = "cuda"
    world_size: int = 1
    ranks_on_cpu: bool = False  # the GPUs cannot run kernels (a simulated fleet's): the ranks use the CPU
    stop_grace_s: float = 2.0
    report_file: str = ""  # the ranks' gpufleet.report files are this + ".rank<N>"
    stop_file: str = ""  # created when the training is asked to stop (GPUFLEET_STOP_FILE)
    output_dir: str = ""  # GPUFLEET_OUTPUT_DIR: files to keep besides checkpoints (listed and downloadable)
    environment: dict[str, Any] | None = None  # a venv.EnvRequest to build (or reuse) before the ranks start
    # Over several nodes: world_size counts every node's ranks, this launcher runs world_size // nnodes of them
    # from first_rank on, and rank 0 (on the node of node_rank 0) holds the store at master_addr:master_port.
    nnodes: int = 1
    node_rank: int = 0
    first_rank: int = 0
    master_addr: str = ""
    master_port: int = 0  # 0: a free port of this host (one node)

    @property
    def local_world(self) -> int:
        """The ranks this launcher starts."""
        return self.world_size // self.nnodes

    def devices(self) -> DeviceSet:
        """This launcher's GPUs, one rank each, as its ranks are to see them."""
        return DeviceSet.of(self.backend, self.gpu_indexes)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    def write(self, path: Path) -> None:
        write_new(path, self.to_json())  # the run dir is the training's account's: no link followed

    @classmethod
    def read(cls, path: str | Path) -> ScriptSpec:
        return cls(**json.loads(Path(path).read_text()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_file(spec: ScriptSpec) -> str:
    return spec.stop_file or spec.progress_file + ".stop"


def rank_env(spec: ScriptSpec, base: dict[str, str], local: int, port: int) -> dict[str, str]:
    """The environment of this launcher's ``local``-th rank: torchrun's variables and gpufleet's."""
    n, rank = spec.world_size, spec.first_rank + local
    env = dict(base)
    env.update(spec.env)
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(local), "GROUP_RANK": str(spec.node_rank), "ROLE_RANK": str(rank),
        "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(spec.local_world), "ROLE_WORLD_SIZE": str(n),
        "GROUP_WORLD_SIZE": str(spec.nnodes),
        "MASTER_ADDR": spec.master_addr or "127.0.0.1", "MASTER_PORT": str(port),
        "TORCHELASTIC_RUN_ID": spec.training_id,
        # cuda:N in the script is the N-th of its GPUs, numbered as NVML does.
        **spec.devices().env(),
        "GPUFLEET_TRAINING_ID": spec.training_id,
        "GPUFLEET_CHECKPOINT_DIR": spec.checkpoint_dir,
        "GPUFLEET_RESUME_FROM": spec.resume_from,
        "GPUFLEET_REPORT_FILE": spec.report_file or spec.progress_file + ".report",
        STOP_FILE_ENV: stop_file(spec),
        "GPUFLEET_OUTPUT_DIR": spec.output_dir,
        "PYTHONUNBUFFERED": "1",
    })
    if spec.ranks_on_cpu:
        env["GPUFLEET_SIMULATED_GPUS"] = "1"
    return env


class Ranks:
    def __init__(self, spec: ScriptSpec, out: IO[bytes]):
        self.spec = spec
        self.out = out
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen | script_warm.ForkedRank] = []
        self.tails: dict[int, str] = {}  # the last stderr line of each rank (else its last stdout line)
        self.err_tails: dict[int, str] = {}
        self.copiers: dict[int, list[threading.Thread]] = {}
        self.oom: set[int] = set()
        self.peaks: list[int] = []
        self.splitters: list[tuple[int, LineSplitter]] = []
        self.errors: defaultdict[int, ErrorWatch] = defaultdict(ErrorWatch)  # what each rank's stderr says

    def start(self, port: int) -> None:
        base = dict(os.environ)
        for d in (self.spec.checkpoint_dir, self.spec.output_dir):
            if d:
                Path(d).mkdir(parents=True, exist_ok=True)
        envs = [rank_env(self.spec, base, local, port) for local in range(self.spec.local_world)]
        cold = script_warm.why_cold(self.spec.argv, envs[0], self.spec.env, self.spec.environment)
        if script_warm.has_server():  # a warm launcher: say whether its ranks are warm too
            print(f"[gpufleet] the ranks start cold: {cold}" if cold else
                  "[gpufleet] the ranks are forked from the warm launcher's rank server (torch already imported)",
                  flush=True)
        for env in envs:
            if cold is None:
                self.procs.append(script_warm.fork_rank(self.spec.argv, self.spec.workdir, env))
                continue
            self.procs.append(subprocess.Popen(  # argv list, never a shell
                self.spec.argv, cwd=self.spec.workdir, env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                preexec_fn=die_with_parent,  # no threads run yet
            ))
        self.peaks = [0] * len(self.procs)
        for rank, p in enumerate(self.procs):
            self.copiers[rank] = []
            for stream, is_err in ((p.stdout, False), (p.stderr, True)):
                t = threading.Thread(target=self._copy, args=(rank, stream, is_err), daemon=True)
                t.start()
                self.copiers[rank].append(t)

    def last_words(self, rank: int) -> str:
        """What the rank wrote last, once its pipes are drained (stderr first: that is where errors go)."""
        for t in self.copiers.get(rank, []):
            t.join(2.0)
        return self.err_tails.get(rank) or self.tails.get(rank, "")

    def _copy(self, rank: int, stream: IO[bytes], is_err: bool) -> None:
        split = LineSplitter()
        self.splitters.append((rank, split))
        for chunk in iter(lambda: stream.read1(65536), b""):  # type: ignore[attr-defined]
            self._emit(rank, is_err, split.feed(chunk))
        with self.lock:
            self.splitters.remove((rank, split))
        self._emit(rank, is_err, split.close())
        stream.close()

    def _emit(self, rank: int, is_err: bool, lines: list[bytes]) -> None:
        prefix = f"[rank {self.spec.first_rank + rank}] ".encode()
        for line in lines:
            text = line.decode(errors="replace").rstrip()
            if is_err:
                self.errors[rank].feed(text)
            if text:
                (self.err_tails if is_err else self.tails)[rank] = text
            if any(m in text for m in _OOM_MARKERS):
                self.oom.add(rank)
            with self.lock:
                self.out.write(prefix + line)
                self.out.flush()

    def flush_redraws(self) -> None:
        """A redraw held back by the once-a-second limit, once its second has passed."""
        with self.lock:
            due = [(rank, split.due()) for rank, split in self.splitters]
        for rank, lines in due:
            self._emit(rank, False, lines)

    def sample_peaks(self) -> list[int]:
        for rank, p in enumerate(self.procs):
            try:
                for row in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                    if row.startswith("VmHWM:"):
                        self.peaks[rank] = max(self.peaks[rank], int(row.split()[1]) * 1024)
            except (OSError, ValueError, IndexError):
                pass
        return self.peaks

    def sample_gpu_peaks(self) -> list[int] | None:
        """Per-rank GPU memory from NVML (NVIDIA only), or None when it cannot be read."""
        if self.spec.backend != "cuda":
            return None
        try:
            import pynvml

            pynvml.nvmlInit()
            try:
                ranks = {p.pid: r for r, p in enumerate(self.procs)}
                for idx in self.spec.gpu_indexes:
                    handle = pynvml.nvmlDeviceGetHandleByIndex(idx)
                    for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                        r = ranks.get(proc.pid)
                        if r is not None and proc.usedGpuMemory:
                            self.peaks[r] = max(self.peaks[r], int(proc.usedGpuMemory))
            finally:
                pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - a measurement, never a reason to stop a training
            return None
        return self.peaks

    def signal_all(self, sig: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(sig)
                except ProcessLookupError:
                    pass

    def stop(self, grace_s: float) -> None:
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
            time.sleep(POLL_S)
        self.signal_all(signal.SIGKILL)
        for p in self.procs:
            p.wait()


def _how(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _write_peaks(progress: ProgressWriter, spec: ScriptSpec, ranks: Ranks) -> None:
    """The ranks' peak memory so far: process RSS where they run on the CPU, NVML's figure on GPUs."""
    if spec.ranks_on_cpu:
        progress.write("peak_memory", per_rank=ranks.sample_peaks(), device_kind="cpu")
        return
    gpu = ranks.sample_gpu_peaks()
    if gpu and any(gpu):
        progress.write("peak_memory", per_rank=gpu, device_kind=spec.backend)
    else:
        progress.write("alive")  # the heartbeat alone


def _write_start(progress: ProgressWriter, spec: ScriptSpec, port: int) -> None:
    """The attempt's ``start`` line: its world, this launcher's GPUs, and (over several nodes) its share."""
    across = {"nnodes": spec.nnodes, "node_rank": spec.node_rank, "first_rank": spec.first_rank,
              "master_addr": spec.master_addr} if spec.nnodes > 1 else {}
    progress.write("start", world_size=spec.world_size, **across,
                   devices=spec.devices().labels,
                   visible_devices=spec.devices().value, simulated=spec.ranks_on_cpu,
                   kind="script", argv=spec.argv, master_port=port, resume_from=spec.resume_from or None,
                   note="simulated GPUs: the ranks run on CPU" if spec.ranks_on_cpu else None)


def run(spec: ScriptSpec) -> int:
    progress = ProgressWriter(spec.progress_file)
    stop = {"requested": False}

    def on_term(signum: int, frame: Any) -> None:
        mark(stop_file(spec))  # before the ranks look: they get SIGTERM from the same killpg
        stop["requested"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    code = venv.prepare_launch(spec, progress, lambda: stop["requested"])  # the training's own packages
    if code != ec.SUCCEEDED:
        progress.write("end", status="interrupted" if code == ec.INTERRUPTED else "failed", exit_code=code)
        return code
    port = spec.master_port or free_port()
    _write_start(progress, spec, port)
    ranks = Ranks(spec, sys.stdout.buffer)
    try:
        ranks.start(port)
    except OSError as exc:
        ranks.stop(0.0)  # ranks started before the one that could not be
        progress.write("error", rank=None, kind="missing_file", message=f"cannot start {spec.argv[0]!r}: {exc}")
        progress.write("end", status="failed", exit_code=ec.CANNOT_RUN)
        print(f"[gpufleet] cannot start {spec.argv[0]!r}: {exc}", flush=True)
        return ec.CANNOT_RUN
    progress.write("ranks", pids=[p.pid for p in ranks.procs])
    reports = ReportMerger(spec.report_file or spec.progress_file + ".report",
                           range(spec.first_rank, spec.first_rank + spec.local_world), progress)
    checkpoints = CheckpointWatch(spec.checkpoint_dir, progress)
    board = TensorBoardWatch(spec.output_dir, progress)
    last_peak = 0.0
    code = ec.SUCCEEDED
    while True:
        reports.poll()
        checkpoints.poll(reports.rank0_step)
        if reports.rank0_step is None:  # gpufleet.report wins over event files
            board.poll()
        ranks.flush_redraws()
        codes = [p.poll() for p in ranks.procs]
        if stop["requested"]:
            ranks.stop(spec.stop_grace_s)
            reports.poll(final=True)
            checkpoints.poll(reports.rank0_step, final=True)
            progress.write("stopped", message="stopped by SIGTERM", step=reports.rank0_step)
            code = ec.INTERRUPTED
            break
        failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            local, rc = failed[0]
            tail = ranks.last_words(local)
            oom = local in ranks.oom
            fatal = None if oom else ranks.errors[local].verdict(rc, spec.argv)  # a failure no retry can fix
            kind = "oom" if oom else fatal[0] if fatal else "error"
            rank = spec.first_rank + local
            message = f"rank {rank} {_how(rc)}" + (f": {fatal[1]}" if fatal else f": {tail}" if tail else "")
            progress.write("error", rank=rank, kind=kind, message=message)
            print(f"[gpufleet] {message}; stopping the other ranks", flush=True)
            # No checkpoint to wait for: the survivors would only hang on their lost peer.
            ranks.stop(min(spec.stop_grace_s, FAILED_PEER_GRACE_S))
            code = ec.OUT_OF_MEMORY if oom else ec.KIND_TO_CODE.get(kind, ec.RANK_FAILED)
            break
        if all(c == 0 for c in codes):
            break
        now = time.monotonic()
        if now - last_peak >= PEAK_EVERY_S:
            # Also the launcher's heartbeat: the worker kills a launcher that stays silent.
            last_peak = now
            _write_peaks(progress, spec, ranks)
        time.sleep(POLL_S)
    reports.poll(final=True)
    checkpoints.poll(reports.rank0_step, final=True)
    if reports.rank0_step is None:
        board.poll(final=True)
    _write_peaks(progress, spec, ranks)
    status = {ec.SUCCEEDED: "succeeded", ec.INTERRUPTED: "interrupted"}.get(code, "failed")
    progress.write("end", status=status, exit_code=code)
    return code


def main(argv: list[str] | None = None) -> int:
    # The ranks follow this process through their parent-death signal.
    return launcher_main(argv, "gpufleet.trainings.script_launch", ScriptSpec.read, run)


if __name__ == "__main__":
    sys.exit(main())
