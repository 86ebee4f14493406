"""`gpufleet pools add slurm | ls | rm` and `gpufleet train --pool` against a real server and a real Slurm cluster."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from gpufleet.api.app import create_app
from gpufleet.config import load_settings
from gpufleet.db.session import session_scope, upgrade_database
from gpufleet.lifecycle.models import Training
from sqlalchemy import select
from support.fleet import register
from support.scripts import write_project
from support.servers import gpufleet, serve_env, serve_inprocess
from support.slurm import PARTITION, slurm_cluster  # noqa: F401 - the fixture


def _cli(data_dir: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*gpufleet(), *args], env={**serve_env(data_dir), "GPUFLEET_SERVER": url},
                          capture_output=True, text=True, timeout=120, check=False)


def test_add_ls_train_refused_rm(tmp_path: Path, slurm_cluster) -> None:  # noqa: F811
    settings = load_settings(data_dir=tmp_path / "data", auth="off", simulate="1xH100-80GB")
    upgrade_database(settings)
    root = tempfile.mkdtemp(prefix="gpufleet-pool-")
    with serve_inprocess(create_app(settings)) as served:
        def cli(*args: str) -> subprocess.CompletedProcess:
            return _cli(settings.data_dir, served.url, *args)

        wrong = cli("pools", "add", "slurm", "cluster", "--partition", "nosuch", "--checkpoint-root", root)
        assert wrong.returncode == 2 and "Slurm has no partition 'nosuch'" in wrong.stderr, wrong.stderr
        added = cli("pools", "add", "slurm", "cluster", "--partition", PARTITION, "--gpus-per-node", "2",
                    "--gpu-model", "H100-80GB", "--gpu-memory", "80", "--checkpoint-root", root, "--json")
        assert added.returncode == 0, added.stderr
        assert json.loads(added.stdout)["gpu_memory"] == 80 * 2**30
        again = cli("pools", "add", "slurm", "cluster", "--partition", PARTITION)
        assert again.returncode == 2 and "exists already" in again.stderr
        listed = cli("pools", "ls")
        assert "cluster  slurm partition gpu, H100-80GB" in listed.stdout, listed.stdout + listed.stderr
        assert "sim1" in listed.stdout and "gpus gpu:2" in listed.stdout
        gpus = cli("gpus")
        # Piped, each table is tab-separated lines with its title on stderr.
        assert "GPUs in pool cluster (Slurm partition gpu)" in gpus.stderr, gpus.stdout + gpus.stderr
        assert "sim1" in gpus.stdout and "gpu:2" in gpus.stdout and "H100-80GB" in gpus.stdout
        [pool] = json.loads(cli("gpus", "--json").stdout)["pools"]
        assert pool["name"] == "cluster" and [n["name"] for n in pool["nodes"]] == ["sim1", "sim2"]
        # This server's local admin is the server's own account (root): a pool never submits as it.
        refused = cli("train", "--recipe", "mlp", "--pool", "cluster", "--no-follow")
        assert refused.returncode != 0 and "no Unix account of their own" in refused.stderr + refused.stdout
        with session_scope(settings) as sess:
            assert sess.scalar(select(Training.id)) is None
        project = write_project(tmp_path / "proj")
        script = cli("run", "--dir", str(project), "--pool", "cluster", "--gpus", "2", "--memory", "1GiB",
                     "--no-follow", "--", "python", "train.py")
        assert script.returncode != 0 and "no Unix account of their own" in script.stderr + script.stdout
        placed = cli("run", "--dir", str(project), "--pool", "cluster", "--host", "sim1", "--no-follow", "--",
                     "python", "train.py")
        assert placed.returncode == 2 and "give --gpus, and drop --host" in placed.stderr, placed.stderr
        with session_scope(settings) as sess:
            assert sess.scalar(select(Training.id)) is None
        unknown = cli("train", "--recipe", "mlp", "--pool", "elsewhere", "--no-follow")
        assert unknown.returncode != 0 and "no pool named 'elsewhere'" in unknown.stderr + unknown.stdout
        # --or-pool: the team's one host (1 GPU) can never hold 4, so the server sends it to the pool, which
        # refuses this account as it refused --pool: the answer names both.
        register(settings)
        wide = cli("train", "--recipe", "mlp", "--world-size", "4", "--or-pool", "cluster", "--no-follow")
        said = wide.stderr + wide.stdout
        assert wide.returncode != 0 and "the team's hosts can never hold it (" in said, said
        assert "4 needs 4 GPUs on one host" in said, said
        assert "pool 'cluster' cannot either" in said and "no Unix account of their own" in said, said
        wide_script = cli("run", "--dir", str(project), "--or-pool", "cluster", "--gpus", "4", "--memory", "1GiB",
                          "--no-follow", "--", "python", "train.py")
        said = wide_script.stderr + wide_script.stdout
        assert wide_script.returncode != 0 and "the team's hosts can never hold it" in said, said
        both = cli("train", "--recipe", "mlp", "--or-pool", "cluster", "--pool", "cluster", "--no-follow")
        assert both.returncode == 2 and "drop --pool, --local, --gpu-ids and --host" in both.stderr, both.stderr
        nowhere = cli("train", "--recipe", "mlp", "--or-pool", "elsewhere", "--no-follow")
        assert nowhere.returncode != 0 and "no pool named 'elsewhere'" in nowhere.stderr + nowhere.stdout
        with session_scope(settings) as sess:
            assert sess.scalar(select(Training.id)) is None
        # The recommendation on the pool: the layout over its declared GPUs and the partition's nodes now.
        rec = cli("recommend", "--memory", "10GiB", "--count", "4", "--pool", "cluster")
        assert rec.returncode == 0, rec.stderr
        assert ("pool cluster: 4 x H100-80GB (80.0 GiB each) hold it, 2 on each of 2 node(s); Slurm decides when "
                "and where it starts") in rec.stdout, rec.stdout
        assert "sim1" in rec.stdout and "sim2" in rec.stdout and "gpu:2" in rec.stdout
        assert "send it there: gpufleet run ... --pool cluster --gpus 4" in rec.stdout
        as_json = json.loads(cli("recommend", "--recipe", "mlp", "--count", "2", "--pool", "cluster", "--json").stdout)
        assert as_json["candidates"] == [] and as_json["estimate"]["total"] == as_json["memory_bytes"] > 0
        pool = as_json["pool"]
        assert (pool["pool"], pool["nodes"], pool["gpus_per_node"]) == ("cluster", 1, 2)
        assert [n["name"] for n in as_json["pool"]["partition_nodes"]] == ["sim1", "sim2"]
        too_big = cli("recommend", "--memory", "100GiB", "--pool", "cluster")
        assert too_big.returncode == 2 and "can never be placed on pool cluster: 100.0 GiB per rank is more than one " \
            "H100-80GB of pool cluster has (80.0 GiB)" in too_big.stderr, too_big.stderr
        uneven = cli("recommend", "--memory", "1GiB", "--count", "3", "--pool", "cluster")
        assert uneven.returncode == 2 and "3 GPUs do not split evenly over 2 nodes" in uneven.stderr, uneven.stderr
        mixed = cli("recommend", "--memory", "1GiB", "--pool", "cluster", "--host", "vm")
        assert mixed.returncode == 2 and "drop --host" in mixed.stderr
        assert cli("pools", "rm", "cluster").returncode == 0
        assert "no pools" in cli("pools", "ls").stdout
