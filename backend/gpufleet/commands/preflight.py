"""What ``gpufleet run`` checks against the fleet before it packs and uploads any code.

The server checks every request again when it is submitted; these checks only
move the refusals a person can act on (more GPUs than a host has, more memory
than any GPU has) before the seconds that packing and uploading take. They ask
``GET /system/gpus`` and apply the server's own rules
(``gpufleet.scheduling.validate``), so the words are the server's, with the
command's options for the API's fields.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from gpufleet.commands.trainings import fail
from gpufleet.devices.device import index_list

if TYPE_CHECKING:
    from gpufleet.commands.remote import Client


def check_fleet(c: Client, count: int, memory_bytes: int | None, host: str | None,
                gpu_ids: list[int] | None = None) -> None:
    """Refuse (one line, exit 2) a request no GPU of the fleet can ever take."""
    from gpufleet.scheduling.validate import memory_never_fits, world_size_never_fits

    page = c.optional(c.gpus)
    if page is None:  # a server that does not show its GPUs to this caller: it checks the request itself
        return
    gpus = page.data
    per_host = Counter(g.host for g in gpus)
    if host is not None and per_host and host not in per_host:
        fail(f"--host {host}: no such host; the fleet has {', '.join(sorted(per_host))}")
    if gpu_ids:
        on = host or (next(iter(per_host)) if len(per_host) == 1 else None)
        have = sorted(g.index for g in gpus if g.host == on)
        missing = [i for i in gpu_ids if have and i not in have]
        if missing:
            fail(f"--gpu-ids: GPU {missing[0]} does not exist on host {on}; it has GPUs {index_list(have)}")
    else:
        why = world_size_never_fits(count, dict(per_host), host)
        if why:
            fail(c.in_options(why))
    sizes = [g.memory_total for g in gpus if not g.drained and (host is None or g.host == host)]
    why = memory_never_fits(memory_bytes, sizes, f"host {host}" if host else "the fleet")
    if why:
        fail(f"--memory: {why}")


def check_source(c: Client, ref: str, source: str) -> None:
    """``--from``: a script starts from a script training's checkpoint (a recipe's is `train --from`'s)."""
    t = c.optional(c.get_training, source)
    # `gpufleet run` is the script kind's own command: it names that kind, as its request does.
    if t is not None and t.kind != "script":
        what = f"a {t.kind} training" + (f" of recipe {t.recipe}" if t.recipe else "")
        fail(f"--from {ref}: training {t.id} is {what}; `gpufleet run --from` starts from a script training's "
             f"checkpoint (for this one: gpufleet train --recipe {t.recipe or 'NAME'} --from {str(t.id)[:8]})")
