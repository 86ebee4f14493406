"""Memory traces for the API, in a few processes of their own, each within a time budget.

Tracing a large model's step takes seconds to minutes of CPU and holds the
GIL, so in the API process it would stall every other request. Here traces
run in at most ``workers`` child processes (``python -m
gpufleet.scheduling.memory_pool``); a request waits for a free one without
holding a thread, a trace that runs past ``budget_s`` is killed with its
process (and refused with the budget named), and too many waiting requests are
turned away at once. A finished trace is kept in ``memory``'s cache, so the
same config is traced once, and, given a ``cache_dir``, on disk: a restarted
server, or another API process, reads it instead of tracing again (the key
holds the config's shape and the gpufleet and torch versions). ``warm``
traces the built-in recipes' defaults before anyone asks, so the first
``recommend?recipe=sae`` neither starts a process nor traces.

Frames on the child's stdin/stdout: one JSON object per line. A trace is
plain numbers, so it crosses as JSON and comes back as attributes (no pickle:
nothing that crosses a pipe can run code).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import SimpleNamespace
from typing import IO, Any, BinaryIO

from gpufleet.scheduling.memory import (
    TRACE_FORMAT,
    EstimateError,
    TracePlan,
    cached_trace,
    keep_trace,
    plan_trace,
)

log = logging.getLogger(__name__)

# How long a new estimate process may take to import torch (a loaded machine is slow).
STARTUP_S = 180.0



def over_budget_advice(load: float | None = None, cores: int | None = None) -> str:
    """What to do about a trace that ran out of time: on a busy machine the model is seldom the cause."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = 0.0
    cores = cores or os.cpu_count() or 1
    if load > cores:
        return (f"the server is busy (load {load:.1f} on {cores} cores), so try again in a moment, "
                "or ask an admin to raise the budget")
    return "a model this large takes long to trace: make it smaller, or ask an admin to raise the budget"

class EstimateBusy(Exception):
    """Too many estimates are waiting; ``retry_after_s`` says when to try again."""

    def __init__(self, message: str, retry_after_s: int = 5):
        super().__init__(message)
        self.retry_after_s = retry_after_s


def _write(stream: IO[bytes], obj: Any) -> None:
    stream.write(json.dumps(obj).encode("utf-8") + b"\n")
    stream.flush()


def _read(stream: IO[bytes]) -> Any:
    line = stream.readline()
    if not line:
        raise EOFError("the estimate process closed its pipe")
    return json.loads(line)


def _encode_trace(trace: Any) -> dict[str, Any]:
    return dataclasses.asdict(trace)


def _decode_trace(data: dict[str, Any]) -> Any:
    """A trace's numbers with the attributes ``memory`` reads (this process imports no torch)."""
    fields = dict(data)
    for phase in ("forward_backward", "optimizer_step"):
        fields[phase] = SimpleNamespace(**fields[phase])
    # StepTrace.peak is a property, so asdict() leaves it out; the estimate reads it.
    fields["peak"] = max(fields["forward_backward"].peak, fields["optimizer_step"].peak)
    return SimpleNamespace(**fields)


@dataclass
class _Worker:
    proc: subprocess.Popen[bytes]

    @property
    def pipes(self) -> tuple[IO[bytes], IO[bytes]]:
        """The process's stdin and stdout, which ``_start`` pipes."""
        if self.proc.stdin is None or self.proc.stdout is None:
            raise RuntimeError("the estimate process was started without pipes")
        return self.proc.stdin, self.proc.stdout

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _child_env() -> dict[str, str]:
    # A trace needs no setting and no secret of the server.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _versions() -> str:
    found = [f"trace={TRACE_FORMAT}"]
    for package in ("gpufleet", "torch"):
        try:
            found.append(f"{package}={version(package)}")
        except PackageNotFoundError:
            found.append(f"{package}=?")
    return ",".join(found)


class TraceFiles:
    """Traces on disk, one JSON file per trace key, versions of gpufleet and torch, and trace format."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._versions = _versions()

    def _path(self, trace_key: str) -> Path:
        digest = hashlib.sha256(f"{trace_key}|{self._versions}".encode()).hexdigest()
        return self.folder / f"{digest}.json"

    def load(self, trace_key: str) -> Any:
        try:
            return _decode_trace(json.loads(self._path(trace_key).read_text()))
        except (OSError, ValueError, TypeError, KeyError):
            return None  # none yet, or unreadable: trace again

    def save(self, trace_key: str, data: dict[str, Any]) -> None:
        path = self._path(trace_key)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data))
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("cannot keep a memory trace in %s: %s", self.folder, exc)


class EstimatePool:
    """At most ``workers`` traces at a time, each within ``budget_s``; at most ``max_waiting`` queued.

    ``started`` and ``traced`` count the processes started and the traces run
    (what a cache saves is visible without timing anything).
    """

    def __init__(self, workers: int = 2, budget_s: float = 20.0, max_waiting: int = 16,
                 cache_dir: Path | None = None):
        self.workers = workers
        self.budget_s = budget_s
        self.max_waiting = max_waiting
        self.files = TraceFiles(cache_dir) if cache_dir is not None else None
        self.started = 0
        self.traced = 0
        self._idle: list[_Worker] = []
        self._slots: asyncio.Semaphore | None = None
        self._waiting = 0

    def _cached(self, trace_key: str) -> bool:
        if cached_trace(trace_key) is not None:
            return True
        found = self.files.load(trace_key) if self.files is not None else None
        if found is not None:
            keep_trace(trace_key, found)
        return found is not None

    async def warm(self, recipes: list[str], data_root: Any) -> None:
        """Trace each recipe's default config on one GPU now, so that the first request finds it ready."""
        for name in recipes:
            try:
                await self.trace(name, {}, 1, data_root)
            except Exception as exc:  # noqa: BLE001 - warming is a courtesy; a request reports its own failure
                log.info("memory estimate of recipe %s not warmed: %s", name, exc)

    def _start(self) -> _Worker:
        self.started += 1
        proc = subprocess.Popen(  # our own interpreter and module
            [sys.executable, "-m", "gpufleet.scheduling.memory_pool"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=_child_env(),
        )
        return _Worker(proc)

    async def trace(self, recipe: str, config: dict[str, Any], world_size: int, data_root: Any) -> TracePlan:
        """Make sure the trace of this config is in the cache; its plan (resolved config and keys).

        Raises the recipe's TrainingConfigError or an EstimateError (both name what to
        fix), EstimateError when the budget ran out, EstimateBusy when too many wait.
        """
        plan = plan_trace(recipe, config, world_size, data_root)
        if self._cached(plan.trace_key):
            return plan
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        if self._waiting >= self.max_waiting:
            raise EstimateBusy(f"{self._waiting} memory estimates are waiting already; try again in a few seconds")
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        try:
            if not self._cached(plan.trace_key):  # another request may have traced it meanwhile
                await self._run(plan, recipe, config, world_size, data_root)
        finally:
            self._slots.release()
        return plan

    async def _run(self, plan: TracePlan, recipe: str, config: dict[str, Any], world_size: int,
                   data_root: Any) -> None:
        worker = self._idle.pop() if self._idle else None
        if worker is None or not worker.alive:
            worker = self._start()
            # Starting (importing torch) is not the config's fault: it has a budget of its own.
            try:
                await asyncio.wait_for(asyncio.to_thread(_read, worker.pipes[1]), timeout=STARTUP_S)
            except BaseException:
                worker.kill()
                raise
        job = (recipe, dict(config), world_size, None if data_root is None else str(data_root))

        def exchange() -> Any:
            stdin, stdout = worker.pipes
            _write(stdin, job)
            return _read(stdout)

        try:
            answer = await asyncio.wait_for(asyncio.to_thread(exchange), timeout=self.budget_s)
        except asyncio.TimeoutError:
            # Killing the process ends the read in the thread (EOF) and frees its memory.
            worker.kill()
            raise EstimateError(
                f"estimating this config's memory took longer than {self.budget_s:g} s, the most the server"
                f" spends on one estimate (GPUFLEET_ESTIMATE_BUDGET_S); {over_budget_advice()}"
            ) from None
        except (EOFError, OSError, ValueError) as exc:
            worker.kill()
            raise EstimateError(f"the memory estimate failed ({exc}); try again") from None
        except BaseException:
            worker.kill()  # the request was cancelled: its trace is of no use
            raise
        self._idle.append(worker)
        self.traced += 1
        status, payload = answer
        if status == "ok":
            keep_trace(plan.trace_key, _decode_trace(payload))
            if self.files is not None:
                self.files.save(plan.trace_key, payload)
            return
        if status == "config":
            from gpufleet.engine.config import TrainingConfigError

            field, message = payload
            error = TrainingConfigError(None, message)
            error.field = field
            raise error
        raise EstimateError(payload)

    def close(self) -> None:
        for w in self._idle:
            w.kill()
        self._idle.clear()


def _serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    # Below the API in the CPU's queue (importing torch included): a burst of
    # estimates must not slow other requests.
    os.nice(10)
    import gpufleet.scheduling.memtrace  # noqa: F401 - torch, before saying ready
    from gpufleet.scheduling.memory import trace_for
    from gpufleet.engine.config import TrainingConfigError

    _write(stdout, ["ready", None])
    while True:
        try:
            recipe, config, world_size, data_root = _read(stdin)
        except EOFError:
            return
        try:
            plan = plan_trace(recipe, config, world_size, data_root)
            answer: tuple[str, Any] = ("ok", _encode_trace(trace_for(plan, data_root)))
        except TrainingConfigError as exc:
            answer = ("config", (getattr(exc, "field", None), str(exc)))
        except EstimateError as exc:
            answer = ("error", str(exc))
        except Exception as exc:  # noqa: BLE001 - any failure is an answer, never a dead process
            answer = ("error", f"cannot estimate this config: {type(exc).__name__}: {exc}")
        _write(stdout, answer)


if __name__ == "__main__":
    _serve(sys.stdin.buffer, sys.stdout.buffer)
