"""The worker's pool of warm launchers: interpreters that have already imported torch and gpufleet.

Each member is ``python -m gpufleet.training.warm``, started like a cold
launcher (same interpreter, its own session, a lifeline pipe to this worker,
the training environment's allow-list: none of the server's secrets), that
waits for one training. :func:`take` hands a ready member out in place of
starting a launcher, and a keeper thread starts another, so the pool refills;
a member that died is replaced the same way.

Which trainings it serves, and why only those (:func:`serves`):

- recipe trainings (``gpufleet.training.launch``) only. A script training
  runs its own interpreter, often a per-training uv venv, whose imports the
  pool cannot have made;
- only a launch that would run as this worker's own account, unsandboxed.
  A member's training runs as its Unix account inside a bubblewrap sandbox
  built for that training's own directories; a process started before the
  training was known can be neither, and a pool per account would keep
  idle processes of every member's account on every host. Those start cold;
- only with the environment the member was started with, but for the
  per-training variables (``GPUFLEET_TRAINING_ID``, ``PYTHONUNBUFFERED``):
  variables read at import time (thread counts, library paths) must match.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass

from gpufleet.jobs.isolation import Isolation
from gpufleet.trainings.environment import EnvPolicy, training_environment

log = logging.getLogger(__name__)

MODULE = "gpufleet.training.launch"
# Set per training on top of the pool's environment; any other difference is another interpreter.
PER_TRAINING = ("GPUFLEET_TRAINING_ID", "PYTHONUNBUFFERED")
KEEP_S = 1.0  # how often the keeper looks for dead members


@dataclass
class Member:
    proc: subprocess.Popen
    lifeline: int  # the write end; the member exits when it closes
    ready: threading.Event


def _base_env(environ: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in PER_TRAINING}


class WarmPool:
    def __init__(self, size: int, env: dict[str, str]) -> None:
        self.size = size
        self.env = _base_env(env)
        self.members: list[Member] = []
        self.started = 0  # members ever started (tests and logs)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._keeper = threading.Thread(target=self._keep, name="gpufleet-warm-pool", daemon=True)
        self._keeper.start()

    def serves(self, module: str, env: dict[str, str], isolation: Isolation) -> bool:
        return (module == MODULE and not isolation.switches and not isolation.sandboxed
                and _base_env(env) == self.env)

    def take(self, env: dict[str, str], spec_path: str) -> tuple[subprocess.Popen, int] | None:
        """A ready member, given the training (``None`` when none is ready: start cold)."""
        with self._lock:
            ready = [m for m in self.members if m.ready.is_set() and m.proc.poll() is None]
            if not ready:
                return None
            member = ready[0]
            self.members.remove(member)
        self._wake.set()  # refill
        try:
            assert member.proc.stdin is not None
            member.proc.stdin.write(json.dumps({"spec": spec_path, "env": env}).encode() + b"\n")
            member.proc.stdin.close()
        except OSError:
            _discard(member)
            return None
        return member.proc, member.lifeline

    def pids(self) -> list[int]:
        with self._lock:
            return [m.proc.pid for m in self.members]

    def ready_count(self) -> int:
        with self._lock:
            return sum(1 for m in self.members if m.ready.is_set() and m.proc.poll() is None)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._keeper.join(timeout=10)
        with self._lock:
            members, self.members = self.members, []
        for m in members:
            _discard(m)

    def _keep(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                dead = [m for m in self.members if m.proc.poll() is not None]
                self.members = [m for m in self.members if m not in dead]
                missing = self.size - len(self.members)
            for m in dead:
                log.warning("warm launcher %d exited with %s; replacing it", m.proc.pid, m.proc.returncode)
                _discard(m)
            for _ in range(max(0, missing)):
                if self._stop.is_set():
                    break
                try:
                    member = self._start()
                except OSError as exc:
                    log.warning("cannot start a warm launcher: %s", exc)
                    break
                with self._lock:
                    self.members.append(member)
            self._wake.wait(KEEP_S)
            self._wake.clear()

    def _start(self) -> Member:
        lifeline_r, lifeline_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gpufleet.training.warm", "--parent-fd", str(lifeline_r)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group, as a cold launcher's
                pass_fds=(lifeline_r,), env=dict(self.env, PYTHONUNBUFFERED="1"),
            )
        except BaseException:
            os.close(lifeline_w)
            raise
        finally:
            os.close(lifeline_r)
        self.started += 1
        member = Member(proc, lifeline_w, threading.Event())
        threading.Thread(target=_await_ready, args=(member,), name=f"gpufleet-warm-{proc.pid}", daemon=True).start()
        return member


def _await_ready(member: Member) -> None:
    """Read the member's first line; its later output is the training's log (pumped by the launcher)."""
    from gpufleet.training.warm import READY

    assert member.proc.stdout is not None
    line = member.proc.stdout.readline()
    if line.decode(errors="replace").strip() == READY:
        member.ready.set()
        log.info("warm launcher %d is ready", member.proc.pid)
    else:
        log.warning("warm launcher %d did not start: %s", member.proc.pid, line.decode(errors="replace").strip())


def _discard(member: Member) -> None:
    try:
        os.close(member.lifeline)  # the member's lifeline reads EOF: it exits
    except OSError:
        pass
    if member.proc.poll() is None:
        member.proc.kill()
    member.proc.wait()
    for f in (member.proc.stdin, member.proc.stdout):
        try:
            if f is not None:
                f.close()
        except OSError:
            pass


_POOL: WarmPool | None = None


def start(size: int, policy: EnvPolicy) -> WarmPool | None:
    """Start this worker's pool (``GPUFLEET_WARM_POOL_SIZE``; 0: off), its members in the trainings' environment."""
    global _POOL
    if size <= 0 or _POOL is not None:
        return _POOL
    _POOL = WarmPool(size, training_environment(os.environ, policy, PYTHONUNBUFFERED="1"))
    log.info("keeping %d warm launcher(s) ready", size)
    return _POOL


def current() -> WarmPool | None:
    return _POOL


def stop() -> None:
    global _POOL
    if _POOL is not None:
        _POOL.close()
        _POOL = None
