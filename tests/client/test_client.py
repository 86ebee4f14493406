"""``gpufleet.client.Client`` against the product's app on a real server with sign-in, and real workers."""

from __future__ import annotations

import ast
import uuid
from pathlib import Path

import pytest

from gpufleet.client import (
    Client,
    Forbidden,
    NotFound,
    RateLimited,
    ServerUnreachable,
    Unauthorized,
    ValidationFailed,
)
from gpufleet.config import Settings

from support.fleet import make_settings, register

SECRET = "client-tests-secret-" + "y" * 32


def _signed_in(tmp_path: Path, **kw) -> tuple[Settings, dict[str, str]]:
    from support.people import make_people

    s = make_settings(tmp_path, "sqlite", auth="on", secret_key=SECRET, **kw)
    p = make_people(s, suffix="-" + uuid.uuid4().hex[:6])
    return s, {"admin": p.admin, "alice": p.alice, "bob": p.bob, "vic": p.vic}


@pytest.mark.slow
def test_client_creates_waits_reads_metrics_logs_events_and_cancels(tmp_path, product_api, workers, scheduler):
    settings, tokens = _signed_in(tmp_path, simulate="1xH100-80GB")
    register(settings)
    workers(settings)
    scheduler(settings)
    url = product_api(settings)
    with Client(url, tokens["alice"]) as gf:
        assert gf.whoami().name.startswith("alice")
        gpus = gf.gpus()
        assert gpus.count == 1 and gpus.data[0].host == settings.host_name
        assert [h.name for h in gf.hosts().data] == [settings.host_name]
        t = gf.create_training(recipe="mlp", gpu_ids=[0],
                               config={"max_steps": 3, "global_batch_size": 8, "log_every": 1})
        assert t.status == "queued" and t.owner.startswith("alice")
        done = gf.wait(t, timeout=240, poll_s=0.3)
        assert done.status == "succeeded", done.status_reason
        metrics = gf.metrics(t)
        assert [m.step for m in metrics.data] == [1, 2, 3] and metrics.data[-1].loss is not None
        assert [m.step for m in gf.follow_metrics(t.id)] == [1, 2, 3]
        assert "ended: succeeded" in "".join(gf.logs(t.id, follow=True))
        kinds = [e.kind for e in gf.events(str(t.id), follow=True)]
        statuses = [e.status for e in gf.events(t)]
        assert kinds and statuses[0] == "queued" and statuses[-1] == "succeeded", (kinds, statuses)
        assert gf.cancel(t).status == "succeeded"  # idempotent on a finished training
        assert gf.list_trainings(status="succeeded").count >= 1


def test_refusals_are_typed_and_carry_the_servers_message(tmp_path, product_api):
    settings, tokens = _signed_in(tmp_path)
    register(settings)
    url = product_api(settings)
    with Client(url, token="") as anon, pytest.raises(Unauthorized) as no_token:
        anon.gpus()
    assert no_token.value.status == 401 and no_token.value.message
    with Client(url, tokens["alice"]) as alice, Client(url, tokens["vic"]) as vic:
        missing = uuid.uuid4()
        with pytest.raises(NotFound, match=f"training {missing} does not exist"):
            alice.get_training(missing)
        t = alice.create_training(recipe="mlp", config={"max_steps": 1}, world_size=1)
        with pytest.raises(Forbidden) as refused:
            vic.cancel(t.id)
        assert refused.value.status == 403
        with pytest.raises(ValidationFailed) as bad:
            alice.request("GET", "/api/v1/trainings", params={"status": "sleeping"})
        # The status is an enum in the schema: the refusal names the field and the statuses there are.
        assert "status.0: Input should be 'queued'" in str(bad.value) and "(HTTP 422)" in str(bad.value)
        with pytest.raises(ValidationFailed) as bad_field:
            alice.request("POST", "/api/v1/trainings", json={"name": "x", "recipe": "mlp", "priority": "high"})
        assert "priority" in bad_field.value.message


def test_fleet_reads_recommend_and_validate_parse_into_the_apis_models(tmp_path, product_api):
    from gpufleet.wire.selection import RecommendationPublic, ValidationPublic

    settings, tokens = _signed_in(tmp_path)
    register(settings)
    url = product_api(settings)
    with Client(url, tokens["vic"]) as gf:
        [topo] = gf.topology(host=settings.host_name).hosts
        assert topo.gpus == [0, 1] and len(topo.matrix) == 2
        rec = gf.recommend(memory_mb=1024, count=2)
        assert isinstance(rec, RecommendationPublic) and rec.candidates[0].gpu_indexes == [0, 1]
        by_recipe = gf.recommend(recipe="mlp", config={"global_batch_size": 8})
        assert by_recipe.estimate is not None and by_recipe.estimate.total > 0
        check = gf.validate([0, 5], memory_mb=1)
        assert isinstance(check, ValidationPublic) and not check.ok
        assert any(p.code == "unknown-gpu" and p.gpu_index == 5 for p in check.problems)
        with pytest.raises(NotFound, match="known hosts: " + settings.host_name):
            gf.gpus(host="nope")
        with pytest.raises(ValueError, match="not both"):
            gf.recommend(recipe="mlp", memory_mb=1)
        assert {"mlp", "sae"} <= {r.name for r in gf.recipes().data}
        assert gf.live().aggregate is not None


def test_a_429_is_waited_out_for_retry_after_then_raised(tmp_path, product_api):
    settings, tokens = _signed_in(tmp_path, create_rate_per_minute=1)
    register(settings)
    url = product_api(settings)
    waits: list[float] = []

    class Recording(Client):
        def _sleep(self, seconds: float) -> None:
            waits.append(seconds)

    with Recording(url, tokens["bob"], rate_limit_retries=2) as gf:
        gf.create_training(recipe="mlp", config={"max_steps": 1})
        with pytest.raises(RateLimited) as limited:
            gf.create_training(recipe="mlp", config={"max_steps": 1})
    # Two retries, each after the server's Retry-After, then the refusal itself.
    assert len(waits) == 2 and all(0 < w <= 60 for w in waits)
    assert limited.value.retry_after is not None and 0 < limited.value.retry_after <= 60
    assert "creation requests in the last minute" in limited.value.message
    assert len(Client(url, tokens["bob"]).list_trainings().data) == 1  # nothing created by the retries


def test_server_and_token_come_from_the_environment_and_bad_urls_are_refused(monkeypatch):
    monkeypatch.setenv("GPUFLEET_SERVER", "http://127.0.0.1:9/")
    monkeypatch.setenv("GPUFLEET_TOKEN", "gf_from_env")
    gf = Client()
    assert gf.server == "http://127.0.0.1:9"
    assert gf._http.headers["authorization"] == "Bearer gf_from_env"
    with pytest.raises(ServerUnreachable, match="cannot reach the server at http://127.0.0.1:9"):
        gf.hosts()
    with pytest.raises(ValueError, match="http:// or https://"):
        Client("127.0.0.1:8000")


def test_the_cli_has_one_http_path_the_client():
    """No command module sends HTTP itself: every server command goes through gpufleet.client."""
    import gpufleet.commands as commands

    offenders = []
    for path in Path(commands.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("httpx", "requests", "urllib")]
    assert offenders == []


def test_the_cli_client_turns_every_refusal_into_one_line_and_exit_2(monkeypatch):
    import typer

    from gpufleet.commands.remote import Client as CLIClient

    monkeypatch.setenv("GPUFLEET_SERVER", "http://127.0.0.1:9")
    with pytest.raises(typer.Exit) as ended:
        CLIClient(None).call("GET", "/api/v1/trainings")
    assert ended.value.exit_code == 2
    with pytest.raises(typer.Exit):
        CLIClient("ftp://nowhere")
