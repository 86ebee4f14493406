"""The device as one value, and a set of devices as a process sees them.

A :class:`Device` is one GPU of a backend (``cuda``, ``hip``, ``xpu``) named
by its number within that backend (``index``, as NVML numbers NVIDIA GPUs), or
by its UUID (``GPU-…``; a MIG instance has only ``MIG-…``), whole or a share
of its memory (``share_mb``). A :class:`DeviceSet` is the devices one process
is given: it alone knows the backend's visibility variable
(``CUDA_VISIBLE_DEVICES``, ``HIP_VISIBLE_DEVICES``, ``ZE_AFFINITY_MASK``) and
the string forms, the environment a process gets (:meth:`DeviceSet.env`), the
value that variable holds (``"0,1"`` or ``"MIG-…"``) and how to read it back
(:meth:`DeviceSet.parse`). Nothing outside this module builds those variables
or joins GPU numbers into text (``tests/devices/test_device_rule.py``).

Imports nothing of the server: the launchers, the client and the CLI use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

# Each backend's variable that narrows the GPUs a process sees.
VISIBILITY: dict[str, str] = {"cuda": "CUDA_VISIBLE_DEVICES", "hip": "HIP_VISIBLE_DEVICES", "xpu": "ZE_AFFINITY_MASK"}
# CUDA numbers GPUs fastest first unless told to follow the PCI bus, which is NVML's order (and gpufleet's).
ORDER_VARIABLE = "CUDA_DEVICE_ORDER"
PCI_ORDER = "PCI_BUS_ID"
# Every variable that decides which GPUs a process sees, or how it numbers them: the backends' own, the
# container runtime's and ROCr's (read before HIP's, so it would renumber what HIP_VISIBLE_DEVICES picks).
DEVICE_ENV: frozenset[str] = frozenset({*VISIBILITY.values(), "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                        ORDER_VARIABLE})
# A whole GPU's UUID (NVML's ``GPU-…``), or a MIG instance's (``MIG-<uuid>``, or the older
# ``MIG-GPU-<uuid>/<gi>/<ci>``). No comma or space: the visibility variable separates with commas.
_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z][0-9A-Za-z/-]{0,95}$")
_LABEL = re.compile(r"^(?:(?P<backend>[a-z]+):)?(?P<id>.+)$")


def index_list(indexes: Iterable[int], sep: str = ",") -> str:
    """GPU numbers as people read them: ``0,1`` (or ``0, 1`` with ``sep=", "``)."""
    return sep.join(str(int(i)) for i in indexes)


@dataclass(frozen=True)
class Device:
    """One GPU of ``backend``, or a MIG instance of one, whole or a share of its memory (``share_mb``).

    ``index`` is the GPU's number within its backend (``cuda:N``; NVML's order
    for NVIDIA); ``uuid`` its UUID. A MIG instance has a UUID and no index. The
    visibility variable names a device by its index where it has one.
    """

    backend: str
    index: int | None = None
    uuid: str | None = None
    share_mb: int | None = None

    def __post_init__(self) -> None:
        if self.backend not in VISIBILITY:
            raise ValueError(f"unknown backend {self.backend!r}; one of {', '.join(VISIBILITY)}")
        if self.index is None and self.uuid is None:
            raise ValueError("a device is named by its index or its UUID; give one")
        if self.index is not None and (type(self.index) is not int or self.index < 0):
            raise ValueError(f"a device index is a whole number from 0, not {self.index!r}")
        if self.uuid is not None:
            self._check_uuid(self.uuid)
        if self.share_mb is not None and (type(self.share_mb) is not int or self.share_mb <= 0):
            raise ValueError(f"a share of a GPU is a whole number of MB above 0, not {self.share_mb!r}")

    def _check_uuid(self, uuid: str) -> None:
        if not _UUID.match(uuid):
            raise ValueError(f"{uuid!r} is not a GPU's UUID (GPU-…) or a MIG instance's (MIG-…)")
        if uuid.startswith("MIG-") and self.backend != "cuda":
            raise ValueError(f"{uuid!r}: MIG instances are NVIDIA's (cuda), not {self.backend}'s")
        if uuid.startswith("MIG-") and self.index is not None:
            raise ValueError(f"{uuid!r}: a MIG instance has no index of its own; name it by its UUID only")
        if self.index is None and self.backend == "xpu":
            raise ValueError("an Intel GPU is made visible by its index (ZE_AFFINITY_MASK), so it needs one")

    @classmethod
    def parse(cls, text: str, backend: str = "cuda") -> Device:
        """``3``, ``cuda:3``, ``hip:1``, ``MIG-…`` or ``cuda:MIG-…`` (a bare one is of ``backend``)."""
        m = _LABEL.match(str(text).strip())
        if not m:
            raise ValueError(f"cannot read device {text!r}; use e.g. 0, cuda:0, hip:1 or MIG-<uuid>")
        name = m.group("id")
        kind = m.group("backend") or backend
        if name.isdigit():
            return cls(kind, index=int(name))
        return cls(kind, uuid=name)

    @property
    def is_mig(self) -> bool:
        return self.uuid is not None and self.uuid.startswith("MIG-")

    @property
    def whole(self) -> bool:
        """The device's memory is all the holder's (no share of it was set)."""
        return self.share_mb is None

    @property
    def visible_id(self) -> str:
        """What the visibility variable names this device by: its index, else its UUID."""
        return str(self.index) if self.index is not None else str(self.uuid)

    @property
    def label(self) -> str:
        """``cuda:0``, ``hip:1``, ``cuda:MIG-…``: the form launch specs store."""
        return f"{self.backend}:{self.visible_id}"

    def share(self, mb: int) -> Device:
        """This device with only ``mb`` MB of its memory."""
        return replace(self, share_mb=mb)


@dataclass(frozen=True)
class DeviceSet:
    """The devices one process is given, all of one backend, in the order its ranks take them.

    An empty set still names its backend: its environment makes no GPU
    visible (the variable is set, to nothing).
    """

    backend: str
    devices: tuple[Device, ...] = ()

    def __post_init__(self) -> None:
        if self.backend not in VISIBILITY:
            raise ValueError(f"unknown backend {self.backend!r}; one of {', '.join(VISIBILITY)}")
        others = sorted({d.backend for d in self.devices} - {self.backend})
        if others:
            raise ValueError(f"a set of {self.backend} devices cannot hold {' or '.join(others)} ones; the "
                             "process sees its GPUs through one backend's variable")
        ids = [d.visible_id for d in self.devices]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"device {twice[0]} is listed twice")

    @classmethod
    def of(cls, backend: str, ids: Iterable[int | str]) -> DeviceSet:
        """The set of ``backend``'s devices by index (``[0, 1]``) or UUID (``["MIG-…"]``)."""
        return cls(backend, tuple(Device(backend, index=i) if isinstance(i, int) else Device.parse(i, backend)
                                  for i in ids))

    @classmethod
    def parse(cls, text: str, backend: str = "cuda") -> DeviceSet:
        """The set a visibility variable's value names (``"0,1"``, ``"MIG-…,MIG-…"``); blank is none."""
        return cls.of(backend, [p.strip() for p in str(text).split(",") if p.strip()])

    @classmethod
    def from_labels(cls, labels: Iterable[str]) -> DeviceSet:
        """The set of stored labels (``["cuda:0", "cuda:1"]``), which are of one backend."""
        devices = tuple(Device.parse(x) for x in labels)
        if not devices:
            raise ValueError("no device given")
        return cls(devices[0].backend, devices)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], backend: str = "cuda") -> DeviceSet | None:
        """The set ``environ`` makes visible through ``backend``'s variable; None when it does not narrow them."""
        value = environ.get(VISIBILITY[backend])
        return None if value is None else cls.parse(value, backend)

    def __len__(self) -> int:
        return len(self.devices)

    def __iter__(self) -> Iterator[Device]:
        return iter(self.devices)

    @property
    def variable(self) -> str:
        return VISIBILITY[self.backend]

    @property
    def value(self) -> str:
        """What the visibility variable holds: ``0,1``, ``MIG-…``, or nothing for an empty set."""
        return self.display(",")

    def display(self, sep: str = ",") -> str:
        """The devices as people read them: ``0,1`` (``0, 1`` with ``sep=", "``)."""
        return sep.join(d.visible_id for d in self.devices)

    @property
    def indexes(self) -> list[int]:
        """Each device's index; ValueError for a device named by UUID only (a MIG instance)."""
        missing = [d.visible_id for d in self.devices if d.index is None]
        if missing:
            raise ValueError(f"device {missing[0]} has no index (a MIG instance is named by its UUID)")
        return [int(d.index) for d in self.devices if d.index is not None]

    @property
    def labels(self) -> list[str]:
        return [d.label for d in self.devices]

    def env(self) -> dict[str, str]:
        """What a process of these devices gets: its backend's variable, and for CUDA NVML's numbering."""
        env = {self.variable: self.value}
        if self.backend == "cuda":
            env[ORDER_VARIABLE] = PCI_ORDER
        return env


def visible_value(environ: Mapping[str, str]) -> str:
    """The value of the first backend's variable ``environ`` sets to something (``""`` when none does)."""
    return next((environ[v] for v in VISIBILITY.values() if environ.get(v)), "")
