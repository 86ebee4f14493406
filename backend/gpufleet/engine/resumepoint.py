"""Which file a script resumes from: ``GPUFLEET_RESUME_FROM`` (torch-free).

Only a script's own checkpoints are resume points. gpufleet's own files in
the checkpoint dir (the attempt fence, ``fence.json``) never are: handed to
``torch.load`` they fail, and that error would hide the real one.
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

from gpufleet import memberfs
from gpufleet.engine.fence import FENCE

_STEP_DIR = re.compile(r"^step-\d+$")
_STEP_IN_NAME = re.compile(r"step[-_]?(\d+)", re.IGNORECASE)
_NUMBER = re.compile(r"\d+")
# Files gpufleet itself keeps in a training's checkpoint dir.
OWN_FILES = frozenset({FENCE})


def is_candidate(p: Path) -> bool:
    """A name a script's checkpoint may have: not gpufleet's, not hidden, not half-written."""
    return not (p.name in OWN_FILES or p.name.startswith(".") or p.name.endswith(".tmp"))


def step_in_name(path: str | Path) -> int | None:
    """The step a checkpoint's name gives: the number after ``step`` (``step-0000121.pt``, ``ckpt_step40``),
    else its last number (``model-121.pt``); None for a name without one (``ckpt.pt``)."""
    name = Path(path).name
    if m := _STEP_IN_NAME.search(name):
        return int(m.group(1))
    numbers = _NUMBER.findall(name)
    return int(numbers[-1]) if numbers else None


def newest_resume_point(ckpt_dir: Path, root: Path | None = None) -> str:
    """The newest checkpoint, or empty.

    gpufleet's own layout (``step-N/`` with ``meta.json``) wins; otherwise the
    most recently modified entry directly in the checkpoint dir (names starting
    with ``.`` or ending in ``.tmp`` are half-written files and ignored, as are
    gpufleet's own files). The folder is its owner's: looked at through no link
    (gpufleet.memberfs; ``root``: the server's folder it is below, else its own
    name sits in one).
    """
    try:
        folder = memberfs.folder(ckpt_dir, root)
    except (OSError, ValueError):
        return ""
    with folder:
        names = folder.names()
        steps = [(int(n[5:]), n) for n in names if _STEP_DIR.match(n) and folder.has(f"{n}/meta.json")]
        if steps:
            return str(Path(ckpt_dir) / max(steps)[1])
        best: tuple[float, str] | None = None
        for n in names:
            st = folder.entry(n) if is_candidate(Path(n)) else None
            if st is not None and (best is None or st.st_mtime > best[0]):
                best = (st.st_mtime, n)
    return str(Path(ckpt_dir) / best[1]) if best else ""


def seed_from(src_dir: Path, dst_dir: Path) -> str | None:
    """Copy ``src_dir``'s newest checkpoint into ``dst_dir`` unless ``dst_dir`` has one; the name copied.

    A clone's first attempt starts from it; later attempts find their own. Both folders are their owners'
    (each one's own name in the checkpoint root): the copy is made by descriptor, links copied as links.
    """
    if newest_resume_point(dst_dir):
        return None
    src = newest_resume_point(src_dir)
    if not src:
        return None
    name = Path(src).name
    Path(dst_dir).parent.mkdir(parents=True, exist_ok=True)  # the checkpoint root: the server's
    with memberfs.Dir.root(Path(dst_dir).parent) as parent:
        parent.make_dir(Path(dst_dir).name, mode=None)
    with memberfs.Dir.root(src_dir) as source, memberfs.Dir.root(dst_dir) as dst:
        st = source.entry(name)
        if st is None or stat.S_ISLNK(st.st_mode):  # a link there leads to what its owner may not read
            return None
        tmp = f".{name}.seed.tmp"
        dst.remove(tmp)
        source.copy_to(name, dst, tmp)
        dst.move(tmp, name)
    return name
