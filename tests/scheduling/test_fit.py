"""What fits: the layout search (``scheduling/fit.py``) and ``POST /system/gpus/fit`` on simulated GPUs.

The search is a pure function of an estimate and a placement; its tests give it
a memory that grows with the micro-batch as a traced one does, and count how
often each is asked. The endpoint's tests run the real estimate (traced in the
estimate pool) against a simulated fleet, and check each answer with the
recommendation the scheduler itself uses; on a Slurm pool, against the GPUs
its admin declared (no Slurm is asked: a pool's queue is Slurm's).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.devices import simstate
from gpufleet.scheduling.fit import Placement, fit, micro_batches, pool_placer, world_sizes
from gpufleet.scheduling.types import GiB

from scheduling.conftest import sample_into_live


def test_micro_batches_split_a_ranks_share_evenly_and_world_sizes_divide_the_batch() -> None:
    assert micro_batches(96, 2) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 48]
    assert world_sizes(96, 8) == [1, 2, 4, 8]
    assert world_sizes(96, 6) == [1, 2, 4, 6]
    assert world_sizes(10, 4) == [1, 2]  # 4 ranks cannot split 10 samples evenly


class _Model:
    """A rank's memory: fixed part (sharded under FSDP) plus activations per sample, as a trace grows."""

    def __init__(self, fixed: int, per_sample: int) -> None:
        self.fixed, self.per_sample, self.asked = fixed, per_sample, []

    def __call__(self, world: int, strategy: str, micro: int, accum: int) -> SimpleNamespace:
        self.asked.append((world, strategy, micro, accum))
        fixed = self.fixed // world if strategy == "fsdp" else self.fixed
        return SimpleNamespace(total=fixed + self.per_sample * micro)


def _fleet(free: list[int], total: int):
    """One host whose GPUs have ``free`` bytes now and ``total`` each: the placement's three answers."""

    def place(memory: int, count: int) -> Placement:
        fits_now = sorted((i for i, f in enumerate(free) if f >= memory), key=lambda i: -free[i])[:count]
        if len(fits_now) == count:
            return Placement("now", "h", tuple(sorted(fits_now)), "free")
        if memory <= total and count <= len(free):
            return Placement("later", reason="busy now")
        return Placement("never", reason="too big for any GPU")
    return place


def test_the_largest_micro_batch_that_fits_is_found_with_a_few_estimates() -> None:
    model = _Model(fixed=10 * GiB, per_sample=GiB // 8)  # 8 samples a GiB
    answer = fit(1024, [1], model, _fleet([40 * GiB], 80 * GiB))
    (option,) = answer.options
    # 30 GiB left for activations: 240 samples, so the largest divisor of 1024 below that is 128.
    assert (option.micro_batch_size, option.grad_accum_steps, option.placement.fits) == (128, 8, "now")
    assert option.memory_bytes == 10 * GiB + 128 * GiB // 8
    assert answer.pick is option and "fits now on h GPU(s) 0" in answer.why
    # A binary search over 11 micro-batches: a handful of estimates, not one per size.
    assert len(model.asked) <= 5


def test_more_gpus_are_tried_until_the_whole_share_fits_in_one_pass_and_the_fewest_are_picked() -> None:
    model = _Model(fixed=60 * GiB, per_sample=GiB // 4)  # 4 samples a GiB: 80 samples beside 60 GiB
    answer = fit(256, [1, 2, 4, 8], model, _fleet([80 * GiB] * 8, 80 * GiB))
    layouts = [(o.world_size, o.strategy, o.micro_batch_size, o.grad_accum_steps, o.placement.fits)
               for o in answer.options]
    # DDP fits on two GPUs, so FSDP is not tried there; four take each rank's 64 in one pass: the search
    # stops before eight.
    assert layouts == [(1, "single", 64, 4, "now"), (2, "ddp", 64, 2, "now"), (4, "ddp", 64, 1, "now")]
    assert answer.pick is answer.options[0]
    assert "the largest micro-batch that fits one GPU" in answer.why


def test_fsdp_is_tried_where_a_whole_replica_does_not_fit() -> None:
    model = _Model(fixed=90 * GiB, per_sample=GiB // 4)  # a replica alone is more than a GPU
    answer = fit(256, [1, 2, 4], model, _fleet([80 * GiB] * 4, 80 * GiB))
    layouts = [(o.world_size, o.strategy, o.micro_batch_size, o.grad_accum_steps) for o in answer.options]
    # FSDP over two GPUs holds 45 GiB of it per rank, and 140 samples beside: each rank's 128 in one pass.
    assert layouts == [(2, "fsdp", 128, 1)]
    assert answer.pick is answer.options[0] and answer.pick.memory_bytes == 45 * GiB + 32 * GiB
    assert [n.split(":")[0] for n in answer.never] == ["1 GPU(s) with single", "2 GPU(s) with ddp"]


def test_nothing_free_now_picks_what_fits_later_and_too_big_says_never() -> None:
    model = _Model(fixed=10 * GiB, per_sample=GiB)
    busy = fit(64, [1], model, _fleet([1 * GiB], 80 * GiB))
    assert busy.pick is not None and busy.pick.placement.fits == "later"
    assert busy.pick.micro_batch_size == 64 and "fits once GPUs free up" in busy.why
    huge = fit(64, [1, 2], _Model(fixed=500 * GiB, per_sample=GiB), _fleet([80 * GiB] * 2, 80 * GiB))
    assert huge.pick is None and huge.options == []
    assert "nothing fits on any host" in huge.why and len(huge.never) == 3  # single, ddp, fsdp


def test_on_a_pool_the_declared_gpus_decide_and_slurm_decides_when() -> None:
    place = pool_placer("institute", "H100", 80 * GiB, 4)  # a partition of one node
    assert place(81 * GiB, 1).fits == "never" and "more than one H100 of pool institute" in place(81 * GiB, 1).reason
    assert place(GiB, 8).fits == "never"
    assert "8 GPUs need 2 nodes of pool institute (4 GPU(s) each), and its partition has 1" in place(GiB, 8).reason
    # Over several nodes: the same number of GPUs on each, as a pool training runs (pools.attempt.layout).
    wide = pool_placer("institute", "H100", 80 * GiB, 4, nodes=3)
    assert wide(GiB, 8).fits == "now" and "over 2 nodes" in wide(GiB, 8).reason
    assert wide(GiB, 6).fits == "now" and wide(GiB, 12).fits == "now"
    assert wide(GiB, 10).fits == "never" and "do not split evenly over 3 nodes" in wide(GiB, 10).reason
    assert wide(GiB, 16).fits == "never" and "its partition has 3" in wide(GiB, 16).reason
    ok = place(80 * GiB, 4)
    assert ok.fits == "now" and ok.pool == "institute" and ok.host is None
    # The layouts: 100 GiB of activations at the whole share do not fit one 80 GiB GPU; two ranks do.
    answer = fit(64, world_sizes(64, 4), _Model(fixed=10 * GiB, per_sample=GiB + GiB // 2), place,
                 where="pool institute")
    assert answer.pick is not None and answer.pick.placement.pool == "institute"
    assert (answer.pick.world_size, answer.pick.micro_batch_size) == (1, 32)
    assert "fits pool institute's GPUs" in answer.why and "Slurm decides when it starts" in answer.why
    # One sample holds more than a GPU of the pool: no layout, and 8 GPUs are more than a node has.
    huge = fit(64, [1, 2, 4, 8], _Model(fixed=GiB, per_sample=81 * GiB), place, where="pool institute")
    assert huge.pick is None and huge.why.startswith("nothing fits on pool institute")
    assert len(huge.never) == 7  # single; ddp and fsdp on 2, 4 and 8


@pytest.fixture
def api(sim_host):
    s = sim_host("nvlink-pairs", "4xV100-16GB")
    with TestClient(create_app(s)) as c:
        yield s, c


# An mlp whose whole batch needs far more than a 16 GB GPU (about 300 KB of activations a sample, 2 GB of
# weights and AdamW states): its activations grow with the micro-batch.
N = 131072
BIG = {"in_features": 64, "hidden": [8192, 8192, 8192], "out_features": 64, "task": "regression",
       "global_batch_size": N, "synthetic_samples": N}


def _recommend(c: TestClient, config: dict, count: int) -> dict:
    r = c.post("/api/v1/system/gpus/recommend", json={"recipe": "mlp", "config": config, "count": count})
    return {"status": r.status_code, **(r.json() if r.headers.get("content-type", "").startswith("application/json")
                                        else {})}


def test_the_fit_picks_a_layout_the_scheduler_places_and_the_next_larger_micro_batch_does_not_fit(api) -> None:
    s, c = api
    r = c.post("/api/v1/system/gpus/fit", json={"recipe": "mlp", "config": BIG, "count": 1})
    assert r.status_code == 200, r.text
    body = r.json()
    pick = body["pick"]
    assert body["global_batch_size"] == N and pick["world_size"] == 1 and pick["fits"] == "now"
    assert pick["grad_accum_steps"] > 1 and pick["micro_batch_size"] * pick["grad_accum_steps"] == N
    # What the fit picked, sent as a training's config, is what the scheduler would place now.
    config = {**BIG, **pick["config"]}
    placed = _recommend(c, config, 1)
    assert placed["status"] == 200 and placed["candidates"], placed
    assert placed["estimate"]["total"] == pick["memory_bytes"]
    # Twice the micro-batch (half the passes) does not fit on a free 16 GB GPU.
    bigger = {**config, "micro_batch_size": pick["micro_batch_size"] * 2,
              "grad_accum_steps": pick["grad_accum_steps"] // 2}
    refused = _recommend(c, bigger, 1)
    assert refused["status"] == 422 or not refused["candidates"], refused


def test_without_a_count_fewer_gpus_come_first_and_busy_gpus_are_left_out(api) -> None:
    s, c = api
    simstate.add_foreign_process(s, 0, 15 * GiB, user="dave")
    sample_into_live(s)
    r = c.post("/api/v1/system/gpus/fit", json={"recipe": "mlp", "config": BIG})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [o["world_size"] for o in body["options"]][0] == 1
    assert body["pick"]["fits"] == "now" and 0 not in body["pick"]["gpu_indexes"]
    assert all(o["micro_batch_size"] * o["grad_accum_steps"] * o["world_size"] == N for o in body["options"])


@pytest.mark.parametrize(
    ("payload", "status", "words"),
    [
        ({"recipe": "nope"}, 422, "unknown recipe 'nope'"),
        ({"recipe": "mlp", "config": {"global_batch_size": 10}, "count": 4}, 422, "not divisible"),
        ({"recipe": "mlp", "config": {"parallel_mode": "independent"}}, 422, "parallel_mode independent"),
        ({"recipe": "mlp", "config": {"hidden": "wide"}}, 422, "hidden"),
        ({"recipe": "mlp", "count": 0}, 422, "greater than or equal"),
        ({"recipe": "mlp", "host": "nowhere"}, 404, "nowhere"),
    ],
)
def test_a_wrong_fit_request_is_a_4xx_that_says_what_to_fix(api, payload: dict, status: int, words: str) -> None:
    _s, c = api
    r = c.post("/api/v1/system/gpus/fit", json=payload)
    assert r.status_code == status, r.text
    assert words in json.dumps(r.json())


def test_recommend_fit_prints_each_layout_and_the_command_that_starts_the_pick(sim_host, monkeypatch,
                                                                               tmp_path) -> None:
    from typer.testing import CliRunner

    from gpufleet.cli import app
    from gpufleet.config import reset_settings_cache
    from support.servers import serve_inprocess

    s = sim_host("nvlink-pairs", "4xV100-16GB")
    config = tmp_path / "big.yaml"
    config.write_text(json.dumps(BIG))  # JSON is YAML

    def invoke(*args: str):
        reset_settings_cache()
        return CliRunner().invoke(app, ["recommend", *args], env={"COLUMNS": "200"})

    _pool(s, "institute", gpus_per_node=8, gpu_model="H100", gpu_memory=80 * GiB)
    with serve_inprocess(create_app(s)) as srv:
        monkeypatch.setenv("GPUFLEET_SERVER", srv.url)
        r = invoke("--recipe", "mlp", "--config", str(config), "--fit")
        assert r.exit_code == 0, r.output
        answer = invoke("--recipe", "mlp", "--config", str(config), "--fit", "--json")
        assert answer.exit_code == 0, answer.output
        there = invoke("--recipe", "mlp", "--config", str(config), "--fit", "--pool", "institute")
        assert there.exit_code == 0, there.output
        # Without --fit the recommendation answers for the pool: its layout, and what Slurm says of its nodes
        # (a table where a test cluster of this process answers for the partition; else that it did not answer).
        no_fit = invoke("--recipe", "mlp", "--config", str(config), "--count", "2", "--pool", "institute")
    # On the pool, the start line sends it there with the layout found for the pool's GPUs.
    assert "fits pool institute's GPUs" in there.output
    assert "start it: gpufleet train --recipe mlp --pool institute --world-size 1 --set strategy=auto" in there.output
    assert [line.split("\t")[-1] for line in there.output.splitlines() if "\t" in line][1:] == ["pool institute"]
    assert no_fit.exit_code == 0, no_fit.output
    assert ("pool institute: 2 x H100 (80.0 GiB each) hold it, 2 on each of 1 node(s); Slurm decides when and where "
            "it starts") in no_fit.output, no_fit.output
    assert "Slurm did not answer" in no_fit.output or "in use" in no_fit.output, no_fit.output
    assert "send it there: gpufleet train ... --pool institute --world-size 2" in no_fit.output
    pick = json.loads(answer.output)["pick"]
    assert "pick: 1 GPU(s), single" in r.output
    assert (f"start it: gpufleet train --recipe mlp --set strategy=auto --set micro_batch_size="
            f"{pick['micro_batch_size']} --set grad_accum_steps={pick['grad_accum_steps']}") in r.output
    # Piped, the layouts are tab-separated lines: a GPU alone, then two DDP ranks each taking their share.
    rows = [line.split("\t") for line in r.output.splitlines() if "\t" in line]
    assert rows[0] == ["GPUs", "strategy", "micro-batch", "accum", "per rank", "fits", "where"]
    assert [row[:4] for row in rows[1:]] == [["1", "single", str(pick["micro_batch_size"]),
                                              str(pick["grad_accum_steps"])], ["2", "ddp", str(N // 2), "1"]]
    own = invoke("--memory", "8GiB", "--fit")
    assert own.exit_code == 2 and "--fit lays out a recipe's config" in own.output
    local = invoke("--recipe", "mlp", "--fit", "--local")
    assert local.exit_code == 2 and "drop --local" in local.output


def _pool(s, name: str, **declared) -> None:
    from gpufleet.db.pools import Pool
    from gpufleet.db.session import session_scope

    with session_scope(s) as sess:
        # A partition no Slurm of these tests has: its node count is unknown here, so the fit stays on one node.
        sess.add(Pool(name=name, options={"partition": "fit-test-partition"}, checkpoint_root="/shared/gpufleet",
                      python="python3", **declared))


def test_the_fit_on_a_pool_uses_its_declared_gpus_not_the_teams_hosts(api) -> None:
    s, c = api
    # The team's GPUs are 16 GB V100s; the pool declares 80 GiB H100s, 8 a node.
    _pool(s, "institute", gpus_per_node=8, gpu_model="H100", gpu_memory=80 * GiB)
    _pool(s, "small", gpus_per_node=2, gpu_model="T4", gpu_memory=16 * 10**9)
    here = c.post("/api/v1/system/gpus/fit", json={"recipe": "mlp", "config": BIG, "count": 1}).json()["pick"]
    r = c.post("/api/v1/system/gpus/fit", json={"recipe": "mlp", "config": BIG, "count": 1, "pool": "institute"})
    assert r.status_code == 200, r.text
    there = r.json()["pick"]
    assert there["pool"] == "institute" and there["host"] is None and there["fits"] == "now"
    assert there["memory_bytes"] <= 80 * GiB and there["micro_batch_size"] > here["micro_batch_size"]
    assert "Slurm decides when it starts" in r.json()["why"]
    # A GPU of the small pool holds what a team GPU holds; its 2 GPUs a node are the most tried.
    small = c.post("/api/v1/system/gpus/fit", json={"recipe": "mlp", "config": BIG, "pool": "small"}).json()
    assert {o["world_size"] for o in small["options"]} <= {1, 2} and small["pick"]["pool"] == "small"


@pytest.mark.parametrize(
    ("payload", "status", "words"),
    [
        ({"pool": "elsewhere"}, 404, "no pool named 'elsewhere'"),
        ({"pool": "bare"}, 422, "does not declare its GPUs (--gpu-memory and --gpus-per-node)"),
        ({"pool": "institute", "host": "sim-host"}, 422, "not both"),
        ({"pool": "Bad pool"}, 422, "pattern"),
    ],
)
def test_a_wrong_pool_fit_is_a_4xx_that_says_what_to_fix(api, payload: dict, status: int, words: str) -> None:
    s, c = api
    _pool(s, "bare")
    r = c.post("/api/v1/system/gpus/fit", json={"recipe": "mlp", **payload})
    assert r.status_code == status, r.text
    assert words in json.dumps(r.json())
