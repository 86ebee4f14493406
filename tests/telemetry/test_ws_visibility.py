"""GPUFLEET_TRAINING_VISIBILITY=owner holds on the live stream as on REST: a real server, real WebSocket clients."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pytest
from websockets.sync.client import connect

from gpufleet.config import Settings, load_settings
from gpufleet.db.models import Training, TrainingEvent, TrainingMetric
from gpufleet.db.session import session_scope, upgrade_database
from gpufleet.telemetry.live import LOCAL
from support.people import SECRET, People, bearer, make_people
from support.servers import serve_inprocess

from .wsutil import messages

CONFIG = {"lr": 0.001, "data_path": "private/alice-only.bin"}


def _settings(tmp_path, visibility: str) -> Settings:
    s = load_settings(data_dir=tmp_path / "d", auth="on", secret_key=SECRET, training_visibility=visibility)
    upgrade_database(s)
    LOCAL.clear()
    return s


def _alices_training(s: Settings, owner: str) -> uuid.UUID:
    tid = uuid.uuid4()
    with session_scope(s) as sess:
        sess.add(Training(id=tid, name="private-run", owner=owner, recipe="mlp", config=CONFIG, status="running"))
        sess.flush()
        sess.add(TrainingEvent(training_id=tid, seq=1, kind="status", status="queued", user=owner,
                               reason="submitted", data={"config": CONFIG}))
        sess.add(TrainingMetric(training_id=tid, step=1, loss=0.5, metrics={}))
    return tid


def _watch(url: str, token: str, channel: str, **resume: object) -> list[dict]:
    """What a client signed in with ``token`` receives for ``channel`` until the server has answered it."""
    http = httpx.post(f"{url}/api/v1/auth/ws-ticket", headers=bearer(token), timeout=10)
    assert http.status_code == 200, http.text
    ticket = http.json()["ticket"]
    got: list[dict] = []
    with connect(f"{url.replace('http', 'ws', 1)}/api/v1/ws?ticket={ticket}") as ws:
        ws.send(json.dumps({"op": "subscribe", "channel": channel, **resume}))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got += messages(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            answered = [m for m in got if m.get("channel") == channel and m["type"] in ("snapshot", "resumed", "error")]
            if answered:
                # Anything the server sends after its answer has come before this pong.
                ws.send(json.dumps({"op": "ping"}))
                while not any(m["type"] == "pong" for m in got):
                    got += messages(ws.recv(timeout=5))
                return [m for m in got if m.get("channel") == channel]
    raise AssertionError(f"no answer for {channel}; got {got}")


@pytest.fixture
def owner_only(tmp_path):
    s = _settings(tmp_path, "owner")
    return s, make_people(s)


def test_a_reader_refused_on_rest_gets_nothing_on_the_training_channel(owner_only) -> None:
    from gpufleet.api.app import create_app

    s, team = owner_only
    tid = _alices_training(s, team.names["alice"])
    channel = f"training:{tid}"
    with serve_inprocess(create_app(s)) as srv:
        for token in (team.bob, team.vic):
            for path in ("events", "logs"):
                r = httpx.get(f"{srv.url}/api/v1/trainings/{tid}/{path}", headers=bearer(token), timeout=10)
                assert r.status_code == 403, (path, r.text)
            got = _watch(srv.url, token, channel)
            assert [m["type"] for m in got] == ["error"], got
            assert got[0]["status"] == 403 and "GPUFLEET_TRAINING_VISIBILITY=owner" in got[0]["message"]
            assert "alice-only" not in json.dumps(got)
        # Its owner and admins see it all, on both paths.
        for token in (team.alice, team.admin):
            assert httpx.get(f"{srv.url}/api/v1/trainings/{tid}/events", headers=bearer(token),
                             timeout=10).status_code == 200
            [snap] = _watch(srv.url, token, channel)
            assert snap["type"] == "snapshot" and snap["data"]["training"]["name"] == "private-run"
            assert [e["seq"] for e in snap["data"]["events"]] == [1]
        # Once someone watches the channel, a refused reader still cannot join it, resuming or not.
        for resume in ({}, {"since": 0}, {"since": snap["seq"], "epoch": snap["epoch"]}):
            got = _watch(srv.url, team.bob, channel, **resume)
            assert [m["type"] for m in got] == ["error"], (resume, got)


def test_the_whole_team_reads_the_channel_by_default(tmp_path) -> None:
    from gpufleet.api.app import create_app

    s = _settings(tmp_path, "team")
    team: People = make_people(s)
    tid = _alices_training(s, team.names["alice"])
    with serve_inprocess(create_app(s)) as srv:
        [snap] = _watch(srv.url, team.vic, f"training:{tid}")
        assert snap["type"] == "snapshot" and snap["data"]["events"][0]["data"]["config"] == CONFIG
