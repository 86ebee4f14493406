"""Script trainings without processes: request checks, the process environment, resume point, outcome."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from gpufleet.config import load_settings
from gpufleet.lifecycle import outcome
from gpufleet.engine import exitcodes as ec
from gpufleet.trainings import script
from gpufleet.trainings.script import ScriptError


def test_process_env_drops_gpufleet_secrets_and_service_urls():
    base = {"PATH": "/usr/bin", "HOME": "/root", "GPUFLEET_SECRET_KEY": "s", "GPUFLEET_DATABASE_URL": "pg://",
            "GPUFLEET_TRAINING_ID": "x", "DATABASE_URL": "pg://", "CELERY_REDIS_URL": "redis://", "LANG": "C",
            "AWS_SECRET_ACCESS_KEY": "k", "SOME_OTHER_SETTING": "v", "CUDA_HOME": "/usr/local/cuda"}
    assert script.process_env(base) == {"PATH": "/usr/bin", "HOME": "/root", "LANG": "C",
                                        "CUDA_HOME": "/usr/local/cuda"}


LAB = {"SSL_CERT_FILE": "/etc/lab/ca.pem", "SSL_CERT_DIR": "/etc/lab/certs", "REQUESTS_CA_BUNDLE": "/etc/lab/ca.pem",
       "CURL_CA_BUNDLE": "/etc/lab/ca.pem", "HTTP_PROXY": "http://proxy:3128", "HTTPS_PROXY": "http://proxy:3128",
       "http_proxy": "http://proxy:3128", "https_proxy": "http://proxy:3128", "NO_PROXY": "localhost,.lab",
       "no_proxy": "localhost,.lab", "UV_INDEX_URL": "https://pypi.lab/simple", "UV_NATIVE_TLS": "1",
       "PIP_INDEX_URL": "https://pypi.lab/simple", "PIP_EXTRA_INDEX_URL": "https://more.lab/simple"}


def test_a_labs_proxy_certificate_authority_and_index_reach_uv_and_the_ranks():
    base = {"PATH": "/usr/bin", "GPUFLEET_SECRET_KEY": "s", "UV_INDEX_PASSWORD": "p", **LAB}
    assert script.process_env(base) == {"PATH": "/usr/bin", **LAB}  # an index's password stays out by default


def test_an_admin_adds_and_removes_names_and_the_servers_settings_never_pass():
    from gpufleet.trainings.environment import EnvPolicy

    base = {"PATH": "/usr/bin", "WANDB_API_KEY": "k", "LAB_MIRROR": "m", "GPUFLEET_SECRET_KEY": "s",
            "GPUFLEET_DATABASE_URL": "pg://", **LAB}
    policy = EnvPolicy(passed=("WANDB_API_KEY", "LAB_*", "GPUFLEET_*"), blocked=("*_proxy", "PIP_*"))
    env = script.process_env(base, policy)
    assert env["WANDB_API_KEY"] == "k" and env["LAB_MIRROR"] == "m"  # named by the admin, credentials word or not
    assert not {"http_proxy", "https_proxy", "no_proxy", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"} & set(env)
    assert env["HTTPS_PROXY"] == "http://proxy:3128"  # the patterns are case-sensitive, as the names are
    assert not [k for k in env if k.startswith("GPUFLEET_")]  # even when an admin's pattern names them
    assert script.process_env(base, EnvPolicy(blocked=("PATH",))).get("PATH") is None  # a standard name too


def test_the_ca_bundle_setting_is_what_python_requests_curl_and_uv_read(tmp_path):
    from gpufleet.jobs.script_attempt import launch_env
    from gpufleet.trainings.environment import EnvPolicy

    bundle = tmp_path / "lab-ca.pem"
    settings = load_settings(data_dir=tmp_path, ca_bundle=bundle, training_env_block=["CURL_CA_BUNDLE"])
    assert EnvPolicy.of(settings).ca_bundle == str(bundle)
    env = launch_env(settings, __import__("uuid").uuid4())
    assert env["SSL_CERT_FILE"] == env["REQUESTS_CA_BUNDLE"] == str(bundle)  # the setting wins over the worker's
    assert "CURL_CA_BUNDLE" not in env  # and an admin's block still holds


@pytest.mark.parametrize(("field", "value", "says"), [
    ("ca_bundle", "lab-ca.pem", "absolute path"),
    ("training_env_pass", ["A B"], "not an environment name"),
    ("env_extra_index_urls", ["pypi.lab/simple"], "not an index URL"),
])
def test_network_settings_refuse_what_cannot_work(tmp_path, field, value, says):
    from gpufleet.config import ConfigError

    with pytest.raises(ConfigError) as exc:
        load_settings(data_dir=tmp_path, **{field: value})
    assert says in str(exc.value) and f"GPUFLEET_{field.upper()}" in str(exc.value)



def test_the_launcher_and_its_ranks_run_unbuffered(tmp_path):
    import uuid

    from gpufleet.jobs.script_attempt import launch_env

    # Output reaches the log as it is printed, not in blocks when a buffer fills or the rank exits.
    assert launch_env(load_settings(data_dir=tmp_path), uuid.uuid4())["PYTHONUNBUFFERED"] == "1"


@pytest.mark.parametrize(("value", "expected"), [
    ("20GiB", 20 * 2**30), ("512MiB", 512 * 2**20), ("1.5G", 1_500_000_000), ("2gb", 2_000_000_000),
    (3 * 2**30, 3 * 2**30), (None, None),
])
def test_parse_memory(value, expected):
    assert script.parse_memory(value) == expected


@pytest.mark.parametrize("value", ["lots", "12 parsecs", 100, "-1GiB", True])
def test_parse_memory_refuses(value):
    with pytest.raises(ScriptError) as exc:
        script.parse_memory(value)
    assert exc.value.field == "memory"


def test_env_allow_list_is_a_setting(tmp_path):
    s = load_settings(data_dir=tmp_path, script_env_allow=["MY_*"])
    assert script.check_env(s, {"MY_FLAG": "1"}) == {"MY_FLAG": "1"}
    for name in ("OMP_NUM_THREADS", "MY_FLAG-X", "RANK", "GPUFLEET_X"):
        with pytest.raises(ScriptError):
            script.check_env(s, {name: "1"})
    # Names the launcher sets stay refused even when a pattern would match them.
    wide = load_settings(data_dir=tmp_path, script_env_allow=["*"])
    for name in ("MASTER_PORT", "CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "PYTHONPATH", "GPUFLEET_DATABASE_URL"):
        with pytest.raises(ScriptError):
            script.check_env(wide, {name: "1"})


def test_no_request_sets_a_variable_that_picks_or_renumbers_gpus(tmp_path):
    # ROCR_VISIBLE_DEVICES is read before HIP_VISIBLE_DEVICES, which indexes into what it leaves: a request that
    # set it would reach GPUs the training was not given, even with an admin's allow-list of "*".
    wide = load_settings(data_dir=tmp_path, script_env_allow=["*"])
    for name in ("ROCR_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
                 "CUDA_DEVICE_ORDER"):
        with pytest.raises(ScriptError, match=f"environment variable {name} may not be set"):
            script.check_env(wide, {name: "1"})


def test_argv_checks():
    assert script.check_argv(["python", "t.py"]) == ["python", "t.py"]
    for bad in ([], [""], ["python", "a\x00b"], ["x"] * 300):
        with pytest.raises(ScriptError):
            script.check_argv(bad)


def test_pythons_by_name(tmp_path):
    s = load_settings(data_dir=tmp_path, pythons={"py312": "/opt/py312/bin/python"})
    assert script.check_python(s, "py312") == "py312" and script.check_python(s, None) is None
    with pytest.raises(ScriptError, match="choose one of default, py312"):
        script.check_python(s, "py99")
    assert script.interpreter(s, {"GPUFLEET_PYTHON": "py312"}) == "/opt/py312/bin/python"
    assert script.interpreter(s, {}) == sys.executable
    assert script.resolve_argv(["python3", "t.py", "-x"], "/p/python") == ["/p/python", "t.py", "-x"]
    assert script.resolve_argv(["bash", "run.sh"], "/p/python") == ["bash", "run.sh"]


def test_resume_point(tmp_path):
    d = tmp_path / "ckpt"
    assert script.newest_resume_point(d) == ""
    d.mkdir()
    assert script.newest_resume_point(d) == ""
    (d / "a.pt").write_text("1")
    os.utime(d / "a.pt", (time.time() - 100, time.time() - 100))
    (d / "b.pt").write_text("2")
    (d / ".c.pt.tmp").write_text("half")
    assert script.newest_resume_point(d) == str(d / "b.pt")
    # gpufleet's own layout wins: the newest complete step-N folder.
    for n in (5, 12):
        (d / f"step-{n}").mkdir()
        (d / f"step-{n}" / "meta.json").write_text("{}")
    (d / "step-20").mkdir()  # incomplete: no meta.json
    assert script.newest_resume_point(d) == str(d / "step-12")


def _attempt(code: int, kind: str) -> outcome.Attempt:
    from gpufleet.jobs.kinds import work_kind

    return outcome.Attempt(exit_code=code, cancel_requested=False, restarts=0, max_restarts=2, allow_rebalance=True,
                           already_rebalanced=False, config={"global_batch_size": 8}, world_size=2,
                           error={"rank": 0, "kind": "oom", "message": "rank 0 exited with code 1: CUDA out of memory"},
                           oom_refusal=work_kind(kind).oom_refusal)


def test_out_of_memory_is_never_rebalanced_for_scripts():
    d = outcome.decide(_attempt(ec.OUT_OF_MEMORY, "script"))
    assert d.status == "failed" and "does not apply to scripts" in d.reason and "rank 0" in d.reason
    # A recipe that allows it is still rebalanced.
    assert outcome.decide(_attempt(ec.OUT_OF_MEMORY, "recipe")).retry_kind == "oom_rebalance"


def test_a_checkpoint_written_in_place_is_one_event_and_a_rewrite_at_the_same_step_none(tmp_path):
    import json

    from gpufleet.engine.progress import ProgressWriter
    from gpufleet.trainings.script_reports import CheckpointWatch

    ckpt, progress = tmp_path / "ckpt", tmp_path / "progress.jsonl"
    ckpt.mkdir()
    watch = CheckpointWatch(str(ckpt), ProgressWriter(str(progress)))
    watch.SETTLE_S = 0.2

    def events() -> list[dict]:
        lines = progress.read_text().splitlines() if progress.exists() else []
        return [e for e in map(json.loads, lines) if e["type"] == "checkpoint"]

    target = ckpt / "ckpt.pt"
    with open(target, "wb") as f:  # torch.save into the same file: opened (truncated), then written in pieces
        f.write(b"x" * 10)
        f.flush()
        watch.poll(5)
        time.sleep(0.05)
        f.write(b"y" * 1000)
        f.flush()
        watch.poll(5)
    watch.poll(5)
    assert events() == []  # still being written, as far as anyone can tell
    time.sleep(0.3)
    watch.poll(5)
    watch.poll(5)
    assert [(e["step"], e["path"]) for e in events()] == [(5, str(target))]
    target.write_bytes(b"z" * 1000)  # the same step's state written again (a second save before the next step)
    os.utime(target, (time.time() + 1, time.time() + 1))
    watch.poll(5, final=True)
    assert len(events()) == 1
    target.write_bytes(b"w" * 2000)  # the next checkpoint, in the same file; the ranks ended: counted at once
    watch.poll(10, final=True)
    assert [e["step"] for e in events()] == [5, 10]


def test_a_checkpoint_event_carries_the_checkpoints_own_step_not_the_step_reported_since(tmp_path):
    import json

    from gpufleet.engine.progress import ProgressWriter
    from gpufleet.engine.resumepoint import step_in_name
    from gpufleet.trainings.script_reports import CheckpointWatch

    ckpt, progress = tmp_path / "ckpt", tmp_path / "progress.jsonl"
    ckpt.mkdir()
    watch = CheckpointWatch(str(ckpt), ProgressWriter(str(progress)))
    watch.SETTLE_S = 0.0
    (ckpt / "step-0000200.pt").write_bytes(b"x")
    watch.poll(200)  # seen as rank 0 reports step 200
    watch.poll(201)  # settled once rank 0 has reported the next step
    (ckpt / "ckpt.pt").write_bytes(b"y")  # a name without a step: the step reported when it appeared
    os.utime(ckpt / "ckpt.pt", (time.time() + 5, time.time() + 5))
    watch.poll(202)
    watch.poll(203)
    lines = [json.loads(x) for x in progress.read_text().splitlines()]
    assert [(e["step"], Path(e["path"]).name) for e in lines if e["type"] == "checkpoint"] == \
        [(200, "step-0000200.pt"), (202, "ckpt.pt")]
    assert [step_in_name(n) for n in ("step-0000121.pt", "ckpt_step40.pt", "model-121.pt", "ckpt.pt", "step-7")] \
        == [121, 40, 121, None, 7]
