"""A warm sandbox's slots (gpufleet.jobs.slots): real mounts, real bwrap sandboxes, and nothing ever deleted.

The end-to-end cases (a member's warm recipe and script in her sandbox) are in test_warm_pool.py and
tests/trainings/test_warm_scripts.py; these hold the slots' own rules.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from gpufleet.jobs import sandbox
from gpufleet.jobs.slots import SlotBase, _mount_points

from support.unix import need_root


@pytest.fixture
def base(tmp_path: Path):
    need_root()
    roots = [tmp_path / "data" / "jobs", tmp_path / "ckpts"]
    for r in roots:
        r.mkdir(parents=True)
    made = SlotBase.make(tmp_path / "data" / "warm-slots", roots)
    assert made is not None
    yield made
    made.close()
    assert not [p for p in _mount_points() if p == made.base or made.base in p.parents]


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
    proc = subprocess.Popen(["bwrap", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                             "--tmpfs", str(base.base.parent), *binds, "--", "sh", "-c",
                             f"read go; cd {mine[0]} && pwd && cat kept.txt {mine[1]}/kept.txt && "
                             f"ls {base.roots[0]} && test ! -e {theirs[0]} && echo alone"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        slots.fill(mine)
        out, _ = proc.communicate("go\n", timeout=30)
    finally:
        slots.clear()
    assert proc.returncode == 0, out
    assert out.split() == [str(mine[0]), "mine", "mine", "mine", "alone"], out
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
