"""A member's code against a real `gpufleet serve` started as root with sign-in on.

The member (granted run_code) submits, with `gpufleet run`, a script that
tries what took the server over before (tests/trainings/exploit.py): read the
secret and the database password from other processes' environments, open
the database, list other trainings' folders, write into the data dir. It must
find nothing, run as its own non-root account, and still train on its
(simulated) GPUs, checkpoint, report metrics and resume. Its requirements.txt
names a package from a local wheel folder (no index): the environment is
built as the member's account into that owner's cache, which outlives the
sandbox, so the retry reuses it.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from support.fleet import wait_for
from support.servers import STRONG_SECRET, cli, make_token, serve_process
from sqlalchemy.engine import make_url
from support.unix import as_account, need_root, short_name, unix_account
from support.wheels import make_wheel

from trainings.exploit import EXPLOIT_SCRIPT
from support.scripts import write_project

pytestmark = pytest.mark.slow
FINAL = ("succeeded", "failed", "cancelled")


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A folder every account may enter (pytest's own is root's alone), so an owner can reach their checkpoints."""
    root = Path(tempfile.mkdtemp(prefix="gpufleet-iso-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _environ(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def _descendants(root: int) -> list[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError, IndexError):
            continue
    out, todo = [], [root]
    while todo:
        parent = todo.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        out += kids
        todo += kids
    return out


def _api(srv, token: str, method: str, path: str, **kw) -> httpx.Response:
    return httpx.request(method, f"{srv.url}/api/v1{path}", headers={"Authorization": f"Bearer {token}"},
                         timeout=60, **kw)


def _final(srv, token: str, tid: str, timeout: float = 300) -> dict:
    return wait_for(lambda: (b := _api(srv, token, "GET", f"/trainings/{tid}").json())["status"] in FINAL and b,
                    timeout, f"training {tid} to end", 0.3)


def _gpufleet_run(srv, token: str, project: Path, *argv: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update(GPUFLEET_SERVER=srv.url, GPUFLEET_TOKEN=token, COLUMNS="200")
    res = subprocess.run([sys.executable, "-m", "gpufleet.cli", "run", "--gpus", "2", "--memory", "1GiB",
                          "--max-restarts", "1", "--no-follow", "--", *argv], check=False, cwd=project, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return next(line.split()[1] for line in res.stdout.splitlines() if line.startswith("submitted "))


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_members_script_finds_nothing_of_the_server_and_still_trains(db, open_root, tmp_path, request):
    need_root()
    data = open_root / "data"
    member = short_name("mal")
    password = f"pw-{uuid.uuid4().hex}"
    # Under /tmp, which the sandbox makes private: the worker must show the ranks this folder.
    house = open_root / "wheels"
    make_wheel(house, "gpufleet-testdep", "1.0", {"__init__.py": "ANSWER = 42\n"})
    env = {"GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": STRONG_SECRET,
           "GPUFLEET_ENV_FIND_LINKS": json.dumps([str(house)]), "GPUFLEET_ENV_NO_INDEX": "true"}
    with ExitStack() as stack:
        if db == "postgresql":
            # The CI's PostgreSQL trusts loopback, so the password is never checked; it must still stay unread.
            url = make_url(request.getfixturevalue("fresh_pg_url")).set(password=password)
            env["GPUFLEET_DATABASE_URL"] = url.render_as_string(hide_password=False)
            # No Unix account of the member's name: the trainings run as the run account.
            account = stack.enter_context(unix_account(short_name("gfrun"), system=True))
            env["GPUFLEET_RUN_ACCOUNT"] = account.pw_name
        else:
            account = stack.enter_context(unix_account(member))  # the member's own login account
        admin = make_token(data, short_name("adm"), "admin", **env)
        token = make_token(data, member, "member", **env)
        cli(data, "users", "grant", member, "run_code", **env)
        srv = stack.enter_context(serve_process(data, **env))
        victim = data / "victim"  # a file of root's the script's links lead to
        victim.write_text("root's own")
        victim.chmod(0o600)

        # Another training's folders to look for: an admin's, run as the server's account.
        r = _api(srv, admin, "POST", "/trainings", json={"name": "other", "recipe": "mlp",
                                                          "config": {"max_steps": 4, "checkpoint_every": 2}})
        assert r.status_code == 201, r.text
        other = r.json()["id"]
        assert _final(srv, admin, other)["status"] == "succeeded"
        assert any((data / "checkpoints" / other).iterdir())

        project = write_project(tmp_path / "proj", EXPLOIT_SCRIPT)
        (project / "requirements.txt").write_text("gpufleet-testdep==1.0\n")
        tid = _gpufleet_run(srv, token, project, "python", "train.py", str(data), other)
        body = _final(srv, token, tid)
        log = _api(srv, token, "GET", f"/trainings/{tid}/logs", params={"offset": 0}).json()["text"]
        assert body["status"] == "succeeded", (body["status_reason"], log[-3000:])

        ckpt = data / "checkpoints" / tid
        found = json.loads((ckpt / "exploit-first.json").read_text())
        text = json.dumps(found)
        # It ran as the account, never as root, in a PID namespace of its own.
        assert found["uid"] == account.pw_uid != 0 and found["gid"] == account.pw_gid
        assert found["parents"][-1] == 1 and len(found["parents"]) <= 2, found["parents"]
        # Only the sandbox's own processes are visible: its init, the launcher, the ranks and their helpers.
        assert len(found["visible_pids"]) <= 8, found["visible_pids"]
        # No secret, no password, anywhere it could read.
        assert STRONG_SECRET not in text and password not in text and not found["leaks"], found["leaks"]
        # No database, no secrets file, no other training, no writing into the data dir.
        for name in ("gpufleet.db", "secrets/database_url", "secrets/secret_key"):
            assert not found[f"open {name}"]["ok"], (name, found[f"open {name}"])
        for key in (f"list checkpoints/{other}", f"list jobs/{other}", "list logs"):
            assert not found[key]["ok"], (key, found[key])
        for key in ("list .", "list checkpoints", "list jobs", "list work"):
            assert not found[key]["ok"] or set(found[key]["value"]) <= {"checkpoints", "envs", "jobs", "outputs",
                                                                        "work", tid}, found[key]
        assert not found["write data dir"]["ok"] and not found["write checkpoints"]["ok"]
        assert not (data / "owned").exists() and not (data / "checkpoints" / "owned").exists()
        # The retry's spec was written beside the links it left, not through them.
        assert victim.read_text() == "root's own" and victim.stat().st_uid == 0

        # Of the server's processes, only serve itself was started with them; its children got none.
        for pid in _descendants(srv.pid):
            held = _environ(pid)
            assert STRONG_SECRET not in held and password not in held, pid

        # And it trained: both attempts, the metrics, checkpoints of its own, a resume.
        assert body["restarts"] == 1 and "resumed from" in log and "failing once on purpose" in log
        assert (ckpt / "exploit-resumed.json").is_file()
        # Built once as the member's account, kept in the owner's cache, reused by the retry.
        assert log.count("(built)") == 1 and log.count("(cache hit)") == 1, log[-3000:]
        built = [m.parent for m in (data / "envs" / member).glob("*/.gpufleet-ready")]
        assert len(built) == 1 and built[0].stat().st_uid == account.pw_uid
        steps = [m["step"] for m in _api(srv, token, "GET", f"/trainings/{tid}/metrics").json()["data"]]
        assert 10 in steps and 1 in steps
        saved = sorted(ckpt.glob("step-*.pt"))
        assert saved and all(p.stat().st_uid == account.pw_uid for p in saved)
        # Its owner reads them with their own account; nobody else does.
        assert as_account(account, "head", "-c", "16", str(saved[-1])).returncode == 0
        assert as_account(pwd.getpwnam("nobody"), "head", "-c", "16", str(saved[-1])).returncode != 0


# A member's script as a member writes it: it says whether torch was there before its first line, where it
# runs and as whom, into its own output dir.
WHERE_AM_I = """\
import json, os, sys
warm = "torch" in sys.modules
import torch
rank = int(os.environ["RANK"])
with open(os.path.join(os.environ["GPUFLEET_OUTPUT_DIR"], f"rank-{rank}.json"), "w") as fh:
    json.dump({"warm": warm, "cwd": os.getcwd(), "uid": os.getuid(),
               "checkpoints": os.path.isdir(os.environ["GPUFLEET_CHECKPOINT_DIR"])}, fh)
"""


def test_a_members_next_script_starts_warm_in_her_sandbox(open_root, tmp_path):
    """Through a real server: her first script starts cold and makes her warm launcher; her next one is handed
    to it, in her sandbox made ahead, and finds its folders at their own paths."""
    import re

    from gpufleet.jobs.slots import _mount_points

    need_root()
    data = open_root / "data"
    member = short_name("wsb")
    env = {"GPUFLEET_AUTH": "on", "GPUFLEET_SECRET_KEY": STRONG_SECRET}
    with unix_account(member) as account, ExitStack() as stack:
        # A home of her own (the warm launchers are hers across trainings; a HOME made per training is not).
        home = open_root / "home"
        home.mkdir()
        os.chown(home, account.pw_uid, account.pw_gid)
        subprocess.run(["usermod", "--home", str(home), member], check=True)
        token = make_token(data, member, "member", **env)
        cli(data, "users", "grant", member, "run_code", **env)
        srv = stack.enter_context(serve_process(data, **env))
        project = write_project(tmp_path / "proj", WHERE_AM_I)
        first = _gpufleet_run(srv, token, project, "python", "train.py")
        assert _final(srv, token, first)["status"] == "succeeded"
        assert json.loads((data / "outputs" / first / "rank-0.json").read_text())["warm"] is False
        # Her pool: made at her first training, as her account; wait until its launcher is ready.
        worker_log = data / "logs" / "worker.log"
        started = wait_for(lambda: re.search(rf"warm launcher (\d+) of Unix account {member} started",
                                             worker_log.read_text(errors="replace")), 120, "her warm launcher")
        wait_for(lambda: f"warm launcher {started.group(1)} is ready" in worker_log.read_text(errors="replace"), 300,
                 "her warm launcher ready")

        tid = _gpufleet_run(srv, token, project, "python", "train.py")
        body = _final(srv, token, tid)
        log = _api(srv, token, "GET", f"/trainings/{tid}/logs", params={"offset": 0}).json()["text"]
        assert body["status"] == "succeeded", log[-3000:]
        assert f"the launcher is warm launcher {started.group(1)}" in log, log[-3000:]
        assert f"training {tid} of {member} runs as Unix account {member} (same-name) in a bwrap sandbox" \
            in worker_log.read_text(errors="replace")
        for rank in (0, 1):
            said = json.loads((data / "outputs" / tid / f"rank-{rank}.json").read_text())
            assert said == {"warm": True, "cwd": str(data / "work" / tid), "uid": account.pw_uid,
                            "checkpoints": True}, said
        base = data / "warm-slots"
        wait_for(lambda: not [p for p in _mount_points() if base in p.parents], 30, "her slots emptied")
