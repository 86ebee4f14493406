"""gpufleet.memberfs on its own, with openat2 and with the per-component fallback a kernel without it uses:
a link at any component is never followed, a FIFO never blocks, a path never leaves its folder."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from gpufleet import memberfs
from gpufleet.memberfs import resolve

SECRET = b"root's own\n"


@pytest.fixture(params=["openat2", "per-component"])
def tree(request, tmp_path: Path, monkeypatch):
    if request.param == "openat2" and not memberfs.has_openat2():
        pytest.skip("this kernel has no openat2")
    if request.param == "per-component":
        monkeypatch.setitem(resolve._state, "openat2", False)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(SECRET)
    (outside / "meta.json").write_text("{}")
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "ok").write_bytes(b"hers\n")
    (root / "a" / "file-link").symlink_to(outside / "secret")
    (root / "dir-link").symlink_to(outside)
    os.mkfifo(root / "a" / "fifo")
    with memberfs.Dir.root(root) as d:
        yield d, root, outside


def test_a_link_at_any_component_reads_as_nothing(tree) -> None:
    d, _root, _outside = tree
    assert d.read("a/ok") == b"hers\n"
    for rel in ("a/file-link", "dir-link/secret", "a/fifo"):
        assert d.read(rel) is None, rel
    with pytest.raises(OSError) as err:
        d.sub("dir-link")
    assert err.value.errno == errno.ELOOP
    assert not d.has("dir-link/meta.json")


def test_writes_folders_and_modes_go_to_the_name_never_a_links_target(tree) -> None:
    d, root, outside = tree
    d.write_new("a/file-link", "new")  # the link itself is replaced
    assert (outside / "secret").read_bytes() == SECRET and (root / "a" / "file-link").read_text() == "new"
    for rel in ("dir-link", "dir-link/x", "a/ok"):
        with pytest.raises(OSError):
            d.make_dir(rel, mode=0o777)
    with pytest.raises(OSError):
        d.give("a/fifo", None, None, 0o666)
    assert stat.S_IMODE(outside.stat().st_mode) != 0o777
    d.make_dir("a/new/deep", mode=0o755)
    assert stat.S_IMODE((root / "a" / "new" / "deep").stat().st_mode) == 0o755
    assert not d.mark("dir-link/stop") and not (outside / "stop").exists()
    d.remove("dir-link")  # the link, not what it leads to
    assert not (root / "dir-link").exists() and (outside / "secret").exists()


def test_a_name_never_leaves_its_folder(tree) -> None:
    d, _root, _outside = tree
    for rel in ("../outside/secret", "/etc/passwd", "a/../../outside/secret"):
        with pytest.raises(ValueError):
            memberfs.open_beneath(d.fd, rel)
    with pytest.raises(ValueError):
        memberfs.beneath("/srv/pool", "/srv/other/x")


def test_a_clone_copy_keeps_links_as_links(tree, tmp_path: Path) -> None:
    d, root, outside = tree
    dst = tmp_path / "dst"
    dst.mkdir()
    with memberfs.Dir.root(dst) as out:
        d.copy_to("a", out, "a")
    assert (dst / "a" / "ok").read_bytes() == b"hers\n"
    assert (dst / "a" / "file-link").is_symlink() and not (dst / "a" / "fifo").exists()
