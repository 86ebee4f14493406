"""System resource: hosts, GPUs (with live metrics and availability), topology."""

from __future__ import annotations


import logging

from fastapi import APIRouter, Body, HTTPException, Query, Response

from gpufleet import __version__
from gpufleet.api.deps import AdminUser, SessionDep, SettingsDep
from gpufleet.api.hosts import UNKNOWN_HOST, check_host
from gpufleet.api.params import GPUIndexPath, HostPath
from gpufleet.wire.system import (
    DrainPublic,
    DrainRequest,
    GPUAvailabilityPublic,
    GPULive,
    GPUPublic,
    GPUsPublic,
    Health,
    HealthClearedPublic,
    HostPublic,
    HostsPublic,
    HostTopology,
    LinkPublic,
    TopologyPublic,
)
from gpufleet.db.models import GPULink
from gpufleet.db.session import write_session
from gpufleet.scheduling import fleet_view
from gpufleet.scheduling.drain import DrainError, set_drained
from gpufleet.scheduling.hosts import UnknownHost, require_host
from gpufleet.telemetry.gpu_health import HealthClearError, clear_health

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1/system", tags=["system"])
health_router = APIRouter(tags=["health"])


def _live_by_gpu(settings) -> dict[tuple[str, int], GPULive]:
    from gpufleet.telemetry.live import read_live_samples

    return {(s.host, s.index): GPULive.model_validate(s, from_attributes=True) for s in read_live_samples(settings)}


def _availability_by_gpu(sess, settings) -> dict[tuple[str, int], GPUAvailabilityPublic]:
    from gpufleet.scheduling.inputs import availability_by_gpu

    return {
        key: GPUAvailabilityPublic(
            state=a.state, reason=a.reason, free_memory=a.free_memory, holders=list(a.holders)
        )
        for key, a in availability_by_gpu(sess, settings, settings, settings, settings).items()
    }


@router.get("/gpus", response_model=GPUsPublic, operation_id="gpus-list", responses=UNKNOWN_HOST)
def list_gpus(
    sess: SessionDep,
    settings: SettingsDep,
    host: str | None = Query(default=None, description="only the GPUs of this host (404 if it is not registered)"),
) -> GPUsPublic:
    """Every GPU of the fleet with its newest sample and its availability."""
    check_host(sess, host)
    rows = fleet_view.gpus(sess, host)
    live = _live_by_gpu(settings)
    avail = _availability_by_gpu(sess, settings)
    data = [
        GPUPublic(
            id=g.id,
            host=host_name,
            index=g.index,
            uuid=g.uuid,
            vendor=g.vendor,
            backend=g.backend,
            name=g.name,
            pci_bus_id=g.pci_bus_id,
            memory_total=g.memory_total,
            compute_capability=g.compute_capability,
            simulated=g.simulated,
            status=g.status,
            status_reason=g.status_reason,
            drained=g.drained,
            drain_reason=g.drain_reason,
            live=live.get((host_name, g.index)),
            availability=avail.get((host_name, g.index)),
        )
        for g, host_name in rows
    ]
    return GPUsPublic(data=data, count=len(data), simulated=any(g.simulated for g in data))


def _drain(settings, user, host: str, index: int, drained: bool, reason: str | None) -> DrainPublic:
    # The reason shown with the GPU's state says who drained it.
    shown = f"{reason or 'drained'} (by {user.name})" if drained else None
    try:
        with write_session(settings) as sess:
            require_host(sess, host)
            result = set_drained(sess, host, [index], drained, shown)
    except (DrainError, UnknownHost) as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None
    log.info("%s %s GPU %d on %s%s", user.name, "drained" if drained else "undrained", index, host,
             f": {reason}" if reason else "")
    return DrainPublic(host=host, index=index, drained=drained, reason=result.reason,
                       still_running=[name for _, name in result.still_running])


@router.post("/gpus/{host}/{index}/drain", response_model=DrainPublic, operation_id="gpus-drain")
def drain_gpu(
    host: HostPath, index: GPUIndexPath, settings: SettingsDep, user: AdminUser,
    body: DrainRequest = Body(default_factory=DrainRequest),
) -> DrainPublic:
    """Stop placing trainings on this GPU (admins only); trainings on it keep running."""
    return _drain(settings, user, host, index, True, body.reason)


@router.post("/gpus/{host}/{index}/undrain", response_model=DrainPublic, operation_id="gpus-undrain")
def undrain_gpu(host: HostPath, index: GPUIndexPath, settings: SettingsDep, user: AdminUser) -> DrainPublic:
    """Let the scheduler place trainings on this GPU again (admins only)."""
    return _drain(settings, user, host, index, False, None)


@router.post("/gpus/{host}/{index}/clear-health", response_model=HealthClearedPublic, operation_id="gpus-clear-health")
def clear_gpu_health(host: HostPath, index: GPUIndexPath, settings: SettingsDep,
                     user: AdminUser) -> HealthClearedPublic:
    """Put a GPU its samples marked unhealthy (fatal XID, pending row remap, ECC) back in scheduling (admins only)."""
    try:
        with write_session(settings) as sess:
            status, cleared = clear_health(sess, host, index)
    except HealthClearError as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from None
    if cleared:
        log.warning("%s cleared the health mark of GPU %d on %s (%s)", user.name, index, host, cleared)
    return HealthClearedPublic(host=host, index=index, status=status, cleared=cleared)


@router.get("/hosts", response_model=HostsPublic, operation_id="hosts-list")
def list_hosts(sess: SessionDep, settings: SettingsDep) -> HostsPublic:
    from gpufleet.scheduling.inputs import host_offline

    data = [
        HostPublic.model_validate(h, from_attributes=True).model_copy(update={
            "gpu_count": gpu_count,
            # A host whose heartbeat stopped is offline, whatever its row last said.
            "status": "offline" if host_offline(h.status, h.last_heartbeat, settings) else h.status,
        })
        for h, gpu_count in fleet_view.hosts(sess)
    ]
    return HostsPublic(data=data, count=len(data))


def _level(link: GPULink | None) -> str:
    if link is None:
        return "SYS"
    if link.nvlink_count:
        return f"NV{link.nvlink_count}"
    return link.pcie_level or "SYS"


@router.get("/topology", response_model=TopologyPublic, operation_id="topology-get", responses=UNKNOWN_HOST)
def get_topology(
    sess: SessionDep,
    host: str | None = Query(default=None, description="only this host (404 if it is not registered)"),
) -> TopologyPublic:
    """The GPU link matrix of each host (NVLink link counts, PCIe levels, peer access)."""
    check_host(sess, host)
    out = []
    for h in fleet_view.topology(sess, host):
        matrix = [
            ["X" if a == b else _level(h.links.get((min(a, b), max(a, b)))) for b in h.gpus] for a in h.gpus
        ]
        links = [LinkPublic.model_validate(link, from_attributes=True)
                 for link in sorted(h.links.values(), key=lambda link: (link.gpu_a, link.gpu_b))]
        out.append(HostTopology(host=h.host.name, gpus=h.gpus, links=links, matrix=matrix))
    return TopologyPublic(hosts=out)


@health_router.get("/healthz", response_model=Health, operation_id="health-get",
                   responses={503: {"model": Health, "description": "The database cannot be reached"}})
def healthz(sess: SessionDep, settings: SettingsDep, response: Response) -> Health:
    status = "ok" if fleet_view.database_answers(sess) else "database unreachable"
    if status != "ok":
        response.status_code = 503
    return Health(
        status=status,
        version=__version__,
        database="sqlite" if settings.is_sqlite else "postgresql",
        embedded=settings.is_embedded,
    )
