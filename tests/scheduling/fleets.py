"""Small fleets for selection tests, built from the plain dataclasses."""

from __future__ import annotations

from gpufleet.scheduling.availability import assess_gpu
from gpufleet.scheduling.types import (
    GiB,
    FleetState,
    GPUObservation,
    HostState,
    LinkInfo,
)


def nvlink_pairs_links(n: int) -> dict[tuple[int, int], LinkInfo]:
    """GPUs (0,1), (2,3)... NVLink-connected; pairs on one switch; halves on two sockets."""
    links = {}
    for a in range(n):
        for b in range(a + 1, n):
            if a // 2 == b // 2:
                links[(a, b)] = LinkInfo(4, "PIX", True)
            elif a // (n // 2 or 1) == b // (n // 2 or 1):
                links[(a, b)] = LinkInfo(0, "NODE", True)
            else:
                links[(a, b)] = LinkInfo(0, "SYS", True)
    return links


def pcie_links(n: int) -> dict[tuple[int, int], LinkInfo]:
    """No NVLink; GPUs (0,1), (2,3)... under one switch; halves on two sockets."""
    return {
        k: LinkInfo(0, v.pcie_level, v.peer_access)
        for k, v in nvlink_pairs_links(n).items()
    }


def host(
    name: str,
    n: int = 4,
    *,
    links: dict | None = None,
    memory_gb: int = 80,
    gpu_name: str = "NVIDIA H100 80GB HBM3",
    **per_gpu: dict,
) -> HostState:
    """A host of ``n`` idle GPUs; ``per_gpu={"g1": {...}}`` overrides GPU 1's observation."""
    gpus = []
    for i in range(n):
        kw = dict(
            host=name,
            index=i,
            name=gpu_name,
            memory_total=memory_gb * GiB,
            memory_free=memory_gb * GiB - GiB // 2,
        )
        kw.update(per_gpu.get(f"g{i}", {}))
        gpus.append(assess_gpu(GPUObservation(**kw)))
    return HostState(name, tuple(gpus), links if links is not None else nvlink_pairs_links(n))


def fleet(*hosts: HostState) -> FleetState:
    return FleetState(hosts=tuple(hosts))
