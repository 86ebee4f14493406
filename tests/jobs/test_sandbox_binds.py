"""The sandbox's bind list (gpufleet.jobs.sandbox): an allow-list, and the masks after every read bind.

The whole path, a real server and a member's script, is in tests/trainings/test_sandbox_allow_list.py; these
check the two rules on the arguments themselves, for folders a real run does not meet on this machine.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import gpufleet
from gpufleet.jobs import sandbox


def test_the_read_paths_are_the_interpreter_and_gpufleet_never_the_rest_of_sys_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stray = tmp_path / "started-here"
    stray.mkdir()
    # As under `python -m gpufleet.jobs.worker` started in a folder, with '' and an admin's PYTHONPATH.
    monkeypatch.setattr(sys, "path", [str(stray), "", "/tmp", str(tmp_path), *sys.path])
    monkeypatch.chdir(stray)
    paths = sandbox.read_paths()
    for p in (stray, tmp_path, Path("/tmp"), Path(os.getcwd())):
        assert p.resolve() not in paths, (p, paths)
    assert Path(os.path.realpath(sys.prefix)) in paths
    assert Path(os.path.dirname(os.path.realpath(gpufleet.__file__))) in paths
    # And the interpreter finds gpufleet and its dependencies in what is bound.
    assert all(any(p == r or r in p.parents for r in paths) for p in (
        Path(os.path.realpath(gpufleet.__file__)), Path(os.path.realpath(__import__("httpx").__file__))))


def test_the_data_dir_is_masked_after_every_read_bind_that_could_show_it(tmp_path: Path) -> None:
    if sandbox.bwrap_path() is None or sandbox.setpriv_path() is None:
        pytest.fail("bwrap (Debian: bubblewrap) and setpriv are needed, as in the sandbox tests")
    data = Path("/tmp/gf-binds/data")  # under /tmp, which the sandbox makes private
    datasets, run = data / "data", data / "jobs" / "t1"
    args = sandbox.bwrap_args(uid=4242, gid=4242, groups=[], hidden=[data], write=[run],
                              read=[Path("/tmp/gf-binds"), Path("/tmp"), datasets])

    def at(*op: str) -> int:
        return next(i for i in range(len(args)) if args[i:i + len(op)] == list(op))

    mask = at("--tmpfs", str(data))
    # A read bind above the data dir (the folder a server was started in, /tmp) comes before its mask...
    assert at("--ro-bind", "/tmp/gf-binds", "/tmp/gf-binds") < mask
    assert at("--ro-bind", "/tmp", "/tmp") < mask
    # ...and what is inside it on purpose after: the shared datasets read-only, the training's own read-write.
    assert mask < at("--ro-bind", str(datasets), str(datasets)) and mask < at("--bind", str(run), str(run))
