"""Prometheus exposition of the live fleet.

GPU series use dcgm-exporter's names, units and labels (``gpu``, ``UUID``,
``device``, ``modelName``, ``Hostname``) so that existing Grafana dashboards
built for dcgm-exporter work unchanged: utilization in percent, framebuffer
in MiB, temperature in °C, power in W, clocks in MHz. What dcgm-exporter has
no name for, and everything about trainings, the queue and the sampler
itself, is under ``gpufleet_*`` with Prometheus' own snake_case labels
(``gpu``, ``uuid``, ``device``, ``model_name``, ``hostname``), which
``promtool check metrics`` accepts; only the ``DCGM_FI_*`` series keep
dcgm-exporter's camelCase, for compatibility.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy import func, select

from gpufleet.config import StoreSettings
from gpufleet.db.models import TRAINING_STATUSES, Training, TrainingSession
from gpufleet.db.session import session_scope
from gpufleet.telemetry.live import read_agent_health, read_live_samples
from gpufleet.telemetry.sample import GPUSample

log = logging.getLogger(__name__)

MIB = 1024 * 1024
# dcgm-exporter's labels, for the DCGM_FI_* series only.
BACKEND_OF_VENDOR = {"nvidia": "cuda", "amd": "hip", "intel": "xpu"}
# dcgm-exporter 4.x adds the driver version (its default-counters.csv lists DCGM_FI_DRIVER_VERSION as a label).
GPU_LABELS = ["gpu", "UUID", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]
# The same labels, in the same order, for gpufleet's own series (no driver version: they never had it).
OWN_GPU_LABELS = ["gpu", "uuid", "device", "model_name", "hostname"]

# (name, help, value from a sample)
DCGM_GAUGES: list[tuple[str, str, Callable[[GPUSample], float | None]]] = [
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda s: s.utilization),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda s: s.memory_util),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
     lambda s: None if s.memory_used is None else s.memory_used / MIB),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
     lambda s: None if s.memory_free is None else s.memory_free / MIB),
    ("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).",
     lambda s: None if s.memory_reserved is None else s.memory_reserved / MIB),
    ("DCGM_FI_DEV_FB_TOTAL", "Framebuffer memory total (in MiB).",
     lambda s: None if s.memory_total is None else s.memory_total / MIB),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda s: s.temperature),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda s: s.power_draw),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "Power management limit (in W).", lambda s: s.power_limit),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda s: s.sm_clock),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda s: s.mem_clock),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "PCIe transmitted bytes per second.", lambda s: s.pcie_tx),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "PCIe received bytes per second.", lambda s: s.pcie_rx),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "NVLink transmitted bytes per second.", lambda s: s.nvlink_tx),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", "NVLink received bytes per second.", lambda s: s.nvlink_rx),
]

DCGM_GAUGES += [
    ("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", lambda s: s.memory_temperature),
    ("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", lambda s: s.encoder_util),
    ("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", lambda s: s.decoder_util),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", lambda s: s.last_xid),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed",
     lambda s: None if s.row_remap_failure is None else float(s.row_remap_failure)),
]
# dcgm-exporter's counters keep its names (no _total suffix), so its dashboards' queries find them.
DCGM_COUNTERS: list[tuple[str, str, Callable[[GPUSample], float | None]]] = [
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", lambda s: s.energy_mj),
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "Total number of bytes transmitted through PCIe TX (in KB) via NVML.",
     lambda s: None if s.pcie_tx is None else s.pcie_tx / 1024),
    ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "Total number of bytes received through PCIe RX (in KB) via NVML.",
     lambda s: None if s.pcie_rx is None else s.pcie_rx / 1024),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", lambda s: s.pcie_replays),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "Total number of NVLink bandwidth counters for all lanes",
     lambda s: s.nvlink_total_kib),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors",
     lambda s: s.rows_remapped_uncorrectable),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors",
     lambda s: s.rows_remapped_correctable),
]


def _dcgm_counter(name: str, help_: str) -> Metric:
    return Metric(name, help_, "counter")


def _labels(s: GPUSample) -> list[str]:
    return [str(s.index), s.uuid or "", f"nvidia{s.index}" if (s.vendor or "nvidia") == "nvidia" else f"gpu{s.index}",
            s.name or "", s.host, s.driver_version or ""]


class FleetCollector:
    """Reads the live view (and the database for trainings) on every scrape."""

    def __init__(self, settings: StoreSettings) -> None:
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        samples = read_live_samples(self.settings)
        for name, help_, get in DCGM_GAUGES:
            fam = GaugeMetricFamily(name, help_, labels=GPU_LABELS)
            for s in samples:
                v = None if s.lost else get(s)
                if v is not None:
                    fam.add_metric(_labels(s), float(v))
            yield fam
        for name, help_, get in DCGM_COUNTERS:
            counter = _dcgm_counter(name, help_)
            for s in samples:
                v = None if s.lost else get(s)
                if v is not None:
                    counter.add_sample(name, dict(zip(GPU_LABELS, _labels(s), strict=True)), float(v))
            yield counter
        yield from self._gpufleet_gpu(samples)
        yield from self._trainings()
        yield from self._usage()
        yield from self._health()

    def _gpufleet_gpu(self, samples: list[GPUSample]) -> Iterator[Metric]:
        lost = GaugeMetricFamily("gpufleet_gpu_lost", "1 when the GPU stopped answering.", labels=OWN_GPU_LABELS)
        ecc = GaugeMetricFamily("gpufleet_gpu_ecc_errors", "Uncorrected ECC errors (volatile).", labels=OWN_GPU_LABELS)
        xid = CounterMetricFamily("gpufleet_gpu_xid_errors", "XID errors seen since the agent started.",
                                  labels=OWN_GPU_LABELS)
        procs = GaugeMetricFamily("gpufleet_gpu_processes", "Processes on the GPU, by owner kind.",
                                  labels=[*OWN_GPU_LABELS, "kind"])
        held = GaugeMetricFamily("gpufleet_gpu_training_info", "1 for the training that holds the GPU.",
                                 labels=[*OWN_GPU_LABELS, "training_id"])
        info = GaugeMetricFamily("gpufleet_gpu_info", "1 for every GPU, with its vendor and backend.",
                                 labels=[*OWN_GPU_LABELS, "vendor", "backend"])
        for s in samples:
            lab = _labels(s)[:len(OWN_GPU_LABELS)]
            vendor = s.vendor or "nvidia"
            info.add_metric([*lab, vendor, BACKEND_OF_VENDOR.get(vendor, "")], 1.0)
            lost.add_metric(lab, 1.0 if s.lost else 0.0)
            if s.ecc_errors is not None:
                ecc.add_metric(lab, float(s.ecc_errors))
            if s.xid_errors is not None:
                xid.add_metric(lab, float(s.xid_errors))
            foreign = sum(1 for p in s.processes if p.foreign)
            procs.add_metric([*lab, "foreign"], float(foreign))
            procs.add_metric([*lab, "training"], float(len(s.processes) - foreign))
            if s.job_id is not None:
                held.add_metric([*lab, str(s.job_id)], 1.0)
        yield from (info, lost, ecc, xid, procs, held)

    def _trainings(self) -> Iterator[Metric]:
        by_status = GaugeMetricFamily("gpufleet_trainings", "Trainings by status.", labels=["status"])
        queue = GaugeMetricFamily("gpufleet_queue_length", "Trainings waiting for GPUs.")
        try:
            with session_scope(self.settings) as sess:
                counts = dict(sess.execute(select(Training.status, func.count()).group_by(Training.status)).all())
        except Exception as exc:  # noqa: BLE001 - a scrape still shows the GPUs while the database is away
            log.warning("cannot count trainings for /metrics: %s", exc)
            return
        for st in TRAINING_STATUSES:
            by_status.add_metric([st], float(counts.get(st, 0)))
        queue.add_metric([], float(counts.get("queued", 0)))
        yield by_status
        yield queue
        yield from self._sessions()

    def _sessions(self) -> Iterator[Metric]:
        """Live sessions (trainings rows of kind session) by state and mode; ended ones are in usage."""
        fam = GaugeMetricFamily("gpufleet_sessions", "Interactive sessions waiting or running, by mode.",
                                labels=["state", "mode"])
        try:
            with session_scope(self.settings) as sess:
                rows = sess.execute(
                    select(Training.status, TrainingSession.jupyter, func.count())
                    .join(TrainingSession, TrainingSession.training_id == Training.id)
                    .where(Training.status.in_(["queued", "scheduled", "preempted", "running"]))
                    .group_by(Training.status, TrainingSession.jupyter)).all()
        except Exception as exc:  # noqa: BLE001 - a scrape still shows the GPUs while the database is away
            log.warning("cannot count sessions for /metrics: %s", exc)
            return
        counts = {(state, mode): 0.0 for state in ("queued", "running") for mode in ("shell", "jupyter")}
        for status, jupyter, n in rows:
            counts[("running" if status == "running" else "queued", "jupyter" if jupyter else "shell")] += n
        for (state, mode), value in counts.items():
            fam.add_metric([state, mode], value)
        yield fam

    def _usage(self) -> Iterator[Metric]:
        from gpufleet.users.usage import totals_by_user

        held = CounterMetricFamily("gpufleet_usage_gpu_held_seconds", "GPU-seconds reserved by a user's trainings "
                                   "(stored by the maintenance pass, about a minute behind).", labels=["user"])
        used = CounterMetricFamily("gpufleet_usage_gpu_used_seconds", "GPU-seconds a user's trainings held, "
                                   "weighted by utilisation.", labels=["user"])
        try:
            with session_scope(self.settings) as sess:
                totals = totals_by_user(sess)
        except Exception as exc:  # noqa: BLE001 - a scrape still shows the GPUs while the database is away
            log.warning("cannot read usage for /metrics: %s", exc)
            return
        for user, (h, u) in sorted(totals.items()):
            held.add_metric([user], h)
            used.add_metric([user], u)
        yield held
        yield used

    def _health(self) -> Iterator[Metric]:
        health = read_agent_health(self.settings)
        specs: list[tuple[str, str, str, type]] = [
            ("gpufleet_sampler_samples", "Samples taken by the agent.", "samples_total", CounterMetricFamily),
            ("gpufleet_sampler_errors", "Sampling rounds that failed.", "sample_errors_total", CounterMetricFamily),
            ("gpufleet_sampler_last_sample_timestamp_seconds", "Unix time of the newest sample.",
             "last_sample_unix", GaugeMetricFamily),
            ("gpufleet_sampler_duration_seconds", "How long the newest sampling round took.",
             "last_duration_s", GaugeMetricFamily),
            ("gpufleet_sampler_disabled_fields", "Fields no longer asked of a GPU (not supported).",
             "disabled_fields", GaugeMetricFamily),
            ("gpufleet_metrics_buffered_rows", "History rows waiting for the database.", "buffered",
             GaugeMetricFamily),
            ("gpufleet_metrics_written_rows", "History rows written.", "written_total", CounterMetricFamily),
            ("gpufleet_metrics_dropped_rows", "History rows dropped because the buffer overflowed.",
             "dropped_total", CounterMetricFamily),
        ]
        for name, help_, key, cls in specs:
            fam = cls(name, help_, labels=["hostname"])
            for host, h in sorted(health.items()):
                v: Any = h.get(key)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    fam.add_metric([host], float(v))
            yield fam


def render(settings: StoreSettings) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(settings))
    return _dcgm_counter_names(generate_latest(registry))


_DCGM_COUNTER_META = re.compile(rb"^(# (?:HELP|TYPE) DCGM_FI_\w+?)_total ", re.MULTILINE)


def _dcgm_counter_names(text: bytes) -> bytes:
    """dcgm-exporter's counters' HELP and TYPE lines name them as it does, without prometheus_client's _total."""
    return _DCGM_COUNTER_META.sub(rb"\1 ", text)
