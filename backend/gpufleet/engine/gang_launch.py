"""The launcher's part in a training across hosts (``LaunchSpec.gang``).

Each host's launcher starts its local ranks; local rank ``r`` is global rank
``first_rank + r`` of ``world_size``. The rank-0 host's launcher opens the
c10d TCPStore on the port its worker published in the database, and keeps it
open for as long as it runs; every rank, there and elsewhere, joins it as a
client and waits up to ``rendezvous_timeout_s`` for it and for the others.
Torch-free at import time, as the launcher is.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gpufleet.engine.spec import LaunchSpec


def open_store(spec: LaunchSpec) -> Any:
    """The rendezvous store, when this launcher is the rank-0 host's; else None."""
    gang = spec.gang
    if not gang or not gang.get("store_master"):
        return None
    import torch.distributed as dist

    return dist.TCPStore("0.0.0.0", int(gang["master_port"]), int(gang["world_size"]), is_master=True,
                         wait_for_workers=False, timeout=timedelta(seconds=float(gang["rendezvous_timeout_s"])))


def rank_view(spec: LaunchSpec, run_devices: list[str], local_rank: int) -> tuple[int, list[str], dict[str, Any]]:
    """This rank's global rank, the device list the trainer indexes by it, and the rendezvous arguments."""
    gang = spec.gang
    if not gang:
        return local_rank, run_devices, {}
    first, world = int(gang["first_rank"]), int(gang["world_size"])
    # Only this host's slots are ever used; the others stand for the remote ranks.
    devices = [run_devices[0]] * first + list(run_devices) + [run_devices[0]] * (world - first - len(run_devices))
    return first + local_rank, devices, {"master_addr": gang["master_addr"],
                                         "rendezvous_timeout_s": float(gang["rendezvous_timeout_s"])}
