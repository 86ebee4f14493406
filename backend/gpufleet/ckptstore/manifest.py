"""What one uploaded checkpoint is: its files, each with its size and SHA-256, and what it reported."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class FileEntry:
    path: str  # from the checkpoint dir: "step-40/model.safetensors", or "ckpt_step40.pt"
    size: int
    sha256: str


@dataclass
class Manifest:
    training: str
    name: str  # the checkpoint's own name in the checkpoint dir (a file, or a folder)
    step: int | None
    upload: str  # this upload's own folder in the store
    uploaded_at: float
    files: list[FileEntry] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    attempt: int | None = None
    host: str | None = None

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    def order(self) -> tuple[int, float]:
        """Newer is larger: the step first, then when it was uploaded."""
        return (-1 if self.step is None else self.step, self.uploaded_at)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        raw: dict[str, Any] = json.loads(data)
        raw["files"] = [FileEntry(**f) for f in raw.get("files", [])]
        return cls(**raw)
