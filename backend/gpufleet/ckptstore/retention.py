"""What of a training stays in the store: its newest K complete checkpoints, its best by a reported metric,
and whatever ``latest`` names; every other upload (complete or not) is deleted.

An upload with no manifest yet is deleted only when its step is below every step kept (complete, it would
be deleted anyway) or when nothing was written to it for a day (abandoned); otherwise it may be one under
way, and stays.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from botocore.exceptions import ClientError

from gpufleet.ckptstore.client import Store
from gpufleet.ckptstore.latest import read_latest
from gpufleet.ckptstore.manifest import Manifest
from gpufleet.engine.resumepoint import step_in_name

# An upload with no manifest and no write for this long was abandoned (its uploader was killed).
ABANDONED_S = 24 * 3600


@dataclass(frozen=True)
class Policy:
    keep_last: int = 3
    best_metric: str | None = None
    best_mode: str = "min"  # "min": lower is better


def _keys(store: Store, prefix: str) -> list[dict]:
    pages = store.client.get_paginator("list_objects_v2").paginate(Bucket=store.bucket, Prefix=prefix)
    return [obj for page in pages for obj in page.get("Contents", [])]


def uploads(store: Store, training: str) -> dict[str, list[dict]]:
    """Every upload folder of the training (``checkpoints/<name>/<upload>``), its objects."""
    root = store.key(training, "checkpoints") + "/"
    out: dict[str, list[dict]] = {}
    for obj in _keys(store, root):
        parts = obj["Key"][len(root):].split("/")
        if len(parts) >= 3:
            out.setdefault(f"{root}{parts[0]}/{parts[1]}", []).append(obj)
    return out


def complete(store: Store, training: str) -> list[tuple[str, Manifest]]:
    """The complete uploads (those with a manifest), oldest first."""
    found = []
    for folder, objs in uploads(store, training).items():
        if any(o["Key"] == f"{folder}/manifest.json" for o in objs):
            try:
                got = store.client.get_object(Bucket=store.bucket, Key=f"{folder}/manifest.json")
            except ClientError:
                continue
            found.append((folder, Manifest.from_json(got["Body"].read())))
    return sorted(found, key=lambda fm: fm[1].order())


def _best(done: list[tuple[str, Manifest]], policy: Policy) -> str | None:
    scored = [(m.metrics[policy.best_metric], folder) for folder, m in done
              if policy.best_metric and policy.best_metric in m.metrics]
    if not scored:
        return None
    return (min(scored) if policy.best_mode == "min" else max(scored))[1]


def _perhaps_under_way(folder: str, objs: list[dict], lowest_kept: int | None) -> bool:
    step = step_in_name(folder.rsplit("/", 2)[-2])
    abandoned = max(o["LastModified"].timestamp() for o in objs) < time.time() - ABANDONED_S
    below = lowest_kept is not None and (-1 if step is None else step) < lowest_kept
    return not (abandoned or below)


def prune(store: Store, training: str, policy: Policy) -> list[str]:
    """Delete what the policy does not keep; the upload folders deleted."""
    done = complete(store, training)
    keep = {folder for folder, _ in done[-policy.keep_last:]}
    if best := _best(done, policy):
        keep.add(best)
    latest, _ = read_latest(store, training)
    if latest is not None:
        keep.add(latest.manifest.rsplit("/", 1)[0])
    lowest_kept = min((m.order()[0] for folder, m in done if folder in keep), default=None)
    manifests = dict(done)
    deleted = []
    for folder, objs in sorted(uploads(store, training).items()):
        if folder in keep:
            continue
        if folder not in manifests and _perhaps_under_way(folder, objs, lowest_kept):
            continue
        for i in range(0, len(objs), 1000):
            store.client.delete_objects(Bucket=store.bucket, Delete={
                "Objects": [{"Key": o["Key"]} for o in objs[i:i + 1000]], "Quiet": True})
        deleted.append(folder)
    return deleted
