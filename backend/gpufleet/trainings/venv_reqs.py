"""A training's requirement files: which ones count, and whether the host's torch satisfies them.

``requirements.txt`` (and the files it includes with ``-r``), or
``pyproject.toml`` with its ``uv.lock``. Torch and the packages built against
it come from the host's interpreter, never from the environment: a
requirement on one of them that the host's copy does not satisfy is refused
before anything is built, naming both versions.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

# Installed with the host's torch build (CUDA/ROCm wheels of one release); never resolved anew.
TORCH_FAMILY = frozenset({"torch", "torchvision", "torchaudio", "torchtext", "triton", "pytorch-triton",
                          "pytorch-triton-rocm", "pytorch-triton-xpu"})
_INCLUDE = re.compile(r"^\s*(?:-r|--requirement)[\s=]\s*(\S+)")
MAX_INCLUDES = 32


class EnvError(Exception):
    """The environment cannot be built; the message says why, for the training's reason."""


@dataclass(frozen=True)
class ReqFile:
    name: str  # relative to the work dir
    data: bytes


def _inside(root: Path, rel: str) -> Path:
    path = (root / rel).resolve()
    if not path.is_relative_to(root.resolve()):
        raise EnvError(f"{rel} is outside the uploaded code")
    if not path.is_file():
        raise EnvError(f"{rel} is not in the uploaded code")
    return path


def requirement_files(workdir: Path, rel: str) -> list[ReqFile]:
    """The files whose bytes decide the environment (its cache key), read from the work dir."""
    path = _inside(workdir, rel)
    if path.name == "pyproject.toml":
        lock = path.parent / "uv.lock"
        if not lock.is_file():
            raise EnvError(f"{rel} has no uv.lock beside it; run `uv lock`, or give a requirements.txt")
        return [ReqFile(rel, path.read_bytes()), ReqFile(str(Path(rel).parent / "uv.lock"), lock.read_bytes())]
    out: list[ReqFile] = []
    todo = [rel]
    while todo and len(out) < MAX_INCLUDES:
        name = todo.pop()
        data = _inside(workdir, name).read_bytes()
        out.append(ReqFile(name, data))
        for line in data.decode(errors="replace").splitlines():
            if m := _INCLUDE.match(line):
                todo.append(str(Path(name).parent / m.group(1)))
    return out


def _requirements(f: ReqFile) -> list[tuple[str, str]]:
    """(the requirement as written, the version it pins or '') for each one in a file."""
    from packaging.requirements import InvalidRequirement, Requirement

    if f.name.endswith("uv.lock"):
        packages = tomllib.loads(f.data.decode()).get("package", [])
        return [(f"{p['name']}=={p['version']}", p["version"]) for p in packages if "version" in p]
    if f.name.endswith("pyproject.toml"):
        lines = tomllib.loads(f.data.decode()).get("project", {}).get("dependencies", [])
    else:
        lines = [re.split(r"\s+#", line, maxsplit=1)[0].strip() for line in f.data.decode().splitlines()]
    out = []
    for line in lines:
        if not line or line.startswith(("#", "-")):
            continue
        try:
            Requirement(line)
        except InvalidRequirement:
            continue  # a URL or a path: the resolver says what it makes of it
        out.append((line, ""))
    return out


def check_torch(files: list[ReqFile], installed: dict[str, str], python: str) -> None:
    """Refuse a requirement on torch's family that the host's installed copy does not satisfy."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    for f in files:
        for text, pinned in _requirements(f):
            req = Requirement(text)
            name = canonicalize_name(req.name)
            have = installed.get(name)
            if name not in TORCH_FAMILY or have is None or (req.marker and not req.marker.evaluate()):
                continue
            ok = (Version(pinned).public == Version(have).public if pinned
                  else req.specifier.contains(have, prereleases=True))
            if not ok:
                raise EnvError(
                    f"{f.name} asks for {text} but this host's interpreter ({python}) has {name} {have}; "
                    f"a training uses the host's {name} (its GPU build) and never installs another: require "
                    f"a version that {have} satisfies, or none")
