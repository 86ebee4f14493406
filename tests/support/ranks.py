"""How a spawned test rank ends: the way gpufleet's launcher ends a finished rank.

A gloo rank that returns into interpreter teardown can abort there
(``terminate called without an active exception``: a gloo thread still
joinable when its object is destroyed), which ``torch.multiprocessing``
reports as the rank dying of SIGABRT although its work was done and written.
``engine/launch.py`` ends its ranks with ``os._exit(0)`` for this reason;
tests that spawn ranks themselves do the same.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import torch.distributed as dist


def leave() -> NoReturn:
    """Wait for every rank, release the group, then exit without teardown.

    Call it last, after the rank has written everything it owes (files are
    closed by then): ``os._exit`` skips ``atexit`` and destructors.
    """
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
