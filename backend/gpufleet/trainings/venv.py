"""A training's own packages: a virtual environment built with ``uv`` on the host that runs it.

The script launcher calls :func:`prepare_launch` before it starts the ranks,
so the build runs in the launcher's process context (the training's, not the
API's or the worker's). The environment is keyed by the requirement files,
the interpreter and the platform (:mod:`gpufleet.trainings.venvcache`); a
second training with the same key reuses it. It is layered on the interpreter
that runs the training (``uv venv --system-site-packages``, plus a ``.pth``
to that interpreter's own site-packages when it is itself a virtual
environment), so the host's torch and its CUDA build are used, never
downloaded: torch's family is excluded from the resolution, and a requirement
that the host's copy does not satisfy is refused before anything is built.

Progress lines: ``environment`` (``phase`` building | waiting | ready,
``key``, ``message``, ``seconds``, ``cache_hit``), and an ``error`` of kind
``environment`` with the resolver's message when the build fails; the
launcher then exits ``CANNOT_RUN`` (failed, no restart spent).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.engine import exitcodes as ec
from gpufleet.rankpath.gpufleet_share import share_of
from gpufleet.trainings import venvcache
from gpufleet.trainings.venv_reqs import EnvError, check_torch, requirement_files

if TYPE_CHECKING:
    from gpufleet.config import CodeSettings, StoreSettings
    from gpufleet.engine.progress import ProgressWriter

RANK_PATH = Path(__file__).resolve().parents[1] / "rankpath"  # gpufleet_report.py, dependency-free
HEARTBEAT_S = 5.0
_PROBE = """\
import importlib.metadata as md, json, platform, sys, sysconfig
found = {}
for d in md.distributions():
    name = (d.metadata["Name"] or "").lower().replace("_", "-")
    found.setdefault(name, d.version)
paths = sysconfig.get_paths()
print(json.dumps({"executable": sys.executable, "version": platform.python_version(),
                  "implementation": sys.implementation.cache_tag, "platform": sysconfig.get_platform(),
                  "is_venv": sys.prefix != sys.base_prefix, "purelib": paths["purelib"],
                  "platlib": paths["platlib"], "installed": found}))
"""
_held: list[venvcache.Slot] = []  # the environment this launcher runs with, locked shared until it exits


@dataclass
class EnvRequest:
    requirements: str  # relative to the work dir: a requirements file, or pyproject.toml beside uv.lock
    python: str  # the interpreter the environment sits on (the one with torch)
    cache_dir: str
    max_bytes: int
    uv: str
    index_url: str = ""
    find_links: list[str] = field(default_factory=list)
    no_index: bool = False
    extra_index_urls: list[str] = field(default_factory=list)
    native_tls: bool = False  # uv trusts the system's certificate store (a lab's CA installed there)


def request_for(store_settings: StoreSettings, settings: CodeSettings, requirements: str | None, python: str,
                owner: str) -> dict[str, Any] | None:
    """The worker's part: what the launcher needs to build the environment (None: no environment)."""
    if not requirements:
        return None
    import uv

    return asdict(EnvRequest(
        requirements=requirements, python=python, cache_dir=str(owner_cache_dir(store_settings, settings, owner)),
        max_bytes=settings.env_cache_max_bytes, uv=uv.find_uv_bin(), index_url=settings.env_index_url or "",
        find_links=list(settings.env_find_links), no_index=settings.env_no_index,
        extra_index_urls=list(settings.env_extra_index_urls), native_tls=settings.env_native_tls))


def owner_cache_dir(store_settings: StoreSettings, code_settings: CodeSettings, owner: str) -> Path:
    """Per owner: an environment one member built is never code another member runs."""
    return Path(code_settings.env_cache_dir or store_settings.data_dir / "envs") / owner  # filled in by Settings


def probe(python: str) -> dict[str, Any]:
    res = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise EnvError(f"cannot inspect the interpreter {python}: {res.stderr.strip()[-500:]}")
    return json.loads(res.stdout)


class Build:
    """One build or reuse, writing its output to the training's log and its phases to the progress file."""

    def __init__(self, req: EnvRequest, workdir: Path, progress: ProgressWriter, stopped: Callable[[], bool]):
        self.req, self.workdir, self.progress, self.stopped = req, workdir, progress, stopped
        self._beat = time.monotonic()
        self.slot: venvcache.Slot | None = None

    def tick(self) -> bool:
        """The heartbeat while waiting (the worker kills a silent launcher); False once a stop is asked."""
        if time.monotonic() - self._beat >= HEARTBEAT_S:
            self._beat = time.monotonic()
            self.progress.write("alive")
        return not self.stopped()

    def note(self, phase: str, key: str, message: str, **extra: Any) -> None:
        self.progress.write("environment", phase=phase, key=key, message=message, **extra)
        log(message)

    def run(self) -> Path:
        began = time.monotonic()
        files = requirement_files(self.workdir, self.req.requirements)
        ident = probe(self.req.python)
        check_torch(files, ident["installed"], self.req.python)
        identity = {k: ident[k] for k in ("executable", "version", "implementation", "platform")}
        identity["torch"] = {n: v for n, v in ident["installed"].items() if n in _torch_family(ident)}
        key = venvcache.env_key([(f.name, f.data) for f in files], identity)
        slot = venvcache.Slot(Path(self.req.cache_dir), key)
        if not slot.try_shared():  # another training builds it now
            self.note("waiting", key, f"waiting for another training's build of environment {key}")
            slot.shared(self.tick)
        hit = slot.ready()
        if not hit:
            slot.release()
            slot = venvcache.Slot(Path(self.req.cache_dir), key)
            if not slot.try_exclusive():
                self.note("waiting", key, f"waiting for another training's build of environment {key}")
                slot.exclusive(self.tick)
            hit = slot.ready()  # built while this one waited
            if not hit:
                self.note("building", key, f"building environment (key {key}) from {self.req.requirements} with uv")
                self._build(slot, ident)
            slot.shared(self.tick)  # downgrade: others may use it now
        slot.touch()
        self.slot = slot  # held shared while the training runs: never evicted under it
        seconds = time.monotonic() - began
        self.note("ready", key, f"environment ready in {seconds:.1f} s ({'cache hit' if hit else 'built'})",
                  seconds=round(seconds, 3), cache_hit=hit, path=str(slot.dir))
        removed = venvcache.evict(Path(self.req.cache_dir), self.req.max_bytes, keep=key)
        if removed:
            log(f"removed {len(removed)} least recently used environment(s) to stay within the cache budget")
        return slot.dir

    def _build(self, slot: venvcache.Slot, ident: dict[str, Any]) -> None:
        slot.clear()  # what a killed build left
        uv, target = self.req.uv, slot.dir
        self._uv([uv, "venv", "--quiet", "--system-site-packages", "--python", self.req.python, str(target)])
        if ident["is_venv"]:
            # uv layers on the base interpreter; the training's interpreter's own packages (torch) come next.
            site = next((target / "lib").glob("python*/site-packages"))
            dirs = dict.fromkeys([ident["purelib"], ident["platlib"]])
            (site / "_gpufleet_base.pth").write_text(
                "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs) + "\n")
        reqs = self.workdir / self.req.requirements
        if reqs.name == "pyproject.toml":
            exported = target / "requirements.lock.txt"
            self._uv([uv, "export", "--quiet", "--frozen", "--no-hashes", "--no-emit-project", "--no-header",
                      "--project", str(reqs.parent), "-o", str(exported)])
            reqs = exported
        excluded = target / "excluded.txt"
        excluded.write_text("".join(f"{n}\n" for n in _torch_family(ident)))
        cmd = [uv, "pip", "install", "--python", str(target / "bin" / "python"), "-r", str(reqs),
               "--excludes", str(excluded)]
        if self.req.index_url:
            cmd += ["--index-url", self.req.index_url]
        for url in self.req.extra_index_urls:
            cmd += ["--extra-index-url", url]
        for link in self.req.find_links:
            cmd += ["--find-links", link]
        if self.req.no_index:
            cmd.append("--no-index")
        self._uv(cmd)
        slot.mark_ready({"requirements": self.req.requirements, "python": self.req.python, "built_at": time.time()})

    def _uv(self, cmd: list[str]) -> None:
        # The launcher's environment is the training's: a lab's proxy, CA bundle and index variables are in it.
        env = dict(os.environ, UV_PYTHON_DOWNLOADS="never", UV_NO_PROGRESS="1", NO_COLOR="1")
        if self.req.native_tls:  # uv's older name and its newer one: each version reads the one it knows
            env.update(UV_NATIVE_TLS="1", UV_SYSTEM_CERTS="1")
        env.pop("VIRTUAL_ENV", None)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=self.req.cache_dir)
        tail: deque[str] = deque(maxlen=12)
        copier = threading.Thread(target=_copy, args=(proc.stdout, tail), daemon=True)
        copier.start()
        while proc.poll() is None:
            if not self.tick():
                proc.kill()
                proc.wait()
                raise venvcache.Stopped
            time.sleep(0.1)
        copier.join(5)
        if proc.returncode != 0:
            lines = [t for t in tail if t and not t.startswith(("Using Python", "Using CPython"))]
            said = " ".join(lines)[-1500:] or f"{cmd[1]} exited with {proc.returncode}"
            raise EnvError(said + _network_hint(said))


def _network_hint(said: str) -> str:
    """What to set when the build failed on the lab's network rather than on the requirements."""
    if "UnknownIssuer" in said or "certificate verify failed" in said or "invalid peer certificate" in said:
        return (" (the index's certificate is signed by an authority uv does not trust: an admin sets "
                "GPUFLEET_CA_BUNDLE to a PEM bundle holding it, or SSL_CERT_FILE in the worker's environment, "
                "or GPUFLEET_ENV_NATIVE_TLS=true when it is in the system's store)")
    if "Connect" in said and ("proxy" in said.lower() or "tunnel" in said.lower()):
        return " (check the proxy the worker's HTTPS_PROXY/HTTP_PROXY names, and NO_PROXY)"
    return ""


def _torch_family(ident: dict[str, Any]) -> list[str]:
    from gpufleet.trainings.venv_reqs import TORCH_FAMILY

    return sorted(n for n in ident["installed"] if n in TORCH_FAMILY)


def _copy(stream: Any, tail: deque[str]) -> None:  # a pipe
    for raw in iter(stream.readline, b""):
        text = raw.decode(errors="replace").rstrip()
        tail.append(text.strip())
        log(text)
    stream.close()


def log(text: str) -> None:
    sys.stdout.write(f"[env] {text}\n")
    sys.stdout.flush()


def prepare_launch(spec: Any, progress: ProgressWriter, stopped: Callable[[], bool]) -> int:
    """Before the ranks start: the report module on their path, and the training's environment.

    Returns ``SUCCEEDED`` (``spec.argv`` and this process's environment now
    point at the environment), ``CANNOT_RUN`` or ``INTERRUPTED``.
    """
    # On a share, share/sitecustomize.py caps PyTorch's allocator in every rank before the script's first line.
    share = str(RANK_PATH / "share") if share_of(spec.env) is not None else None
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (share, str(RANK_PATH), os.environ.get("PYTHONPATH")) if p)
    if not spec.environment:
        return ec.SUCCEEDED
    req = EnvRequest(**spec.environment)
    build = Build(req, Path(spec.workdir), progress, stopped)
    try:
        target = build.run()
        _held.append(build.slot)  # type: ignore[arg-type]
    except venvcache.Stopped:
        progress.write("error", rank=None, kind="interrupted", message="stopped while preparing the environment")
        return ec.INTERRUPTED
    except (EnvError, OSError, subprocess.SubprocessError, ValueError) as exc:
        message = f"cannot build the environment from {req.requirements}: {exc}"
        progress.write("error", rank=None, kind="environment", message=message)
        print(f"[gpufleet] {message}", flush=True)
        return ec.CANNOT_RUN
    if spec.argv and spec.argv[0] == req.python:
        spec.argv = [str(target / "bin" / "python"), *spec.argv[1:]]
    os.environ["VIRTUAL_ENV"] = str(target)
    os.environ["PATH"] = os.pathsep.join([str(target / "bin"), os.environ.get("PATH", "")])
    return ec.SUCCEEDED
