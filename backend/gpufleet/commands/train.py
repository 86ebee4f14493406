"""``gpufleet train``: run a training in the foreground (``--local``).

``--local`` writes a LaunchSpec and runs the same launcher the server's worker
runs (``python -m gpufleet.engine.launch``) as a child process, showing its
progress lines as a progress bar and ending with a summary. Without
``--local`` the training is submitted to a server (not yet: see
``submit_to_server``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

from gpufleet.commands.tables import fmt_loss, fmt_size, labelled, make_console

if TYPE_CHECKING:
    from gpufleet.engine.spec import LaunchSpec

console = make_console(stderr=True)


def register(app: typer.Typer) -> None:
    app.command("train", help="Run a training (--local: here, in the foreground).")(train)


def _fail(message: str) -> None:
    console.print(labelled("error:", message, style="red"))
    raise typer.Exit(code=2)


# The options whose declarations take more than a line of the signature.
GpusOpt = Annotated[int | None, typer.Option(
    "--gpus", min=1, max=1024, help="On a server: how many GPUs (one rank each), chosen by the server.")]
HostOpt = Annotated[str | None, typer.Option(
    "--host", help="On a server: the host whose GPUs --gpu-ids names (a fleet of several hosts needs it).")]
NameOpt = Annotated[str | None, typer.Option(
    "--name", help="On a server: the training's name (default: recipe and time).")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="FIELD=VALUE, repeatable; wins over --config.")]
PoolOpt = Annotated[str | None, typer.Option(
    "--pool", help="On a server: run in this pool (a Slurm partition, `gpufleet pools ls`) instead of the team's "
                   "hosts.")]


def train(
    recipe: Annotated[str, typer.Option(help="Recipe name (gpufleet.recipes entry point), e.g. sae or mlp.")] = "sae",
    local: Annotated[bool, typer.Option("--local", help="Run here in the foreground instead of on a server.")] = False,
    gpu_ids: Annotated[str | None, typer.Option("--gpu-ids", help="GPUs: 0,1 or cuda:0,cuda:1 (hip:N, xpu:N).")] = None,
    gpus: GpusOpt = None,
    host: HostOpt = None,
    name: NameOpt = None,
    follow: Annotated[bool, typer.Option(help="On a server: follow the training until it ends.")] = True,
    devices: Annotated[str | None, typer.Option("--devices", help="'cpu' to train on CPU ranks.")] = None,
    world_size: Annotated[int, typer.Option("--world-size", min=1, help="Ranks with --devices cpu.")] = 1,
    config: Annotated[Path | None, typer.Option("--config", help="YAML file of config fields.")] = None,
    set_: SetOpt = None,
    checkpoint_dir: Annotated[Path | None, typer.Option(help="Where step-N/ checkpoints go.")] = None,
    data_root: Annotated[Path | None, typer.Option(help="Root that data_path is relative to.")] = None,
    resume: Annotated[bool, typer.Option(help="Resume from the newest checkpoint in checkpoint-dir.")] = True,
    priority: Annotated[int, typer.Option("--priority", min=-1000, max=1000,
                                          help="Server: higher runs first, and may preempt lower.")] = 0,
    max_runtime: Annotated[int | None, typer.Option(
        "--max-runtime", min=1, max=366 * 86400,
        help="Server: seconds one attempt may run; lets it use GPUs a larger training waits for (backfill)")] = None,
    preemptible: Annotated[bool | None, typer.Option(
        "--preemptible/--no-preemptible",
        help="Server: may a higher-priority training checkpoint and stop this one (default: the server's).")] = None,
    hosts: Annotated[int | None, typer.Option("--hosts", min=1, help="On a server: across this many hosts.")] = None,
    gpus_per_host: Annotated[int | None, typer.Option("--gpus-per-host", min=1,
                                                      help="On a server: GPUs (ranks) on each host.")] = None,
    spread: Annotated[bool, typer.Option("--spread", help="On a server: the fewest hosts that hold "
                                                          "--world-size GPUs.")] = False,
    from_training: Annotated[str | None, typer.Option(
        "--from", help="On a server: start from this training's newest checkpoint, with its config and your "
                       "--config/--set changes.")] = None,
    pool: PoolOpt = None,
    or_pool: Annotated[str | None, typer.Option(
        "--or-pool", help="On a server: the team's hosts, or this pool when they can never hold the training "
                          "(more GPUs or memory than any of them has).")] = None,
) -> None:
    # Loaded here, not with the CLI: every other command starts without them.
    from gpufleet.engine.config import TrainingConfigError, parse_overrides, read_config_file
    from gpufleet.engine.spec import parse_devices

    values: dict[str, Any] = {}
    try:
        if config is not None:
            values.update(read_config_file(config))
        values.update(parse_overrides(set_ or []))
        from gpufleet.engine.recipes import get_recipe

        rec = get_recipe(recipe)
        resolved = rec.resolve_config(values)
        if gpu_ids and devices:
            raise TrainingConfigError("devices", "give --gpu-ids or --devices, not both")
        if gpus is not None and (gpu_ids or devices or local):
            raise TrainingConfigError("gpus", "--gpus asks a server to choose that many GPUs; give --gpu-ids "
                                              "(or --devices cpu --world-size N) instead, or drop --local")
        device_list = parse_devices(gpu_ids or devices or "cpu", gpus or world_size)
        if gpu_ids and world_size != 1 and world_size != len(device_list):
            raise TrainingConfigError("world_size",
                                      f"--world-size {world_size} does not match {len(device_list)} GPU id(s)")
        resolved.batch_layout(len(device_list))
    except TrainingConfigError as exc:
        _fail(str(exc))
    gang = {k: v for k, v in (("hosts", hosts), ("gpus_per_host", gpus_per_host),
                              ("spread", "auto" if spread else None)) if v is not None}
    if local and (host or name or priority or preemptible is not None or max_runtime is not None or from_training):
        _fail("--host, --name, --priority, --preemptible, --max-runtime and --from are for a training on a server; "
              "--local runs here")
    _check_where(local, gpu_ids, host, gang, pool, or_pool)
    if not local:
        submit_to_server(recipe, values, device_list, gang, host=host, name=name, priority=priority, follow=follow,
                         preemptible=preemptible, max_runtime=max_runtime, from_training=from_training, pool=pool,
                         or_pool=or_pool)
        return
    if gpu_ids:
        device_list = _fleet_devices(gpu_ids)
    code = run_local(recipe, values, device_list, checkpoint_dir=checkpoint_dir, data_root=data_root,
                     resume=resume, max_steps=resolved.max_steps)
    raise typer.Exit(code=code)


def _check_where(local: bool, gpu_ids: str | None, host: str | None, gang: dict[str, Any], pool: str | None,
                 or_pool: str | None) -> None:
    """Where the training goes: the options that choose it exclude each other."""
    if gang and (local or gpu_ids or host):
        _fail("--hosts, --gpus-per-host and --spread place a training across a server's hosts; "
              "drop --local, --gpu-ids and --host")
    if pool and (local or gpu_ids or host or gang):
        _fail("--pool runs the training where the pool's scheduler puts it: give --world-size (GPUs), and drop "
              "--local, --gpu-ids, --host, --hosts, --gpus-per-host and --spread")
    if or_pool and (pool or local or gpu_ids or host):
        _fail("--or-pool sends the training to that pool only when the team's hosts can never hold it: drop "
              "--pool, --local, --gpu-ids and --host")


def _fleet_devices(text: str) -> list[str]:
    """This machine's GPUs that ``--gpu-ids`` names, as each one's backend device: on a host of several
    vendors ``0,1,2`` are ``cuda:0,hip:0,xpu:0`` (the ``gpufleet gpus`` IDs)."""
    from gpufleet.config import ConfigError, load_settings
    from gpufleet.devices.backend import device_backend
    from gpufleet.devices.ids import resolve_device_ids

    try:
        found = resolve_device_ids(text, device_backend(load_settings()).detect_gpus())
    except (ConfigError, ValueError) as exc:
        _fail(str(exc))
    return [f"{g.backend}:{g.device_id}" for g in found]


def submit_to_server(recipe: str, config: dict[str, Any], devices: list[str], gang: dict[str, Any] | None = None,
                     *, host: str | None = None, name: str | None = None, priority: int = 0, follow: bool = True,
                     preemptible: bool | None = None, max_runtime: int | None = None,
                     from_training: str | None = None, pool: str | None = None,
                     or_pool: str | None = None) -> None:
    """Submit the training to a gpufleet server ($GPUFLEET_SERVER) and follow it.

    GPU devices become ``gpu_ids``; CPU devices only say how many GPUs the
    server should choose.
    """
    from gpufleet.commands.trainings import submit

    body: dict[str, Any] = {"name": name or f"{recipe}-{time.strftime('%Y%m%d-%H%M%S')}", "recipe": recipe,
                            "config": config, "priority": priority}
    if host:
        body["host"] = host
    if gang:
        body.update(gang)
        if gang.get("spread") or world_size_given(devices, gang):
            body["world_size"] = len(devices)
    elif all(d == "cpu" for d in devices):
        body["world_size"] = len(devices)
    else:
        body["gpu_ids"] = [int(d.split(":")[1]) for d in devices]
    if preemptible is not None:
        body["preemptible"] = preemptible
    if max_runtime is not None:
        body["max_runtime_s"] = max_runtime
    if pool:
        body["pool"] = pool
    if or_pool:
        body["or_pool"] = or_pool
    if from_training:
        from gpufleet.commands.trainings import connect

        c = connect(None)
        source = c.training_id(from_training, "--from")  # an ID, a unique start of one, or a name
        # The source's config, changed by --config/--set: a clone with changes.
        body["config"] = {**c.get_training(source).config, **config}
        body["from_training"] = source
    raise typer.Exit(code=submit(body, follow=follow))


def world_size_given(devices: list[str], gang: dict[str, Any]) -> bool:
    """--world-size counts with --hosts/--gpus-per-host only when it was given (more than one rank)."""
    return len(devices) > 1 or not (gang.get("hosts") and gang.get("gpus_per_host"))


def run_local(recipe: str, config: dict[str, Any], devices: list[str], *, checkpoint_dir: Path | None,
              data_root: Path | None, resume: bool, max_steps: int) -> int:
    from gpufleet.config import ConfigError, load_settings
    from gpufleet.devices.backend import device_backend
    from gpufleet.engine.config import TrainingConfigError
    from gpufleet.engine.spec import LaunchSpec

    try:
        settings = load_settings()
    except ConfigError as exc:
        _fail(str(exc))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = settings.data_dir / "local-runs" / f"{recipe}-{stamp}"
    run_dir.mkdir(parents=True, exist_ok=True)
    # GPUs that cannot run kernels (a simulated fleet's) have their ranks run on the CPU.
    on_cpu = device_backend(settings).ranks_run_on_cpu(devices)
    try:
        spec = LaunchSpec(
            recipe=recipe, config=config, devices=devices,
            checkpoint_dir=str(checkpoint_dir or (settings.checkpoint_root / f"local-{recipe}-{stamp}")),
            progress_file=str(run_dir / "progress.jsonl"),
            data_root=str(data_root or settings.data_root), resume=resume,
            collective_timeout_s=settings.collective_timeout_s, ranks_on_cpu=on_cpu,
        )
    except TrainingConfigError as exc:
        _fail(str(exc))
    spec_path = spec.write(run_dir / "spec.json")
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet.engine.launch", str(spec_path)])
    records = _watch(proc, Path(spec.progress_file), max_steps)
    code = proc.wait()
    _summary(records, code, spec)
    return code


def _watch(proc: subprocess.Popen, progress_file: Path, max_steps: int) -> list[dict[str, Any]]:
    from gpufleet.engine.progress import follow_progress

    records: list[dict[str, Any]] = []
    offset = 0
    interrupts = 0
    # The fields are text, never markup: the info line holds the ranks' own words.
    columns = (TextColumn("{task.description}", style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[info]}", markup=False), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("training", total=max_steps, info="starting ranks")
        while True:
            try:
                new, offset = follow_progress(progress_file, offset)
                for r in new:
                    records.append(r)
                    if r["type"] == "step":
                        sps = r.get("samples_per_s") or 0
                        bar.update(task, completed=r["step"],
                                   info=f"loss {r['loss']:.4g}  {sps:,.0f} samples/s")
                    elif r["type"] == "resume":
                        bar.update(task, completed=r["step"], info=f"resumed at step {r['step']}")
                    elif r["type"] == "checkpoint":
                        bar.update(task, info=f"checkpoint step {r['step']}")
                if proc.poll() is not None:
                    new, offset = follow_progress(progress_file, offset)
                    records.extend(new)
                    return records
                time.sleep(0.2)
            except KeyboardInterrupt:
                # Ctrl-C reaches the launcher too; a second one stops it hard.
                interrupts += 1
                bar.update(task, info="stopping: checkpointing (Ctrl-C again to kill)")
                proc.send_signal(signal.SIGTERM if interrupts == 1 else signal.SIGKILL)


def summary_lines(records: list[dict[str, Any]], code: int, spec: LaunchSpec) -> list[tuple[str, str]]:
    """The end-of-run summary as (label, value) lines; losses to 4 significant digits."""
    from gpufleet.engine import exitcodes

    last = {r["type"]: r for r in records}
    lines = [("status", f"{exitcodes.describe(code)} (exit {code})")]
    if "step" in last:
        s = last["step"]
        lines.append(("steps", str(s["step"])))
        lines.append(("loss", fmt_loss(s["loss"])))
        for name, value in s.get("parts", {}).items():
            lines.append((f"  {name}", fmt_loss(value)))
        if s.get("samples_per_s"):
            lines.append(("samples/s", f"{s['samples_per_s']:,.0f}"))
    if "eval" in last:
        for name, value in last["eval"]["metrics"].items():
            lines.append((name, fmt_loss(value)))
    if "peak_memory" in last:
        lines.append(("peak memory", ", ".join(fmt_size(b) for b in last["peak_memory"]["per_rank"])))
    if "checkpoint" in last:
        lines.append(("checkpoint", last["checkpoint"]["path"]))
    if "error" in last:
        e = last["error"]
        lines.append(("error", f"rank {e.get('rank')}: {e.get('message')}" if e.get("rank") is not None
                      else str(e.get("message"))))
    lines.append(("progress log", spec.progress_file))
    return lines


def _summary(records: list[dict[str, Any]], code: int, spec: LaunchSpec, out: Console | None = None) -> None:
    out = out or make_console()
    out.print(Text(f"training {spec.recipe} on {', '.join(spec.devices)}", style="bold"))
    lines = summary_lines(records, code, spec)
    pad = max(len(k) for k, _ in lines)
    for k, v in lines:
        # Not a table: a table cuts long values with "…", and a cut path cannot be pasted.
        out.print(Text.assemble((f"{k:<{pad}}", "bold"), "  ", v), soft_wrap=True, highlight=False)
