"""`gpufleet recommend` and `gpufleet gpus drain|undrain` against a registered simulated host."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from gpufleet.config import reset_settings_cache
from gpufleet.db.models import GPU, Host
from gpufleet.db.session import session_scope


@pytest.fixture
def run(sim_host, monkeypatch):
    s = sim_host("nvlink-pairs", "4xH100-80GB")
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(s.data_dir))
    monkeypatch.setenv("GPUFLEET_SIMULATE", "4xH100-80GB")
    monkeypatch.setenv("GPUFLEET_HOST_NAME", s.host_name)
    from gpufleet.cli import app

    def invoke(*args: str):
        reset_settings_cache()
        return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})

    return s, invoke


@pytest.fixture(params=["server", "local"])
def recommend_in(request, run, monkeypatch):
    """`gpufleet recommend` asking a live server (the default), or reading the database (--local)."""
    s, invoke = run
    if request.param == "local":
        yield s, lambda *args: invoke("recommend", "--local", *args)
        return
    from gpufleet.api.app import create_app
    from support.servers import serve_inprocess

    with serve_inprocess(create_app(s)) as srv:
        # The server answers from its own settings; the CLI sees only the URL.
        monkeypatch.setenv("GPUFLEET_SERVER", srv.url)
        monkeypatch.setenv("GPUFLEET_DATA_DIR", str(s.data_dir.parent / "elsewhere"))
        yield s, lambda *args: invoke("recommend", *args)


def _drained(s) -> dict[int, tuple[bool, str | None]]:
    with session_scope(s) as sess:
        host = sess.scalar(select(Host).where(Host.name == s.host_name))
        return {g.index: (g.drained, g.drain_reason) for g in sess.scalars(select(GPU).where(GPU.host_id == host.id))}


def test_recommend_prints_the_breakdown_and_ranked_sets(recommend_in, tmp_path) -> None:
    s, recommend = recommend_in
    cfg = tmp_path / "run.yaml"
    cfg.write_text("d_in: 256\nn_latents: 4096\nglobal_batch_size: 1024\nprecision: bf16\n")
    r = recommend("--recipe", "sae", "--config", str(cfg), "--count", "2")
    assert r.exit_code == 0, r.output
    # Under DDP the gradients are the buckets: one row, "gradients (DDP buckets)".
    for words in ("optimizer states", "activations", "ddp buckets", "framework overhead", "nvlink", "estimated"):
        assert words in r.output.lower()
    r = recommend("--recipe", "sae", "--config", str(cfg), "--count", "2", "--json")
    body = json.loads(r.output)
    assert body["candidates"][0]["gpu_indexes"] in ([0, 1], [2, 3])
    assert body["estimate"]["micro_batch_size"] == 512


def test_recommend_for_ones_own_code_takes_the_memory(recommend_in) -> None:
    _s, recommend = recommend_in
    r = recommend("--memory", "40GiB", "--count", "2")
    assert r.exit_code == 0, r.output
    assert "your own code on 2 GPU(s), 40.0 GiB per rank" in r.output and "nvlink" in r.output
    body = json.loads(recommend("--memory", "40GiB", "--count", "2", "--json").output)
    assert body["candidates"][0]["gpu_indexes"] in ([0, 1], [2, 3]) and body["estimate"] is None


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--recipe", "sae", "--count", "8"), "can never be placed: needs 8 GPUs on one host"),
        (("--count", "2"), "give --recipe"),
        (("--recipe", "sae", "--memory", "1GiB"), "not both"),
        (("--memory", "lots"), "--memory 'lots' is not a size"),
        (("--recipe", "nope"), "unknown recipe 'nope'"),
        (("--recipe", "sae", "--set", "n_latents=0"), "n_latents"),
        (("--recipe", "sae", "--config", "/does/not/exist.yaml"), "does not exist"),
    ],
)
def test_recommend_errors_are_one_clear_line(recommend_in, args: tuple, words: str) -> None:
    _s, recommend = recommend_in
    r = recommend(*args)
    assert r.exit_code == 2
    assert words in r.output


def test_recommend_and_other_read_only_commands_create_no_files(tmp_path, monkeypatch) -> None:
    """A read that fails (no server, no database) says what to do and leaves the data dir untouched."""
    from gpufleet.cli import app

    data = tmp_path / "fresh-home" / "gpufleet"
    monkeypatch.setenv("GPUFLEET_DATA_DIR", str(data))
    monkeypatch.setenv("GPUFLEET_SERVER", "http://127.0.0.1:9")
    runner = CliRunner()
    r = runner.invoke(app, ["recommend", "--recipe", "mlp"])
    assert r.exit_code == 2 and "cannot reach the server at http://127.0.0.1:9" in r.output
    assert "--local" in r.output
    reset_settings_cache()
    r = runner.invoke(app, ["recommend", "--recipe", "mlp", "--local"])
    assert r.exit_code == 2 and "no database at" in r.output and "gpufleet.db" in r.output
    for args in (["top", "--once"], ["trainings", "ls"], ["trainings", "show", "x"]):
        reset_settings_cache()
        assert runner.invoke(app, args).exit_code == 2
    reset_settings_cache()
    r = runner.invoke(app, ["db", "current"])
    assert r.exit_code == 0 and "no database at" in r.output
    assert not (tmp_path / "fresh-home").exists(), sorted(p.name for p in (tmp_path / "fresh-home").rglob("*"))


def test_drain_and_undrain_change_only_the_named_gpus(run) -> None:
    s, invoke = run
    r = invoke("gpus", "drain", "1", "3", "--reason", "fan swap")
    assert r.exit_code == 0, r.output
    assert _drained(s) == {0: (False, None), 1: (True, "fan swap"), 2: (False, None), 3: (True, "fan swap")}
    from gpufleet.scheduling.inputs import availability_by_gpu

    with session_scope(s) as sess:
        a = availability_by_gpu(sess, s, s, s, s)[(s.host_name, 1)]
    assert a.state == "drained" and "fan swap" in a.reason
    assert invoke("gpus", "undrain", "1").exit_code == 0
    assert _drained(s)[1] == (False, None) and _drained(s)[3][0] is True


def test_drain_refuses_unknown_gpus_and_hosts_and_writes_nothing(run) -> None:
    s, invoke = run
    r = invoke("gpus", "drain", "0", "7")
    assert r.exit_code == 2 and "GPU 7 does not exist" in r.output and "0, 1, 2, 3" in r.output
    assert not any(d for d, _ in _drained(s).values())
    r = invoke("gpus", "drain", "0", "--host", "nowhere")
    assert r.exit_code == 2 and "host 'nowhere' is not registered" in r.output
