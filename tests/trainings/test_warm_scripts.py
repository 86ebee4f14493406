"""A member's script started warm: the warm launcher becomes the script's launcher and its ranks fork from
the rank server (gpufleet.trainings.script_warm, gpufleet.trainings.warm_launch).

Real processes throughout: the pool's members are real interpreters that have imported torch, the ranks
are real forks of the real rank server, and the scripts are files run as ``__main__``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpufleet.engine import exitcodes, warm
from gpufleet.engine.progress import read_progress
from gpufleet.jobs import warmpool
from gpufleet.trainings import script_warm
from gpufleet.trainings.environment import training_environment
from gpufleet.trainings.script_launch import ScriptSpec

from support.fleet import wait_for

SCRIPT = warm.SCRIPT_MODULE
# What each rank says of itself: whether torch was imported before its first line ran, who started it,
# what it was given; it leaves a file from an atexit handler, as a script's cleanup would.
TRAIN = """\
import atexit, os, sys
warm = "torch" in sys.modules
import torch
rank = int(os.environ["RANK"])
atexit.register(lambda: open(f"atexit-{rank}", "w").write(os.environ["GPUFLEET_TRAINING_ID"]))
print(json.dumps({"rank": rank, "warm": warm, "name": __name__, "argv": sys.argv, "cwd": os.getcwd(),
                  "path0": sys.path[0], "world": os.environ["WORLD_SIZE"], "ppid": os.getppid(),
                  "uid": os.getuid(), "ask": os.environ.get("ASK"), "unbuffered": sys.stdout.write_through,
                  "stdin": sys.stdin.read(),
                  "secrets": sorted(k for k in os.environ if "SECRET" in k or "DATABASE" in k),
                  "ckpt": os.environ["GPUFLEET_CHECKPOINT_DIR"],
                  "ckpt_here": os.path.isdir(os.environ["GPUFLEET_CHECKPOINT_DIR"]),
                  "other": os.path.exists(os.path.join(os.path.dirname(os.getcwd()), "other")),
                  "out": os.environ.get("GPUFLEET_OUTPUT_DIR"),
                  "out_here": os.path.isdir(os.environ.get("GPUFLEET_OUTPUT_DIR", ""))}))
if rank == int(os.environ.get("FAIL_RANK", "-1")):
    {fail}
"""


def _env() -> dict[str, str]:
    return training_environment(os.environ, PYTHONUNBUFFERED="1")


def _spec(tmp_path: Path, argv: list[str], fail: str = "pass", **env: str) -> Path:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "train.py").write_text("import json\n" + TRAIN.replace("{fail}", fail))
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    spec = ScriptSpec(training_id="t1", argv=argv, workdir=str(work), progress_file=str(run / "progress-1.jsonl"),
                      checkpoint_dir=str(tmp_path / "ckpt"), env=env, gpu_indexes=[0, 1], world_size=2,
                      ranks_on_cpu=True, output_dir=str(tmp_path / "out"))
    spec.write(run / "spec-1.json")
    return run / "spec-1.json"


def _said(out: str) -> dict[int, dict]:
    """Each rank's JSON line, by rank, from the launcher's output (``[rank N] {...}``)."""
    found = {}
    for line in out.splitlines():
        if line.startswith("[rank ") and "{" in line:
            said = json.loads(line.split("] ", 1)[1])
            found[said["rank"]] = said
    return found


def _run(pool: warmpool.WarmPool, spec: Path) -> tuple[int, str, int]:
    [pid] = pool.pids()
    server = [p for p in _children(pid) if b"forkserver" in Path(f"/proc/{p}/cmdline").read_bytes()]
    proc, lifeline = pool.take(dict(_env(), GPUFLEET_TRAINING_ID="t1"), str(spec), module=SCRIPT)
    assert proc.pid == pid
    out = proc.stdout.read().decode()
    code = proc.wait(300)
    os.close(lifeline)
    return code, out, server[0]


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


@pytest.fixture
def pool(monkeypatch):
    # The worker's secrets are in its environment: its warm launchers and their ranks never see them.
    monkeypatch.setenv("GPUFLEET_SECRET_KEY", "s3cret-value-123")
    monkeypatch.setenv("GPUFLEET_DATABASE_URL", "postgresql+psycopg://gpufleet:dbpass-456@db/gpufleet")
    pool = warmpool.WarmPool(1, _env())
    try:
        wait_for(lambda: pool.ready_count() == 1, 300, "a ready warm launcher")
        yield pool
    finally:
        pool.close()


def test_a_warm_launcher_runs_a_script_whose_ranks_fork_from_its_rank_server(pool, tmp_path: Path) -> None:
    spec = _spec(tmp_path, [sys.executable, "train.py", "--lr", "0.1"], ASK="from-the-request")
    code, out, server = _run(pool, spec)
    assert code == exitcodes.SUCCEEDED, out
    assert "forked from the warm launcher's rank server" in out
    said = _said(out)
    assert sorted(said) == [0, 1], out
    work = str(tmp_path / "work")
    for rank, me in said.items():
        # torch was there before the script's first line: the rank is a fork of the server that imported it.
        assert me["warm"] is True and me["ppid"] == server, me
        # Otherwise what `python train.py --lr 0.1` would see: __main__, its argv, its folder, its cwd.
        assert me["name"] == "__main__" and me["argv"] == ["train.py", "--lr", "0.1"], me
        assert me["cwd"] == work and me["path0"] == work and me["world"] == "2", me
        # The training's environment (the request's variable too), not the server's; no input; unbuffered.
        assert me["ask"] == "from-the-request" and me["stdin"] == "" and me["unbuffered"] is True, me
        assert me["secrets"] == [], me
        assert (tmp_path / "work" / f"atexit-{rank}").read_text() == "t1"  # its atexit handlers ran
    lines = read_progress(tmp_path / "run" / "progress-1.jsonl")
    assert [x["status"] for x in lines if x["type"] == "end"] == ["succeeded"]


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A folder every account may pass through (pytest's tmp dir sits in one that is root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="gpufleet-wscr-", dir="/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_members_warm_script_runs_as_the_member_with_no_secret(open_tmp: Path, monkeypatch) -> None:
    from gpufleet.jobs.isolation import Isolation
    from gpufleet.users.runas import RunAccount

    from support.unix import need_root, short_name, unix_account

    need_root()
    tmp_path = open_tmp
    monkeypatch.setenv("GPUFLEET_SECRET_KEY", "s3cret-value-123")  # the worker's, never the member's
    monkeypatch.setenv("GPUFLEET_DATABASE_URL", "postgresql+psycopg://gpufleet:dbpass-456@db/gpufleet")
    with unix_account(short_name("wscr")) as entry:
        home = tmp_path / "home"
        home.mkdir()
        tmp_path.chmod(0o755)
        spec = _spec(tmp_path, [sys.executable, "train.py"])
        for folder in ("ckpt", "out"):  # made and given over by the worker before a launch, as here
            (tmp_path / folder).mkdir()
        for p in (home, tmp_path / "work", tmp_path / "run", tmp_path / "ckpt", tmp_path / "out",
                  *tmp_path.joinpath("work").iterdir(),
                  *tmp_path.joinpath("run").iterdir()):
            os.chown(p, entry.pw_uid, entry.pw_gid)
        account = RunAccount(entry.pw_name, entry.pw_uid, entry.pw_gid, (), str(home), "same-name")
        iso = Isolation(account=account, home=home)
        # Unsandboxed, the member's account runs this interpreter where it lies (a sandbox binds it in): started
        # as the pool starts its launchers, can it?
        try:
            reach = subprocess.run(iso.command([sys.executable, "-c", "import torch"]), capture_output=True,
                                   text=True, **iso.popen_kwargs())
            why = reach.stderr.strip()[-200:] if reach.returncode else ""
        except OSError as exc:
            why = str(exc)
        if why:
            pytest.skip(f"Unix account {entry.pw_name} cannot run {sys.executable} outside a sandbox on this "
                        f"machine ({why}); her sandboxed script is the next test")
        pool = warmpool.WarmPool(1, _env(), iso)
        try:
            wait_for(lambda: pool.ready_count() == 1, 300, "the member's warm launcher ready")
            code, out, server = _run(pool, spec)
        finally:
            pool.close()
    assert code == exitcodes.SUCCEEDED, out
    said = _said(out)
    assert sorted(said) == [0, 1], out
    for me in said.values():
        assert me["uid"] == entry.pw_uid and me["warm"] is True and me["ppid"] == server, me
        assert me["secrets"] == [], me


def test_a_members_sandboxed_script_starts_warm_in_her_sandbox_at_its_own_paths(tmp_path: Path, monkeypatch) -> None:
    from gpufleet.config import load_settings
    from gpufleet.jobs import kinds, script_attempt
    from gpufleet.jobs.isolation import plan
    from gpufleet.jobs.slots import _mount_points
    from gpufleet.users.runas import RunAccount

    from support.unix import need_root, short_name, unix_account

    need_root()
    monkeypatch.setenv("GPUFLEET_SECRET_KEY", "s3cret-value-123")  # the worker's, never the member's
    s = load_settings(data_dir=tmp_path / "data", checkpoint_root=tmp_path / "ckpts")
    tid = "0f0e0d0c-0b0a-4908-8706-050403020100"
    run, ckpt, work = (kinds.run_dir(s, tid), kinds.checkpoint_dir(s, tid), script_attempt.work_dir(s, tid))
    outputs = script_attempt.output_dir(s, tid)
    base = s.data_dir / "warm-slots"
    with unix_account(short_name("sbx")) as entry:
        home = tmp_path / "home"
        home.mkdir()
        os.chown(home, entry.pw_uid, entry.pw_gid)
        tmp_path.chmod(0o755)
        account = RunAccount(entry.pw_name, entry.pw_uid, entry.pw_gid, (), str(home), "same-name")
        iso = plan(s, account, True, run, ckpt, work)
        assert iso.switches and iso.sandboxed
        iso.write.append(outputs)  # as a script's launch plan adds it (GPUFLEET_OUTPUT_DIR)
        for d in (run, ckpt, work, outputs):
            d.mkdir(parents=True)
        (work / "train.py").write_text("import json\n" + TRAIN.replace("{fail}", "pass"))
        spec = ScriptSpec(training_id=tid, argv=[sys.executable, "train.py"], workdir=str(work),
                          progress_file=str(run / "progress-1.jsonl"), checkpoint_dir=str(ckpt), env={},
                          gpu_indexes=[0, 1], world_size=2, ranks_on_cpu=True, output_dir=str(outputs))
        spec.write(run / "spec-1.json")
        iso.prepare()  # as a launch: its directories and what is in them handed to the member
        (work.parent / "other").mkdir()  # another training's work dir: not in this sandbox
        warmpool.start(0, member_size=1, member_keep_s=600, slots=(base, kinds.training_roots(s, s)))
        try:
            env = dict(_env(), GPUFLEET_TRAINING_ID=tid)
            assert warmpool.for_launch(SCRIPT, env, iso) is None  # the member's first: cold, and makes her pool
            pool = warmpool.member_pools()[entry.pw_uid]
            wait_for(lambda: pool.ready_count() == 1, 300, "the member's warm launcher ready")
            assert warmpool.for_launch(SCRIPT, env, iso) is pool  # her sandboxed script is served warm
            # One that builds its environment needs her cache bound in: it starts cold, and her pool stays.
            builds = plan(s, account, True, run, ckpt, work)
            builds.keep.append(tmp_path / "envs" / entry.pw_name)
            assert warmpool.for_launch(SCRIPT, env, builds) is None and warmpool.member_pools()[entry.pw_uid] is pool
            proc, lifeline = pool.take(iso.env(env), str(run / "spec-1.json"), iso.write, module=SCRIPT)
            out = proc.stdout.read().decode()
            code = proc.wait(300)
            os.close(lifeline)
            # Once the launcher is gone, the training's directories are unbound from its slots.
            wait_for(lambda: not [p for p in _mount_points() if base in p.parents], 30, "the slots emptied")
            assert sorted(p.name for p in work.parent.iterdir()) == sorted(["other", tid])  # nothing removed
        finally:
            warmpool.stop()
    assert code == exitcodes.SUCCEEDED, out
    said = _said(out)
    assert sorted(said) == [0, 1], out
    for rank, me in said.items():
        assert me["uid"] == entry.pw_uid and me["warm"] is True, me  # forked from her warm launcher's server
        # Her directories by their own names (os.getcwd works, the checkpoint path is real), nothing else's.
        assert me["cwd"] == str(work) and me["path0"] == str(work), me
        assert me["ckpt"] == str(ckpt) and me["ckpt_here"] is True and me["other"] is False, me
        assert me["out"] == str(outputs) and me["out_here"] is True, me
        assert me["secrets"] == [], me
        assert (work / f"atexit-{rank}").read_text() == tid and (work / f"atexit-{rank}").stat().st_uid == entry.pw_uid


@pytest.mark.parametrize(("fail", "words"), [
    ("sys.exit(3)", "rank 1 exited with code 3"),
    ("raise ValueError('bad batch')", "ValueError: bad batch"),
])
def test_a_forked_ranks_exit_status_is_the_interpreters(pool, tmp_path: Path, fail: str, words: str) -> None:
    spec = _spec(tmp_path, [sys.executable, "train.py"], fail=fail, FAIL_RANK="1")
    code, out, _ = _run(pool, spec)
    assert code == exitcodes.RANK_FAILED, out
    errors = [x for x in read_progress(tmp_path / "run" / "progress-1.jsonl") if x["type"] == "error"]
    assert errors and errors[-1]["rank"] == 1 and words in errors[-1]["message"], (errors, out)
    if "raise" in fail:
        assert "Traceback (most recent call last)" in out  # printed on the rank's stderr, as an interpreter does
    assert (tmp_path / "work" / "atexit-1").exists()  # atexit runs on a failing exit too


# An object whose destructor never returns, as torch's gloo process group's may not when a DDP model is
# freed (it joins a thread that wants the GIL its freeing thread holds). Its class is in a module of its
# own, as torch's are: the script's globals are then in no cycle, and go as soon as nothing holds them.
STUCK_DEL = """\
import threading
class Group:
    def __del__(self):
        threading.Event().wait()  # never set: the destructor does not return
"""
SCRIPT_WITH_GROUP = """\
from group import Group
group = Group()
print("trained", flush=True)
"""


@pytest.mark.parametrize("ending", ["", "import sys; sys.exit(0)"])
def test_a_forked_rank_ends_without_freeing_what_the_script_left(pool, tmp_path: Path, ending: str) -> None:
    spec = _spec(tmp_path, [sys.executable, "train.py"])
    (tmp_path / "work" / "group.py").write_text(STUCK_DEL)
    (tmp_path / "work" / "train.py").write_text(SCRIPT_WITH_GROUP + ending + "\n")
    proc, lifeline = pool.take(dict(_env(), GPUFLEET_TRAINING_ID="t1"), str(spec), module=SCRIPT)
    out: list[bytes] = []
    reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
    reader.start()
    try:
        code = proc.wait(180)
    except subprocess.TimeoutExpired:  # the ranks hang in the destructor: end them (its own process group)
        os.killpg(proc.pid, 9)
        proc.wait()
        pytest.fail("a forked rank hung after its script ended, freeing what the script left")
    finally:
        os.close(lifeline)
    reader.join(30)
    said = b"".join(out).decode()
    assert code == exitcodes.SUCCEEDED, said
    assert said.count("trained") == 2, said


def test_a_script_the_warm_interpreter_cannot_run_starts_its_ranks_cold_and_says_why(pool, tmp_path: Path) -> None:
    # Another interpreter, as a script with its own environment has: its ranks are spawned as before.
    (tmp_path / "python3-shim").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (tmp_path / "python3-shim").chmod(0o755)
    spec = _spec(tmp_path, [str(tmp_path / "python3-shim"), "train.py"])
    code, out, _ = _run(pool, spec)
    assert code == exitcodes.SUCCEEDED, out
    assert "the ranks start cold:" in out and "is not this launcher's Python" in out, out
    assert all(me["warm"] is False for me in _said(out).values()), out


def test_why_cold_names_each_reason_a_rank_cannot_be_forked() -> None:
    py = sys.executable
    env = {"PATH": f"{Path(py).parent}:/usr/bin:/bin"}
    before = script_warm.has_server()
    try:
        script_warm._SERVER[0] = False
        assert "no rank server" in script_warm.why_cold([py, "train.py"], env, {}, None)
        script_warm.use_rank_server()
        assert script_warm.why_cold([py, "train.py"], env, {}, None) is None
        assert script_warm.why_cold([py, "-m", "pkg.train"], env, {}, None) is None
        assert "environment of its own" in script_warm.why_cold([py, "train.py"], env, {}, {"requirements": "r"})
        assert "not this launcher's Python" in script_warm.why_cold(["/usr/bin/env", "train.py"], env, {}, None)
        assert "option '-c'" in script_warm.why_cold([py, "-c", "print(1)"], env, {}, None)
        assert "option '-m'" in script_warm.why_cold([py, "-m"], env, {}, None)
        assert "not this launcher's Python" in script_warm.why_cold([py], env, {}, None)
        said = script_warm.why_cold([py, "train.py"], env, {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "2"}, None)
        assert "OMP_NUM_THREADS, PYTHONHASHSEED" in said
        assert script_warm.why_cold([py, "train.py"], env, {"NCCL_DEBUG": "INFO"}, None) is None  # read later
    finally:
        script_warm._SERVER[0] = before


@pytest.mark.slow
def test_a_script_training_through_the_worker_starts_warm_trains_and_stops_on_cancel(
        tmp_path: Path, workers, scheduler, live_server) -> None:
    import subprocess
    import time

    import httpx

    from support.fleet import make_settings, pids_in_group, register
    from support.scripts import write_project

    settings = make_settings(tmp_path, "sqlite", warm_pool_size=1)
    register(settings)
    w = workers(settings)
    scheduler(settings)
    base = live_server(settings)
    wait_for(lambda: "is ready" in w.output(), 300, "the worker's warm launcher")
    project = write_project(tmp_path / "proj")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}

    def run(*args: str) -> str:
        res = subprocess.run([sys.executable, "-m", "gpufleet.cli", "run", "--gpus", "2", "--memory", "1GiB",
                              "--no-follow", "--", "python", "train.py", *args], cwd=project, capture_output=True,
                             text=True, timeout=300, env=dict(env, GPUFLEET_SERVER=base))
        assert res.returncode == 0, res.stdout + res.stderr
        return next(line.split()[1] for line in res.stdout.splitlines() if line.startswith("submitted "))

    def get(tid: str) -> dict:
        return httpx.get(f"{base}/api/v1/trainings/{tid}", timeout=30).json()

    def log(tid: str) -> str:
        return httpx.get(f"{base}/api/v1/trainings/{tid}/logs", params={"offset": 0}, timeout=30).json()["text"]

    tid = run("--steps", "3")
    body = wait_for(lambda: (b := get(tid))["status"] in ("succeeded", "failed") and b, 300, "the training's end")
    text = log(tid)
    assert body["status"] == "succeeded", (body, text)
    assert "is warm launcher" in text and "forked from the warm launcher's rank server" in text, text
    for rank in (0, 1):
        assert f"[rank {rank}] step 2 loss" in text, text
    # The next one takes the refilled pool; a cancel reaches its forked ranks (SIGTERM, as a spawned rank's).
    wait_for(lambda: w.output().count("is ready") >= 2, 300, "the pool refilled")
    tid = run("--steps", "100000", "--sleep", "0.05")
    wait_for(lambda: "[rank 1] step 3" in log(tid), 180, "both ranks training", 0.2)
    assert "forked from the warm launcher's rank server" in log(tid)
    group = get(tid)["launcher_pid"]
    assert len(pids_in_group(group)) >= 4  # the launcher, its rank server and the two ranks
    t0 = time.monotonic()
    assert httpx.post(f"{base}/api/v1/trainings/{tid}/cancel", timeout=30).status_code == 200
    wait_for(lambda: not pids_in_group(group), 10, "every rank to stop", 0.05)
    assert time.monotonic() - t0 < 10
    assert wait_for(lambda: (b := get(tid))["status"] in ("cancelled", "failed") and b, 60, "the end")["status"] \
        == "cancelled"
