"""Detect this machine's GPUs: NVIDIA through NVML, AMD through amdsmi/ROCm, Intel through xpu-smi/XPU.

Fleet indexes are given in that order (NVIDIA, then AMD, then Intel), so an
NVIDIA GPU's index is its NVML index. Detection never raises: no driver means
no GPUs of that vendor, a field the driver refuses is ``None``, and a GPU that
stopped answering is reported with ``healthy=False`` beside the others.

CUDA device numbers: ``device_id`` of an NVIDIA GPU is its NVML index, which is
PCI bus order. CUDA numbers GPUs fastest-first unless
``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so processes that open ``cuda:N`` (the
training launcher) must set that variable for the two to agree.

torch is never imported here. AMD and Intel GPUs that need torch to be seen
(ROCm without amdsmi, XPU) are probed in a short-lived subprocess, and only
when sysfs shows a display device of that vendor: importing torch, or worse
initialising HIP, in the API process would slow its start and break the
children it forks.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpufleet.devices.types import Backend, GPUInfo, Vendor
from gpufleet.devices.xpusmi import XpuSmiRunner, detect_with

log = logging.getLogger(__name__)

PCI_VENDOR_AMD = "0x1002"
PCI_VENDOR_INTEL = "0x8086"
# PCI classes of GPUs: display controllers (0x03xxxx) and processing
# accelerators (0x12xxxx, where some data-centre parts sit).
_GPU_PCI_CLASSES = ("0x03", "0x12")
_PROBE_TIMEOUT_S = 120


# ---------------------------------------------------------------------------
# NVIDIA


def detect_nvidia(nvml: Any, simulated: bool = False) -> list[GPUInfo]:
    """NVIDIA GPUs through ``nvml`` (``pynvml`` or the simulated one)."""
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no library, no driver, no GPU: all mean none
        log.debug("NVML unavailable (%s); no NVIDIA GPUs", exc)
        return []
    try:
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            log.warning("NVML cannot count GPUs: %s", exc)
            return []
        return [_nvidia_gpu(nvml, i, simulated) for i in range(count)]
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def _nvidia_gpu(nvml: Any, index: int, simulated: bool) -> GPUInfo:
    base: dict[str, Any] = dict(index=index, backend="cuda", device_id=index, vendor="nvidia", simulated=simulated)
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except nvml.NVMLError as exc:
        return GPUInfo(name=None, healthy=False, error=f"NVML cannot open GPU {index}: {exc}", **base)

    faults: list[str] = []
    # GPU-wide failures: the GPU is unusable, whatever field showed it.
    fatal = (nvml.NVMLError_GpuIsLost, nvml.NVMLError_ResetRequired)

    def ask(fn: Any, *args: Any) -> Any:
        try:
            return fn(handle, *args)
        except fatal as exc:
            if str(exc) not in faults:
                faults.append(str(exc))
            return None
        except nvml.NVMLError:
            return None

    name = ask(nvml.nvmlDeviceGetName)
    uuid = ask(nvml.nvmlDeviceGetUUID)
    pci = ask(nvml.nvmlDeviceGetPciInfo)
    mem = ask(nvml.nvmlDeviceGetMemoryInfo)
    cc = ask(nvml.nvmlDeviceGetCudaComputeCapability)
    return GPUInfo(
        name=name,
        uuid=uuid,
        pci_bus_id=pci.busId if pci is not None else None,
        memory_total=int(mem.total) if mem is not None else None,
        memory_free=int(mem.free) if mem is not None else None,
        compute_capability=f"{cc[0]}.{cc[1]}" if cc is not None else None,
        healthy=not faults,
        error="; ".join(faults) or None,
        **base,
    )


# ---------------------------------------------------------------------------
# AMD and Intel


def pci_vendor_present(vendor: str, root: Path = Path("/sys/bus/pci/devices")) -> bool:
    """True if sysfs lists a GPU-class PCI device of ``vendor`` (or sysfs is absent)."""
    if not root.is_dir():
        return True
    for dev in root.iterdir():
        try:
            if (dev / "vendor").read_text().strip() != vendor:
                continue
            if (dev / "class").read_text().strip().startswith(_GPU_PCI_CLASSES):
                return True
        except OSError:
            continue
    return False


def detect_amd(start_index: int, amdsmi: Any | None) -> list[GPUInfo]:
    """AMD GPUs of this machine through ``amdsmi`` (None: not installed), else the torch probe."""
    if not pci_vendor_present(PCI_VENDOR_AMD):
        return []
    found = detect_amd_with(amdsmi, start_index) if amdsmi is not None else None
    if found is not None:
        return found
    probed = probe_torch_gpus().get("hip", [])
    return [_from_probe(start_index + i, "hip", "amd", d) for i, d in enumerate(probed)]


def detect_intel(start_index: int, xpusmi: XpuSmiRunner | None) -> list[GPUInfo]:
    """Intel GPUs of this machine through ``xpu-smi`` (None: not installed), else the torch probe."""
    if not pci_vendor_present(PCI_VENDOR_INTEL):
        return []
    if xpusmi is not None:
        found = detect_with(xpusmi, start_index)
        if found:
            return found
    probed = probe_torch_gpus().get("xpu", [])
    return [_from_probe(start_index + i, "xpu", "intel", d) for i, d in enumerate(probed)]


def _from_probe(index: int, backend: Backend, vendor: Vendor, d: dict[str, Any]) -> GPUInfo:
    return GPUInfo(
        index=index,
        backend=backend,
        device_id=int(d.get("device_id", index)),
        vendor=vendor,
        name=d.get("name"),
        uuid=d.get("uuid"),
        pci_bus_id=d.get("pci_bus_id"),
        memory_total=d.get("memory_total"),
        memory_free=d.get("memory_free"),
        healthy=d.get("error") is None,
        error=d.get("error"),
    )


# amdsmi status codes that mean the GPU itself is gone, not one field.
AMDSMI_FATAL_STATUS = {6: "AMDSMI_STATUS_DRM_ERROR", 31: "AMDSMI_STATUS_NOT_FOUND",
                       34: "AMDSMI_STATUS_DRIVER_NOT_LOADED"}


def amdsmi_fatal(exc: BaseException) -> bool:
    """True when an amdsmi error says the GPU stopped answering."""
    return getattr(exc, "err_code", None) in AMDSMI_FATAL_STATUS


def detect_amd_with(amdsmi: Any, start_index: int, simulated: bool = False) -> list[GPUInfo] | None:
    """AMD GPUs through ``amdsmi`` (the real module or the simulated one); None when it is unusable.

    No HIP context is needed. A field amdsmi refuses is None; a GPU whose
    calls fail with a device-gone status is listed unhealthy beside the others.
    """
    try:
        amdsmi.amdsmi_init()
    except Exception as exc:  # noqa: BLE001 - any amdsmi failure: fall back to the torch probe
        log.debug("amdsmi_init failed: %s", exc)
        return None
    out: list[GPUInfo] = []
    try:
        for i, h in enumerate(amdsmi.amdsmi_get_processor_handles()):
            faults: list[str] = []

            def ask(fn: Any, *args: Any, h: Any = h, faults: list[str] = faults) -> Any:
                try:
                    return fn(h, *args)
                except Exception as exc:  # noqa: BLE001 - amdsmi raises its own exception types per field
                    if amdsmi_fatal(exc) and str(exc) not in faults:
                        faults.append(str(exc).replace("\n\t", " "))
                    return None

            asic = ask(amdsmi.amdsmi_get_gpu_asic_info) or {}
            vram = amdsmi.AmdSmiMemoryType.VRAM
            total = ask(amdsmi.amdsmi_get_gpu_memory_total, vram)
            used = ask(amdsmi.amdsmi_get_gpu_memory_usage, vram)
            name = asic.get("market_name")
            out.append(GPUInfo(
                index=start_index + i,
                backend="hip",
                device_id=i,
                vendor="amd",
                name=name if name and name != "N/A" else None,
                uuid=ask(amdsmi.amdsmi_get_gpu_device_uuid),
                pci_bus_id=ask(amdsmi.amdsmi_get_gpu_device_bdf),
                memory_total=total,
                memory_free=total - used if total is not None and used is not None else None,
                simulated=simulated,
                healthy=not faults,
                error=f"amdsmi: GPU is lost ({faults[0]})" if faults else None,
            ))
    except Exception as exc:  # noqa: BLE001 - the handle list itself failed: fall back
        log.warning("amdsmi cannot list GPUs: %s", exc)
        return None
    finally:
        try:
            amdsmi.amdsmi_shut_down()
        except Exception:  # noqa: BLE001
            pass
    return out


# Run in a subprocess: imports torch there, never here.
_PROBE = r"""
import json, torch
out = {"hip": [], "xpu": []}
def props(mod, i):
    p = mod.get_device_properties(i)
    d = {"device_id": i, "name": p.name, "memory_total": int(p.total_memory)}
    u = getattr(p, "uuid", None)
    d["uuid"] = str(u) if u is not None else None
    try:
        d["memory_free"] = int(mod.mem_get_info(i)[0])
    except Exception:
        d["memory_free"] = None
    return d
if getattr(torch.version, "hip", None):
    for i in range(torch.cuda.device_count()):
        try:
            out["hip"].append(props(torch.cuda, i))
        except Exception as e:
            out["hip"].append({"device_id": i, "error": str(e)})
xpu = getattr(torch, "xpu", None)
if xpu is not None and xpu.is_available():
    for i in range(xpu.device_count()):
        try:
            out["xpu"].append(props(xpu, i))
        except Exception as e:
            out["xpu"].append({"device_id": i, "error": str(e)})
print(json.dumps(out))
"""


def probe_torch_gpus() -> dict[str, list[dict[str, Any]]]:
    """ROCm and XPU GPUs as torch sees them, probed in a subprocess.

    Returns ``{"hip": [...], "xpu": [...]}``; empty lists when torch has
    neither backend, when torch is missing, or when the probe fails.
    """
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("probing ROCm/XPU GPUs through torch failed: %s", exc)
        return {"hip": [], "xpu": []}
    if proc.returncode != 0:
        log.warning("probing ROCm/XPU GPUs through torch failed: %s", proc.stderr.strip()[-500:])
        return {"hip": [], "xpu": []}
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"hip": [], "xpu": []}
    return {"hip": list(data.get("hip", [])), "xpu": list(data.get("xpu", []))}
