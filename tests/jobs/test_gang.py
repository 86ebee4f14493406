"""One training across hosts: two or three `gpufleet worker` processes with their own
host names on this machine, gloo ranks on the CPU, PostgreSQL and Redis."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from support.fleet import FINAL, make_settings, register, unique, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

MLP = dict(in_features=8, hidden=[16, 16], out_features=3, task="classification", synthetic_samples=2048,
           global_batch_size=32, max_steps=20, log_every=5, checkpoint_every=10, lr=3e-3)


def gang_host(tmp_path: Path, request, name: str, shared: Path | None = None, **kw):
    return make_settings(tmp_path / name, "postgresql", request, simulate="2xH100-80GB",
                         host_name=unique(name), checkpoint_root=shared or tmp_path / "shared-checkpoints",
                         advertise_address="127.0.0.1", network_interface="lo", rendezvous_timeout_s=90, **kw)


def final(c, tid: str, timeout: float = 300) -> dict:
    return wait_for(lambda: (b := c.get(f"/api/v1/trainings/{tid}").json())["status"] in FINAL and b,
                    timeout, f"training {tid} to end", 0.3)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_four_ranks_on_two_hosts_match_one_process(tmp_path, request, client_for, workers, scheduler, strategy):
    a, b = gang_host(tmp_path, request, "a"), gang_host(tmp_path, request, "b")
    register(a), register(b)
    workers(a), workers(b)
    scheduler(a)
    c = client_for(a)
    r = c.post("/api/v1/trainings", json={"name": "across", "recipe": "mlp",
                                          "config": {**MLP, "strategy": strategy},
                                          "hosts": [a.host_name, b.host_name], "gpus_per_host": 2})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    body = final(c, tid)
    assert body["status"] == "succeeded", (body, (a.logs_dir / "trainings" / f"{tid}.log").read_text())
    # Host b's worker writes its own member row once its launcher has exited, which may come
    # just after rank 0's host ended the training.
    body = wait_for(lambda: (x := c.get(f"/api/v1/trainings/{tid}").json())["hosts"][1]["status"] != "running"
                    and x, 30, "host b's part to end", 0.2)
    assert [(h["host"], h["ranks"], h["gpu_ids"], h["status"]) for h in body["hosts"]] == [
        (a.host_name, [0, 1], [0, 1], "running"), (b.host_name, [2, 3], [0, 1], "succeeded")]
    assert len(body["gpus"]) == 4 and body["world_size"] == 4  # every host's reservation
    # Both hosts ran ranks: host b's worker wrote its part of the log.
    other = (b.logs_dir / "trainings" / f"{tid}-{b.host_name}.log").read_text()
    assert "ranks 2-3 of 4" in other and "ended: succeeded" in other
    # The other host's launcher names its ranks by their global numbers, and a clean end reads as one.
    assert "rank 2 <-> cuda:0, rank 3 <-> cuda:1" in other and "rank 0 <->" not in other, other
    assert "-15" not in other and "stopped by this worker" not in other, other
    from gpufleet.engine.recipes import get_recipe
    from gpufleet.engine.trainer import Trainer

    recipe = get_recipe("mlp")
    single = Trainer(recipe, recipe.resolve_config(MLP), devices=["cpu"])
    assert single.train().step == 20
    one = single.raw_model.state_dict()
    four = torch.load(tmp_path / "shared-checkpoints" / tid / "step-20" / "model.pt", weights_only=True)
    assert four.keys() == one.keys()
    diff = max((one[k].double() - four[k].double()).abs().max().item() for k in one)
    assert diff < 1e-5, f"4 ranks on 2 hosts differ from 1 process by {diff}"
    metrics = c.get(f"/api/v1/trainings/{tid}/metrics").json()["data"]
    # Every rank reports its step time on the rows that carry step times, and such rows exist.
    timed = [m for m in metrics if m.get("rank_step_times")]
    assert timed and all(len(m["rank_step_times"]) == 4 for m in timed), metrics


def ranks_of(tid: str) -> list[int]:
    """Every live process (launcher or rank, on any "host" of this machine) of training ``tid``."""
    needle = f"GPUFLEET_TRAINING_ID={tid}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0") and \
                    (d / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.append(int(d.name))
        except OSError:
            continue
    return out


# Long enough that a kill or a stop at step 30..60 leaves most of the run to do after the resume (about
# 110 steps a second on this 2-core machine), and short enough that the resumed run ends in seconds.
LONG = {**MLP, "max_steps": 400, "checkpoint_every": 25, "log_every": 5}


def _start_long(tmp_path, request, client_for, workers, scheduler, lease_s: float | None = None, **b_kw):
    both = {} if lease_s is None else {"lease_s": lease_s}
    a, b = gang_host(tmp_path, request, "a", **both), gang_host(tmp_path, request, "b", **both, **b_kw)
    register(a), register(b)
    wa, wb = workers(a), workers(b)
    scheduler(a)
    c = client_for(a)
    r = c.post("/api/v1/trainings", json={"name": "long", "recipe": "mlp", "config": LONG, "hosts": 2,
                                          "gpus_per_host": 2, "max_restarts": 3})
    assert r.status_code == 201, r.text
    return a, b, wa, wb, c, r.json()["id"]


def _running_past(c, tid: str, step: int) -> dict:
    def ok():
        body = c.get(f"/api/v1/trainings/{tid}").json()
        assert body["status"] not in FINAL, body
        return body["status"] == "running" and body["step"] >= step and body
    return wait_for(ok, 240, f"training {tid} to pass step {step}", 0.2)


@pytest.mark.parametrize("lost", ["rank-0 host", "other host"])
def test_a_lost_worker_stops_every_host_and_the_gang_resumes(tmp_path, request, client_for, workers, scheduler,
                                                             lost):
    a, b, wa, wb, c, tid = _start_long(tmp_path, request, client_for, workers, scheduler)
    _running_past(c, tid, 60)
    assert len(ranks_of(tid)) >= 6  # two launchers and four ranks
    leader = wa if c.get(f"/api/v1/trainings/{tid}").json()["host_name"] == a.host_name else wb
    other = leader if lost == "rank-0 host" else (wb if leader is wa else wa)
    other.kill9()
    wait_for(lambda: not ranks_of(tid), 15, "no rank of the training left on any host", 0.1)
    body = wait_for(lambda: (x := c.get(f"/api/v1/trainings/{tid}").json())["restarts"] == 1 and x, 30,
                    "the gang to be requeued", 0.2)
    events = c.get(f"/api/v1/trainings/{tid}/events").json()["data"]
    assert any(e["kind"] == "retry" for e in events), events
    workers(other.settings)  # the host's worker comes back
    body = final(c, tid, 400)
    assert body["status"] == "succeeded", body
    first = next(p for p in sorted((a.data_dir / "jobs" / tid).glob("progress-*.jsonl"))
                 if '"resume"' in p.read_text())
    resumed = [line for line in first.read_text().splitlines() if '"resume"' in line]
    assert resumed and '"step": 0' not in resumed[0], resumed


def test_cancel_stops_every_rank_on_every_host(tmp_path, request, client_for, workers, scheduler):
    import time

    a, b, wa, wb, c, tid = _start_long(tmp_path, request, client_for, workers, scheduler)
    _running_past(c, tid, 10)
    assert len(ranks_of(tid)) >= 6
    t0 = time.monotonic()
    assert c.post(f"/api/v1/trainings/{tid}/cancel").status_code == 200
    wait_for(lambda: not ranks_of(tid), 5, "every rank on every host to stop after cancel", 0.05)
    took = time.monotonic() - t0
    body = final(c, tid, 60)
    assert body["status"] == "cancelled", body
    print(f"cancel reached every host's ranks in {took:.2f}s")


def test_a_checkpoint_root_that_is_not_shared_is_refused(tmp_path, request, client_for, workers, scheduler):
    a, b, wa, wb, c, tid = _start_long(tmp_path, request, client_for, workers, scheduler,
                                       shared=tmp_path / "not-shared")
    body = final(c, tid, 240)
    assert body["status"] == "failed", body
    assert "is not shared with the rank-0 host" in body["status_reason"], body
    wait_for(lambda: not ranks_of(tid), 15, "no rank left", 0.1)


def test_a_stopping_worker_checkpoints_the_whole_gang_back_to_the_queue(tmp_path, request, client_for, workers,
                                                                         scheduler):
    import signal

    # A lease long enough that a loaded machine's late renewal is not taken for a lost worker: this test
    # is about a stop, which must cost no restart; a lost lease (tested above) costs one, as designed.
    a, b, wa, wb, c, tid = _start_long(tmp_path, request, client_for, workers, scheduler, lease_s=15.0)
    _running_past(c, tid, 30)
    leader = wa if c.get(f"/api/v1/trainings/{tid}").json()["host_name"] == a.host_name else wb
    other = wb if leader is wa else wa
    other.proc.send_signal(signal.SIGTERM)
    body = wait_for(lambda: any(e.get("data", {}) and e["data"].get("retry_kind") == "interrupted"
                                for e in c.get(f"/api/v1/trainings/{tid}/events").json()["data"]), 120,
                    "the gang to go back to the queue as interrupted", 0.3)
    assert body
    wait_for(lambda: other.proc.poll() is not None, 60, "the stopping worker to exit", 0.2)
    body = c.get(f"/api/v1/trainings/{tid}").json()
    assert body["restarts"] == 0 and body["last_checkpoint"], body  # not a failure; it checkpointed
    workers(other.settings)  # the host's worker comes back; the gang resumes there
    body = final(c, tid, 400)
    assert body["status"] == "succeeded" and body["restarts"] == 0, body


def test_a_rank_lost_on_another_host_stops_every_host(tmp_path, request, client_for, workers, scheduler):
    """Global rank 3 (on the second host) fails at step 40; with no restarts left the gang fails,
    saying which rank, and no rank is left on either host."""
    a, b = gang_host(tmp_path, request, "a"), gang_host(tmp_path, request, "b")
    register(a), register(b)
    workers(a), workers(b, env={"GPUFLEET_TRAIN_FAULT": "3:40"})
    scheduler(a)
    c = client_for(a)
    r = c.post("/api/v1/trainings", json={"name": "fault", "recipe": "mlp", "config": LONG,
                                          "hosts": [a.host_name, b.host_name], "gpus_per_host": 2,
                                          "max_restarts": 0})
    assert r.status_code == 201, r.text
    tid = r.json()["id"]
    body = final(c, tid, 300)
    assert body["status"] == "failed", body
    assert body["status_reason"].startswith(f"host {b.host_name}: "), body
    assert "injected failure on rank 3" in body["status_reason"], body
    wait_for(lambda: not ranks_of(tid), 15, "no rank left on any host", 0.1)
    other = [h for h in body["hosts"] if h["host"] == b.host_name][0]
    assert other["status"] == "failed" and "injected failure on rank 3" in (other["message"] or ""), other
