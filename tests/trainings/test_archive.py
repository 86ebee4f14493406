"""Code archives: every unsafe entry is refused by name; packing honours ignore files and is deterministic."""

from __future__ import annotations

import pytest

from gpufleet.trainings.archive import ArchiveError, Limits, check_archive, pack, unpack

from support.scripts import tar_of

OK = ("file", "train.py", "print('hi')\n")


@pytest.mark.parametrize(
    ("entries", "entry", "words"),
    [
        ([OK, ("file", "/etc/evil", "x")], "/etc/evil", "absolute path"),
        ([OK, ("file", "../evil.py", "x")], "../evil.py", "'..'"),
        ([OK, ("file", "pkg/../../evil.py", "x")], "pkg/../../evil.py", "'..'"),
        ([OK, ("symlink", "data", "/etc")], "data", "leaves the work dir"),
        ([OK, ("symlink", "sub/up", "../../x")], "sub/up", "leaves the work dir"),
        ([OK, ("hardlink", "h", "/etc/passwd")], "h", "hard link"),
        ([OK, ("fifo", "pipe", "")], "pipe", "device file or FIFO"),
        ([OK, ("chr", "null", "")], "null", "device file or FIFO"),
    ],
)
def test_unsafe_entries_are_refused_by_name(entries, entry, words):
    with pytest.raises(ArchiveError) as exc:
        check_archive(tar_of(entries))
    assert exc.value.entry == entry and words in str(exc.value) and exc.value.status == 422


def test_links_inside_the_tree_are_fine():
    info = check_archive(tar_of([OK, ("dir", "sub", ""), ("symlink", "sub/t.py", "../train.py"),
                                 ("hardlink", "copy.py", "train.py")]))
    assert info.files == 4


def test_size_and_count_limits():
    data = tar_of([OK, ("file", "big.bin", b"\0" * 5000)])
    with pytest.raises(ArchiveError) as exc:
        check_archive(data, Limits(max_bytes=len(data) - 1))
    assert exc.value.status == 413
    with pytest.raises(ArchiveError) as exc:
        check_archive(data, Limits(max_unpacked_bytes=4000))
    assert exc.value.status == 413 and exc.value.entry == "big.bin"
    with pytest.raises(ArchiveError) as exc:
        check_archive(tar_of([OK, ("file", "b.py", "x"), ("file", "c.py", "x")]), Limits(max_files=2))
    assert exc.value.status == 413 and exc.value.entry == "c.py"


def test_not_an_archive():
    with pytest.raises(ArchiveError) as exc:
        check_archive(b"this is not gzip")
    assert "not a readable .tar.gz" in str(exc.value)


def test_a_refused_archive_writes_nothing(tmp_path):
    dest = tmp_path / "work"
    with pytest.raises(ArchiveError):
        unpack(tar_of([OK, ("file", "../escape.py", "x")]), dest)
    assert not dest.exists() and not (tmp_path / "escape.py").exists()


def test_pack_honours_gitignore_and_gpufleetignore_and_is_deterministic(tmp_path):
    root = tmp_path / "proj"
    (root / "data").mkdir(parents=True)
    (root / "src").mkdir()
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref")
    (root / "train.py").write_text("print(1)\n")
    (root / "src" / "model.py").write_text("x = 1\n")
    (root / "src" / "keep.log").write_text("keep\n")
    (root / "data" / "huge.npy").write_bytes(b"0" * 100)
    (root / "notes.log").write_text("log\n")
    (root / ".gitignore").write_text("*.log\n!src/keep.log\n")
    (root / ".gpufleetignore").write_text("data/\n")
    data = pack(root)
    dest = tmp_path / "out"
    unpack(data, dest)
    got = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert got == [".gitignore", ".gpufleetignore", "src/keep.log", "src/model.py", "train.py"]
    # The same tree packs to the same bytes (the same content hash), whatever the file times.
    import os

    os.utime(root / "train.py", (1, 1))
    assert pack(root) == data


def test_pack_over_the_limit_names_the_largest_files(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text("print(1)\n")
    (root / "weights.bin").write_bytes(b"1" * 3 * 2**20)
    from gpufleet.trainings.archive import PackTooLarge

    with pytest.raises(PackTooLarge) as exc:
        pack(root, max_bytes=2**20)
    assert "weights.bin (3.0 MB)" in str(exc.value) and ".gpufleetignore" in str(exc.value)
