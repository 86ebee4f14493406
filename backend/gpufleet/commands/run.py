"""``gpufleet run [--gpus N] [--memory 20GiB] -- python train.py ...``: run your own code on the server.

Packs the current directory (``--dir``), honouring ``.gitignore`` and
``.gpufleetignore`` (default limit 100 MB, naming the largest files when
over), uploads it unless the server already holds the same code (content
hash), submits a training of kind ``script`` with the command as argv, and
follows it like ``gpufleet trainings logs --follow``.

The training's packages: ``requirements.txt``, or ``pyproject.toml`` with
``uv.lock``, found in the uploaded folder (or ``--requirements FILE``;
``--no-env`` for none) is built into a cached virtual environment on the
host that runs it, on top of that host's interpreter and torch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpufleet.commands import preflight
from gpufleet.commands.trainings import ServerOpt, fail, connect, err, follow_training, out

if TYPE_CHECKING:
    from gpufleet.commands.remote import Client


def register(app: typer.Typer) -> None:
    app.command("run", help="Run your own training script (written for torchrun) on the server's GPUs.",
                context_settings={"allow_interspersed_args": False})(run)


# The request's fields, as this command's options (what a refusal names).
CLI_OPTIONS = {"gpu_ids": "--gpu-ids", "world_size": "--gpus", "memory_mb": "--memory", "memory": "--memory",
               "max_restarts": "--max-restarts", "max_runtime_s": "--max-runtime", "from_training": "--from",
               "requirements": "--requirements", "python": "--python", "env": "--env", "host": "--host",
               "pool": "--pool", "or_pool": "--or-pool"}


def _parse_env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            fail(f"--env {item!r}: write NAME=VALUE")
        env[name] = value
    return env


def find_requirements(root: Path, given: Path | None, no_env: bool) -> str | None:
    """The requirement file to build the environment from, relative to ``root``, or None."""
    if no_env:
        if given is not None:
            fail("--requirements and --no-env contradict each other; give one")
        return None
    if given is not None:
        path = given.resolve()
        if not path.is_file():
            fail(f"--requirements {given}: no such file")
        if not path.is_relative_to(root):
            fail(f"--requirements {given} is outside --dir {root}; only the uploaded folder reaches the server")
        if path.name == "pyproject.toml" and not (path.parent / "uv.lock").is_file():
            fail(f"--requirements {given}: pyproject.toml needs a uv.lock beside it (run `uv lock`)")
        return path.relative_to(root).as_posix()
    if (root / "requirements.txt").is_file():
        return "requirements.txt"
    if (root / "pyproject.toml").is_file() and (root / "uv.lock").is_file():
        return "pyproject.toml"
    return None


def _packed(data: bytes, rel: str) -> bool:
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = set(tar.getnames())
    return rel in names and (not rel.endswith("pyproject.toml") or str(Path(rel).parent / "uv.lock")
                             .removeprefix("./") in names)


def upload(c: Client, data: bytes, said: list[str] | None = None) -> str:
    """Upload ``data`` unless the server has it; returns the code hash.

    Code already on the server is not sent; with ``said``, that note is put there to be printed once the
    training is accepted (a caller without ``run_code`` is refused then, and must not be told first that
    the code is ready to run)."""
    from gpufleet.trainings.archive import content_hash

    h = content_hash(data)
    try:
        known = c._http.get(f"/api/v1/code/{h}").status_code == 200
    except Exception:  # noqa: BLE001 - the POST below reports the server's answer
        known = False
    if known:
        note = f"code {h[:12]} is on the server already ({len(data) / 2**20:.2f} MB not sent)"
        if said is not None:
            said.append(note)
        else:
            err.print(note, highlight=False)
        return h
    res = c.call("POST", "/api/v1/code", params={"sha256": h}, content=data,
                 headers={"Content-Type": "application/octet-stream"})
    err.print(f"uploaded code {h[:12]} ({res['files']} files, {len(data) / 2**20:.2f} MB)", highlight=False)
    return res["hash"]


def _check_where(pool: str | None, or_pool: str | None, gpu_ids: str | None, host: str | None) -> None:
    """--pool and --or-pool leave the GPUs to the server and the pool's scheduler."""
    if pool and (gpu_ids or host):
        fail("--pool runs the script where the pool's scheduler puts it: give --gpus, and drop "
             f"{'--gpu-ids' if gpu_ids else '--host'}")
    if or_pool and (pool or gpu_ids or host):
        fail("--or-pool sends the script to that pool only when the team's hosts can never hold it: drop "
             f"{'--pool' if pool else '--gpu-ids' if gpu_ids else '--host'}")


def run(
    command: Annotated[list[str], typer.Argument(help="the command after --, e.g. python train.py --lr 3e-4")],
    gpus: Annotated[int | None, typer.Option("--gpus", min=1, max=1024, help="how many GPUs (one rank each)")] = None,
    gpu_ids: Annotated[str | None, typer.Option("--gpu-ids", help="these GPUs of --host, e.g. 0,1")] = None,
    host: Annotated[str | None, typer.Option("--host", help="the host whose GPUs --gpu-ids names")] = None,
    memory: Annotated[str | None, typer.Option(
        "--memory", help="memory one rank needs, e.g. 20GiB (default: the peak earlier runs of the same code "
                         "measured, else whole GPUs)")] = None,
    name: Annotated[str | None, typer.Option("--name", help="the training's name")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="NAME=VALUE, repeatable (allowed names only)")] = None,
    python: Annotated[str | None, typer.Option("--python", help="an interpreter the server lists by name")] = None,
    requirements: Annotated[Path | None, typer.Option(
        "--requirements", help="build the training's environment from this file in --dir (default: "
                               "requirements.txt, or pyproject.toml with uv.lock, when present)")] = None,
    no_env: Annotated[bool, typer.Option("--no-env", help="run on the host's interpreter as is, no environment")
                      ] = False,
    max_restarts: Annotated[int, typer.Option("--max-restarts", min=0, max=100)] = 2,
    priority: Annotated[int, typer.Option("--priority", min=-1000, max=1000,
                                          help="higher runs first, and may preempt lower")] = 0,
    max_runtime: Annotated[int | None, typer.Option(
        "--max-runtime", min=1, max=366 * 86400,
        help="seconds one attempt may run; lets it use GPUs a larger training waits for (backfill)")] = None,
    preemptible: Annotated[bool | None, typer.Option(
        "--preemptible/--no-preemptible",
        help="may a higher-priority training checkpoint and stop this one (default: the server's)")] = None,
    pool: Annotated[str | None, typer.Option("--pool", help="run in this pool (a Slurm partition, `gpufleet pools "
                                                            "ls`) instead of the team's hosts")] = None,
    or_pool: Annotated[str | None, typer.Option(
        "--or-pool", help="the team's hosts, or this pool when they can never hold the script (more GPUs or "
                          "memory than any of them has)")] = None,
    directory: Annotated[Path, typer.Option("--dir", help="the code to upload")] = Path("."),
    max_mb: Annotated[int, typer.Option("--max-mb", min=1, help="refuse to upload more than this")] = 100,
    follow: Annotated[bool, typer.Option("--follow/--no-follow", help="follow the log until it ends")] = True,
    from_training: Annotated[str | None, typer.Option(
        "--from", help="start from this training's newest checkpoint (GPUFLEET_RESUME_FROM) with this code "
                       "and these arguments")] = None,
    server: ServerOpt = None,
) -> None:
    # Everything that can be checked is, before the code is packed and sent.
    memory_bytes = _memory(memory)
    _check_where(pool, or_pool, gpu_ids, host)
    placement = _placement(gpus, gpu_ids, host, memory)
    extra_env = _parse_env(env) if env else None
    c = connect(server)
    c.options = CLI_OPTIONS
    source = c.training_id(from_training, "--from") if from_training else None  # an ID, a unique prefix, or a name
    if from_training and source:
        preflight.check_source(c, from_training, source)
    if not (pool or or_pool):  # a pool's nodes are its scheduler's; the server checks the request against them
        preflight.check_fleet(c, placement.get("world_size", 0), memory_bytes, host, placement.get("gpu_ids"))
    data, req_file = _pack_code(directory, max_mb, requirements, no_env)
    body: dict[str, Any] = {
        "name": name or f"{Path(command[1] if len(command) > 1 else command[0]).stem}-{time.strftime('%Y%m%d-%H%M%S')}",
        "kind": "script", "argv": list(command), "max_restarts": max_restarts,
    }
    body.update(placement)
    body.update({k: v for k, v in (("pool", pool), ("or_pool", or_pool)) if v})
    if extra_env:
        body["env"] = extra_env
    if python:
        body["python"] = python
    if req_file:
        body["requirements"] = req_file
        err.print(f"the training's environment is built from {req_file} (--no-env to skip)", highlight=False)
    if priority:
        body["priority"] = priority
    if preemptible is not None:
        body["preemptible"] = preemptible
    if max_runtime is not None:
        body["max_runtime_s"] = max_runtime
    if source:
        body["from_training"] = source
    said: list[str] = []
    body["code"] = upload(c, data, said)
    t = c.create("/api/v1/trainings", body)  # an Idempotency-Key: a timed-out submit is retried safely
    for note in said:
        err.print(note, highlight=False)
    out.print(f"submitted {t['id']} ({t['name']}) to {c.base}", highlight=False)
    if follow:
        raise typer.Exit(follow_training(c, t["id"]))


def _memory(memory: str | None) -> int | None:
    from gpufleet.trainings.script import ScriptError, parse_memory

    try:
        return parse_memory(memory)
    except ScriptError as exc:
        fail(f"--memory {memory}: {str(exc).removeprefix('memory ')}")


def _pack_code(directory: Path, max_mb: int, requirements: Path | None, no_env: bool) -> tuple[bytes, str | None]:
    """The archive to upload, and the requirements file in it the environment is built from."""
    from gpufleet.trainings.archive import PackTooLarge, pack

    root = directory.resolve()
    if not root.is_dir():
        fail(f"--dir {directory} is not a directory")
    try:
        data = pack(root, max_bytes=max_mb * 2**20)
    except PackTooLarge as exc:
        fail(str(exc))
    req_file = find_requirements(root, requirements, no_env)
    if req_file and not _packed(data, req_file):
        fail(f"{req_file} is ignored by .gitignore or .gpufleetignore, so it would not be uploaded; "
             "stop ignoring it, or pass --no-env")
    return data, req_file


def _placement(gpus: int | None, gpu_ids: str | None, host: str | None, memory: str | None) -> dict[str, Any]:
    """Where the ranks go: a count or named GPUs, a host, the memory one rank needs."""
    body: dict[str, Any] = {}
    if gpu_ids:
        try:
            body["gpu_ids"] = [int(x) for x in gpu_ids.split(",") if x.strip()]
        except ValueError:
            fail(f"--gpu-ids {gpu_ids!r}: write GPU indexes like 0,1")
        if gpus is not None and gpus != len(body["gpu_ids"]):
            fail(f"--gpus {gpus} does not match --gpu-ids {gpu_ids}")
    else:
        body["world_size"] = gpus or 1
    if host:
        body["host"] = host
    if memory:
        body["memory"] = memory
    return body
