"""Checkpoints on an S3-compatible object store, so that a training resumes on any host or pool.

The training's code does not change: it writes into ``GPUFLEET_CHECKPOINT_DIR`` and resumes from
``GPUFLEET_RESUME_FROM``. The worker uploads each checkpoint once its ranks reported it complete
(:mod:`~gpufleet.ckptstore.upload`: every file read from the member's folder by descriptor through no
link, its SHA-256 taken on the way and checked against what the store holds, the SDK's multipart,
retries and checksums doing the transfer), then writes the checkpoint's manifest, then moves the
training's ``latest`` pointer to it with a conditional write (:mod:`~gpufleet.ckptstore.latest`): it
moves only forward, only to a checkpoint whose every file is there, so a killed upload or two racing
attempts never leave it naming a partial or older one. An attempt that finds no checkpoint in its
folder downloads the newest complete one (:mod:`~gpufleet.ckptstore.download`), verified file by file.
Retention (:mod:`~gpufleet.ckptstore.retention`) keeps the newest K and the best by a metric.

Layout under ``s3://bucket/prefix``::

    <training>/latest.json                                   {"name", "step", "manifest", "uploaded_at"}
    <training>/checkpoints/<name>/<upload>/manifest.json     every file's path, size and sha256
    <training>/checkpoints/<name>/<upload>/files/<path>      the checkpoint's files

Each upload has its own ``<upload>`` folder, so two attempts uploading the same name never mix files.
"""

from gpufleet.ckptstore.client import Store, StoreError, open_store
from gpufleet.ckptstore.download import fetch_newest
from gpufleet.ckptstore.latest import Latest, advance, read_latest
from gpufleet.ckptstore.manifest import Manifest
from gpufleet.ckptstore.retention import prune
from gpufleet.ckptstore.upload import upload_checkpoint

__all__ = ["Latest", "Manifest", "Store", "StoreError", "advance", "fetch_newest", "open_store", "prune",
           "read_latest", "upload_checkpoint"]
