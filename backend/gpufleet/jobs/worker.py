"""The Celery worker of one GPU host (``gpufleet worker``).

It consumes only ``host.<name>``, so trainings reach the host that owns
their GPUs. Before taking work it kills launcher groups a previous worker of
this host left behind. The pool is threads: a task only supervises a
subprocess (the launcher), and threads let a host run many trainings at once
without forking a process that holds database connections.

``python -m gpufleet.jobs.worker`` runs it with settings from the environment
(how ``serve`` starts the embedded worker).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import uuid

from celery.signals import worker_shutting_down
from sqlalchemy import select

from gpufleet.config import ConfigError, HostSettings, Settings, StoreSettings, load_settings
from gpufleet.ckptstore.client import StoreError
from gpufleet.db.models import Host
from gpufleet.db.session import prepare_database, session_scope
from gpufleet.jobs.celery_app import TASK_RUN, host_queue, make_celery
from gpufleet.jobs.procs import HostTaken, hold_host_lock, kill_orphans
from gpufleet.trainings.environment import EnvPolicy

log = logging.getLogger(__name__)


def ensure_host(settings: Settings) -> uuid.UUID:
    """This host's row: registered by the inventory when it can detect GPUs."""
    try:
        from gpufleet.telemetry.inventory import register_host

        return register_host(settings).host_id
    except Exception:  # detection trouble must not keep the worker down
        log.exception("could not register this host's GPUs; using the host row as it is")
    with session_scope(settings) as sess:
        host = sess.execute(select(Host).where(Host.name == settings.host_name)).scalar_one_or_none()
        if host is None:
            host = Host(name=settings.host_name, status="online")
            sess.add(host)
            sess.flush()
        return host.id


def _heartbeat_loop(store_settings: StoreSettings, host_settings: HostSettings, stop: threading.Event) -> None:
    from gpufleet.telemetry.inventory import HEARTBEAT_S, heartbeat

    failing = False
    while not stop.wait(HEARTBEAT_S):
        try:
            heartbeat(store_settings, host_settings)
            failing = False
        except Exception:  # the database may be away; say so once
            if not failing:
                log.warning("cannot write this host's heartbeat; retrying", exc_info=True)
            failing = True


WORKER_BEAT_S = 2.0


def _worker_beat_loop(store_settings: StoreSettings, host_settings: HostSettings, stop: threading.Event) -> None:
    """This worker's own beat: a host whose worker was lost gets work again only once it beats."""
    from gpufleet.jobs.recovery import worker_beat

    while True:
        try:
            worker_beat(store_settings, host_settings)
        except Exception:  # the database may be away; the next beat tries again
            log.debug("cannot write this worker's beat", exc_info=True)
        if stop.wait(WORKER_BEAT_S):
            return


def _on_shutting_down(**_: object) -> None:
    # Celery's warm shutdown (SIGTERM, SIGINT) waits for running tasks; ask
    # each one to checkpoint and requeue its training so that wait is short.
    from gpufleet.jobs.supervisor import begin_shutdown

    log.warning("stopping: asking running trainings to checkpoint and go back to the queue")
    begin_shutdown()


def build_app(settings: Settings, host_id: uuid.UUID, worker_id: str):
    app = make_celery(settings)
    worker_shutting_down.connect(_on_shutting_down, weak=False)

    @app.task(name=TASK_RUN, ignore_result=True)
    def run_training(training_id: str) -> str:
        from gpufleet.jobs.supervisor import run_attempt

        try:
            tid = uuid.UUID(training_id)
        except ValueError:
            log.error("ignoring a task with a bad training id %r", training_id)
            return "bad-id"
        status = run_attempt(settings, tid, host_id, settings.host_name, worker_id)
        log.info("training %s: %s", training_id, status)
        return status

    return app


def watch_parent(fd: int) -> None:
    """Stop as on SIGTERM once the pipe from ``serve`` reads EOF (``serve`` is gone, however it died)."""
    from gpufleet.engine.lifeline import on_pipe_closed

    def gone() -> None:
        log.warning("the server that started this worker is gone; stopping")
        os.kill(os.getpid(), signal.SIGTERM)

    on_pipe_closed(fd, gone, "gpufleet-serve-watch")


def run_worker(settings: Settings, *, concurrency: int | None = None, agent: bool = True) -> None:
    from gpufleet.datadir import secure_data_dir
    from gpufleet.logsetup import note_root, quiet

    quiet()
    note_root(log)
    secure_data_dir(settings)
    from gpufleet.jobs.isolation import startup_warnings
    from gpufleet.secretfiles import scrub_environment

    scrub_environment()  # the settings hold them; no launcher or Celery child inherits them
    for warning in startup_warnings(settings, settings, settings):
        log.warning("%s", warning)
    # The embedded database is created on first use, as `serve` does; a
    # shared one must be at this version's schema (`gpufleet db upgrade`).
    prepare_database(settings)
    # Held until this process exits: the orphan cleanup below must never kill
    # the launchers of a live worker of the same host.
    hold_host_lock(settings, settings.host_name)
    host_id = ensure_host(settings)
    from gpufleet.jobs import ckpt_uploads

    ckpt_uploads.start(settings, settings)  # a store set wrong is one clear error now (ckptstore.StoreError)
    killed = kill_orphans(settings, settings.host_name)
    if killed:
        log.warning("killed leftover launchers of trainings %s", ", ".join(killed))
    stop = threading.Event()
    from gpufleet.jobs.log_shipper import start_shipper

    start_shipper(settings, stop)  # this host's training logs, to the database the API reads them from
    if agent:
        from gpufleet.telemetry.agent import start_agent

        start_agent(settings, stop)
    else:
        # Without the agent this host would read as offline once its heartbeat
        # is stale; a worker that can take trainings keeps it fresh itself.
        threading.Thread(target=_heartbeat_loop, args=(settings, settings, stop), name="gpufleet-heartbeat",
                         daemon=True).start()
    threading.Thread(target=_worker_beat_loop, args=(settings, settings, stop), name="gpufleet-worker-beat",
                     daemon=True).start()
    worker_id = f"{settings.host_name}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
    app = build_app(settings, host_id, worker_id)
    slots = concurrency or max(4, 8 * settings.gpu.max_models_per_gpu)
    argv = [
        "worker",
        "-Q", host_queue(settings.host_name),
        "-n", f"gpufleet@{settings.host_name}",
        "--pool", "threads",
        "-c", str(slots),
        "--without-gossip", "--without-mingle",
        "-l", "INFO",
    ]
    if not settings.redis_url:
        argv.append("--without-heartbeat")  # heartbeats are events: Redis only
    from gpufleet.jobs import warmpool
    from gpufleet.jobs.kinds import training_roots

    # After scrub_environment: its members inherit no secret.
    warmpool.start(settings.warm_pool_size, EnvPolicy.of(settings), settings.member_warm_pool_size,
                   settings.member_warm_keep_s,
                   slots=(settings.data_dir / "warm-slots", training_roots(settings, settings)))
    try:
        app.worker_main(argv)
    finally:
        stop.set()
        warmpool.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m gpufleet.jobs.worker")
    ap.add_argument("--host-name")
    ap.add_argument("--concurrency", type=int)
    ap.add_argument("--no-agent", action="store_true")
    ap.add_argument("--parent-fd", type=int, help="read end of a pipe from serve: stop when it closes")
    args = ap.parse_args(argv)
    from gpufleet.logsetup import configure_logging

    configure_logging()
    if args.parent_fd is not None:
        watch_parent(args.parent_fd)
    overrides = {"host_name": args.host_name} if args.host_name else {}
    try:
        run_worker(load_settings(**overrides), concurrency=args.concurrency, agent=not args.no_agent)
    except HostTaken as exc:
        log.error("%s", exc)
        raise SystemExit(1) from None
    except (ConfigError, StoreError) as exc:
        log.error("%s", exc)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
