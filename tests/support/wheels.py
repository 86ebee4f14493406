"""Small wheels written by hand, so environment builds are tested (and benchmarked) with no network.

A wheel is a zip with the package's modules, ``METADATA``, ``WHEEL`` and
``RECORD`` (PEP 427); this writes exactly that, the way ``pip wheel`` would
for a pure-Python package.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, name: str, version: str = "1.0", modules: dict[str, str] | None = None,
               requires: list[str] = ()) -> Path:  # type: ignore[assignment]
    """``<folder>/<name>-<version>-py3-none-any.whl``; ``modules`` maps file names inside the package to source."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    sources = modules or {"__init__.py": f"VERSION = {version!r}\n"}
    files = {f"{dist}/{mod}": src.encode() for mod, src in sources.items()}
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    files[f"{info}/METADATA"] = meta.encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: gpufleet-tests\nRoot-Is-Purelib: true\n"
                              b"Tag: py3-none-any\n")
    record = "".join(f"{n},{_digest(d)},{len(d)}\n" for n, d in files.items()) + f"{info}/RECORD,,\n"
    files[f"{info}/RECORD"] = record.encode()
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files.items():
            z.writestr(n, d)
    return path
