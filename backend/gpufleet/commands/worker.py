"""`gpufleet worker`: the Celery worker (and telemetry agent) of one GPU host."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.commands.tables import labelled, make_console

err = make_console(stderr=True)


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)


def worker(
    host_name: Annotated[str | None, typer.Option(
        "--host-name", help="this host's name in the fleet (default: GPUFLEET_HOST_NAME or the hostname)")] = None,
    concurrency: Annotated[int | None,
                           typer.Option("--concurrency", min=1, help="trainings supervised at once")] = None,
    agent: Annotated[bool,
                     typer.Option(help="also run the telemetry agent (inventory, heartbeat, GPU samples)")] = True,
) -> None:
    """Run this host's worker: consumes the queue host.<name>, runs trainings on this host's GPUs."""
    import threading

    from gpufleet.api.proxy.relay import start_relay
    from gpufleet.config import ConfigError, load_settings
    from gpufleet.jobs.procs import HostTaken
    from gpufleet.jobs.worker import run_worker

    try:
        settings = load_settings(**({"host_name": host_name} if host_name else {}))
        if settings.redis_url is None:
            err.print(labelled("note:", "no GPUFLEET_REDIS_URL: using the embedded filesystem broker under "
                               f"{settings.data_dir}; only a server on this machine can reach this worker",
                               style="yellow"))
        # Sessions' notebooks here, for a gpufleet server on another machine (when configured).
        start_relay(settings, threading.Event())
        run_worker(settings, concurrency=concurrency, agent=agent)
    except ConfigError as exc:
        err.print(labelled("error:", exc), highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except HostTaken as exc:
        err.print(labelled("error:", exc), highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
