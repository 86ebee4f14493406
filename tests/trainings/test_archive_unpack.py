"""Uploads are checked as they will be unpacked, and unpack works on every Python the project supports.

- A chain of symbolic links, each harmless on its own, that climbs out of the
  work dir is refused at upload (``check_archive``), as tarfile's ``data``
  filter refuses it at unpack; a chain that stays inside is accepted by both.
- Where tarfile has no ``data`` filter (Python 3.11.0-3.11.3, Debian 12's
  3.11.2), :func:`gpufleet.trainings.tarsafe.extract_data` applies its checks:
  each hostile archive is refused as the filter refuses it, and a benign one
  gives the same tree, modes included. ``unpack`` takes that path when the
  filter is missing, and runs under Debian's own interpreter when it is there.
"""

from __future__ import annotations

import io
import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from gpufleet.trainings import tarsafe
from gpufleet.trainings.archive import ArchiveError, check_archive, unpack
from support.scripts import tar_of

ROOT = Path(__file__).resolve().parents[2]
OK = ("file", "train.py", "print('hi')\n")

CHAINS = [
    # a -> . is the root; a/b -> .. from there is the root's parent.
    ([("symlink", "a", "."), ("symlink", "a/b", "..")], "a/b"),
    ([("dir", "d", ""), ("symlink", "d/l", ".."), ("symlink", "d/l/x", "..")], "d/l/x"),
    # A file written through a link that a later link turned outward.
    ([("dir", "s", ""), ("symlink", "s/up", ".."), ("symlink", "s/up/s2", "."), ("symlink", "s/up/s2/out", "../..")],
     "s/up/s2/out"),
    # A hard link whose target goes out through a link.
    ([("symlink", "here", "."), ("hardlink", "h", "here/../x")], "h"),
]


def _data_filter_refuses(data: bytes, dest: Path) -> bool:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        try:
            tar.extractall(dest, filter="data")
        except (tarfile.FilterError, OSError):
            return True
    return False


@pytest.mark.parametrize(("entries", "entry"), CHAINS)
def test_a_chain_of_links_that_climbs_out_is_refused_at_upload(entries, entry, tmp_path) -> None:
    data = tar_of([OK, *entries])
    with pytest.raises(ArchiveError) as refused:
        check_archive(data)
    assert refused.value.entry == entry and refused.value.status == 422, str(refused.value)
    assert "through the links before it" in str(refused.value) or "outside" in str(refused.value)
    if hasattr(tarfile, "data_filter"):  # the unpack refuses it too: the two agree
        assert _data_filter_refuses(data, tmp_path / "dest")


def test_a_chain_that_stays_inside_is_accepted_by_both(tmp_path: Path) -> None:
    data = tar_of([OK, ("dir", "pkg", ""), ("symlink", "cur", "."), ("symlink", "cur/pkg/up", ".."),
                   ("symlink", "pkg/t.py", "../cur/train.py")])
    assert check_archive(data).files == 5
    unpack(data, tmp_path / "w")
    assert (tmp_path / "w" / "pkg" / "t.py").read_text() == "print('hi')\n"


def test_a_link_loop_is_refused_not_followed_forever() -> None:
    with pytest.raises(ArchiveError, match="more than 40 links"):
        check_archive(tar_of([OK, ("symlink", "a", "b"), ("symlink", "b", "a"), ("file", "a/x", "y")]))


# The fallback (Python before 3.11.4) -----------------------------------------------------------------


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for ti, payload in members:
            if payload is not None:
                ti.size = len(payload)
            tar.addfile(ti, io.BytesIO(payload) if payload is not None else None)
    return buf.getvalue()


def _info(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, link: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.linkname, ti.uid, ti.gid, ti.uname = kind, mode, link, 0, 0, "root"
    return ti


HOSTILE = {
    "climbs out": _tar((_info("../evil.py"), b"x")),
    "absolute link": _tar((_info("etc", tarfile.SYMTYPE, link="/etc"), None)),
    "link out": _tar((_info("up", tarfile.SYMTYPE, link="../../x"), None)),
    "chain out": _tar((_info("a", tarfile.SYMTYPE, link="."), None), (_info("a/b", tarfile.SYMTYPE, link=".."), None)),
    "hard link out": _tar((_info("h", tarfile.LNKTYPE, link="../x"), None)),
    "device": _tar((_info("null", tarfile.CHRTYPE), None)),
    "fifo": _tar((_info("pipe", tarfile.FIFOTYPE), None)),
    "write through a link": _tar((_info("out", tarfile.SYMTYPE, link=".."), None), (_info("out/x.py"), b"x")),
}


def _fallback(data: bytes, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tarsafe.extract_data(tar, dest)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_the_fallback_refuses_what_the_data_filter_refuses(name: str, tmp_path: Path) -> None:
    outside = tmp_path / "box"
    dest = outside / "a" / "w"
    dest.mkdir(parents=True)
    with pytest.raises(tarsafe.UnsafeEntry):
        _fallback(HOSTILE[name], dest)
    # Nothing was written outside the destination.
    assert sorted(p.name for p in outside.rglob("*")) == sorted(["a", "w", *(p.name for p in dest.rglob("*"))])
    assert not (outside / "a" / "evil.py").exists() and not (outside / "a" / "x.py").exists()
    if hasattr(tarfile, "data_filter"):
        assert _data_filter_refuses(HOSTILE[name], tmp_path / "filter")


def _tree(root: Path) -> dict[str, tuple[str, int | str]]:
    out: dict[str, tuple[str, int | str]] = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        rel = str(p.relative_to(root))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(p))
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir", 0)
        else:
            out[rel] = ("file", stat.S_IMODE(st.st_mode))
    return out


BENIGN = _tar((_info("/abs/train.py"), b"a"), (_info("bin"), b"b"), (_info("run.sh", mode=0o4777), b"#!/bin/sh\n"),
              (_info("shared.txt", mode=0o666), b"s"), (_info("pkg", tarfile.DIRTYPE, mode=0o777), None),
              (_info("pkg/t.py", tarfile.SYMTYPE, link="../bin"), None),
              (_info("hard", tarfile.LNKTYPE, link="bin"), None),
              (_info("ro.txt", mode=0o400), b"r"))


def test_the_fallback_gives_the_tree_the_data_filter_gives(tmp_path: Path) -> None:
    _fallback(BENIGN, tmp_path / "ours")
    ours = _tree(tmp_path / "ours")
    # A leading / is stripped; setuid, setgid and group/other write are dropped; owners are ignored.
    assert ours["abs/train.py"] == ("file", 0o644) and ours["run.sh"] == ("file", 0o755)
    assert ours["shared.txt"] == ("file", 0o644) and ours["ro.txt"] == ("file", 0o600)
    assert ours["pkg/t.py"] == ("link", "../bin") and (tmp_path / "ours" / "hard").read_bytes() == b"b"
    if hasattr(tarfile, "data_filter"):
        (tmp_path / "theirs").mkdir()
        with tarfile.open(fileobj=io.BytesIO(BENIGN), mode="r:gz") as tar:
            tar.extractall(tmp_path / "theirs", filter="data")
        assert ours == _tree(tmp_path / "theirs")


def test_unpack_uses_the_fallback_where_tarfile_has_no_data_filter(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delattr(tarfile, "data_filter", raising=False)  # Debian 12's 3.11.2 has none to take away

    def no_filter_argument(self, path=".", members=None, *, numeric_owner=False):
        raise AssertionError("extractall of Python 3.11.0-3.11.3 takes no filter, and is not to be used unfiltered")

    monkeypatch.setattr(tarfile.TarFile, "extractall", no_filter_argument)
    data = tar_of([OK, ("dir", "pkg", ""), ("symlink", "pkg/t.py", "../train.py")])
    info = unpack(data, tmp_path / "w")
    assert info.files == 3 and (tmp_path / "w" / "pkg" / "t.py").read_text() == "print('hi')\n"


SYSTEM_PYTHON = "/usr/bin/python3"
IN_SYSTEM_PYTHON = """
import io, sys, tarfile
sys.path.insert(0, sys.argv[1])
from gpufleet.trainings.archive import unpack
from gpufleet.trainings.tarsafe import UnsafeEntry, extract_data
benign, hostile, dest = (open(p, "rb").read() if i < 2 else p for i, p in enumerate(sys.argv[2:5]))
unpack(benign, __import__("pathlib").Path(dest) / "ok")
try:
    with tarfile.open(fileobj=io.BytesIO(hostile), mode="r:gz") as tar:
        extract_data(tar, __import__("pathlib").Path(dest) / "bad")
except UnsafeEntry as exc:
    print("refused:", exc)
print(sys.version.split()[0], "filter" if hasattr(tarfile, "data_filter") else "no-filter")
"""


def test_unpack_on_the_systems_own_python(tmp_path: Path) -> None:
    """The machine's own interpreter (Debian 12's is 3.11.2, without tarfile's data filter) unpacks a benign
    archive, and the fallback refuses a hostile one there."""
    assert Path(SYSTEM_PYTHON).exists(), f"{SYSTEM_PYTHON} is needed here (apt-get install python3)"
    (tmp_path / "benign.tgz").write_bytes(tar_of([OK, ("dir", "pkg", ""), ("symlink", "pkg/t.py", "../train.py")]))
    (tmp_path / "hostile.tgz").write_bytes(HOSTILE["chain out"])
    r = subprocess.run([SYSTEM_PYTHON, "-c", IN_SYSTEM_PYTHON, str(ROOT / "backend"), str(tmp_path / "benign.tgz"),
                        str(tmp_path / "hostile.tgz"), str(tmp_path / "out")], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "ok" / "pkg" / "t.py").read_text() == "print('hi')\n"
    assert "refused: entry 'a/b' links to '..', outside the destination" in r.stdout, r.stdout
    version, has_filter = r.stdout.split()[-2:]
    assert version.startswith("3.") and has_filter in ("filter", "no-filter")
