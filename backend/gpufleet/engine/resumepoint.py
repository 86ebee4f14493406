"""Which file a script resumes from: ``GPUFLEET_RESUME_FROM`` (torch-free).

Only a script's own checkpoints are resume points. gpufleet's own files in
the checkpoint dir (the attempt fence, ``fence.json``) never are: handed to
``torch.load`` they fail, and that error would hide the real one.
"""

from __future__ import annotations

import re
from pathlib import Path

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


def newest_resume_point(ckpt_dir: Path) -> str:
    """The newest checkpoint, or empty.

    gpufleet's own layout (``step-N/`` with ``meta.json``) wins; otherwise the
    most recently modified entry directly in the checkpoint dir (names starting
    with ``.`` or ending in ``.tmp`` are half-written files and ignored, as are
    gpufleet's own files).
    """
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return ""
    steps = [(int(p.name[5:]), p) for p in ckpt_dir.iterdir()
             if _STEP_DIR.match(p.name) and (p / "meta.json").exists()]
    if steps:
        return str(max(steps)[1])
    best: tuple[float, str] | None = None
    for p in ckpt_dir.iterdir():
        if not is_candidate(p):
            continue
        try:
            m = p.stat().st_mtime
        except OSError:
            continue
        if best is None or m > best[0]:
            best = (m, str(p))
    return best[1] if best else ""


def seed_from(src_dir: Path, dst_dir: Path) -> str | None:
    """Copy ``src_dir``'s newest checkpoint into ``dst_dir`` unless ``dst_dir`` has one; the name copied.

    A clone's first attempt starts from it; later attempts find their own.
    """
    import shutil

    if newest_resume_point(dst_dir):
        return None
    src = newest_resume_point(src_dir)
    if not src:
        return None
    s, dst_dir = Path(src), Path(dst_dir)
    if s.is_symlink():  # the source is its owner's folder: a link there leads to what they may not read
        return None
    dst_dir.mkdir(parents=True, exist_ok=True)
    tmp = dst_dir / f".{s.name}.seed.tmp"
    shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
    if s.is_dir():
        shutil.copytree(s, tmp, symlinks=True)  # links are copied as links, never followed
    else:
        shutil.copy2(s, tmp, follow_symlinks=False)
    tmp.rename(dst_dir / s.name)
    return s.name
