"""LaunchSpec: everything the launcher needs, as one JSON file.

The jobs supervisor writes it; ``python -m gpufleet.engine.launch SPEC.json``
reads it. Torch-free.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpufleet.devices.device import Device, DeviceSet
from gpufleet.engine.config import TrainingConfigError
from gpufleet.rankpath.gpufleet_share import SHARE_ENV

GPU_BACKENDS = ("cuda", "hip", "xpu")


def normalize_device(text: str) -> str:
    """``"0"`` -> ``"cuda:0"``, ``"hip:1"`` stays, ``"cuda:MIG-…"`` stays, ``"cpu"`` stays; else TrainingConfigError."""
    t = str(text).strip()
    kind, sep, name = t.partition(":")
    kind = kind.lower() if sep or kind.lower() in ("cpu", *GPU_BACKENDS) else ""
    if kind == "cpu" and (name == "" or name.isdigit()):
        return "cpu"
    try:
        return Device.parse(f"{kind}:{name or 0}" if kind else t).label
    except ValueError:
        raise TrainingConfigError("devices", f"cannot read device {text!r}; use 0, cuda:0, hip:0, xpu:0, "
                                             "cuda:MIG-<uuid> or cpu") from None


def parse_devices(text: str, world_size: int | None = None) -> list[str]:
    """``"0,1"`` / ``"cuda:0,cuda:1"`` / ``"cpu"`` (with ``world_size`` copies)."""
    parts = [p for p in (s.strip() for s in str(text).split(",")) if p]
    if not parts:
        raise TrainingConfigError("devices", "no device given; use e.g. 0,1 or cuda:0,cuda:1 or cpu")
    devices = [normalize_device(p) for p in parts]
    if devices == ["cpu"] and world_size:
        devices = ["cpu"] * world_size
    return devices


@dataclass
class LaunchSpec:
    recipe: str
    config: dict[str, Any]
    devices: list[str]
    checkpoint_dir: str
    progress_file: str
    data_root: str | None = None
    # Resume from the newest valid checkpoint in checkpoint_dir when there is one.
    resume: bool = True
    collective_timeout_s: float = 60.0
    training_id: str | None = None
    # The devices cannot run kernels (the device backend says so: a simulated
    # fleet's GPUs): each rank runs on CPU with gloo while the rank <-> GPU
    # mapping is kept (it is written in the "start" progress line).
    ranks_on_cpu: bool = False
    # How long ranks get to checkpoint after SIGTERM before they are killed.
    stop_grace_s: float = 60.0
    # The attempt number this launch runs for: its checkpoint writes are fenced
    # by it (a newer attempt's fence in checkpoint_dir stops them).
    attempt: int | None = None
    # A training across hosts: {"world_size", "first_rank" (this host's first
    # global rank), "master_addr", "master_port", "store_master" (this launcher
    # opens the TCPStore), "rendezvous_timeout_s"}; None on one host.
    gang: dict[str, Any] | None = None
    # A sweep's trial: the rung steps where it reports and waits for the sweep's verdict (engine/rungwait.py).
    rung_steps: list[int] | None = None
    # A share of each GPU's memory, in MB (None: the GPUs are whole): the ranks cap PyTorch's allocator at it.
    share_mb: int | None = None

    def __post_init__(self) -> None:
        if not self.devices:
            raise TrainingConfigError("devices", "at least one device is needed")
        self.devices = [normalize_device(d) for d in self.devices]
        kinds = {d.split(":")[0] for d in self.devices}
        if "cpu" in kinds and len(kinds) > 1:
            raise TrainingConfigError(
                "devices", f"one training cannot mix the CPU with GPUs ({', '.join(self.devices)})")
        gpus = [d for d in self.devices if d != "cpu"]
        if len(set(gpus)) != len(gpus):
            raise TrainingConfigError("devices", f"a GPU is listed twice: {self.devices}")
        if not self.collective_timeout_s > 0:
            raise TrainingConfigError("collective_timeout_s", "must be > 0")
        if not self.stop_grace_s > 0:
            raise TrainingConfigError("stop_grace_s", "must be > 0")
        if not isinstance(self.config, dict):
            raise TrainingConfigError("config", "must be a mapping of field: value")

    @property
    def world_size(self) -> int:
        return len(self.devices)

    @property
    def global_world_size(self) -> int:
        """Ranks on every host together (the local ``world_size`` on one host)."""
        return int(self.gang["world_size"]) if self.gang else self.world_size

    @property
    def backend(self) -> str:
        return self.devices[0].split(":")[0]

    @property
    def kinds(self) -> list[str]:
        """Each rank's backend (``cuda`` | ``hip`` | ``xpu`` | ``cpu``)."""
        return [d.split(":")[0] for d in self.devices]

    @property
    def mixed_vendors(self) -> bool:
        """GPUs of more than one vendor: no vendor's collective library reaches every rank."""
        return len(set(self.kinds)) > 1

    @property
    def process_group_backend(self) -> str | None:
        """The backend every rank's process group uses: gloo across vendors, else None (the device's own)."""
        return "gloo" if self.mixed_vendors else None

    def vendor_groups(self) -> list[int]:
        """Each rank's group: the ranks of one backend form one group, numbered in order of first rank."""
        order = list(dict.fromkeys(self.kinds))
        return [order.index(k) for k in self.kinds]

    def run_devices(self) -> list[str]:
        """The torch devices the ranks use.

        GPU indexes are renumbered 0..n-1 because the launcher narrows the
        visible devices (the backend's visibility variable) to exactly this training's.
        HIP runs through torch's cuda device type. Across vendors each rank
        sees only its own GPU (:meth:`rank_visible_env`), so each is device 0
        of its backend.
        """
        if self.ranks_on_cpu or self.backend == "cpu":
            return ["cpu"] * self.world_size
        if self.mixed_vendors:
            return [f"{'cuda' if k == 'hip' else k}:0" for k in self.kinds]
        kind = "cuda" if self.backend in ("cuda", "hip") else self.backend
        return [f"{kind}:{i}" for i in range(self.world_size)]

    def rank_visible_env(self, rank: int) -> dict[str, str]:
        """What rank ``rank`` of a set that mixes vendors sees: its own GPU through its backend's variable.

        Set in the rank process before any device is touched (the runtimes read
        the variable when they initialise). Empty for a set of one vendor,
        whose launcher narrows the visible devices for all ranks at once.
        """
        if not self.mixed_vendors:
            return {}
        return DeviceSet.from_labels([self.devices[rank]]).env()

    def visible_devices_env(self) -> dict[str, str]:
        if self.ranks_on_cpu or self.backend == "cpu" or self.mixed_vendors:
            return {}
        # For NVIDIA GPUs numbered as NVML does (PCI bus order); CUDA's default is fastest first.
        env = DeviceSet.from_labels(self.devices).env()
        if self.share_mb:
            env[SHARE_ENV] = str(int(self.share_mb))
        return env

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    def write(self, path: str | Path) -> Path:
        from gpufleet.memberfs import write_new  # the run dir is the training's account's

        return write_new(path, self.to_json())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LaunchSpec":
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise TrainingConfigError(unknown[0], f"unknown launch spec field; known: {', '.join(sorted(known))}")
        missing = [k for k in ("recipe", "config", "devices", "checkpoint_dir", "progress_file") if k not in data]
        if missing:
            raise TrainingConfigError(missing[0], "missing from the launch spec")
        return cls(**data)

    @classmethod
    def read(cls, path: str | Path) -> "LaunchSpec":
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except FileNotFoundError:
            raise TrainingConfigError(None, f"launch spec {p} does not exist") from None
        except json.JSONDecodeError as exc:
            raise TrainingConfigError(None, f"launch spec {p} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise TrainingConfigError(None, f"launch spec {p} must hold a JSON object")
        return cls.from_dict(data)


