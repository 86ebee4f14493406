"""An attempt's checkpoint from the store: when the checkpoint folder on this host has none, or an older
one than the store's newest complete checkpoint (the training ran elsewhere since), that one is
downloaded into the folder before the launcher looks (``GPUFLEET_RESUME_FROM``, a recipe's ``step-N/``),
and the training's events say where it came from. A training started from another's checkpoint
(``resumed_from``) whose source folder is not on this host starts from the source's newest in the store.
The store unreachable is said and the attempt goes on with what the host has.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from gpufleet import ckptstore
from gpufleet.ckptstore.download import newest_manifest
from gpufleet.config import StoreSettings
from gpufleet.db.session import session_scope
from gpufleet.engine.resumepoint import newest_resume_point, step_in_name
from gpufleet.jobs.ckpt_uploads import current
from gpufleet.jobs.logs import BoundedLog
from gpufleet.lifecycle.models import Training
from gpufleet.lifecycle.transitions import record_event


def _local_step(ckpt_dir: Path, root: Path | None) -> int | None:
    newest = newest_resume_point(ckpt_dir, root)
    if not newest:
        return None
    return step_in_name(newest) if step_in_name(newest) is not None else -1


def restore(db: StoreSettings, t: Training, ckpt_dir: Path, log: BoundedLog | None, *, root: Path | None = None,
            owner: tuple[int, int] | None = None) -> ckptstore.Manifest | None:
    """Bring the store's newest complete checkpoint of ``t`` (or of its source) into ``ckpt_dir`` when it is
    newer than what is there; its manifest, or None when nothing was brought. ``root``: the pool's root
    ``ckpt_dir`` is below (reached through no link), and ``owner`` the member the files are given to."""
    uploads = current()
    if uploads is None:
        return None
    store = uploads.store
    here = _local_step(ckpt_dir, root)
    try:
        source = str(t.id)
        newest = newest_manifest(store, source)
        if newest is None and here is None and t.resumed_from is not None:
            source = str(t.resumed_from)
            newest = newest_manifest(store, source)
        if newest is None or (here is not None and (newest.step if newest.step is not None else -1) <= here):
            return None
        got = ckptstore.fetch_newest(store, str(t.id), ckpt_dir, source=source, root=root, owner=owner)
    except Exception as exc:  # noqa: BLE001 - the store away: the attempt goes on from what the host has
        _event(db, t.id, "warning", f"could not fetch the newest checkpoint from {store.url} ({exc}); "
               "continuing from this host's checkpoint folder", {"store": store.url})
        return None
    if got is None:
        return None
    where = f"attempt {got.attempt} on host {got.host}" if got.host else "an earlier attempt"
    of = "" if source == str(t.id) else f" of training {source}"
    reason = (f"resuming from checkpoint {got.name}{of} (step {got.step}), fetched from {store.url} and "
              f"verified; it was uploaded by {where}")
    if log is not None:
        log.line(f"[gpufleet] {reason}")
    _event(db, t.id, "info", reason, {"store": store.url, "name": got.name, "step": got.step,
                                      "source": source, "from_host": got.host, "from_attempt": got.attempt})
    return got


def _event(db: StoreSettings, tid: uuid.UUID, kind: str, reason: str, data: dict) -> None:
    with session_scope(db) as sess:
        record_event(sess, tid, kind, reason=reason, data=data)
