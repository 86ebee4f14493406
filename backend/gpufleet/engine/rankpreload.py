"""Imported by a launcher's rank server (``engine/rankserver.py``): torch, the trainer and every
installed recipe, so the ranks forked from that server start with them imported. Nothing here
touches a GPU: the server forks ranks that choose their devices afterwards.

The server also dies with its launcher. Its ranks die with it (each sets ``PR_SET_PDEATHSIG``
against its parent, the server), so a launcher that exits takes them at once. Left to itself the
server would notice the launcher's end on its own pipe and leave through a whole interpreter
shutdown with torch loaded: a second or more in which the ranks outlived a killed worker.
"""

import os
import signal

from gpufleet.engine.lifeline import die_with_parent
from gpufleet.engine.preload import preload
from gpufleet.engine.rankserver import SERVER_PARENT_ENV

die_with_parent()
if os.environ.get(SERVER_PARENT_ENV) not in (None, str(os.getppid())):
    os._exit(1)  # the launcher ended before the line above took effect
# A stop is SIGTERM to the launcher's process group, which the server shares: the ranks checkpoint
# on it, and the server must outlive them (their parent: its end would SIGKILL them mid-checkpoint).
# It ignores SIGINT already; each rank sets its own handlers when it starts.
signal.signal(signal.SIGTERM, signal.SIG_IGN)
preload()
