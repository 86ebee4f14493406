"""A copy of this checkout to run its scripts in, and the `.venv` an earlier install left there.

The venv's packages are hard links to this environment's (nothing downloaded, nothing copied); its
``bin/`` and ``pyvenv.cfg`` are its own files, so what an install run there replaces or writes never
reaches this environment's.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def copy_checkout(dest: Path) -> None:
    """The tracked files as they are in this working tree (changes not yet committed included)."""
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def linked_venv(dest: Path, base: Path) -> None:
    """``dest/.venv`` as `BASE -m venv` and an install made it: this environment's packages, linked."""
    venv, mine = dest / ".venv", REPO / ".venv"
    venv.mkdir()
    subprocess.run(["cp", "-al", str(mine / "lib"), str(venv / "lib")], check=True)
    (venv / "lib64").symlink_to("lib")
    version = subprocess.run([str(base), "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (venv / "pyvenv.cfg").write_text(f"home = {base.parent}\ninclude-system-site-packages = false\n"
                                     f"version = {version}\nexecutable = {base.resolve()}\n")
    (venv / "bin").mkdir()
    for entry in (mine / "bin").iterdir():
        if entry.is_symlink() or not entry.is_file():
            continue
        data = entry.read_bytes()
        if data.startswith(b"#!" + str(mine).encode()):
            data = data.replace(str(mine).encode(), str(venv).encode(), 1)
        target = venv / "bin" / entry.name
        target.write_bytes(data)
        target.chmod(entry.stat().st_mode & 0o777)
    (venv / "bin" / "python3").symlink_to(base)
    (venv / "bin" / "python").symlink_to("python3")
