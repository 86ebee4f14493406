"""Imported by a warm launcher's rank server (``engine/warm.py``): torch, the trainer and every
installed recipe, so the ranks forked from that server start with them imported. Nothing here
touches a GPU: the server forks ranks that choose their devices afterwards."""

from gpufleet.engine.preload import preload

preload()
