"""The worker's warm launchers (gpufleet.jobs.warmpool, gpufleet.engine.warm, gpufleet.trainings.warm_launch).

Real processes throughout: the pool's members are real interpreters that
import torch; the end-to-end test runs a real worker, once with the pool and
once without, and compares what the two trainings reported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from gpufleet.engine import warm
from gpufleet.jobs import warmpool
from gpufleet.jobs.isolation import Isolation
from gpufleet.trainings.environment import training_environment
from gpufleet.users.runas import RunAccount

from support.fleet import FINAL, get_events, register, wait_for, wait_status

MLP = {"max_steps": 4, "global_batch_size": 8, "log_every": 1, "checkpoint_every": 2}


def _env() -> dict[str, str]:
    return training_environment(os.environ, PYTHONUNBUFFERED="1")


def test_preload_leaves_cuda_uninitialised() -> None:
    code = ("import torch; from gpufleet.engine.warm import preload; preload(); "
            "import sys; print(sys.modules.get('gpufleet.engine.trainer') is not None, torch.cuda.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split() == ["True", "False"]


RECIPE, SCRIPT = warm.RECIPE_MODULE, warm.SCRIPT_MODULE


def test_serves_recipe_and_script_launches_of_its_own_account_environment_and_binds() -> None:
    pool = warmpool.WarmPool.__new__(warmpool.WarmPool)  # the rule alone: no member started
    pool.env, pool.iso = warmpool._base_env(_env()), Isolation()
    own = Isolation()
    member = RunAccount("alice", os.geteuid() + 4242, 4242, (), "/home/alice", "mapped")
    env = dict(_env(), GPUFLEET_TRAINING_ID="x")
    assert pool.serves(RECIPE, env, own) and pool.serves(SCRIPT, env, own)
    assert not pool.serves("gpufleet.interactive.launch", env, own)  # a session is not a launcher it becomes
    assert not pool.serves(RECIPE, env, Isolation(account=member))  # another Unix account
    assert not pool.serves(RECIPE, env, Isolation(account=member, sandboxed=True))
    assert not pool.serves(RECIPE, dict(env, OMP_NUM_THREADS="3"), own)  # read at import time
    # A member's sandbox made ahead serves only trainings with its binds: a script that builds its own
    # environment needs its owner's cache bound in, which that sandbox does not have.
    member_pool = warmpool.WarmPool.__new__(warmpool.WarmPool)
    member_pool.iso = Isolation(account=member, sandboxed=True, read=[Path("/data")])
    member_pool.env = warmpool._base_env(member_pool.iso.env(_env()))
    assert member_pool.serves(RECIPE, env, Isolation(account=member, sandboxed=True, read=[Path("/data")]))
    assert not member_pool.serves(RECIPE, env, Isolation(account=member, sandboxed=True, read=[Path("/data")],
                                                         keep=[Path("/var/cache/envs/alice")]))
    # A script with the same binds is served there too: its folders are bound in at their own paths.
    assert member_pool.serves(SCRIPT, env, Isolation(account=member, sandboxed=True, read=[Path("/data")]))
    assert not member_pool.serves("gpufleet.interactive.launch", env, Isolation(account=member, sandboxed=True,
                                                                              read=[Path("/data")]))
    unsandboxed = warmpool.WarmPool.__new__(warmpool.WarmPool)
    unsandboxed.iso = Isolation(account=member)
    unsandboxed.env = warmpool._base_env(unsandboxed.iso.env(_env()))
    assert unsandboxed.serves(SCRIPT, env, Isolation(account=member))


def test_pool_refills_and_replaces_a_dead_member(tmp_path: Path) -> None:
    pool = warmpool.WarmPool(1, _env())
    try:
        wait_for(lambda: pool.ready_count() == 1, 300, "a ready member")
        [first] = pool.pids()
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: pool.ready_count() == 1 and pool.pids() != [first], 300, "the dead member replaced")
        [second] = pool.pids()
        # A member given a training becomes its launcher (here: a spec that does not exist) and leaves the pool.
        proc, lifeline = pool.take(dict(_env(), GPUFLEET_TRAINING_ID="t"), str(tmp_path / "missing.json"))
        assert proc.pid == second
        out = proc.stdout.read().decode()
        assert proc.wait(60) != 0 and "missing.json" in out
        os.close(lifeline)
        wait_for(lambda: pool.ready_count() == 1 and pool.pids() not in ([first], [second]), 300, "the pool refilled")
        assert pool.started == 3
    finally:
        pool.close()
    assert all(not _alive(p) for p in (first, second))


def _site(tmp_path: Path, code: str) -> dict[str, str]:
    """The pool's environment with ``code`` run at each member's start (a sitecustomize on its path)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(code)
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    return env


def test_a_member_that_warns_before_it_is_ready_still_serves(tmp_path: Path) -> None:
    # A library's warning on stderr as the member imports it comes before READY on the same pipe: taken for
    # a failed start, the member stayed in the pool alive and never ready, and no training was ever warm.
    env = _site(tmp_path, "import sys\nprint('UserWarning: a library says something', file=sys.stderr)\n")
    pool = warmpool.WarmPool(1, env)
    try:
        wait_for(lambda: pool.ready_count() == 1, 300, "a ready member, past the warning")
        assert pool.started == 1
    finally:
        pool.close()


def test_a_member_never_ready_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warmpool, "READY_S", 30.0)  # a loaded machine's torch import takes seconds
    hang = tmp_path / "hang"
    hang.touch()
    # The first member to start finds the file, takes it and hangs in its imports; the next starts normally.
    env = _site(tmp_path, "import os, time\ntry:\n    os.unlink(os.environ['HANG_FILE'])\nexcept FileNotFoundError:\n"
                          "    pass\nelse:\n    time.sleep(3600)\n")
    env["HANG_FILE"] = str(hang)
    pool = warmpool.WarmPool(1, env)
    try:
        wait_for(lambda: not hang.exists(), 120, "the first member to start")
        [first] = pool.pids()
        wait_for(lambda: pool.ready_count() == 1, 300, "the hung member replaced by a ready one")
        assert pool.pids() != [first] and pool.started >= 2
        wait_for(lambda: not _alive(first), 30, "the hung member gone")
    finally:
        pool.close()


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_warm_launchers_ranks_fork_from_its_rank_server_and_take_the_trainings_environment(
        tmp_path: Path) -> None:
    import json

    from gpufleet.engine.progress import read_progress

    pool = warmpool.WarmPool(1, _env())
    try:
        wait_for(lambda: pool.ready_count() == 1, 300, "a ready member")
        [pid] = pool.pids()
        # Ready means its rank server has imported torch and answered a fork: it is the launcher's child.
        [server] = [p for p in _tree(pid) if p != pid and b"forkserver" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert _ppid(server) == pid
        run = tmp_path / "run"
        run.mkdir()
        spec = {"recipe": "mlp", "config": dict(MLP, max_steps=6), "devices": ["cuda:0", "cuda:1"],
                "ranks_on_cpu": True, "checkpoint_dir": str(tmp_path / "ckpt"),
                "progress_file": str(run / "progress-1.jsonl"), "resume": False}
        (run / "spec-1.json").write_text(json.dumps(spec))
        # Only the training's environment asks rank 1 to fail at step 3: the rank server started without it,
        # so a rank that kept the server's environment would train to the end.
        env = dict(_env(), GPUFLEET_TRAINING_ID="t", GPUFLEET_TRAIN_FAULT="1:3")
        assert "GPUFLEET_TRAIN_FAULT" not in pool.env
        proc, lifeline = pool.take(env, str(run / "spec-1.json"))
        assert proc.pid == pid
        out = proc.stdout.read().decode()
        code = proc.wait(300)
        os.close(lifeline)
    finally:
        pool.close()
    lines = read_progress(run / "progress-1.jsonl")
    [ranks] = [x for x in lines if x["type"] == "ranks"]
    assert ranks["start"] == "forkserver", ranks
    errors = [x for x in lines if x["type"] == "error"]
    assert code != 0 and errors and "injected failure on rank 1" in errors[-1]["message"], (code, errors, out)
    assert max((x["step"] for x in lines if x["type"] == "step"), default=0) < 6
    assert not _alive(pid) and not _alive(server)


def _fd_targets(pid: int) -> list[str]:
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass  # closed while listed
    return out


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = _ppid(int(entry))
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _uids(pid: int) -> set[str]:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("Uid:"))
    return set(line.split()[1:])  # real, effective, saved, filesystem


def test_a_members_warm_launcher_runs_as_the_member_holds_no_secret_and_serves_its_training(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from gpufleet.config import load_settings
    from gpufleet.jobs.isolation import plan
    from gpufleet.jobs.kinds import training_roots
    from gpufleet.jobs.slots import _mount_points
    from support.unix import need_root, short_name, unix_account

    need_root()
    # The worker's secrets: in its environment, and a file it holds open.
    monkeypatch.setenv("GPUFLEET_SECRET_KEY", "s3cret-value-123")
    monkeypatch.setenv("GPUFLEET_DATABASE_URL", "postgresql+psycopg://gpufleet:dbpass-456@db/gpufleet")
    secret = tmp_path / "secret.key"
    secret.write_text("s3cret-value-123")
    secret.chmod(0o600)
    with open(secret) as held, unix_account(short_name("warm")) as entry:
        home = tmp_path / "home"
        home.mkdir()
        os.chown(home, entry.pw_uid, entry.pw_gid)
        tmp_path.chmod(0o755)
        account = RunAccount(entry.pw_name, entry.pw_uid, entry.pw_gid, (), str(home), "same-name")
        s = load_settings(data_dir=tmp_path / "data", checkpoint_root=tmp_path / "ckpt")
        run, ckpt = s.data_dir / "jobs" / "t1", tmp_path / "ckpt" / "t1"
        iso = plan(s, account, "recipe", run, ckpt)
        assert iso.switches and iso.sandboxed  # the member's own account, in its bwrap sandbox
        base = s.data_dir / "warm-slots"
        warmpool.start(0, member_size=1, member_keep_s=600, slots=(base, training_roots(s, s)))
        try:
            env = dict(_env(), GPUFLEET_TRAINING_ID="t1")
            # The member's first training here starts cold and makes the member's pool, for the next ones.
            assert warmpool.for_launch(RECIPE, env, iso) is None
            pool = warmpool.member_pools()[entry.pw_uid]
            wait_for(lambda: pool.ready_count() == 1, 300, "the member's warm launcher ready")
            [pid] = pool.pids()  # bwrap; the launcher is the interpreter inside its namespaces
            tree = _tree(pid)
            [python] = [p for p in tree if "gpufleet.trainings.warm_launch" in Path(f"/proc/{p}/cmdline").read_text()
                        and Path(f"/proc/{p}/exe").resolve().name.startswith("python")]
            assert _uids(python) == {str(entry.pw_uid)}
            for p in tree:  # nothing in the member's sandbox holds a secret, in its environment or open
                environ = Path(f"/proc/{p}/environ").read_bytes().decode().split("\0")
                assert not [v for v in environ if "s3cret" in v or "dbpass" in v or v.startswith(
                    ("GPUFLEET_SECRET", "GPUFLEET_DATABASE", "GPUFLEET_REDIS"))], environ
                targets = _fd_targets(p)
                assert str(secret) not in targets and not [t for t in targets if "data" in t], targets
            environ = Path(f"/proc/{python}/environ").read_bytes().decode().split("\0")
            assert f"USER={entry.pw_name}" in environ and f"HOME={home}" in environ
            assert os.fstat(held.fileno()).st_size > 0  # (held open by this process all along)
            # Inside, the data dir holds only the slots where the training it is given will appear: empty.
            inside = Path(f"/proc/{python}/root{s.data_dir}")
            assert sorted(p.name for p in inside.iterdir()) == ["jobs", "outputs", "work"], list(inside.iterdir())
            assert not [p for p in inside.rglob("*") if p.name not in ("jobs", "outputs", "work")]
            # The member's next training takes it: it runs there, as the member, and writes its progress.
            assert warmpool.for_launch(RECIPE, env, iso) is pool
            assert not pool.serves(RECIPE, env, Isolation(account=account, home=home))  # not sandboxed
            iso.prepare()
            # Two ranks: forked from the launcher's rank server, in the same sandbox, as the member; they find
            # the training's directories at their own paths, bound into the slots when it was handed over.
            spec = {"recipe": "mlp", "config": MLP, "devices": ["cuda:0", "cuda:1"], "ranks_on_cpu": True,
                    "checkpoint_dir": str(ckpt), "progress_file": str(run / "progress-1.jsonl"), "resume": False}
            (run / "spec-1.json").write_text(json.dumps(spec))
            proc, lifeline = pool.take(iso.env(env), str(run / "spec-1.json"), iso.write)
            assert proc.pid == pid
            out = proc.stdout.read().decode()
            assert proc.wait(300) == 0, out
            os.close(lifeline)
            progress = run / "progress-1.jsonl"
            assert '"type": "step"' in progress.read_text() and progress.stat().st_uid == entry.pw_uid
            assert '"start": "forkserver"' in progress.read_text()
            wait_for(lambda: not [p for p in _mount_points() if base in p.parents], 30, "the slots emptied")
        finally:
            warmpool.stop()
        assert not _alive(pid)


def test_a_members_pool_closes_once_the_member_stops_starting_work(tmp_path: Path) -> None:
    from support.unix import need_root, short_name, unix_account

    from gpufleet.config import load_settings
    from gpufleet.jobs.isolation import plan

    need_root()
    with unix_account(short_name("idle")) as entry:
        home = tmp_path / "home"
        home.mkdir()
        os.chown(home, entry.pw_uid, entry.pw_gid)
        account = RunAccount(entry.pw_name, entry.pw_uid, entry.pw_gid, (), str(home), "same-name")
        s = load_settings(data_dir=tmp_path / "data", checkpoint_root=tmp_path / "ckpt")
        from gpufleet.jobs.kinds import training_roots
        from gpufleet.jobs.slots import SlotBase

        iso = plan(s, account, "recipe", tmp_path / "r", tmp_path / "c")
        slots = SlotBase.make(s.data_dir / "warm-slots", training_roots(s, s))
        pool = warmpool.WarmPool(1, _env(), Isolation(account=account, sandboxed=iso.sandboxed, read=iso.read,
                                                      hidden=iso.hidden, home=home), keep_s=600.0, slots=slots)
        try:
            wait_for(lambda: pool.ready_count() == 1, 300, "the member's launcher ready")
            pids = pool.pids()
            pool.keep_s = 1.0  # the member has started nothing for longer than that now
            # Closed, and its launcher gone (the keeper ends it right after it marks the pool closed).
            wait_for(lambda: pool.closed and not any(_alive(p) for p in pids), 60, "the idle member's pool closed")
            assert pool.pids() == []
        finally:
            pool.close()
            slots.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _run_one(c, settings, name: str) -> tuple[dict, list[dict], list[dict], str]:
    r = c.post("/api/v1/trainings", json={"name": name, "recipe": "mlp", "config": MLP, "gpu_ids": [0],
                                          "host": settings.host_name})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    body = wait_status(c, tid, FINAL, 300)
    metrics = c.get(f"/api/v1/trainings/{tid}/metrics").json()["data"]
    logs = c.get(f"/api/v1/trainings/{tid}/logs?tail=200").json()["text"]
    return body, get_events(c, tid), metrics, logs


@pytest.mark.slow
def test_a_warm_rank_trains_and_reports_like_a_cold_one(tmp_path, client_for, workers, scheduler) -> None:
    from support.fleet import make_settings

    settings = make_settings(tmp_path, "sqlite", warm_pool_size=1)
    register(settings)
    scheduler(settings)
    c = client_for(settings)
    w = workers(settings)
    wait_for(lambda: "is ready" in w.output() and any(_is_warm_child(p, w.proc.pid) for p in _pids()), 300,
             "the worker's warm launcher")
    warm_body, warm_events, warm_metrics, warm_log = _run_one(c, settings, "warm")
    assert "is warm launcher" in warm_log
    w.stop()
    cold = make_settings(tmp_path, "sqlite", warm_pool_size=0, host_name=settings.host_name)
    workers(cold)
    cold_body, cold_events, cold_metrics, cold_log = _run_one(c, settings, "cold")
    assert "is warm launcher" not in cold_log
    for body in (warm_body, cold_body):
        assert body["status"] == "succeeded" and body["step"] == MLP["max_steps"] and body["exit_code"] == 0
    # The same events, but for what the reservation says: the cold run is estimated from what the warm one
    # measured (calibrated), so only the warm one may find its rank over its first estimate.
    def said(events: list[dict]) -> list[tuple]:
        return [(e["kind"], e["status"]) for e in events if "reserved for it" not in (e["reason"] or "")]

    assert said(warm_events) == said(cold_events)
    assert [m["step"] for m in warm_metrics] == [m["step"] for m in cold_metrics] == [1, 2, 3, 4]
    assert all(m["loss"] is not None for m in warm_metrics)


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _is_warm_child(pid: int, parent: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        ppid = _ppid(pid)
    except (OSError, ValueError, IndexError):
        return False
    return ppid == parent and b"gpufleet.trainings.warm_launch" in cmd
