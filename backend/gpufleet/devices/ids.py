"""``--gpu-ids`` parsing: ``0,1``, ``cuda:0,cuda:1``, ``hip:0``, ``xpu:0``, ``cpu``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.devices.types import BACKENDS, GPUInfo

_ITEM = re.compile(r"^(?:(?P<backend>[a-z]+):)?(?P<index>\d+)$")


@dataclass(frozen=True)
class DeviceId:
    """One item of a device list.

    ``backend=None`` means a fleet index (``0`` = GPU 0 of the ``gpus``
    table, whatever its vendor); ``cuda:0``/``hip:0``/``xpu:0`` name a
    backend's own numbering; ``cpu`` has neither.
    """

    backend: str | None
    index: int | None

    @property
    def is_cpu(self) -> bool:
        return self.backend == "cpu"

    def __str__(self) -> str:
        if self.is_cpu:
            return "cpu"
        return f"{self.backend}:{self.index}" if self.backend else str(self.index)


def parse_device_ids(text: str) -> list[DeviceId]:
    """Parse a device list; ``ValueError`` says what is wrong and what is accepted."""
    forms = "use e.g. 0,1 or cuda:0,cuda:1 or hip:0 or xpu:0 or cpu"
    if text is None or not str(text).strip():
        raise ValueError(f"no devices given; {forms}")
    items = [s.strip().lower() for s in str(text).split(",")]
    if any(not s for s in items):
        raise ValueError(f"empty item in {text!r}; {forms}")
    if "cpu" in items:
        if len(items) > 1:
            raise ValueError(f"'cpu' cannot be combined with GPUs in {text!r}")
        return [DeviceId("cpu", None)]
    out: list[DeviceId] = []
    for item in items:
        m = _ITEM.match(item)
        if not m:
            prefix, sep, rest = item.partition(":")
            if sep and prefix in BACKENDS:
                raise ValueError(f"{item!r}: the GPU number after '{prefix}:' must be an integer >= 0, got {rest!r}")
            if sep:
                raise ValueError(f"{item!r}: unknown backend {prefix!r}; one of {', '.join(BACKENDS)}")
            raise ValueError(f"{item!r} is not a GPU number; {forms}")
        backend = m.group("backend")
        if backend is not None and backend not in BACKENDS:
            raise ValueError(f"{item!r}: unknown backend {backend!r}; one of {', '.join(BACKENDS)}")
        dev = DeviceId(backend, int(m.group("index")))
        if dev in out:
            raise ValueError(f"{item!r} is listed twice in {text!r}")
        out.append(dev)
    return out


def _describe(gpus: list[GPUInfo]) -> str:
    if not gpus:
        return "this machine has no GPUs"
    return "this machine has " + ", ".join(f"{g.index} ({g.label})" for g in gpus)


def resolve_device_ids(ids: list[DeviceId] | str, gpus: list[GPUInfo]) -> list[GPUInfo]:
    """The detected GPUs that ``ids`` name, in the given order ([] for ``cpu``).

    ``cuda:N`` also finds AMD GPU ``N`` on a ROCm host, where torch itself
    calls AMD GPUs ``cuda``.
    """
    if isinstance(ids, str):
        ids = parse_device_ids(ids)
    if len(ids) == 1 and ids[0].is_cpu:
        return []
    has_cuda = any(g.backend == "cuda" for g in gpus)
    out: list[GPUInfo] = []
    for d in ids:
        if d.backend is None:
            found = next((g for g in gpus if g.index == d.index), None)
        else:
            backend = "hip" if d.backend == "cuda" and not has_cuda else d.backend
            found = next((g for g in gpus if g.backend == backend and g.device_id == d.index), None)
        if found is None:
            raise ValueError(f"GPU {d} does not exist; {_describe(gpus)}")
        if found in out:
            raise ValueError(f"GPU {d} is GPU {found.index}, which is already listed")
        out.append(found)
    return out
