"""dcgm-exporter's default counters that NVML gives beyond the live readings, read at the slow cadence.

Each is read through its own pynvml function (memory temperature as the
``NVML_FI_DEV_MEMORY_TEMP`` field), guarded like every other field: a GPU
that refuses one has it ``None`` and is not asked again. The names are
:class:`~gpufleet.telemetry.sample.GPUSample`'s.
"""

from __future__ import annotations

from typing import Any


def read_health(n: Any, g: Any, i: int, h: Any) -> dict[str, Any]:
    """The readings of GPU ``i`` (handle ``h``) through NVML module ``n`` and field guard ``g``."""
    out: dict[str, Any] = {}
    vals = g.read(i, "memory_temperature", lambda: n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_MEMORY_TEMP]))
    if vals is not None and int(vals[0].nvmlReturn) == 0:
        out["memory_temperature"] = float(vals[0].value.uiVal)
    elif vals is not None:
        g.refuse(i, "memory_temperature", str(n.NVMLError(int(vals[0].nvmlReturn))))
    out["energy_mj"] = g.read(i, "energy", lambda: n.nvmlDeviceGetTotalEnergyConsumption(h))
    out["pcie_replays"] = g.read(i, "pcie_replay", lambda: n.nvmlDeviceGetPcieReplayCounter(h))
    enc = g.read(i, "encoder", lambda: n.nvmlDeviceGetEncoderUtilization(h))
    out["encoder_util"] = None if enc is None else float(enc[0])
    dec = g.read(i, "decoder", lambda: n.nvmlDeviceGetDecoderUtilization(h))
    out["decoder_util"] = None if dec is None else float(dec[0])
    rows = g.read(i, "remapped_rows", lambda: n.nvmlDeviceGetRemappedRows(h))
    if rows is not None:
        corr, unc, pending, failure = rows
        out.update(rows_remapped_correctable=int(corr), rows_remapped_uncorrectable=int(unc),
                   row_remap_pending=bool(pending), row_remap_failure=bool(failure))
    return out
