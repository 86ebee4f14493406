"""gpufleet: a team-shared GPU training server.

For training code: ``gpufleet.report(step=..., loss=..., **scalars)`` (a no-op
outside gpufleet) and ``gpufleet.TrainingBackend`` (imports torch on first use).
"""

from typing import Any

from gpufleet.reporting import report

__version__ = "0.1.0"
__all__ = ["TrainingBackend", "make_backend", "report"]


def __getattr__(name: str) -> Any:
    # Importing gpufleet must stay cheap (the CLI and the web app never load torch).
    if name in ("TrainingBackend", "make_backend"):
        from gpufleet.training import backend

        return getattr(backend, name)
    raise AttributeError(f"module 'gpufleet' has no attribute {name!r}")
