"""Intel data-centre GPUs through ``xpu-smi`` (Intel XPU Manager, on Level Zero sysman).

``xpu-smi`` has no Python API; it prints JSON with ``-j``. This module runs it
(or the simulated one, :class:`~gpufleet.devices.simxpusmi.SimXpuSmi`, which
answers the same commands with the same JSON) and turns its answers into
:class:`GPUInfo` and live readings. The three commands used:

* ``xpu-smi discovery -j``: ``{"device_list": [{"device_id", "device_name",
  "uuid", "pci_bdf_address", "pci_device_id", "vendor_name"}...]}``
* ``xpu-smi discovery -d N -j``: one device's details, among them
  ``memory_physical_size_byte`` (a string of bytes)
* ``xpu-smi stats -d N -j``: ``{"device_id": N, "device_level": [{"metrics_type":
  "XPUM_STATS_...", "value": v}...]}``; memory used in MiB, power in W,
  temperature in °C. A metric the device does not support is simply absent.

A failing command (a device that stopped answering) exits non-zero and the
device is reported unhealthy with xpu-smi's words; the other devices are not
affected.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from typing import Any, Protocol

from gpufleet.devices.types import GPUInfo

log = logging.getLogger(__name__)

_TIMEOUT_S = 20
MIB = 2**20


class XpuSmiError(RuntimeError):
    """xpu-smi refused a command (non-zero exit, or no JSON)."""


class XpuSmiRunner(Protocol):
    def run(self, *args: str) -> dict[str, Any]:
        """``xpu-smi <args> -j``, parsed; raises :class:`XpuSmiError`."""


class XpuSmi:
    """The installed ``xpu-smi`` binary."""

    def __init__(self, binary: str = "xpu-smi") -> None:
        self.binary = binary

    @staticmethod
    def available(binary: str = "xpu-smi") -> bool:
        return shutil.which(binary) is not None

    def run(self, *args: str) -> dict[str, Any]:
        try:
            proc = subprocess.run([self.binary, *args, "-j"], capture_output=True, text=True, timeout=_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise XpuSmiError(f"xpu-smi {' '.join(args)}: {exc}") from exc
        if proc.returncode != 0:
            raise XpuSmiError((proc.stdout.strip() or proc.stderr.strip())[-300:] or f"exit {proc.returncode}")
        try:
            return dict(json.loads(proc.stdout))
        except ValueError as exc:
            raise XpuSmiError(f"xpu-smi {' '.join(args)} printed no JSON") from exc


def detect_with(smi: XpuSmiRunner, start_index: int, simulated: bool = False) -> list[GPUInfo]:
    """Every GPU ``xpu-smi discovery`` lists, fleet indexes from ``start_index``."""
    try:
        listed = smi.run("discovery").get("device_list", [])
    except XpuSmiError as exc:
        log.info("xpu-smi lists no GPUs: %s", exc)
        return []
    out: list[GPUInfo] = []
    for pos, d in enumerate(listed):
        device_id = int(d.get("device_id", pos))
        base: dict[str, Any] = dict(index=start_index + pos, backend="xpu", device_id=device_id, vendor="intel",
                                    simulated=simulated)
        try:
            detail = smi.run("discovery", "-d", str(device_id))
        except XpuSmiError as exc:
            out.append(GPUInfo(name=d.get("device_name"), uuid=d.get("uuid"), healthy=False,
                               error=f"xpu-smi cannot read GPU {device_id}: {exc}", **base))
            continue
        total = _int(detail.get("memory_physical_size_byte"))
        used = None
        try:
            used_mib = stats_with(smi, device_id).get("XPUM_STATS_MEMORY_USED")
            used = int(used_mib * MIB) if used_mib is not None else None
        except XpuSmiError:
            pass
        out.append(GPUInfo(
            name=detail.get("device_name") or d.get("device_name"),
            uuid=detail.get("uuid") or d.get("uuid"),
            pci_bus_id=detail.get("pci_bdf_address") or d.get("pci_bdf_address"),
            memory_total=total,
            memory_free=total - used if total is not None and used is not None else None,
            **base,
        ))
    return out


def stats_with(smi: XpuSmiRunner, device_id: int) -> dict[str, float]:
    """``xpu-smi stats -d N``'s device-level metrics, by ``metrics_type``."""
    data = smi.run("stats", "-d", str(device_id))
    out: dict[str, float] = {}
    for m in data.get("device_level", []):
        v = m.get("value")
        if isinstance(m.get("metrics_type"), str) and isinstance(v, (int, float)) and not isinstance(v, bool):
            out[m["metrics_type"]] = float(v)
    return out


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None
