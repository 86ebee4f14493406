"""The seed's ``AggregatedMetrics``: one summary of many GPUs, for the fleet and per host.

The seed divided by ``len()`` (an empty fleet crashed) and took ``max`` over
temperatures that may be ``None``. Here a GPU that is lost, or that does not
report a field, simply does not count for that field; the summary says how
many GPUs each figure covers so a dashboard can show "3 of 4 GPUs".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from gpufleet.telemetry.sample import GPUSample


@dataclass(frozen=True)
class AggregatedMetrics:
    total_memory_used: int
    total_memory_total: int
    average_utilization: float | None
    max_temperature: float | None
    total_power_draw: float | None
    gpu_count: int
    # How many GPUs answered at all (not lost), and how many reported each
    # averaged figure: a summary over 2 of 8 GPUs must not look like the fleet.
    reporting_count: int = 0
    utilization_count: int = 0
    power_count: int = 0
    lost_count: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compute_aggregated(samples: list[GPUSample]) -> AggregatedMetrics:
    live = [s for s in samples if not s.lost]
    utils = [s.utilization for s in live if s.utilization is not None]
    temps = [s.temperature for s in live if s.temperature is not None]
    powers = [s.power_draw for s in live if s.power_draw is not None]
    return AggregatedMetrics(
        total_memory_used=sum(s.memory_used or 0 for s in live),
        total_memory_total=sum(s.memory_total or 0 for s in live),
        average_utilization=(sum(utils) / len(utils)) if utils else None,
        max_temperature=max(temps) if temps else None,
        total_power_draw=sum(powers) if powers else None,
        gpu_count=len(samples),
        reporting_count=len(live),
        utilization_count=len(utils),
        power_count=len(powers),
        lost_count=len(samples) - len(live),
    )


def aggregate_by_host(samples: list[GPUSample]) -> dict[str, AggregatedMetrics]:
    hosts: dict[str, list[GPUSample]] = {}
    for s in samples:
        hosts.setdefault(s.host, []).append(s)
    return {h: compute_aggregated(ss) for h, ss in sorted(hosts.items())}
