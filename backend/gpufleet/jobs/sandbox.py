"""The bubblewrap sandbox a training's launcher and ranks run in.

What the code inside sees (``bwrap`` arguments below):

- its own PID namespace: no process of the server, the worker or another
  training is visible in ``/proc``, so no ``/proc/<pid>/environ`` to read;
- the system read-only, ``/tmp`` and ``/dev/shm`` private (``mp.spawn``
  semaphores and shared memory work; nothing is shared with other trainings);
- gpufleet's data dir and checkpoint root absent (an empty tmpfs over them,
  laid after every read bind that could show them), except the training's own
  directories, bound read-write;
- the server account's home hidden when the run account cannot enter it, with
  only what :func:`read_paths` allows (the interpreter, its site-packages,
  gpufleet's package) bound back read-only, never the rest of ``sys.path``;
- ``/dev`` minimal, plus the GPU device nodes (``/dev/nvidia*``, ``/dev/dri``,
  ``/dev/kfd``); the network kept (rendezvous, NCCL).

bwrap runs as root and sets the namespaces up; ``setpriv`` then becomes the
run account (uid, gid, its groups, no capabilities, ``no_new_privs``) and
execs the launcher. bwrap's own processes ignore SIGTERM (the disposition is
set before bwrap starts and survives exec), so a stop reaches the launcher,
which checkpoints, while SIGKILL of the group, and the worker's death
(``--die-with-parent``), end the whole namespace at once.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
from collections.abc import Iterable
from pathlib import Path

# NVIDIA's nodes (nvidia0.., nvidiactl, nvidia-uvm, nvidia-caps/), and AMD's and Intel's.
GPU_NODES = ("nvidia*", "dri", "kfd")


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def setpriv_path() -> str | None:
    return shutil.which("setpriv")


def _gpu_nodes() -> list[str]:
    return sorted({str(p) for pattern in GPU_NODES for p in Path("/dev").glob(pattern)})


def _enters(st: os.stat_result, uid: int, gids: set[int]) -> bool:
    """Whether ``uid`` (with ``gids``) may search a directory of this mode."""
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in gids:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def closed_ancestor(path: Path, uid: int, gids: set[int]) -> Path | None:
    """The topmost directory on the way to ``path`` that ``uid`` may not enter, or None."""
    probe = Path("/")
    for part in path.parts[1:]:
        try:
            if not _enters(probe.stat(), uid, gids):
                return probe
        except OSError:
            return None
        probe = probe / part
    return None


def read_paths() -> list[Path]:
    """What the launcher needs to read, from an allow-list: the interpreter (its prefixes and its folder), its
    standard library and site-packages, and gpufleet's own package folder (an editable install imports it from
    its source tree, which no site-packages holds).

    Never the rest of ``sys.path``: the worker runs as ``python -m``, so its first entry is the folder the
    server was started in (the data dir's parent, ``/tmp``, an admin's home), which is no code of the sandbox's.
    """
    import site
    import sys
    import sysconfig

    import gpufleet

    paths = sysconfig.get_paths()
    allowed = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
               os.path.dirname(os.path.realpath(sys.executable)),
               *(paths.get(k, "") for k in ("stdlib", "platstdlib", "purelib", "platlib")),
               *site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else []),
               os.path.dirname(os.path.realpath(gpufleet.__file__))]
    seen: list[Path] = []
    for p in allowed:
        if p and os.path.isabs(p) and os.path.exists(p):
            path = Path(os.path.realpath(p))
            if path not in seen:
                seen.append(path)
    return seen


def _inside(p: Path, folders: Iterable[Path]) -> bool:
    return any(p == m or m in p.parents for m in folders)


def bwrap_args(*, uid: int, gid: int, groups: Iterable[int], hidden: Iterable[Path], read: Iterable[Path],
               write: Iterable[Path], binds: Iterable[tuple[Path, Path]] = ()) -> list[str]:
    """bwrap and setpriv arguments that run a command as ``uid`` in the sandbox (append the command).

    ``hidden`` (the data dir, the checkpoint root) are masked after every read bind that is not inside them,
    so no read bind can show them; a read path inside one (the shared datasets) and the ``write`` folders are
    bound after the masks. ``binds``: (folder, where it appears) pairs, read-write (a warm launcher's slots,
    ``jobs/slots.py``).
    """
    bwrap, setpriv = bwrap_path(), setpriv_path()
    if bwrap is None or setpriv is None:
        raise FileNotFoundError("bwrap (Debian: bubblewrap) and setpriv (util-linux) are needed for the sandbox")
    gids = {gid, *groups}
    write = [Path(p) for p in write]
    read = [Path(p) for p in read]
    binds = [(Path(src), Path(dest)) for src, dest in binds]
    hidden = {Path(p) for p in hidden}
    closed: set[Path] = set()  # the folders on the way the account may not enter (the server's home)
    for p in [*read, *write, *(dest for _, dest in binds)]:
        c = closed_ancestor(p, uid, gids)
        if c is not None and c != Path("/"):
            closed.add(c)
    args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/dev/shm",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    for node in _gpu_nodes():
        args += ["--dev-bind", node, node]
    covered = closed | hidden | {Path("/tmp"), Path("/dev/shm")}
    made: set[Path] = set()

    def way_to(p: Path) -> list[str]:
        # bwrap would make the folders on the way 0700 root: make them searchable first.
        out: list[str] = []
        for d in reversed(p.parents):
            if d not in made and any(m in d.parents for m in covered):
                made.add(d)
                out += ["--perms", "0755", "--dir", str(d)]
        return out

    def mask(folders: set[Path]) -> None:
        for m in sorted(folders, key=lambda p: len(p.parts)):
            args.extend([*way_to(m), "--tmpfs", str(m)])

    mask(closed - hidden)
    for p in read:  # what is visible already needs no bind; inside a mask it does
        if _inside(p, covered) and not _inside(p, hidden):
            args += [*way_to(p), "--ro-bind", str(p), str(p)]
    mask(hidden)
    for p in read:
        if _inside(p, hidden):
            args += [*way_to(p), "--ro-bind", str(p), str(p)]
    for p in write:
        args += [*way_to(p), "--bind", str(p), str(p)]
    for src, dest in binds:
        args += [*way_to(dest), "--bind", str(src), str(dest)]
    groups_arg = ["--groups", ",".join(str(g) for g in sorted(set(groups)))] if groups else ["--clear-groups"]
    args += ["--", setpriv, f"--reuid={uid}", f"--regid={gid}", *groups_arg,
             "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    return args


def ignore_sigterm() -> None:
    """In the child before bwrap starts: its processes ignore SIGTERM, the launcher sets its own handler."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
