"""Plain dataclasses that say what a GPU is. No torch, no NVML: safe anywhere."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

Backend = Literal["cuda", "hip", "xpu"]
Vendor = Literal["nvidia", "amd", "intel"]

BACKENDS: tuple[str, ...] = ("cuda", "hip", "xpu")
VENDOR_OF_BACKEND = {"cuda": "nvidia", "hip": "amd", "xpu": "intel"}


def torch_device_string(backend: str, device_id: int) -> str:
    """The torch device string for a backend's GPU.

    ROCm builds of PyTorch expose AMD GPUs under the ``cuda`` device type, so
    ``hip:1`` is ``cuda:1`` to torch.
    """
    if backend not in BACKENDS and backend != "cpu":
        raise ValueError(f"unknown backend {backend!r}; one of cpu, {', '.join(BACKENDS)}")
    if backend == "cpu":
        return "cpu"
    kind = "cuda" if backend == "hip" else backend
    return f"{kind}:{device_id}"


@dataclass(frozen=True)
class GPUInfo:
    """One GPU of this machine, as detection found it.

    ``index`` is the GPU's number in gpufleet (the fleet index, what
    ``--gpu-ids 0,1`` and the ``gpus`` table mean); ``device_id`` is its number
    within its backend (``cuda:N``/``hip:N``/``xpu:N``). A field the driver
    refused to give is ``None``. A GPU that stopped answering has
    ``healthy=False`` and the driver's words in ``error``.
    """

    index: int
    backend: Backend
    device_id: int
    vendor: Vendor
    name: str | None
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_total: int | None = None  # bytes
    memory_free: int | None = None  # bytes
    compute_capability: str | None = None  # "9.0", NVIDIA only
    simulated: bool = False
    healthy: bool = True
    error: str | None = None

    @property
    def torch_device(self) -> str:
        """``"cuda:0"``, ``"xpu:1"``… (see :func:`torch_device_string`)."""
        return torch_device_string(self.backend, self.device_id)

    @property
    def label(self) -> str:
        return f"{self.backend}:{self.device_id}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class GPUDevice:
    """The seed's per-GPU handle: a GPUInfo plus its torch device.

    Backend operations (set device, synchronize, streams, memory, autocast)
    live in :func:`gpufleet.devices.backend_ops`; this class only names the
    device, so it can be built where torch is not imported yet.
    """

    def __init__(self, info: GPUInfo):
        self.info = info

    @property
    def backend(self) -> str:
        return self.info.backend

    @property
    def device_id(self) -> int:
        return self.info.device_id

    @property
    def vendor(self) -> str:
        return self.info.vendor

    @property
    def device(self) -> torch.device:
        import torch

        return torch.device(self.info.torch_device)

    def __repr__(self) -> str:
        return f"GPUDevice({self.info.label}, {self.info.name!r})"


@dataclass(frozen=True)
class ProcessNote:
    """What a device backend itself knows about a process on one of its GPUs, beyond ``/proc``."""

    user: str | None = None
    command: str | None = None
    training_id: str | None = None
