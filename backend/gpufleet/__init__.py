"""gpufleet: a team-shared GPU training server."""

__version__ = "0.1.0"
