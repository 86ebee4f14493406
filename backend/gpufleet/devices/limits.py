"""How a share of a GPU's memory is held to its budget: which limit methods apply, strongest first.

Three methods, and a share gets every one that applies:

1. ``driver``: the driver's own per-cgroup limit (``nvmlDeviceSetMemoryLimits_v1``, a hard limit of one
   GPU's memory for the processes of one cgroup). Found by calling it, never by the driver's version:
   an older driver has no such entry point (``NVMLError_FunctionNotFound``), an older nvidia-ml-py no
   such function, a MIG instance no such limit. It needs a cgroup of the work's own.
2. ``allocator``: PyTorch's per-process memory fraction, set in the work's own processes before the
   member's first line (``rankpath/gpufleet_share.py``); CUDA and ROCm builds of PyTorch have it.
3. ``watchdog``: NVML's per-process memory, read every sampling period; a process group that holds
   more than its share for longer than a configured moment is stopped alone (``jobs/share_watch.py``).

A share on a device where neither the driver nor the allocator can hold it (an Intel GPU: PyTorch's
XPU allocator has no per-process cap gpufleet relies on) is refused: :func:`refusal` says so.
Imports nothing of the server and no NVML of its own: the caller hands in its ``pynvml`` (real or
simulated), so the real code path runs on simulated GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DRIVER = "driver"
ALLOCATOR = "allocator"
WATCHDOG = "watchdog"
METHODS = (DRIVER, ALLOCATOR, WATCHDOG)
WORDS = {DRIVER: "the driver's per-cgroup memory limit", ALLOCATOR: "PyTorch's per-process memory fraction",
         WATCHDOG: "the watchdog on NVML's per-process memory"}
# The backends whose PyTorch allocator takes a per-process fraction (ROCm's builds are torch.cuda).
CAPPED_BACKENDS = ("cuda", "hip")
ROOT_CGROUP = b"/sys/fs/cgroup"


@dataclass(frozen=True)
class LimitPlan:
    """The methods that hold one share, strongest first, and why each of the others does not."""

    methods: tuple[str, ...]
    why_not: dict[str, str] = field(default_factory=dict)

    @property
    def strongest(self) -> str | None:
        return self.methods[0] if self.methods else None

    def say(self, share_mb: int) -> str:
        """What a training's events say: ``held to 10240 MB by …; not by … (why)``."""
        held = "; ".join(WORDS[m] for m in self.methods) or "nothing"
        text = f"a share of {share_mb} MB, held by: {held}"
        if self.why_not:
            text += "; not by " + "; ".join(f"{WORDS[m]} ({why})" for m, why in self.why_not.items())
        return text

    def to_json(self) -> dict[str, Any]:
        return {"methods": list(self.methods), "why_not": dict(self.why_not)}


def driver_limit_offered(nvml: Any, handle: Any) -> str | None:
    """None where the driver offers per-cgroup memory limits on this GPU, else why not."""
    get = getattr(nvml, "nvmlDeviceGetMemoryLimits_v1", None)
    if get is None or not hasattr(nvml, "nvmlDeviceSetMemoryLimits_v1"):
        return "this nvidia-ml-py has no nvmlDeviceSetMemoryLimits_v1"
    limits = nvml.c_nvmlGetMemoryLimits_v1_t()
    limits.nameSpace = ROOT_CGROUP
    try:
        get(handle, limits)
    except nvml.NVMLError_FunctionNotFound:
        return f"driver {_driver(nvml)} has no nvmlDeviceSetMemoryLimits_v1"
    except nvml.NVMLError_NotSupported:
        return "not supported on this GPU"
    except nvml.NVMLError as exc:
        return f"NVML refused it: {exc}"
    return None


def _driver(nvml: Any) -> str:
    try:
        version = nvml.nvmlSystemGetDriverVersion()
    except nvml.NVMLError:
        return "(version unknown)"
    return version.decode() if isinstance(version, bytes) else str(version)


def choose(backend: str, nvml: Any = None, handle: Any = None, cgroup: str | None = None,
           mig: bool = False) -> LimitPlan:
    """The methods that hold a share of ``backend``'s GPU (NVIDIA's through ``nvml`` and ``handle``)."""
    methods: list[str] = []
    why_not: dict[str, str] = {}
    if backend != "cuda" or nvml is None:
        why_not[DRIVER] = "only NVIDIA's driver has one"
    elif mig:
        why_not[DRIVER] = "NVML sets no memory limit on a MIG instance"
    elif (reason := driver_limit_offered(nvml, handle)) is not None:
        why_not[DRIVER] = reason
    elif cgroup is None:
        why_not[DRIVER] = "the driver offers it, but this work runs in no cgroup of its own"
    else:
        methods.append(DRIVER)
    if backend in CAPPED_BACKENDS:
        methods.append(ALLOCATOR)
    else:
        why_not[ALLOCATOR] = f"PyTorch's {backend} allocator takes no per-process fraction"
    if backend == "cuda" and nvml is not None:
        methods.append(WATCHDOG)
    else:
        why_not[WATCHDOG] = "it reads NVML's per-process memory, which only NVIDIA GPUs report"
    return LimitPlan(tuple(methods), why_not)


def refusal(backend: str) -> str | None:
    """Why a share of ``backend``'s GPU cannot be held in-process (so is refused), or None."""
    if backend in CAPPED_BACKENDS:
        return None
    return (f"a share of a {backend} GPU cannot be held to its budget: no per-process limit can be set in "
            f"PyTorch's {backend} allocator and the driver offers none; ask for a whole GPU instead "
            "(leave out memory_mb / --memory)")


def set_driver_limit(nvml: Any, handle: Any, cgroup: str, share_bytes: int) -> None:
    """Set the driver's hard limit of this GPU's memory for the processes of ``cgroup`` (a sysfs path)."""
    limits = nvml.c_nvmlSetMemoryLimits_v1_t()
    limits.nameSpace = cgroup.encode()
    limits.softLimit = int(share_bytes)
    limits.hardLimit = int(share_bytes)
    nvml.nvmlDeviceSetMemoryLimits_v1(handle, limits)


def clear_driver_limit(nvml: Any, handle: Any, cgroup: str) -> None:
    """Clear it as NVML says: soft 0, hard ``NVML_DEVICE_MEMORY_LIMIT_MAX``."""
    limits = nvml.c_nvmlSetMemoryLimits_v1_t()
    limits.nameSpace = cgroup.encode()
    limits.softLimit = 0
    limits.hardLimit = nvml.NVML_DEVICE_MEMORY_LIMIT_MAX
    nvml.nvmlDeviceSetMemoryLimits_v1(handle, limits)
