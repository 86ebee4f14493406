"""A warm sandbox's slots (gpufleet.jobs.slots): real mounts, real bwrap sandboxes, and nothing ever deleted.

The end-to-end cases (a member's warm recipe and script in her sandbox) are in test_warm_pool.py and
tests/trainings/test_warm_scripts.py; these hold the slots' own rules.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from gpufleet.datadir import PRIVATE_UMASK
from gpufleet.jobs import sandbox
from gpufleet.jobs.slots import SlotBase, _mount_points

from support.unix import need_root


@pytest.fixture
def base():
    need_root()
    top = Path(tempfile.mkdtemp(prefix="gpufleet-slots-", dir="/tmp"))  # (pytest's own is root's alone)
    top.chmod(0o755)
    old = os.umask(PRIVATE_UMASK)  # the worker's: slots must still let their account through
    roots = [top / "data" / "jobs", top / "ckpts"]
    for r in roots:
        r.mkdir(parents=True)
    made = SlotBase.make(top / "data" / "warm-slots", roots)
    assert made is not None
    try:
        yield made
    finally:
        os.umask(old)
        made.close()
    assert not [p for p in _mount_points() if p == made.base or made.base in p.parents]
    shutil.rmtree(top)


def _training(base: SlotBase, name: str) -> list[Path]:
    dirs = [base.roots[0] / name, base.roots[1] / name]
    for d in dirs:
        d.mkdir()
        (d / "kept.txt").write_text(name + "\n")
    return dirs


def test_a_training_bound_after_the_sandbox_started_appears_there_at_its_own_paths(base: SlotBase) -> None:
    if sandbox.bwrap_path() is None:
        pytest.skip("bwrap is not installed")
    mine, theirs = _training(base, "mine"), _training(base, "theirs")
    slots = base.new()
    assert slots.holds(mine) and not slots.holds([base.base.parent / "elsewhere" / "x"])
    binds = [a for src, dest in slots.binds for a in ("--bind", str(src), str(dest))]
    # The sandbox is made first (as a warm launcher's is); the training is bound into its slots afterwards.
    for d in mine:  # the training's own, as a launch hands them to its account
        for p in (d, d / "kept.txt"):
            os.chown(p, 4242, 4242)
    # As that account (setpriv, as the sandbox runs a member), so the slots' own modes are what let it through.
    proc = subprocess.Popen(["bwrap", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                             "--tmpfs", str(base.base.parent), *binds, "--", "setpriv", "--reuid=4242",
                             "--regid=4242", "--clear-groups", "sh", "-c",
                             f"read go; cd {mine[0]} && pwd && cat kept.txt {mine[1]}/kept.txt && "
                             f"(ls {base.roots[0]} 2>/dev/null || echo unlisted) && "
                             f"test ! -e {theirs[0]} && echo alone"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        slots.fill(mine)
        out, _ = proc.communicate("go\n", timeout=30)
    finally:
        slots.clear()
    assert proc.returncode == 0, out
    # Its own folders at their paths; the slot above them can be passed through, not listed; no one else's.
    assert out.split() == [str(mine[0]), "mine", "mine", "unlisted", "alone"], out
    # Cleared: unbound and the slot folders gone; the training's own files untouched.
    assert not [p for p in _mount_points() if base.base in p.parents]
    assert not slots.folder.exists()
    assert [(d / "kept.txt").read_text() for d in mine] == ["mine\n", "mine\n"]


def test_what_a_worker_left_bound_is_unbound_at_the_next_start_and_nothing_is_deleted(base: SlotBase) -> None:
    mine = _training(base, "mine")
    slots = base.new()
    slots.fill(mine)  # ... and the worker dies before its launcher exits: nobody clears
    assert [p for p in _mount_points() if base.base in p.parents]
    again = SlotBase.make(base.base, base.roots)  # the next worker on this host
    assert again is not None
    assert not [p for p in _mount_points() if base.base in p.parents]
    assert not slots.folder.exists()
    assert [(d / "kept.txt").read_text() for d in mine] == ["mine\n", "mine\n"]


def test_a_data_dir_named_with_blanks_and_non_ascii_letters_is_mounted_once() -> None:
    # mountinfo writes a mount point's bytes with blanks as octal escapes; a name read back wrongly would have
    # each worker start bind the base once more over itself.
    need_root()
    top = Path(tempfile.mkdtemp(prefix="gpufleet slots ä-", dir="/tmp"))
    base = top / "Daten für Läufe" / "warm-slots"
    roots = [top / "jobs"]
    roots[0].mkdir()
    first = SlotBase.make(base, roots)
    assert first is not None
    try:
        assert SlotBase.make(base, roots) is not None  # the next worker on this host
        assert _mount_points().count(base) == 1
    finally:
        first.close()
    assert base not in _mount_points()
    shutil.rmtree(top)
