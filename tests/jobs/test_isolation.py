"""How a member's launcher is started (gpufleet.jobs.isolation): refusals, the sandbox, the directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.config import load_settings
from gpufleet.jobs import sandbox
from gpufleet.jobs.isolation import IsolationRefused, plan, startup_warnings
from gpufleet.jobs.kinds import work_kind
from gpufleet.users.runas import RunAccount
from support.unix import need_root, short_name, unix_account

NOBODY = 65534
PLAN_AS_NOBODY = """
import json, sys
from pathlib import Path
from gpufleet.config import load_settings
from gpufleet.jobs.isolation import IsolationRefused, plan
from gpufleet.jobs.kinds import work_kind
from gpufleet.users.runas import RunAccount

member = RunAccount("ann", 4242, 4242, (), "/nonexistent", "same-name")
out = {}
for kind, shared in (("script", False), ("script", True), ("recipe", False)):
    s = load_settings(data_dir=Path("/tmp/plan-data"), shared_account_runs=shared)
    try:
        iso = plan(s, member, work_kind(kind).runs_member_code, Path("/tmp/r"), Path("/tmp/c"))
        out[f"{kind} {shared}"] = {"switches": iso.switches, "sandboxed": iso.sandboxed}
    except IsolationRefused as exc:
        out[f"{kind} {shared}"] = str(exc)
print(json.dumps(out))
"""


def test_a_worker_that_is_not_root_refuses_a_members_code_unless_an_admin_opted_in(tmp_path: Path) -> None:
    need_root()
    # The check runs as nobody, for real: the sandbox is how an unprivileged process reaches this interpreter.
    args = sandbox.bwrap_args(uid=NOBODY, gid=NOBODY, groups=[], hidden=[], read=sandbox.read_paths(), write=[])
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    res = subprocess.run([*args, sys.executable, "-c", PLAN_AS_NOBODY], check=False, capture_output=True, text=True,
                         timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert "not root" in out["script False"] and "GPUFLEET_SHARED_ACCOUNT_RUNS=true" in out["script False"]
    # Opted in: it runs, as the server's account. A recipe is the server's own code: it runs too.
    assert out["script True"] == out["recipe False"] == {"switches": False, "sandboxed": False}


def test_sandbox_bwrap_without_bwrap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_root()
    monkeypatch.setenv("PATH", str(tmp_path))  # a host where bwrap is not installed
    s = load_settings(data_dir=tmp_path / "data", sandbox="bwrap")
    member = RunAccount("ann", 4242, 4242, (), "/nonexistent", "same-name")
    with pytest.raises(IsolationRefused, match="apt-get install bubblewrap"):
        plan(s, member, True, tmp_path / "r", tmp_path / "c")
    auto = load_settings(data_dir=tmp_path / "data")
    iso = plan(auto, member, True, tmp_path / "r", tmp_path / "c")
    assert iso.switches and not iso.sandboxed  # its own account, without the namespaces
    assert any("install bubblewrap" in w for w in startup_warnings(auto, auto, auto))
    assert iso.popen_kwargs() == {"user": 4242, "group": 4242, "extra_groups": []}


def test_the_training_dirs_become_the_accounts_and_the_rest_stays_closed(tmp_path: Path) -> None:
    need_root()
    with unix_account(short_name("iso")) as entry:
        s = load_settings(data_dir=tmp_path / "data")
        s.data_dir.mkdir(mode=0o700)
        (s.data_dir / "gpufleet.db").write_text("")
        (s.data_dir / "gpufleet.db").chmod(0o600)
        account = RunAccount(entry.pw_name, entry.pw_uid, entry.pw_gid, (), "/nonexistent", "same-name")
        run, ckpt = s.data_dir / "jobs" / "t1", Path(s.checkpoint_root) / "t1"
        run.mkdir(parents=True)
        (run / "spec-1.json").write_text("{}")  # written by the worker, as root
        iso = plan(s, account, True, run, ckpt)
        assert iso.sandboxed and iso.command(["x"])[0].endswith("bwrap") and iso.command(["x"])[-1] == "x"
        iso.prepare()
        for p in (run, run / "spec-1.json", ckpt, run / "home"):
            assert (p.stat().st_uid, p.stat().st_gid) == (entry.pw_uid, entry.pw_gid), p
        # The data dir and the checkpoint root: entered on the way to one's own folder, never listed.
        assert s.data_dir.stat().st_mode & 0o007 == 0o001
        assert (s.data_dir / "gpufleet.db").stat().st_uid == 0
        assert iso.env({"HOME": "/root"})["HOME"] == str(run / "home")


def test_in_a_fleet_members_code_is_refused_while_redis_or_postgresql_take_anyone(tmp_path: Path) -> None:
    need_root()  # a worker that is not root refuses members' code anyway
    member = RunAccount("ann", 4242, 4242, (), "/nonexistent", "same-name")

    def refusal(kind: str = "script", **fleet: object) -> str | None:
        s = load_settings(data_dir=tmp_path / "d", allow_services_without_password=False, **fleet)
        try:
            plan(s, member, work_kind(kind).runs_member_code, tmp_path / "r", tmp_path / "c")
        except IsolationRefused as exc:
            return str(exc)
        return None

    open_redis = refusal(redis_url="redis://10.0.0.5:6379/0")
    assert open_redis is not None and "Redis (redis://10.0.0.5)" in open_redis
    assert "GPUFLEET_ALLOW_SERVICES_WITHOUT_PASSWORD=true" in open_redis
    assert "PostgreSQL (db.lan:5432)" in (refusal("session", database_url="postgresql+psycopg://gf@db.lan/gf") or "")
    # With passwords (in the URL, or Redis's as a query), on PostgreSQL's own socket, or for a recipe: it runs.
    with_passwords = {"redis_url": "redis://:s3cret@10.0.0.5:6379/0",
                      "database_url": "postgresql+psycopg://gf:s3cret@db.lan/gf"}
    for fleet in (with_passwords, {"redis_url": "redis://10.0.0.5:6379/0?password=s3cret"},
                  {"database_url": "postgresql+psycopg://gf@/gf?host=/var/run/postgresql"}):
        assert refusal(**fleet) is None, fleet
    assert refusal("recipe", redis_url="redis://10.0.0.5:6379/0") is None
    # An admin who accepts the risk says so in a setting; the worker still says it at start.
    s = load_settings(data_dir=tmp_path / "d", redis_url="redis://10.0.0.5:6379/0",
                      allow_services_without_password=True)
    plan(s, member, True, tmp_path / "r", tmp_path / "c")
    refusing = load_settings(data_dir=tmp_path / "d", redis_url="redis://10.0.0.5:6379/0",
                             allow_services_without_password=False)
    warned = startup_warnings(refusing, refusing, refusing)
    assert any("without a password" in w for w in warned), warned
