"""gpufleet: a team-shared GPU training server.

For training code: ``gpufleet.report(step=..., loss=..., **scalars)`` (a no-op
outside gpufleet), ``gpufleet.watch_stop()`` / ``gpufleet.stop_requested()`` (the stop
contract: checkpoint within the grace) and ``gpufleet.TrainingBackend`` (imports torch
on first use).
"""

from typing import Any

from gpufleet.reporting import report

__version__ = "0.1.0"
__all__ = ["TrainingBackend", "make_backend", "report", "stop_requested", "watch_stop"]


def __getattr__(name: str) -> Any:
    # Importing gpufleet must stay cheap (the CLI and the web app never load torch).
    if name in ("TrainingBackend", "make_backend"):
        from gpufleet.engine import backend

        return getattr(backend, name)
    if name in ("stop_requested", "watch_stop"):
        from gpufleet.engine import stopfile

        return stopfile.stop_requested if name == "stop_requested" else stopfile.watch
    raise AttributeError(f"module 'gpufleet' has no attribute {name!r}")
