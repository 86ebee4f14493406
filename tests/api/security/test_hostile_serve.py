"""Hostile requests against a real `gpufleet serve`: raw Host and X-Forwarded-For headers,
what a training process can see, and who can read the data dir."""

from __future__ import annotations

import base64
import os
import secrets
import socket
import stat
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from support.servers import STRONG_SECRET, cli, gpufleet, make_token, serve_env, serve_process

pytestmark = pytest.mark.slow


def _ws_handshake(port: int, host_header: str) -> str:
    """The status line a WebSocket upgrade with this raw ``Host`` gets."""
    key = base64.b64encode(secrets.token_bytes(16)).decode()
    request = (
        f"GET /api/v1/ws HTTP/1.1\r\nHost: {host_header}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request.encode())
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n", 1)[0].decode()


def test_dns_rebinding_names_are_refused_by_a_server_without_sign_in(tmp_path: Path) -> None:
    with serve_process(tmp_path / "data") as srv:
        evil = {"Host": f"evil.example:{srv.port}", "Origin": f"http://evil.example:{srv.port}"}
        drain = f"{srv.url}/api/v1/system/gpus/sim-host/0/drain"
        r = httpx.post(drain, headers=evil)
        assert r.status_code == 400 and "evil.example" in r.json()["detail"], r.text
        assert httpx.get(f"{srv.url}/api/v1/system/gpus", headers=evil).status_code == 400
        assert httpx.post(f"{srv.url}/api/v1/auth/ws-ticket", headers=evil).status_code == 400
        # A name that only starts like a loopback address is a public name.
        assert httpx.get(f"{srv.url}/api/v1/system/gpus",
                         headers={"Host": f"127.0.0.1.nip.io:{srv.port}"}).status_code == 400
        assert " 101 " not in _ws_handshake(srv.port, f"evil.example:{srv.port}") + " "
        # Nothing was drained, and the loopback names still work.
        for host in (f"127.0.0.1:{srv.port}", f"localhost:{srv.port}", "localhost"):
            gpus = httpx.get(f"{srv.url}/api/v1/system/gpus", headers={"Host": host})
            assert gpus.status_code == 200, (host, gpus.text)
        assert not any(g.get("drained") for g in gpus.json()["data"]), gpus.json()
        assert _ws_handshake(srv.port, f"127.0.0.1:{srv.port}").split()[1] == "101"
        ok = httpx.post(drain, headers={"Origin": srv.url})
        assert ok.status_code == 200, ok.text


def test_allowed_hosts_limit_a_server_with_sign_in(tmp_path: Path) -> None:
    env = {"GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": STRONG_SECRET,
           "GPUFLEET_ALLOWED_HOSTS": '["gpus.example.org"]', "GPUFLEET_EMBEDDED_WORKER": "false"}
    token = make_token(tmp_path / "data", "ops", "admin", **env)
    with serve_process(tmp_path / "data", **env) as srv:
        auth = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{srv.url}/api/v1/auth/whoami",
                         headers={**auth, "Host": "gpus.example.org"}).status_code == 200
        r = httpx.get(f"{srv.url}/api/v1/auth/whoami", headers={**auth, "Host": "other.example.org"})
        assert r.status_code == 400 and "GPUFLEET_ALLOWED_HOSTS" in r.json()["detail"]


def test_forwarded_for_counts_only_from_a_configured_proxy(tmp_path: Path) -> None:
    env = {"GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": STRONG_SECRET, "GPUFLEET_EMBEDDED_WORKER": "false"}
    make_token(tmp_path / "data", "ops", "admin", **env)
    bad = {"token": "gf_" + "x" * 40}
    with serve_process(tmp_path / "data", **env) as srv:
        codes = [httpx.post(f"{srv.url}/api/v1/auth/sign-in", json=bad,
                            headers={"X-Forwarded-For": f"203.0.113.{i}"}).status_code for i in range(25)]
        # Every attempt came from 127.0.0.1, whatever the header claimed: the limit (20 a minute) holds.
        assert codes[:20] == [401] * 20 and set(codes[20:]) == {429}, codes
    # Behind a configured proxy the header names the client, so each client has its own budget.
    with serve_process(tmp_path / "data", **env, GPUFLEET_TRUSTED_PROXIES='["127.0.0.1"]') as srv:
        codes = [httpx.post(f"{srv.url}/api/v1/auth/sign-in", json=bad,
                            headers={"X-Forwarded-For": f"203.0.113.{i}"}).status_code for i in range(25)]
        assert codes == [401] * 25, codes


def _processes_of(training_id: str) -> dict[int, dict[str, str]]:
    needle = f"GPUFLEET_TRAINING_ID={training_id}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in raw.split(b"\0"):
            pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
            found[int(entry)] = {k.decode(errors="replace"): v.decode(errors="replace") for k, _, v in pairs}
    return found


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_training_processes_get_no_secrets_and_the_data_dir_is_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    leak = {"GPUFLEET_SECRET_KEY": STRONG_SECRET, "DEPLOY_API_TOKEN": "tok-should-not-leak",
            "GPUFLEET_SESSION_TTL_S": "3600"}
    with serve_process(data, **leak) as srv:
        body = {"name": "env-probe", "recipe": "mlp",
                "config": {"max_steps": 1_000_000, "global_batch_size": 8, "log_every": 1,
                           "checkpoint_every": 1_000_000}}
        r = httpx.post(f"{srv.url}/api/v1/trainings", json=body, timeout=60)
        assert r.status_code == 201, r.text
        tid = r.json()["id"]
        deadline = time.monotonic() + 180
        procs: dict[int, dict[str, str]] = {}
        while not procs:
            assert time.monotonic() < deadline, f"no process of training {tid} appeared:\n{srv.log_tail()}"
            procs = _processes_of(tid)
            time.sleep(0.5)
        for pid, env in procs.items():
            leaked = sorted(k for k in env if k.startswith("GPUFLEET_") and k not in ("GPUFLEET_TRAINING_ID",))
            assert leaked == [], (pid, leaked)
            assert "DEPLOY_API_TOKEN" not in env and STRONG_SECRET not in env.values()
            assert "PATH" in env
        httpx.post(f"{srv.url}/api/v1/trainings/{tid}/cancel", timeout=60)

        assert _mode(data) == 0o700
        assert _mode(data / "gpufleet.db") == 0o600
        assert _mode(data / "logs") == 0o700
        logs = [p for p in (data / "logs").rglob("*") if p.is_file()]
        assert logs and all(_mode(p) == 0o600 for p in logs), [(p, oct(_mode(p))) for p in logs]


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": "a" * 32}, "gpufleet secret"),
        ({"GPUFLEET_HOST": "127.0.0.1.nip.io"}, "exposes gpufleet to the network"),
        ({"GPUFLEET_HOST": "127.attacker.example"}, "exposes gpufleet to the network"),
    ],
)
def test_serve_refuses_weak_secrets_and_lookalike_loopback_names(tmp_path: Path, env: dict, needle: str) -> None:
    proc = subprocess.run([*gpufleet(), "serve", "--port", "1"], env=serve_env(tmp_path / "data", **env),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in " ".join(proc.stderr.split()), proc.stderr


def test_gpufleet_secret_makes_a_secret_serve_accepts(tmp_path: Path) -> None:
    from gpufleet.api.security.policy import secret_problem

    made = cli(tmp_path / "data", "secret").strip()
    assert len(made) >= 48 and secret_problem(made) is None
    assert made != cli(tmp_path / "data", "secret").strip()


@pytest.mark.postgres
def test_out_of_range_numbers_and_long_paths_are_422_naming_the_field(tmp_path: Path, fresh_pg_url: str) -> None:
    env = {"GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": STRONG_SECRET, "GPUFLEET_EMBEDDED_WORKER": "false",
           "GPUFLEET_DATABASE_URL": fresh_pg_url}
    token = make_token(tmp_path / "data", "ops", "admin", **env)
    huge = 2**63
    with serve_process(tmp_path / "data", **env) as srv:
        c = httpx.Client(base_url=srv.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        ok = c.post("/api/v1/trainings", json={"name": "ok", "recipe": "mlp", "config": {"max_steps": 2}})
        assert ok.status_code == 201, ok.text
        tid = ok.json()["id"]
        base = {"name": "x", "recipe": "mlp"}
        cases = [
            ("POST", "/api/v1/trainings", {**base, "memory_mb": huge}, "memory_mb"),
            ("POST", "/api/v1/trainings", {**base, "checkpoint_every": huge}, "checkpoint_every"),
            ("POST", "/api/v1/trainings", {**base, "config": {"max_steps": huge}}, "max_steps"),
            ("POST", "/api/v1/trainings", {**base, "config": {"data_path": "d" * 300 + ".npy"}}, "data_path"),
            ("POST", "/api/v1/trainings", {**base, "gpu_ids": [huge]}, "gpu_ids"),
            ("POST", "/api/v1/trainings/batch", {"items": [{**base, "memory_mb": huge}]}, "memory_mb"),
            ("POST", "/api/v1/system/gpus/validate", {"gpu_ids": [huge], "memory_mb": 1}, "gpu_ids"),
            ("GET", f"/api/v1/trainings/{tid}/events?after_seq={huge}", None, "after_seq"),
            ("GET", f"/api/v1/trainings/{tid}/metrics?after_step={huge}", None, "after_step"),
            ("GET", f"/api/v1/trainings/{tid}/logs?offset={2**70}", None, "offset"),
            ("GET", f"/api/v1/system/metrics/history?gpu=sim-host:{huge}", None, "gpu index"),
            ("GET", f"/api/v1/system/metrics/history?points={huge}", None, "points"),
            ("POST", f"/api/v1/system/gpus/sim-host/{huge}/drain", None, "index"),
        ]
        for method, path, body, field in cases:
            r = c.request(method, path, json=body)
            assert r.status_code == 422, (path, body and list(body), r.status_code, r.text[:300])
            assert field in r.text, (path, r.text[:300])
        listed = c.get("/api/v1/trainings").json()
        assert listed["count"] == 1, "a refused request wrote a training"


def test_absurd_trainings_are_refused_at_create(tmp_path: Path) -> None:
    with serve_process(tmp_path / "data", GPUFLEET_EMBEDDED_WORKER="false") as srv:
        c = httpx.Client(base_url=srv.url, timeout=120)
        cases = [
            ({"global_batch_size": 2**63}, "global_batch_size"),
            # The synthetic dataset has 8192 samples: one step of 10000 can never be drawn.
            ({"global_batch_size": 10000}, "global_batch_size"),
            ({"hidden": [2**40]}, "parameters"),
            # Traces fine, but one rank needs about 190 GiB; the fleet's GPUs have 80.
            ({"hidden": [100_000, 100_000]}, "largest GPU"),
        ]
        for config, needle in cases:
            r = c.post("/api/v1/trainings", json={"name": "absurd", "recipe": "mlp", "config": config})
            assert r.status_code == 422 and needle in r.text, (config, r.status_code, r.text[:300])
        r = c.post("/api/v1/trainings/batch", json={"items": [
            {"name": "fine", "recipe": "mlp", "config": {"max_steps": 2}},
            {"name": "absurd", "recipe": "mlp", "config": {"hidden": [100_000, 100_000]}}]})
        assert r.status_code == 422 and "largest GPU" in r.text, r.text
        assert c.get("/api/v1/trainings").json()["count"] == 0
        ok = c.post("/api/v1/trainings", json={"name": "fine", "recipe": "mlp", "config": {"max_steps": 2}})
        assert ok.status_code == 201, ok.text


async def _stream_until_closed(url: str, revoke, deadline_s: float = 30.0) -> tuple[int, float]:
    """Open the stream, see frames, call ``revoke()``; the close code and the seconds it took after revoking."""
    import asyncio

    import websockets

    async with websockets.connect(url, open_timeout=20) as ws:
        await ws.send('{"op": "subscribe", "channel": "aggregate"}')
        for _ in range(2):
            await asyncio.wait_for(ws.recv(), timeout=20)
        await asyncio.to_thread(revoke)
        revoked = time.monotonic()
        try:
            while time.monotonic() - revoked < deadline_s:
                await asyncio.wait_for(ws.recv(), timeout=deadline_s)
        except websockets.exceptions.ConnectionClosed as exc:
            return (exc.rcvd.code if exc.rcvd else -1), time.monotonic() - revoked
    return 0, deadline_s


@pytest.mark.parametrize("how", ["revoke", "disable"])
def test_revoking_a_token_or_disabling_a_user_closes_its_websockets(tmp_path: Path, how: str) -> None:
    import asyncio

    data = tmp_path / "data"
    env = {"GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": STRONG_SECRET, "GPUFLEET_EMBEDDED_WORKER": "false"}
    token = make_token(data, "ann", "member", **env)
    other = cli(data, "tokens", "create", "ann", "--name", "second", **env).strip().splitlines()[-1].strip()

    def revoke() -> None:
        if how == "revoke":
            cli(data, "tokens", "revoke", token[:10], **env)
        else:
            cli(data, "users", "disable", "ann", **env)

    with serve_process(data, **env) as srv:
        ticket = httpx.post(f"{srv.url}/api/v1/auth/ws-ticket", headers={"Authorization": f"Bearer {token}"}).json()
        ws_url = srv.url.replace("http://", "ws://") + f"/api/v1/ws?ticket={ticket['ticket']}"
        code, took = asyncio.run(_stream_until_closed(ws_url, revoke))
        # Closed as a policy violation within 5 s (the CLI's own start-up is not counted).
        assert code == 1008 and took < 5.0, (code, took)
        still = httpx.get(f"{srv.url}/api/v1/auth/whoami", headers={"Authorization": f"Bearer {other}"})
        assert still.status_code == (200 if how == "revoke" else 401), still.text


@pytest.mark.parametrize("visibility", ["team", "owner"])
def test_who_may_read_a_trainings_config_events_and_logs(tmp_path: Path, visibility: str) -> None:
    data = tmp_path / "data"
    env = {"GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": STRONG_SECRET, "GPUFLEET_EMBEDDED_WORKER": "false",
           "GPUFLEET_TRAINING_VISIBILITY": visibility}
    tokens = {"ann": make_token(data, "ann", "member", **env)}
    for name, role in (("bob", "member"), ("vic", "viewer"), ("root", "admin")):
        cli(data, "users", "add", name, "--role", role, **env)
        tokens[name] = cli(data, "tokens", "create", name, **env).strip().splitlines()[-1].strip()
    with serve_process(data, **env) as srv:
        def get(who: str, path: str) -> httpx.Response:
            return httpx.get(f"{srv.url}{path}", headers={"Authorization": f"Bearer {tokens[who]}"}, timeout=60)

        r = httpx.post(f"{srv.url}/api/v1/trainings", headers={"Authorization": f"Bearer {tokens['ann']}"},
                       json={"name": "secret-sauce", "recipe": "mlp", "config": {"max_steps": 7}}, timeout=120)
        assert r.status_code == 201, r.text
        tid = r.json()["id"]
        for who in ("ann", "bob", "vic", "root"):
            readable = visibility == "team" or who in ("ann", "root")
            one = get(who, f"/api/v1/trainings/{tid}").json()
            listed = next(t for t in get(who, "/api/v1/trainings").json()["data"] if t["id"] == tid)
            # Everyone sees that it exists and whose it is; the config only where allowed.
            assert one["owner"] == listed["owner"] == "ann"
            assert (one["config"].get("max_steps") == 7) is readable
            assert (listed["config"].get("max_steps") == 7) is readable
            for path in (f"/api/v1/trainings/{tid}/events", f"/api/v1/trainings/{tid}/logs"):
                assert get(who, path).status_code == (200 if readable else 403), (who, path)
