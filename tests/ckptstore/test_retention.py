"""Retention in the store: the newest K complete checkpoints and the best by a metric stay, and whatever
``latest`` names; the rest go, and an upload under way (no manifest yet, newer than what is kept) stays."""

from __future__ import annotations

from pathlib import Path

from support.storekit import recipe_checkpoint, store_for
from support.s3server import S3Server

from gpufleet.ckptstore import prune, read_latest, upload_checkpoint
from gpufleet.ckptstore.retention import Policy, complete, uploads


def test_retention_keeps_the_last_k_and_the_best_and_deletes_the_rest(s3: S3Server, bucket: str,
                                                                     tmp_path: Path) -> None:
    store = store_for(s3, bucket, tmp_path)
    ckpt = tmp_path / "t"
    ckpt.mkdir()
    losses = {10: 0.9, 20: 0.2, 30: 0.5, 40: 0.6, 50: 0.7}
    for step, loss in losses.items():
        upload_checkpoint(store, "t", ckpt, recipe_checkpoint(ckpt, step), metrics={"loss": loss})
    other = tmp_path / "other"
    other.mkdir()
    upload_checkpoint(store, "other", other, recipe_checkpoint(other, 10))  # another training's: untouched
    # An upload under way (files, no manifest yet), and one a killed uploader left of an old step.
    store.client.put_object(Bucket=bucket, Key="team/t/checkpoints/step-60/inflight/files/step-60/model.bin",
                            Body=b"partial")
    store.client.put_object(Bucket=bucket, Key="team/t/checkpoints/step-15/killed/files/step-15/model.bin",
                            Body=b"partial")

    deleted = prune(store, "t", Policy(keep_last=2, best_metric="loss", best_mode="min"))

    assert sorted(d.split("/")[3] for d in deleted) == ["step-10", "step-15", "step-30"]
    kept = {m.step for _, m in complete(store, "t")}
    assert kept == {20, 40, 50}  # the last two, and the best loss (step 20)
    assert any(f.endswith("step-60/inflight") for f in uploads(store, "t"))
    assert {m.step for _, m in complete(store, "other")} == {10}
    latest, _ = read_latest(store, "t")
    assert latest is not None and latest.step == 50
    assert prune(store, "t", Policy(keep_last=2, best_metric="loss")) == []  # nothing more to delete
