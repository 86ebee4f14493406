"""Usage is kept beside the rollups by the maintenance pass and exposed as Prometheus counters."""

from __future__ import annotations

import uuid
from datetime import timedelta

from prometheus_client.parser import text_string_to_metric_families

from gpufleet.config import Settings
from gpufleet.db.types import utcnow
from gpufleet.telemetry.prometheus import render
from gpufleet.telemetry.retention import maintain
from support.sharing import held_training, make_host, rollup_minutes


def _counters(settings: Settings, user: str) -> dict[str, float]:
    return {s.name: s.value for fam in text_string_to_metric_families(render(settings).decode())
            for s in fam.samples if s.name.startswith("gpufleet_usage_") and s.labels.get("user") == user}


def test_maintenance_stores_usage_and_metrics_count_it(db_settings: Settings) -> None:
    owner = "p" + uuid.uuid4().hex[:8]
    host = make_host(db_settings, 1)
    now = utcnow().replace(second=0, microsecond=0)
    start = now - timedelta(hours=2)
    held_training(db_settings, host, owner, [(0, start, now - timedelta(hours=1))])
    rollup_minutes(db_settings, host, 0, [start + timedelta(minutes=m) for m in range(30)], 40.0)
    assert _counters(db_settings, owner) == {}
    maintain(db_settings, db_settings, now=now)
    assert _counters(db_settings, owner) == {
        "gpufleet_usage_gpu_held_seconds_total": 3600.0,
        "gpufleet_usage_gpu_used_seconds_total": 30 * 60 * 0.4,
    }
    maintain(db_settings, db_settings, now=now)  # a second pass counts nothing twice
    assert _counters(db_settings, owner)["gpufleet_usage_gpu_held_seconds_total"] == 3600.0
