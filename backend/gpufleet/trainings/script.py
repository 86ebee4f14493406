"""Script trainings: what a request may ask for, and what the processes get.

A script training is a user's own program (usually written for ``torchrun``)
run once per GPU from an uploaded code archive. The request names the code by
hash, the command as an argv list (never given to a shell), environment
variables from an allow-list, and the memory one rank needs on its GPU.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet import memberfs
from gpufleet.config import CodeSettings, StoreSettings
from gpufleet.db.models import CodeBlob, Training
from gpufleet.devices.device import DEVICE_ENV
from gpufleet.engine import resumepoint

if TYPE_CHECKING:
    from gpufleet.trainings.environment import EnvPolicy
    from gpufleet.trainings.script_launch import ScriptSpec

MAX_ARGV = 256
MAX_ARG_LEN = 4096
MAX_ENV = 64
MAX_ENV_VALUE = 4096
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
          "KI": 1024, "MI": 1024**2, "GI": 1024**3, "TI": 1024**4}
# What the launcher sets for every rank, and every variable that picks or renumbers GPUs; a request can
# never override these.
RESERVED_ENV = frozenset({
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", *DEVICE_ENV,
    "TORCHELASTIC_RUN_ID", "PYTHONPATH", "PATH", "LD_PRELOAD", "LD_LIBRARY_PATH",
})
SCRIPT_RECIPE = "script"
# The requirement file a training's environment is built from travels in the row's env under this
# reserved name (as the interpreter's name does under GPUFLEET_PYTHON); the launcher never passes it on.
REQUIREMENTS_KEY = "GPUFLEET_REQUIREMENTS"
PYTHON_NAMES = ("python", "python3")


class ScriptError(ValueError):
    def __init__(self, field: str, message: str, status: int = 422):
        super().__init__(message)
        self.field = field
        self.status = status


def parse_memory(value: str | int | None) -> int | None:
    """``"20GiB"``, ``"512MB"``, ``"1.5G"`` or a number of bytes -> bytes."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ScriptError("memory", "memory must be a size like '20GiB' or a number of bytes")
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE.match(value)
        if not m:
            raise ScriptError("memory", f"memory {value!r} is not a size; write e.g. '20GiB', '512MiB' or bytes")
        unit = (m.group(2) or "").upper().rstrip("B")
        n = int(float(m.group(1)) * _UNITS[unit])
    if n < 2**20:
        raise ScriptError("memory", f"memory {value!r} is less than 1 MiB per GPU; give the memory one rank needs")
    if n > 2**50:
        raise ScriptError("memory", f"memory {value!r} is larger than any GPU")
    return n


def check_argv(argv: list[str] | None) -> list[str]:
    if not argv:
        raise ScriptError("argv", "a script training needs argv, the command to run, e.g. ['python', 'train.py']")
    if len(argv) > MAX_ARGV:
        raise ScriptError("argv", f"argv has {len(argv)} items; at most {MAX_ARGV}")
    for i, a in enumerate(argv):
        if not isinstance(a, str) or len(a) > MAX_ARG_LEN or "\x00" in a:
            raise ScriptError(f"argv[{i}]", f"argv[{i}] must be a string of at most {MAX_ARG_LEN} characters")
    if not argv[0].strip():
        raise ScriptError("argv[0]", "argv[0], the program, is empty")
    return list(argv)


def check_env(settings: CodeSettings, env: Mapping[str, str] | None) -> dict[str, str]:
    """Only variables matching ``GPUFLEET_SCRIPT_ENV_ALLOW`` may be set by a request."""
    env = dict(env or {})
    if len(env) > MAX_ENV:
        raise ScriptError("env", f"env has {len(env)} variables; at most {MAX_ENV}")
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ScriptError(f"env.{name}", f"{name!r} is not an environment variable name")
        if not isinstance(value, str) or len(value) > MAX_ENV_VALUE or "\x00" in value:
            raise ScriptError(f"env.{name}", f"env.{name} must be a string of at most {MAX_ENV_VALUE} characters")
        allowed = name not in RESERVED_ENV and not name.startswith("GPUFLEET_") and any(
            fnmatch.fnmatchcase(name, p) for p in settings.script_env_allow)
        if not allowed:
            raise ScriptError(
                f"env.{name}",
                f"environment variable {name} may not be set by a request; allowed: "
                f"{', '.join(settings.script_env_allow)} (an admin sets GPUFLEET_SCRIPT_ENV_ALLOW)")
    return env


def check_python(settings: CodeSettings, name: str | None) -> str | None:
    if name is None or name == "default":
        return None
    if name not in settings.pythons:
        known = ", ".join(["default", *sorted(settings.pythons)])
        raise ScriptError("python", f"python {name!r} is not configured on this server; choose one of {known}")
    return name


def check_requirements(settings: StoreSettings, sess: Session, code_hash: str, rel: str | None) -> str | None:
    """The requirement file, relative to the code's root, if the uploaded code holds it."""
    import io
    import tarfile

    from gpufleet.trainings.code import fetch

    if not rel:
        return None
    rel = rel.strip().removeprefix("./")
    if rel.startswith("/") or ".." in Path(rel).parts or "\x00" in rel:
        raise ScriptError("requirements", f"requirements {rel!r} must be a path inside the uploaded code")
    if not (rel.endswith(".txt") or Path(rel).name == "pyproject.toml"):
        raise ScriptError("requirements", f"requirements {rel!r} must be a requirements .txt file, or "
                                          "pyproject.toml with a uv.lock beside it")
    with tarfile.open(fileobj=io.BytesIO(fetch(settings, sess, code_hash)), mode="r:gz") as tar:
        names = {n.removeprefix("./") for n in tar.getnames()}
    lock = str(Path(rel).parent / "uv.lock") if Path(rel).parent != Path(".") else "uv.lock"
    if rel not in names:
        raise ScriptError("requirements", f"requirements {rel!r} is not in the uploaded code")
    if Path(rel).name == "pyproject.toml" and lock not in names:
        raise ScriptError("requirements", f"{rel} has no uv.lock beside it in the uploaded code; run `uv lock`")
    return rel


def measured_peak(sess: Session, code_hash: str) -> int | None:
    """The largest per-rank peak measured by earlier runs of the same code."""
    return sess.scalar(select(func.max(Training.measured_peak_memory)).where(
        Training.code_hash == code_hash))  # only a script's row holds code


@dataclass
class ScriptFields:
    code_hash: str
    argv: list[str]
    env: dict[str, str]
    memory_declared: int | None
    memory_estimate: int | None
    estimate: dict[str, Any] | None


def resolve(sess: Session, store_settings: StoreSettings, settings: CodeSettings, *, code: str | None,
            argv: list[str] | None,
            env: Mapping[str, str] | None, memory: str | int | None, python: str | None,
            requirements: str | None = None) -> ScriptFields:
    """Validate a script request; nothing is written."""
    from gpufleet.trainings.archive import ArchiveError
    from gpufleet.trainings.code import check_hash

    if not code:
        raise ScriptError("code", "a script training needs code: the hash that POST /api/v1/code returned")
    try:
        code_hash = check_hash(code)
    except ArchiveError as exc:
        raise ScriptError("code", str(exc)) from None
    if sess.scalar(select(func.count()).select_from(CodeBlob).where(CodeBlob.hash == code_hash)) == 0:
        raise ScriptError("code", f"code {code_hash} has not been uploaded; POST the archive to /api/v1/code first")
    argv = check_argv(argv)
    env = check_env(settings, env)
    py = check_python(settings, python)
    if py is not None:
        env = {**env}  # the interpreter's name travels in the row's env under a reserved key
        env["GPUFLEET_PYTHON"] = py
    req_file = check_requirements(store_settings, sess, code_hash, requirements)
    if req_file:
        env = {**env, REQUIREMENTS_KEY: req_file}
    declared = parse_memory(memory)
    estimate: dict[str, Any] | None = None
    mem = declared
    if declared is not None:
        estimate = {"source": "declared", "total": declared}
    else:
        peak = measured_peak(sess, code_hash)
        if peak:
            mem = peak
            estimate = {"source": "measured", "total": peak,
                        "note": "the largest per-rank peak measured by earlier runs of the same code"}
        else:
            # As Slurm does: whole GPUs, held exclusively; this run's measured peak sizes the next one.
            estimate = {"source": "whole-gpu",
                        "note": "no memory declared and no earlier run of the same code measured: whole GPUs, "
                                "exclusively; the peak this run measures is used next time"}
    return ScriptFields(code_hash=code_hash, argv=argv, env=env, memory_declared=declared,
                        memory_estimate=mem, estimate=estimate)


def process_env(base: Mapping[str, str], policy: EnvPolicy | None = None) -> dict[str, str]:
    """The environment a script's launcher starts from: the training allow-list, as for recipes.

    Only what a Python program, torch and the GPU runtimes need passes
    (``trainings.environment``); gpufleet's settings, the secret key and any database
    or broker URL never do; a lab's proxy and certificate authority do (``policy``:
    an admin's changes). The launcher then adds the variables it sets itself,
    and the request's own ``env`` (names the server allows) goes to the ranks.
    """
    from gpufleet.trainings.environment import DEFAULT_POLICY, training_environment

    return training_environment(base, policy or DEFAULT_POLICY)


def interpreter(settings: CodeSettings, env: Mapping[str, str] | None) -> str:
    import sys

    name = (env or {}).get("GPUFLEET_PYTHON")
    if name and name in settings.pythons:
        return settings.pythons[name]
    return sys.executable


def resolve_argv(argv: list[str], python: str) -> list[str]:
    """``python``/``python3`` as the program means the chosen interpreter."""
    return [python, *argv[1:]] if argv and argv[0] in PYTHON_NAMES else list(argv)


newest_resume_point = resumepoint.newest_resume_point


def attempt_spec(store_settings: StoreSettings, settings: CodeSettings, t: Training, *, workdir: Path, progress: Path,
                 checkpoint_dir: Path,
                 output_dir: Path, gpu_indexes: list[int], backend: str, ranks_on_cpu: bool, stop_grace_s: float,
                 env_cache: Path | None = None, files_root: Path | None = None,
                 python: str | None = None) -> ScriptSpec:
    """The script launcher's spec for the next attempt of ``t``, on a team host or a pool's node alike: the
    interpreter and environment its request chose, and the newest checkpoint to resume from. The attempt's
    progress file and stop marker from an earlier run are cleared. ``env_cache``: where the environment is
    built (default: the owner's cache on this host). ``files_root``: the server's folder the attempt's files
    are below, reached from it through no link (a pool's root); default: each file's folder sits in one of
    the server's (gpufleet.memberfs). ``python``: the interpreter of the place it runs (a pool's nodes have
    their own; default: the one the request chose among this host's)."""
    from gpufleet.trainings import venv
    from gpufleet.trainings.script_launch import ScriptSpec

    memberfs.remove(progress, files_root)
    memberfs.remove(f"{progress}.stop", files_root)
    env = dict(t.env or {})
    python = python or interpreter(settings, env)
    env.pop("GPUFLEET_PYTHON", None)
    # Built by the launcher, in the training's own process context, before its ranks start.
    environment = venv.request_for(store_settings, settings, env.pop(REQUIREMENTS_KEY, None), python,
                                   t.owner or "local")
    if environment is not None and env_cache is not None:
        environment["cache_dir"] = str(env_cache)
    return ScriptSpec(
        training_id=str(t.id), argv=resolve_argv(list(t.argv or []), python), workdir=str(workdir),
        progress_file=str(progress), checkpoint_dir=str(checkpoint_dir),
        resume_from=newest_resume_point(checkpoint_dir, files_root), env=env, gpu_indexes=gpu_indexes, backend=backend,
        world_size=len(gpu_indexes), ranks_on_cpu=ranks_on_cpu, stop_grace_s=stop_grace_s,
        output_dir=str(output_dir), environment=environment)
