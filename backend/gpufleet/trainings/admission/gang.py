"""What a request for a training across hosts must satisfy, checked before anything is written.

``hosts`` (a count, or the hosts' names with rank 0 on the first) and
``gpus_per_host`` must multiply to ``world_size``; ``spread: auto`` lets the
scheduler pick the fewest hosts instead. Each refusal names the field and
what to fix (:class:`~gpufleet.trainings.admission.checks.TrainingRequestError`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet import workkinds
from gpufleet.db.models import GPU, Host
from gpufleet.scheduling.hosts import UnknownHost
from gpufleet.trainings.admission.checks import TrainingRequestError
from gpufleet.wire.training_requests import TrainingCreate


def gang_request(sess: Session, req: TrainingCreate, count: int) -> tuple[dict[str, Any] | None, int]:
    """The stored gang request (None: one host, as before) and the world size it implies."""
    names = list(req.hosts) if isinstance(req.hosts, list) else None
    n_hosts = len(req.hosts) if isinstance(req.hosts, list) else req.hosts
    per_host = req.gpus_per_host
    if n_hosts is None and per_host is None and req.spread is None:
        return None, count
    if req.spread == "auto" and (n_hosts is not None or per_host is not None):
        raise TrainingRequestError("spread", "spread: auto picks the hosts itself; give either spread or "
                                             "hosts/gpus_per_host, not both")
    if req.gpu_ids:
        raise TrainingRequestError("gpu_ids", "gpu_ids are per host; a training across hosts gets its GPUs "
                                              "chosen on each host (give hosts and gpus_per_host instead)")
    if req.host:
        raise TrainingRequestError("host", "host names one host; to pin a training across hosts give "
                                           "hosts as a list of host names")
    if not workkinds.of(req.kind).spans_hosts:
        spanning = " and ".join(workkinds.names(lambda k: k.spans_hosts))
        raise TrainingRequestError("hosts", f"a {req.kind} training runs on one host; only {spanning} trainings "
                                            "can span hosts")
    if req.world_size is None and n_hosts is not None and per_host is not None:
        count = n_hosts * per_host
    if n_hosts is not None and per_host is not None:
        if n_hosts * per_host != count:
            raise TrainingRequestError(
                "gpus_per_host", f"hosts × gpus_per_host = {n_hosts} × {per_host} = {n_hosts * per_host}, "
                                 f"but world_size is {count}; make them agree or omit world_size")
    elif n_hosts is not None:
        if count % n_hosts:
            raise TrainingRequestError(
                "hosts", f"world_size {count} does not split evenly over {n_hosts} hosts; "
                         "give gpus_per_host or a world_size that is a multiple of hosts")
        per_host = count // n_hosts
    elif per_host is not None:
        if count % per_host:
            raise TrainingRequestError(
                "gpus_per_host", f"world_size {count} is not a multiple of gpus_per_host {per_host}")
        n_hosts = count // per_host
    if req.distributed is False and count > 1:
        raise TrainingRequestError("distributed", f"{count} GPUs need distributed=true (one DDP rank per GPU)")
    sizes = dict(sess.execute(
        select(Host.name, func.count(GPU.id)).join(GPU, GPU.host_id == Host.id)
        .where(GPU.enabled.is_(True)).group_by(Host.name)
    ).all())
    known = sorted(sess.execute(select(Host.name)).scalars())
    if names is not None:
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise TrainingRequestError("hosts", f"host {dup[0]} is listed twice in hosts {names}")
        for name in names:
            if name not in known:
                raise TrainingRequestError("hosts", str(UnknownHost(name, known)), status=404)
            if sizes.get(name, 0) < (per_host or 0):
                raise TrainingRequestError(
                    "hosts", f"host {name} has {sizes.get(name, 0)} GPU(s); it can never hold {per_host} ranks")
    elif n_hosts is not None:
        big = sorted(h for h, n in sizes.items() if n >= (per_host or 0))
        if len(big) < n_hosts:
            have = ", ".join(f"{h}: {n}" for h, n in sorted(sizes.items())) or "no GPU host yet"
            raise TrainingRequestError(
                "hosts", f"needs {n_hosts} hosts × {per_host} GPUs; the fleet has {len(big)} host(s) with "
                         f"{per_host} or more GPUs ({have})")
    elif sum(sizes.values()) < count:
        raise TrainingRequestError(
            "world_size", f"world_size {count} is more GPUs than the whole fleet has ({sum(sizes.values())})")
    if n_hosts == 1 and names is None:
        return None, count  # one host: the ordinary path
    return {"hosts": n_hosts, "gpus_per_host": per_host, "host_names": names, "spread": req.spread}, count
