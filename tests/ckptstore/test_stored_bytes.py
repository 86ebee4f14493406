"""Bytes the store holds, per training from one listing, and per user, group or training as the usage
report counts them: a training's bytes are its owner's and each of the owner's groups'; a folder that
names no training here is counted apart; a key of the prefix's own is nobody's."""

from __future__ import annotations

import uuid
from pathlib import Path

from support.fleet import make_settings
from support.s3server import S3Server
from support.storekit import recipe_checkpoint, store_for

from gpufleet.ckptstore import upload_checkpoint
from gpufleet.ckptstore.listing import bytes_by_training
from gpufleet.db.session import session_scope, write_session
from gpufleet.lifecycle.models import new_training
from gpufleet.users.accounts import add_user
from gpufleet.users.groups import add_member, create_group
from gpufleet.users.usage import NO_GROUP, UNKNOWN_TRAINING, stored_by


def test_the_stores_bytes_are_counted_for_each_owner_and_group(s3: S3Server, bucket: str, tmp_path: Path) -> None:
    s = make_settings(tmp_path, "sqlite")
    store = store_for(s3, bucket, tmp_path)
    with write_session(s) as sess:
        for name in ("ann", "ben", "cy"):
            add_user(sess, name)
        create_group(sess, "nlp")
        add_member(sess, "nlp", "ann")
        add_member(sess, "nlp", "ben")
        create_group(sess, "vision")
        add_member(sess, "vision", "ann")
        ids = {}
        for label, owner in (("a1", "ann"), ("a2", "ann"), ("b1", "ben"), ("c1", "cy")):
            t = new_training(kind="recipe", recipe="mlp", owner=owner, name=label, world_size=1, priority=0,
                             preemptible=False)
            sess.add(t)
            sess.flush()
            ids[label] = str(t.id)
    gone = str(uuid.uuid4())
    for label, size in (("a1", 1000), ("a2", 2000), ("b1", 8000), ("c1", 500)):
        folder = tmp_path / label
        upload_checkpoint(store, ids[label], folder, recipe_checkpoint(folder, 10, size))
    folder = tmp_path / "gone"
    upload_checkpoint(store, gone, folder, recipe_checkpoint(folder, 5, 300))
    store.client.put_object(Bucket=bucket, Key=store.key("stray"), Body=b"x" * 77)  # the prefix's own key

    listed: dict[str, int] = {}
    for page in s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="team/"):
        for obj in page["Contents"]:
            first, _, rest = obj["Key"].removeprefix("team/").partition("/")
            if rest:
                listed[first] = listed.get(first, 0) + obj["Size"]
    per = bytes_by_training(store)
    assert per == listed and set(per) == {*ids.values(), gone}
    a1, a2, b1, c1 = (per[ids[k]] for k in ("a1", "a2", "b1", "c1"))
    assert b1 > a2 > a1 > c1 > 500

    with session_scope(s) as sess:
        by_user = stored_by(sess, "user", per)
        assert dict(by_user) == {"ann": a1 + a2, "ben": b1, "cy": c1, UNKNOWN_TRAINING: per[gone]}
        assert [b for _, b in by_user] == sorted((b for _, b in by_user), reverse=True)  # largest first
        assert dict(stored_by(sess, "group", per)) == {"nlp": a1 + a2 + b1, "vision": a1 + a2, NO_GROUP: c1,
                                                      UNKNOWN_TRAINING: per[gone]}
        assert dict(stored_by(sess, "training", per)) == per
