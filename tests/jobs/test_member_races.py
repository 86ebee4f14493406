"""A member racing the root worker in her own folders: while the worker hands them over, writes the next
attempt's spec, marks a stop, reads progress, finds the newest checkpoint, seeds a clone or serves a download,
a process of hers flips the name it works on between the real thing and a link to a root-only canary
(tests/support/links.py). The canary is never read, written, or changed in mode or owner.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet import memberfs
from gpufleet.config import load_settings
from gpufleet.engine import stopfile
from gpufleet.engine.resumepoint import newest_resume_point, seed_from
from gpufleet.engine.spec import LaunchSpec
from gpufleet.jobs.earlier_attempts import newest_checkpoint_step
from gpufleet.trainings import files
from gpufleet.trainings.progress import ProgressReader
from support.links import Canary, canary_file, swapping
from support.unix import short_name, unix_account

RACE_S = 0.4  # per operation
CLONE_RACE_S = 2.0  # the old clone's check-then-copy lost this race within it


@pytest.fixture(scope="module")
def member():
    with unix_account(short_name("rc")) as entry:
        yield entry


@pytest.fixture
def canary(tmp_path: Path):
    with canary_file(tmp_path / "root-only") as c:
        (c.path.parent / "meta.json").write_text("{}")  # a checkpoint's look, for the folder swaps
        yield c


@pytest.fixture
def trees(member):
    """The server's root (0755, root's) with a training's folders in it, the member's."""
    base = Path(tempfile.mkdtemp(prefix="gpufleet-races-"))
    base.chmod(0o755)
    for name in ("run", "ckpt", "clone"):
        (base / name).mkdir()
        os.chown(base / name, member.pw_uid, member.pw_gid)
    yield base
    with memberfs.Dir.root(base.parent) as parent:
        parent.remove(base.name)


def _race(member, at: Path, target: Path, folder: bool, op: Callable[[], object],
          seconds: float = RACE_S) -> list[object]:
    out = []
    with swapping(member, at, target, folder=folder):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                out.append(op())
            except OSError:
                pass  # refused: a link where the real thing should be
    assert out or folder, "the operation never ran"
    return out


def _spec(run: Path) -> LaunchSpec:
    return LaunchSpec(recipe="mlp", config={}, devices=["cpu"], checkpoint_dir=str(run), progress_file=str(run / "p"))


def test_files_written_read_and_marked_in_her_run_dir_never_reach_the_canary(member, canary: Canary, trees) -> None:
    run = trees / "run"
    _race(member, run / "spec-2.json", canary.path, False, lambda: _spec(run).write(run / "spec-2.json"))
    _race(member, run / "progress-1.jsonl.stop", canary.path, False,
          lambda: stopfile.mark(run / "progress-1.jsonl.stop"))
    reads = _race(member, run / "progress-1.jsonl", canary.path, False,
                  lambda: ProgressReader(run / "progress-1.jsonl").read())
    canary.assert_not_in(repr(reads).encode(), "a progress read")
    canary.assert_untouched()


def test_her_folders_handed_over_never_give_the_canary_away(member, canary: Canary, trees) -> None:
    run = trees / "run"
    _race(member, run / "home", canary.path, True, lambda: memberfs.hand_over(run, member.pw_uid, member.pw_gid))
    _race(member, run / "home", canary.path.parent, True,
          lambda: memberfs.Dir.root(trees).make_dir("run/home", member.pw_uid, member.pw_gid, 0o755))
    canary.assert_untouched()
    assert canary.path.parent.stat().st_uid == 0 and canary.path.parent.stat().st_mode & 0o777 == 0o700


def test_checkpoints_found_and_copied_for_a_clone_never_reach_the_canary(member, canary: Canary, trees) -> None:
    ckpt, clone = trees / "ckpt", trees / "clone"
    found = _race(member, ckpt / "step-5", canary.path.parent, True,
                  lambda: (newest_resume_point(ckpt), newest_checkpoint_step(ckpt)))
    assert found  # it ran throughout; what it found is only ever her own names

    def seed() -> bytes:
        """A clone seeded anew; the bytes of every file copied into it."""
        with memberfs.Dir.root(clone) as d:
            for name in d.names():
                d.remove(name)
        seed_from(ckpt, clone)
        return b"".join(Path(folder, name).read_bytes() for folder, _dirs, names in os.walk(clone)
                        for name in names if not Path(folder, name).is_symlink())

    for copied in _race(member, ckpt / "step-5", canary.path.parent, True, seed, CLONE_RACE_S):
        canary.assert_not_in(copied, "a clone's copy")
    canary.assert_untouched()


def test_a_download_from_her_checkpoints_never_serves_the_canary(member, canary: Canary, trees) -> None:
    tid = uuid.uuid4()
    (trees / "ckpt").rename(trees / str(tid))  # the Files page's checkpoints/ of that training
    settings = load_settings(data_dir=trees / "data", checkpoint_root=str(trees))

    def download() -> bytes:
        try:
            fh, _st, _name = files.open_file(settings, settings, tid, "checkpoints/sub/canary")
        except files.FileRefused:
            return b""
        with fh:
            return fh.read()

    served = _race(member, trees / str(tid) / "sub", canary.path.parent, True, download)
    for data in served:
        canary.assert_not_in(data, "a download")
    canary.assert_untouched()
