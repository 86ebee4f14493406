"""How `gpufleet serve` takes its address and lets go of it.

The address is bound before anything is announced or built: a second
``serve`` (or ``scripts/start.sh``) on a port in use says so in one line and
touches nothing. On Ctrl-C the console says what the stop is waiting for:
the trainings on this host are asked to checkpoint, which takes up to
``stop_grace_s``.
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import uuid

    from rich.console import Console

    from gpufleet.config import Settings
    from gpufleet.jobs.embedded import EmbeddedWorker


class AddressInUse(Exception):
    """The address ``serve`` would listen on is taken; the message says what to do."""


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, or :class:`AddressInUse` naming the address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    # Restarting right after a stop must not wait for the old connections' TIME_WAIT.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise AddressInUse(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (is gpufleet already running there? "
            "stop it, or pick another port with --port or GPUFLEET_PORT)") from None
    return sock


def listen_notebooks(settings: Settings, api: socket.socket) -> socket.socket | None:
    """The sessions' notebooks' listener (``GPUFLEET_SESSIONS_PORT``, else the API's port + 1), or None when
    it is 0; :class:`AddressInUse` (``api`` closed) when taken."""
    from gpufleet.api.proxy.place import sessions_port

    port = sessions_port(settings)
    if not port:
        return None
    try:
        return listen(settings.host, port)
    except AddressInUse as exc:
        api.close()
        raise AddressInUse(f"{exc}; the sessions' notebooks need a port of their own: set GPUFLEET_SESSIONS_PORT"
                           " (0: serve no notebooks)") from None


def serve_notebooks(settings: Settings, sock: socket.socket) -> Any:
    """Serve the notebooks' origin on ``sock`` in a thread; returns what stops it."""
    import threading

    import uvicorn

    from gpufleet.api.proxy.origin import NotebookOrigin

    # No log_config or log_level: uvicorn.Config would set the process's uvicorn loggers again, and the
    # API's access log (GPUFLEET_ACCESS_LOG) would go quiet.
    config = uvicorn.Config(NotebookOrigin(settings), log_config=None, log_level=None, lifespan="off",
                            proxy_headers=bool(settings.trusted_proxies),
                            forwarded_allow_ips=list(settings.trusted_proxies) or None,
                            ws_per_message_deflate=False, access_log=settings.access_log)
    srv = uvicorn.Server(config)
    # In a thread uvicorn takes no signals: the API's server owns them, and this one stops when told.
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, name="gpufleet-notebooks", daemon=True)
    thread.start()

    def stop() -> None:
        srv.should_exit = True
        thread.join(timeout=10)

    return stop


def server(config: Any, on_stop: Any, repeat_forces: bool = True) -> Any:
    """A uvicorn server that calls ``on_stop()`` when the first Ctrl-C (or SIGTERM) arrives; a second one
    forces the stop unless ``repeat_forces`` is False."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            if not self.should_exit:
                on_stop()
            elif not repeat_forces:
                return
            super().handle_exit(sig, frame)
            # uvicorn would raise the signal again once it has shut down, which ends in a
            # KeyboardInterrupt traceback from inside the event loop; serve stops the worker
            # and exits on its own instead.
            self._captured_signals.clear()

    return Server(config)


def _trainings_here(settings: Settings, ids: list[uuid.UUID] | None = None) -> list[tuple[uuid.UUID, str, str]]:
    """(id, name, status) of the trainings placed on this host (or of ``ids``); [] if the database is away."""
    from sqlalchemy import select
    from sqlalchemy.exc import SQLAlchemyError

    from gpufleet.db.models import Host, Training
    from gpufleet.db.session import session_scope

    stmt = select(Training.id, Training.name, Training.status)
    if ids is None:
        stmt = stmt.join(Host, Host.id == Training.host_id).where(
            Host.name == settings.host_name, Training.status.in_(("scheduled", "running")))
    else:
        stmt = stmt.where(Training.id.in_(ids))
    try:
        with session_scope(settings) as sess:
            return [tuple(row) for row in sess.execute(stmt.order_by(Training.created_at))]
    except SQLAlchemyError:
        return []


class StopNotice:
    """What the first Ctrl-C says at once, and which trainings were on this host at that moment.

    The embedded worker is in serve's process group, so the same Ctrl-C
    reaches it and it starts checkpointing and requeueing at once; by the
    time the connections are closed a training may be back in the queue
    already. The list is therefore taken when the signal arrives, not after.
    """

    def __init__(self, settings: Settings, console: Console) -> None:
        self.settings = settings
        self.console = console
        self.here: list[tuple[uuid.UUID, str, str]] | None = None

    def began(self) -> None:
        self.console.print("stopping: closing connections…", highlight=False)
        if self.here is None:
            self.here = _trainings_here(self.settings)


def stop_worker(settings: Settings, worker: EmbeddedWorker, console: Console,
                here: list[tuple[uuid.UUID, str, str]] | None = None) -> None:
    """Stop the embedded worker, saying which trainings it waits for (``here``: those on this host when
    the stop began; read now if not given) and how each ended."""
    here = _trainings_here(settings) if here is None else here
    grace = settings.stop_grace_s
    if here:
        names = ", ".join(f"{name} ({str(tid)[:8]})" for tid, name, _ in here)
        console.print(f"stopping: asking {len(here)} training(s) to checkpoint: {names}; "
                      f"waiting up to {grace:.0f} s for them (GPUFLEET_STOP_GRACE_S) before they are killed",
                      highlight=False)
    else:
        console.print("stopping the worker (no training is running here)", highlight=False)
    started = time.monotonic()
    worker.stop(timeout=grace + 15)
    after = ", ".join(f"{name} {status}" for _, name, status in _trainings_here(settings, [t for t, _, _ in here]))
    console.print(f"stopped in {time.monotonic() - started:.1f} s" + (f": {after}" if after else ""),
                  highlight=False)


def register_this_host(settings: Settings) -> str:
    """Write this host's GPUs to the database; return the lines that say what was found."""
    from gpufleet.devices import detect_gpus, detect_topology, log_gpu_topology
    from gpufleet.telemetry.inventory import register_host

    gpus = detect_gpus(settings)
    if not gpus and settings.redis_url:
        # The API machine of a fleet: its workers register the GPU hosts; an
        # empty host here would only show as a GPU host with no GPUs.
        return (f"host {settings.host_name}: no GPUs, so not registered as a GPU host "
                "(each GPU host runs `gpufleet worker`)")
    inv = register_host(settings)
    log_gpu_topology(detect_topology(settings, gpus))
    if not gpus:
        return (f"host {inv.host_name}: no GPUs found (trainings sent here wait for a GPU host; "
                "`gpufleet train --local --devices cpu` trains on this CPU; "
                "GPUFLEET_SIMULATE=4xH100-80GB simulates a fleet)")
    sim = " (simulated)" if settings.simulate else ""
    lines = [f"host {inv.host_name}: {len(gpus)} GPU(s){sim}"]
    for g in gpus:
        mem = f"{g.memory_total / 2**30:.0f} GiB" if g.memory_total else "? GiB"
        state = "" if g.healthy else f"  unhealthy: {g.error}"
        lines.append(f"  {g.backend}:{g.device_id}  {g.name}  {mem}{state}")
    return "\n".join(lines)
