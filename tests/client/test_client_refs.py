"""Trainings named by a short ID or a name (client and CLI), the client's sharing calls and its own errors.

Against the product's app under uvicorn with sign-in. Rows whose IDs share a
chosen start are written directly, so ambiguity does not depend on chance.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from gpufleet.cli import app
from gpufleet.client import AmbiguousTraining, Client, GpufleetError, InvalidRequest, UnknownTraining
from gpufleet.config import Settings
from gpufleet.db.models import GPU, GPUAllocation, Host, Training
from gpufleet.db.session import session_scope
from gpufleet.db.types import utcnow

from support.fleet import register
from .test_client import _signed_in


def _row(settings: Settings, owner: str, name: str, tid: str | None = None, status: str = "queued") -> str:
    with session_scope(settings) as sess:
        t = Training(id=uuid.UUID(tid) if tid else uuid.uuid4(), name=name, owner=owner, recipe="mlp",
                     config={"max_steps": 1}, status=status, world_size=1)
        sess.add(t)
        sess.flush()
        return str(t.id)


@pytest.fixture
def served(tmp_path: Path, product_api):
    settings, tokens = _signed_in(tmp_path)
    register(settings)
    return settings, tokens, product_api(settings)


def test_a_training_is_named_by_a_unique_id_prefix_or_its_name(served) -> None:
    settings, tokens, url = served
    with Client(url, tokens["admin"]) as gf:
        owner = gf.whoami().name
        a = _row(settings, owner, "alpha", "abcd1111-0000-4000-8000-000000000001")
        b = _row(settings, owner, "beta", "abcd2222-0000-4000-8000-000000000002")
        assert str(gf.get_training(a[:8]).id) == a
        assert str(gf.get_training("beta").id) == b
        assert str(gf.get_training("ABCD2222").id) == b  # any case, as typed from a listing
        assert str(gf.get_training(b.replace("-", "")).id) == b
        assert gf.metrics("alpha").count == 0 and gf.log_chunk(a[:8], tail=5).size == 0
        assert [e.seq for e in gf.events("beta")] == []
        with pytest.raises(AmbiguousTraining) as both:
            gf.get_training("abcd")
        assert both.value.matches and {m[0] for m in both.value.matches} == {a[:8], b[:8]}
        assert "alpha" in str(both.value) and "beta" in str(both.value)
        _row(settings, owner, "alpha")
        with pytest.raises(AmbiguousTraining, match="'alpha' names 2 trainings"):
            gf.cancel("alpha")
        with pytest.raises(UnknownTraining, match="'nope'"):
            gf.get_training("nope")
        assert isinstance(UnknownTraining("x"), GpufleetError)
        assert gf.cancel("beta").status == "cancelled"


def test_cancel_of_a_running_training_says_it_is_stopping(served) -> None:
    settings, tokens, url = served
    with Client(url, tokens["admin"]) as gf:
        tid = _row(settings, gf.whoami().name, "runner", status="running")
        t = gf.cancel(tid[:8])
        assert t.status == "running" and t.cancel_requested and t.stopping
        listed = gf.request("GET", f"/api/v1/trainings/{tid}")
        assert listed["stopping"] is True and listed["status"] == "running"


def _cli(url: str, token: str, *args: str):
    return CliRunner().invoke(app, list(args), env={"GPUFLEET_SERVER": url, "GPUFLEET_TOKEN": token})


def test_the_cli_takes_short_ids_and_names_and_lists_the_matches_when_ambiguous(served) -> None:
    settings, tokens, url = served
    with Client(url, tokens["admin"]) as gf:
        owner = gf.whoami().name
    a = _row(settings, owner, "first", "fedc1111-0000-4000-8000-000000000001")
    _row(settings, owner, "second", "fedc2222-0000-4000-8000-000000000002")
    shown = _cli(url, tokens["admin"], "trainings", "show", a[:8])
    assert shown.exit_code == 0, shown.output
    assert a in shown.output and "first" in shown.output
    assert _cli(url, tokens["admin"], "trainings", "logs", "first").exit_code == 0
    ambiguous = _cli(url, tokens["admin"], "trainings", "cancel", "fedc")
    assert ambiguous.exit_code == 2
    assert "fedc1111 (first, queued)" in ambiguous.output and "fedc2222 (second, queued)" in ambiguous.output
    assert "Traceback" not in ambiguous.output
    cancelled = _cli(url, tokens["admin"], "trainings", "cancel", "second")
    assert cancelled.exit_code == 0 and "cancelled" in cancelled.output
    help_text = _cli(url, tokens["admin"], "trainings", "show", "--help").output
    assert "prefix" in help_text and "name" in help_text


def test_a_wrong_field_is_a_gpufleet_error_naming_it(served) -> None:
    _settings, tokens, url = served
    with Client(url, tokens["alice"]) as gf:
        with pytest.raises(InvalidRequest, match="nmae: unknown field") as bad:
            gf.create_training(recipe="mlp", nmae="typo")
        assert isinstance(bad.value, GpufleetError) and bad.value.problems[0][0] == "nmae"
        with pytest.raises(InvalidRequest, match="count"):
            gf.recommend(recipe="mlp", count=0)
        with pytest.raises(InvalidRequest, match="gpu_hours_per_week"):
            gf.set_user_quota("alice", gpu_hours_per_week="lots")
        with pytest.raises(InvalidRequest, match="items"):
            gf.create_batch({"items": [], "strategy": "round_robin"})


def _archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        body = b"print('hello')\n"
        info = tarfile.TarInfo("train.py")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def test_usage_groups_quotas_and_code_upload(served) -> None:
    settings, tokens, url = served
    group = "team-" + uuid.uuid4().hex[:6]
    with Client(url, tokens["admin"]) as gf:
        admin = gf.whoami().name
        assert gf.create_group(group).name == group
        assert gf.add_member(group, admin).members == [admin]
        assert gf.set_group_quota(group, max_gpus=2).quota.max_gpus == 2
        assert group in {g.name for g in gf.groups().data}
        assert gf.set_user_quota(admin, share=2.5).share == 2.5
        assert any(q.user == admin and q.share == 2.5 for q in gf.quotas().data)
        assert gf.remove_member(group, admin).members == []
        gf.delete_group(group)
        assert group not in {g.name for g in gf.groups().data}

        data = _archive()
        stored = gf.upload_code(data)
        assert stored.created and len(stored.hash) == 64
        assert gf.upload_code(data).created is False
        assert gf.code(stored.hash) is not None and gf.code("0" * 64) is None

        tid = _row(settings, admin, "held-one", status="succeeded")
        with session_scope(settings) as sess:
            gpu = sess.scalars(select(GPU).join(Host, Host.id == GPU.host_id)
                               .where(Host.name == settings.host_name, GPU.index == 0)).one()
            now = utcnow()
            sess.add(GPUAllocation(training_id=uuid.UUID(tid), gpu_id=gpu.id, host_id=gpu.host_id, gpu_index=0,
                                   allocated_at=now - timedelta(minutes=30), released_at=now - timedelta(minutes=1)))
        usage = gf.usage(by="training")
        # One row a day: an allocation across midnight (a run just after 00:00 UTC) is a row on each day.
        assert {(r.name, r.training_name) for r in usage.data} == {(tid, "held-one")}
        assert sum(r.gpu_seconds_held for r in usage.data) == pytest.approx(29 * 60, abs=5)
    listed = _cli(url, tokens["admin"], "usage", "--by", "training")
    assert listed.exit_code == 0, listed.output
    assert f"held-one ({tid[:8]})" in listed.output
