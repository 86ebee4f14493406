"""What a member's code leaves in its own folders never makes the root worker write, read or give away
anything else: links named like the next attempt's files, a link where its home folder was, a FIFO as its
progress file, a link in a checkpoint another training is cloned from (gpufleet.memberfs)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpufleet.config import load_settings
from gpufleet.jobs.isolation import plan
from gpufleet.jobs.earlier_attempts import unmerged_reports
from gpufleet.interactive.launch import SessionSpec
from gpufleet.engine import stopfile
from gpufleet.engine.fence import FENCE, write_fence
from gpufleet.engine.resumepoint import seed_from
from gpufleet.engine.spec import LaunchSpec
from gpufleet.trainings.progress import ProgressReader
from gpufleet.trainings.script_launch import ScriptSpec
from gpufleet.users.runas import RunAccount
from support.unix import need_root, short_name, unix_account

SECRET = '{"type": "step", "step": 1, "secret": "the server\'s"}\n'


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file of root's, 0600, outside any training's folders."""
    path = tmp_path / "victim"
    path.write_text(SECRET)
    path.chmod(0o600)
    return path


def _plant(link: Path, target: Path) -> Path:
    link.unlink(missing_ok=True)
    link.symlink_to(target)
    return link


def test_the_next_attempts_files_are_written_beside_a_planted_link_never_through_it(tmp_path: Path,
                                                                                    victim: Path) -> None:
    run, ckpt = tmp_path / "run", tmp_path / "ckpt"
    run.mkdir()
    ckpt.mkdir()
    specs = {
        "spec-2.json": lambda p: LaunchSpec(recipe="mlp", config={}, devices=["cpu"], checkpoint_dir=str(ckpt),
                                            progress_file=str(run / "p")).write(p),
        "spec-3.json": lambda p: ScriptSpec(training_id="t", argv=["true"], workdir=str(run),
                                            progress_file=str(run / "p"), checkpoint_dir=str(ckpt)).write(p),
        "spec-4.json": lambda p: SessionSpec(session_id="t", progress_file=str(run / "p"), workdir=str(run)).write(p),
    }
    for name, write in specs.items():
        stem = name.removesuffix(".json")
        # The spec's name, and every temporary name a writer has used beside it.
        for link in (name, f".{name}.new", f"{stem}.tmp", f"{name}.tmp"):
            _plant(run / link, victim)
        write(run / name)
        assert stat.S_ISREG((run / name).lstat().st_mode) and '"progress_file"' in (run / name).read_text(), name
    for link in (FENCE, f".{FENCE}.new", f".{FENCE}.{os.getpid()}.tmp"):
        _plant(ckpt / link, victim)
    write_fence(ckpt, 2)
    assert stat.S_ISREG((ckpt / FENCE).lstat().st_mode)
    # The stop marker: never created, or touched, at the end of a link.
    gone = tmp_path / "nologin"
    stopfile.mark(_plant(run / "progress-2.jsonl.stop", gone))
    assert victim.read_text() == SECRET and not gone.exists()


def test_the_folders_are_given_over_never_what_a_link_in_them_leads_to(tmp_path: Path, victim: Path) -> None:
    need_root()
    with unix_account(short_name("lnk")) as entry:
        s = load_settings(data_dir=tmp_path / "data")
        closed = tmp_path / "etc"
        closed.mkdir(mode=0o700)
        (closed / "shadow").write_text("root's")
        account = RunAccount(entry.pw_name, entry.pw_uid, entry.pw_gid, (), "/nonexistent", "same-name")
        run, ckpt = s.data_dir / "jobs" / "t1", Path(s.checkpoint_root) / "t1"
        iso = plan(s, account, "script", run, ckpt)
        iso.prepare()  # the first attempt
        assert iso.home == run / "home" and (run / "home").stat().st_uid == entry.pw_uid
        # What the first attempt's code left for the second.
        (run / "home").rmdir()
        _plant(run / "home", closed)
        _plant(run / "passwd", victim)
        _plant(ckpt / "step-1.pt", victim)
        iso.prepare()  # the second attempt
        for p in (closed, closed / "shadow", victim):
            assert p.stat().st_uid == 0, p
        assert stat.S_IMODE(closed.stat().st_mode) == 0o700 and stat.S_IMODE(victim.stat().st_mode) == 0o600
        home = (run / "home").lstat()
        assert stat.S_ISDIR(home.st_mode) and home.st_uid == entry.pw_uid
        assert (run / "passwd").lstat().st_uid == entry.pw_uid  # the link itself, which leads nowhere it may go


def test_progress_and_reports_read_through_a_link_or_a_fifo_read_as_nothing(tmp_path: Path, victim: Path) -> None:
    progress = _plant(tmp_path / "progress-1.jsonl", victim)
    _plant(tmp_path / "progress-1.jsonl.report.rank0", victim)
    assert ProgressReader(progress).read() == []
    assert unmerged_reports(progress) == []
    # A FIFO nobody writes to: read at once as nothing (opening one for reading would wait for a writer).
    fifo = tmp_path / "progress-2.jsonl"
    os.mkfifo(fifo)
    assert ProgressReader(fifo).read() == []
    # A real progress file still reads.
    real = tmp_path / "progress-3.jsonl"
    real.write_text(SECRET)
    assert ProgressReader(real).read() == [{"type": "step", "step": 1, "secret": "the server's"}]


def test_a_clone_copies_the_checkpoint_never_a_links_target(tmp_path: Path, victim: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _plant(src / "step-9.pt", victim)
    assert seed_from(src, tmp_path / "dst1") is None
    assert not (tmp_path / "dst1").exists() or not any((tmp_path / "dst1").iterdir())
    (src / "step-9.pt").unlink()
    (src / "step-10").mkdir()
    (src / "step-10" / "meta.json").write_text("{}")
    _plant(src / "step-10" / "model.pt", victim)
    assert seed_from(src, tmp_path / "dst2") == "step-10"
    copied = tmp_path / "dst2" / "step-10" / "model.pt"
    assert copied.is_symlink()  # the link, not a copy of what it leads to
