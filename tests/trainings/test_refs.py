"""A training named by its name or the start of its ID, on both databases (PostgreSQL's uuid is text with dashes)."""

from __future__ import annotations

import uuid

from gpufleet.config import Settings
from gpufleet.db.models import Training
from gpufleet.db.session import session_scope
from gpufleet.trainings import service


def test_a_reference_names_by_id_prefix_or_name(db_settings: Settings) -> None:
    owner = "refs-" + uuid.uuid4().hex[:6]
    base = uuid.uuid4().hex[:6]
    ids = [uuid.UUID(f"{base}{i:02x}" + uuid.uuid4().hex[8:]) for i in range(2)]
    with session_scope(db_settings) as sess:
        for tid, name in zip(ids, ("one", "two")):
            sess.add(Training(id=tid, name=f"{name}-{base}", owner=owner, recipe="mlp", config={}, status="queued"))
    with session_scope(db_settings) as sess:
        def named(ref: str) -> set[uuid.UUID]:
            views, count = service.page(sess, statuses=None, owner=owner, offset=0, limit=10, ref=ref)
            assert count == len(views)
            return {v.training.id for v in views}

        assert named(base) == set(ids)
        assert named(str(ids[0])[:8]) == {ids[0]}
        assert named(str(ids[1]).upper()) == {ids[1]}
        assert named(ids[1].hex) == {ids[1]}
        assert named(f"two-{base}") == {ids[1]}
        assert named("%") == set() and named("zz") == set()
        assert service.training_names(sess, [str(ids[0]), "not-an-id"]) == {str(ids[0]): f"one-{base}"}
