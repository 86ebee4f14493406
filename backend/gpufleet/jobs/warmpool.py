"""The worker's pool of warm launchers: interpreters that have already imported torch and gpufleet.

Each member is ``python -m gpufleet.trainings.warm_launch``, started like a cold
launcher (same interpreter, its own session, a lifeline pipe to this worker,
the training environment's allow-list: none of the server's secrets), that
waits for one training. :func:`take` hands a ready member out in place of
starting a launcher, and a keeper thread starts another, so the pool refills;
a member that died is replaced the same way.

Which trainings it serves, and why only those (:meth:`WarmPool.serves`):

- recipe trainings (``gpufleet.engine.launch``) and script trainings
  (``gpufleet.trainings.script_launch``): the member becomes the training's
  launcher. A script's ranks are forked warm only where they would have run
  in the member's own interpreter: a script with requirements runs in a
  per-training uv venv whose imports the pool cannot have made, so its ranks
  start cold (``trainings/script_warm.py`` says which, and why);
- only a launch that would run as the pool's account, in its sandbox or none. The
  worker's own pool serves trainings that run as the worker's account. A
  member whose trainings run as their own Unix account gets a pool of their
  own (:func:`for_launch`), started at that member's first training on this
  worker: its members run as that account (uid, gid, groups, ``HOME``), in
  that member's sandbox where trainings are sandboxed, from the same
  allow-listed environment, and it is closed once the member has started
  nothing here for ``member_keep_s`` (recent work only; it counts against
  nobody else's). A sandbox made ahead cannot bind a training's own
  directories when it starts: it binds a slot at each folder they are made
  in, and :meth:`WarmPool.take` binds the training's directories into those
  slots, so the member finds them at their own paths (``jobs/slots.py``;
  where this host cannot mount, sandboxed members start cold);
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
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.engine.warm import MODULES, RECIPE_MODULE  # the launchers a member becomes
from gpufleet.jobs.isolation import Isolation
from gpufleet.jobs.slots import SlotBase, Slots
from gpufleet.trainings.environment import DEFAULT_POLICY, EnvPolicy, training_environment

log = logging.getLogger(__name__)

# Set per training on top of the pool's environment; any other difference is another interpreter.
PER_TRAINING = ("GPUFLEET_TRAINING_ID", "PYTHONUNBUFFERED")
KEEP_S = 1.0  # how often the keeper looks for dead members
# A member not ready this long after it started is replaced: alive but never ready (hung in an import, say),
# it would hold its place in the pool for good, and every training would start cold.
READY_S = 240.0


@dataclass
class Member:
    proc: subprocess.Popen
    lifeline: int  # the write end; the member exits when it closes
    ready: threading.Event
    slots: Slots | None = None  # a sandboxed member's: where the training's directories will appear
    started_at: float = field(default_factory=time.monotonic)  # when it was started


def _base_env(environ: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in PER_TRAINING}


def _same_account(a: Isolation, b: Isolation) -> bool:
    if not a.switches or not b.switches:
        return a.switches == b.switches
    assert a.account is not None and b.account is not None
    return ((a.account.uid, a.account.gid, tuple(a.account.groups), a.home)
            == (b.account.uid, b.account.gid, tuple(b.account.groups), b.home))


def _same_binds(a: Isolation, b: Isolation) -> bool:
    """A sandbox made ahead has the binds of the training it was made for, but for that training's own
    directories (bound into its slots when it is handed over): one that needs others (a script's environment
    cache) cannot run in it."""
    if not (a.sandboxed and b.sandboxed):
        return True
    return (sorted(map(str, a.keep)), sorted(map(str, a.read))) == (sorted(map(str, b.keep)), sorted(map(str, b.read)))


class WarmPool:
    """Warm launchers of one account: the worker's own (``isolation`` None) or a member's.

    ``keep_s``: the pool closes itself once nothing was taken from it (or it was not asked for) that long.
    ``slots``: a sandboxed pool's (``jobs/slots.py``), where its members find the trainings they are given.
    """

    def __init__(self, size: int, env: dict[str, str], isolation: Isolation | None = None,
                 keep_s: float | None = None, slots: SlotBase | None = None) -> None:
        self.size = size
        self.iso = isolation or Isolation()
        if self.iso.sandboxed and slots is None:
            raise ValueError("a sandboxed pool needs slots for its trainings' directories")
        self.slots = slots
        self.env = _base_env(self.iso.env(env))
        self.keep_s = keep_s
        self.last_used = time.monotonic()
        self.members: list[Member] = []
        self.started = 0  # members ever started (tests and logs)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._keeper = threading.Thread(target=self._keep, name="gpufleet-warm-pool", daemon=True)
        self._keeper.start()

    def serves(self, module: str, env: dict[str, str], isolation: Isolation) -> bool:
        return (module in MODULES and isolation.sandboxed == self.iso.sandboxed and _same_account(isolation, self.iso)
                and _base_env(isolation.env(env)) == self.env and _same_binds(isolation, self.iso))

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def take(self, env: dict[str, str], spec_path: str, dirs: list[Path] | None = None,
             module: str = RECIPE_MODULE) -> tuple[subprocess.Popen, int] | None:
        """A ready member, given the training (``None`` when none is ready: start cold).

        ``dirs``: the training's own directories, bound into a sandboxed member's slots at their own paths
        (one made elsewhere than the folders the slots stand for starts cold).
        """
        dirs = dirs or []
        with self._lock:
            ready = [m for m in self.members if m.ready.is_set() and m.proc.poll() is None
                     and (m.slots is None or m.slots.holds(dirs))]
            if not ready:
                return None
            member = ready[0]
            self.members.remove(member)
            self.last_used = time.monotonic()
        self._wake.set()  # refill
        try:
            if member.slots is not None:
                member.slots.fill(dirs)
            assert member.proc.stdin is not None
            job = {"spec": spec_path, "env": env, "module": module}
            member.proc.stdin.write(json.dumps(job).encode() + b"\n")
            member.proc.stdin.close()
        except OSError as exc:
            log.warning("warm launcher %d cannot take the training: %s", member.proc.pid, exc)
            _discard(member)
            return None
        if member.slots is not None:
            member.slots.clear_after(member.proc)  # its slots stay while it runs the training, and no longer
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
            if self.keep_s is not None and time.monotonic() - self.last_used > self.keep_s:
                log.info("no training of %s started here for %.0f s: its warm launchers stop",
                         self._who(), self.keep_s)
                self._stop.set()
                with self._lock:
                    members, self.members = self.members, []
                for m in members:
                    _discard(m)
                return
            now = time.monotonic()
            with self._lock:
                dead = [m for m in self.members if m.proc.poll() is not None]
                stuck = [m for m in self.members if m not in dead and not m.ready.is_set()
                         and now - m.started_at > READY_S]
                self.members = [m for m in self.members if m not in dead and m not in stuck]
                missing = self.size - len(self.members)
            for m in dead:
                log.warning("warm launcher %d exited with %s; replacing it", m.proc.pid, m.proc.returncode)
                _discard(m)
            for m in stuck:
                log.warning("warm launcher %d was not ready %.0f s after it started; replacing it",
                            m.proc.pid, READY_S)
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
        argv = [sys.executable, "-m", "gpufleet.trainings.warm_launch", "--parent-fd", str(lifeline_r)]
        slots = self.slots.new() if self.slots is not None else None
        try:
            # The lifeline ties a member to this worker. bwrap's --die-with-parent would follow the thread
            # that started it (a keeper thread ends with its pool, while a member it gave out still trains).
            proc = subprocess.Popen(
                [a for a in self.iso.command(argv, slots.binds if slots else None) if a != "--die-with-parent"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group, as a cold launcher's
                pass_fds=(lifeline_r,), env=dict(self.env, PYTHONUNBUFFERED="1"),
                **self.iso.popen_kwargs(),  # a member's pool: that member's account, or its sandbox
            )
        except BaseException:
            os.close(lifeline_w)
            if slots is not None:
                slots.clear()
            raise
        finally:
            os.close(lifeline_r)
        self.started += 1
        member = Member(proc, lifeline_w, threading.Event(), slots)
        if self.iso.switches:
            log.info("warm launcher %d of %s started", proc.pid, self._who())
        threading.Thread(target=_await_ready, args=(member,), name=f"gpufleet-warm-{proc.pid}", daemon=True).start()
        return member


    def _who(self) -> str:
        return f"Unix account {self.iso.account.name}" if self.iso.account is not None else "this worker"


def _await_ready(member: Member) -> None:
    """Read the member's output up to its READY line; what follows is the training's log (pumped by the
    launcher). A line before READY (a library's warning as it is imported, say) is logged, not taken for a
    failed start: a member that took it so would stay in the pool alive and never ready."""
    from gpufleet.engine.warm import READY

    assert member.proc.stdout is not None
    for raw in iter(member.proc.stdout.readline, b""):
        line = raw.decode(errors="replace").strip()
        if line == READY:
            member.ready.set()
            log.info("warm launcher %d is ready", member.proc.pid)
            return
        log.warning("warm launcher %d, before it was ready: %s", member.proc.pid, line)
    log.warning("warm launcher %d ended before it was ready", member.proc.pid)


def _discard(member: Member) -> None:
    try:
        os.close(member.lifeline)  # the member's lifeline reads EOF: it exits
    except OSError:
        pass
    if member.proc.poll() is None:
        member.proc.kill()
    member.proc.wait()
    if member.slots is not None:
        member.slots.clear()
    for f in (member.proc.stdin, member.proc.stdout):
        try:
            if f is not None:
                f.close()
        except OSError:
            pass


_POOL: WarmPool | None = None
_MEMBERS: dict[int, WarmPool] = {}  # a member's Unix uid -> that member's pool
_MEMBER_SIZE = 0
_MEMBER_KEEP_S = 600.0
_POLICY = DEFAULT_POLICY  # the trainings' environment rules (GPUFLEET_TRAINING_ENV_PASS/BLOCK, the CA bundle)
_SLOTS: tuple[Path, list[Path]] | None = None  # where sandboxed members' slots are made, and what they stand for
_SLOT_BASE: SlotBase | None = None
_LOCK = threading.Lock()


def start(size: int, policy: EnvPolicy = DEFAULT_POLICY, member_size: int = 0,
          member_keep_s: float = 600.0, slots: tuple[Path, list[Path]] | None = None) -> WarmPool | None:
    """Start this worker's pool (``GPUFLEET_WARM_POOL_SIZE``; 0: off), its members in the trainings' environment
    (``policy``), and allow members' pools of ``member_size`` launchers each (``GPUFLEET_MEMBER_WARM_POOL_SIZE``;
    0: members always start cold). ``slots``: the folder sandboxed members' slots are made in, and the folders
    trainings' directories are made in (``jobs/slots.py``); None: sandboxed members start cold."""
    global _POOL, _MEMBER_SIZE, _MEMBER_KEEP_S, _POLICY, _SLOTS, _SLOT_BASE
    _MEMBER_SIZE, _MEMBER_KEEP_S, _POLICY, _SLOTS, _SLOT_BASE = member_size, member_keep_s, policy, slots, None
    if size <= 0 or _POOL is not None:
        return _POOL
    _POOL = WarmPool(size, training_environment(os.environ, policy, PYTHONUNBUFFERED="1"))
    log.info("keeping %d warm launcher(s) ready", size)
    return _POOL


def for_launch(module: str, env: dict[str, str], isolation: Isolation) -> WarmPool | None:
    """The pool that may serve this launch: the worker's own, or its member's.

    A member's first training here finds no pool: it starts cold and makes one, so that member's next
    trainings (a sweep's next trials) start warm while they keep coming.
    """
    global _SLOTS, _SLOT_BASE
    if _POOL is not None and _POOL.serves(module, env, isolation):
        return _POOL
    if _MEMBER_SIZE <= 0 or module not in MODULES or not isolation.switches:
        return None
    if isolation.sandboxed and isolation.keep:
        # A script that builds its environment: its sandbox needs the owner's cache bound in, which her
        # pool's has not; its ranks start cold in their venv anyway. Her pool stays for her next ones.
        return None
    home = isolation.home
    if home is not None and any(home == d or d in home.parents for d in isolation.write):
        return None  # a HOME made for this one training (an account without one): nothing to share
    assert isolation.account is not None

    with _LOCK:
        if isolation.sandboxed and _SLOT_BASE is None:
            if _SLOTS is None:
                return None
            _SLOT_BASE = SlotBase.make(*_SLOTS)
            if _SLOT_BASE is None:  # (said once, then members are cold for good)
                _SLOTS = None
                return None
        pool = _MEMBERS.get(isolation.account.uid)
        if pool is not None and not pool.closed and pool.serves(module, env, isolation):
            pool.last_used = time.monotonic()
            return pool
        if pool is not None:
            pool.close()
        _MEMBERS[isolation.account.uid] = WarmPool(
            _MEMBER_SIZE, training_environment(os.environ, _POLICY, PYTHONUNBUFFERED="1"),
            Isolation(account=isolation.account, sandboxed=isolation.sandboxed, keep=isolation.keep,
                      read=isolation.read, hidden=isolation.hidden, home=isolation.home), keep_s=_MEMBER_KEEP_S,
            slots=_SLOT_BASE if isolation.sandboxed else None)
    return None


def member_pools() -> dict[int, WarmPool]:
    with _LOCK:
        return {uid: p for uid, p in _MEMBERS.items() if not p.closed}


def current() -> WarmPool | None:
    return _POOL


def stop() -> None:
    global _POOL, _SLOT_BASE
    if _POOL is not None:
        _POOL.close()
        _POOL = None
    with _LOCK:
        pools = list(_MEMBERS.values())
        _MEMBERS.clear()
        base, _SLOT_BASE = _SLOT_BASE, None
    for p in pools:
        p.close()
    if base is not None:
        base.close()
