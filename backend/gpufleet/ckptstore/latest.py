"""A training's ``latest`` pointer: moved only forward, only to a complete checkpoint, by conditional write.

Every move reads the pointer and its ETag, and writes the new one only if the pointer is still what was
read (``If-Match``; ``If-None-Match: *`` for the first). A writer that lost the race reads again and moves
it only if its checkpoint is still the newer, so racing attempts end at the newest of theirs, never at an
older one; and the pointer is written only after the checkpoint's manifest, itself written only after
every file was verified, so it never names a partial checkpoint.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from botocore.exceptions import ClientError

from gpufleet.ckptstore.client import Store, is_precondition_failed
from gpufleet.ckptstore.manifest import Manifest

# A pointer contended this often in a row is left as it is (and the next checkpoint tries again).
_TRIES = 20


@dataclass(frozen=True)
class Latest:
    name: str
    step: int | None
    manifest: str  # the manifest's key
    uploaded_at: float

    def order(self) -> tuple[int, float]:
        return (-1 if self.step is None else self.step, self.uploaded_at)


def latest_key(store: Store, training: str) -> str:
    return store.key(training, "latest.json")


def read_latest(store: Store, training: str) -> tuple[Latest | None, str | None]:
    """The pointer and its ETag, or (None, None) when the training has none yet."""
    try:
        got = store.client.get_object(Bucket=store.bucket, Key=latest_key(store, training))
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
            return None, None
        raise
    return Latest(**json.loads(got["Body"].read())), got["ETag"]


def advance(store: Store, manifest: Manifest, manifest_key: str) -> bool:
    """Point ``latest`` at this complete checkpoint if it is newer than what it names; True if it moved."""
    new = Latest(manifest.name, manifest.step, manifest_key, manifest.uploaded_at)
    body = json.dumps(asdict(new)).encode()
    for _ in range(_TRIES):
        current, etag = read_latest(store, manifest.training)
        if current is not None and current.order() >= new.order():
            return False
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            store.client.put_object(Bucket=store.bucket, Key=latest_key(store, manifest.training), Body=body,
                                    ContentType="application/json", **condition)
            return True
        except ClientError as exc:
            if not is_precondition_failed(exc):
                raise
    return False
