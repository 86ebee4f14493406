"""The script launcher on its own: real rank processes, gloo on CPU, no server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufleet.trainings.progress import ProgressReader
from gpufleet.engine import exitcodes as ec
from gpufleet.trainings.script_launch import ScriptSpec

from support.scripts import DDP_SCRIPT, RESUMABLE_SCRIPT, write_project


def _spec(tmp_path: Path, argv: list[str], n: int = 2, **kw) -> Path:
    work = write_project(tmp_path / "work", kw.pop("script", DDP_SCRIPT))
    spec = ScriptSpec(training_id="t-1", argv=[sys.executable, *argv], workdir=str(work),
                      progress_file=str(tmp_path / "progress.jsonl"), checkpoint_dir=str(tmp_path / "ckpt"),
                      gpu_indexes=kw.pop("gpu_indexes", list(range(n))), world_size=n, ranks_on_cpu=True, **kw)
    path = tmp_path / "spec.json"
    spec.write(path)
    return path


def _launch(spec: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gpufleet.trainings.script_launch", str(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, **(env or {})})


def _lines(tmp_path: Path) -> list[dict]:
    return ProgressReader(tmp_path / "progress.jsonl").read()


def test_unmodified_ddp_script_runs_on_two_ranks_with_prefixed_output(tmp_path):
    proc = _launch(_spec(tmp_path, ["train.py", "--steps", "3"]))
    out, _ = proc.communicate(timeout=180)
    text = out.decode()
    assert proc.returncode == 0, text
    for rank in (0, 1):
        assert f"[rank {rank}] step 2 loss" in text and f"local_rank {rank}" in text
    assert "[rank 0] done" in text
    kinds = [line["type"] for line in _lines(tmp_path)]
    assert kinds[0] == "start" and kinds[-1] == "end" and "ranks" in kinds
    start = _lines(tmp_path)[0]
    assert start["world_size"] == 2 and start["visible_devices"] == "0,1"


def test_rank_env_is_torchrun_env_plus_gpufleet_variables(tmp_path):
    script = (
        "import json, os\n"
        "keys = ['RANK','LOCAL_RANK','WORLD_SIZE','LOCAL_WORLD_SIZE','MASTER_ADDR','MASTER_PORT',"
        "'CUDA_VISIBLE_DEVICES','GPUFLEET_CHECKPOINT_DIR','GPUFLEET_RESUME_FROM','GPUFLEET_TRAINING_ID',"
        "'TRAIN_MODE','GPUFLEET_DATABASE_URL']\n"
        "print(json.dumps({k: os.environ.get(k) for k in keys}))\n"
    )
    proc = _launch(_spec(tmp_path, ["train.py"], script=script, gpu_indexes=[2, 3], env={"TRAIN_MODE": "x"}))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    import json

    envs = {}
    for line in out.decode().splitlines():
        if line.startswith("[rank "):
            rank = int(line[6])
            envs[rank] = json.loads(line.split("] ", 1)[1])
    assert envs[0]["RANK"] == "0" and envs[1]["RANK"] == "1" and envs[1]["LOCAL_RANK"] == "1"
    assert envs[0]["WORLD_SIZE"] == envs[0]["LOCAL_WORLD_SIZE"] == "2"
    assert envs[0]["MASTER_ADDR"] == "127.0.0.1" and envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"]
    assert envs[0]["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert envs[0]["GPUFLEET_CHECKPOINT_DIR"] == str(tmp_path / "ckpt") and envs[0]["GPUFLEET_RESUME_FROM"] == ""
    assert envs[0]["GPUFLEET_TRAINING_ID"] == "t-1" and envs[0]["TRAIN_MODE"] == "x"


def test_two_launchers_as_two_nodes_run_one_world_with_torchruns_multi_node_variables(tmp_path):
    """What a Slurm pool's job over two nodes does (pools/node.py gives each node's launcher its share): here
    both "nodes" are this machine, so the world of 4 meets at 127.0.0.1 on one port."""
    from gpufleet.trainings.script_launch import free_port

    port, procs, outs = free_port(), [], []
    for node in (0, 1):
        home = tmp_path / f"node{node}"
        spec = ScriptSpec.read(_spec(home, ["train.py", "--steps", "3"]))
        spec.world_size, spec.nnodes, spec.node_rank, spec.first_rank = 4, 2, node, 2 * node
        spec.master_addr, spec.master_port = "127.0.0.1", port
        spec.write(home / "node.json")
        procs.append(_launch(home / "node.json"))
    for proc in procs:
        out, _ = proc.communicate(timeout=180)
        outs.append(out.decode())
        assert proc.returncode == 0, out.decode()[-3000:]
    # Node 1's ranks are ranks 2 and 3 of the world (DDP_SCRIPT checks RANK and WORLD_SIZE against the group),
    # local ranks 0 and 1 on its own GPUs.
    assert "[rank 0] step 2 loss" in outs[0] and "[rank 1] step 2 loss" in outs[0] and "[rank 2]" not in outs[0]
    assert "[rank 2] step 2 loss" in outs[1] and "local_rank 0" in outs[1] and "[rank 3] step 2 loss" in outs[1]
    starts = [ProgressReader(tmp_path / f"node{n}" / "progress.jsonl").read()[0] for n in (0, 1)]
    assert [(s["world_size"], s["nnodes"], s["node_rank"], s["first_rank"], s["master_port"]) for s in starts] == [
        (4, 2, 0, 0, port), (4, 2, 1, 2, port)]
    from gpufleet.trainings.script_launch import rank_env

    env = rank_env(ScriptSpec.read(tmp_path / "node1" / "node.json"), {}, 1, port)
    assert (env["RANK"], env["LOCAL_RANK"], env["GROUP_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"],
            env["GROUP_WORLD_SIZE"], env["MASTER_ADDR"], env["MASTER_PORT"]) == (
        "3", "1", "1", "4", "2", "2", "127.0.0.1", str(port))


def test_rank_death_stops_the_others_and_names_the_rank(tmp_path):
    proc = _launch(_spec(tmp_path, ["train.py", "--steps", "1000", "--fail-rank", "1", "--sleep", "0.05"]))
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == ec.RANK_FAILED, out
    errors = [line for line in _lines(tmp_path) if line["type"] == "error"]
    assert errors[0]["rank"] == 1 and "rank 1 exited with code 3" in errors[0]["message"]
    assert "something went wrong in my code" in errors[0]["message"]
    assert b"[rank 1] something went wrong in my code" in out


def test_sigterm_stops_every_rank(tmp_path):
    proc = _launch(_spec(tmp_path, ["train.py", "--steps", "100000", "--sleep", "0.05"]))
    deadline = time.monotonic() + 120
    pids: list[int] = []
    while time.monotonic() < deadline and not pids:
        pids = next((line["pids"] for line in _lines(tmp_path) if line["type"] == "ranks"), [])
        time.sleep(0.1)
    assert len(pids) == 2
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == ec.INTERRUPTED
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert time.monotonic() - t0 < 5


def test_report_gives_rank_zeros_values_and_every_ranks_step_time(tmp_path):
    ck = tmp_path / "ckpt"
    proc = _launch(_spec(tmp_path, ["train.py", "--steps", "4"], script=RESUMABLE_SCRIPT))
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out
    steps = [line for line in _lines(tmp_path) if line["type"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert all(isinstance(s["loss"], float) and s["parts"] == {"lr": 0.05} for s in steps)
    # Every rank's time per step, from the second report on (stragglers show on the dashboard).
    assert "rank_step_times" not in steps[0]
    assert all(len(s["rank_step_times"]) == 2 and all(t > 0 for t in s["rank_step_times"]) for s in steps[1:])
    assert sorted(p.name for p in ck.iterdir()) == ["step-000002.pt", "step-000004.pt"]


def test_launcher_dies_with_its_parent(tmp_path):
    """The launcher asks the kernel for SIGKILL when the process that started it ends."""
    spec = _spec(tmp_path, ["train.py", "--steps", "100000", "--sleep", "0.05"])
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-m', 'gpufleet.trainings.script_launch', {str(spec)!r}],"
        " start_new_session=True)\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    launcher = int(parent.stdout.readline())
    deadline = time.monotonic() + 120
    pids: list[int] = []
    while time.monotonic() < deadline and not pids:
        pids = next((line["pids"] for line in _lines(tmp_path) if line["type"] == "ranks"), [])
        time.sleep(0.1)
    assert pids
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(p) for p in [launcher, *pids]):
        time.sleep(0.1)
    assert not any(_alive(p) for p in [launcher, *pids])


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize(("example", "args"), [
    ("torchrun_ddp", ["--steps", "60"]),
    ("backend_ddp", ["--steps", "60", "--strategy", "fsdp"]),
])
def test_the_examples_run_under_the_launcher(tmp_path, example, args):
    src = Path(__file__).resolve().parents[2] / "examples" / example / "train.py"
    proc = _launch(_spec(tmp_path, ["train.py", *args], script=src.read_text()))
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out.decode()
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step-0000050.pt"]
    if example == "backend_ddp":
        steps = [line for line in _lines(tmp_path) if line["type"] == "step"]
        assert [s["step"] for s in steps] == list(range(1, 61)) and "mae" in steps[0]["parts"]
        assert steps[-1]["loss"] < steps[0]["loss"]
    else:
        assert "[rank 0] step 60 loss" in out.decode()


@pytest.mark.parametrize(("example", "args"), [
    ("torchrun_ddp", ["--steps", "100000"]),
    ("backend_ddp", ["--steps", "100000", "--strategy", "ddp"]),
])
def test_the_examples_keep_the_stop_contract_checkpointing_where_they_stopped(tmp_path, example, args):
    src = Path(__file__).resolve().parents[2] / "examples" / example / "train.py"
    proc = _launch(_spec(tmp_path, ["train.py", *args], script=src.read_text(), stop_grace_s=60.0))
    marker = tmp_path / "progress.jsonl.stop"
    if example == "backend_ddp":
        wait = lambda: any(line["type"] == "step" for line in _lines(tmp_path))  # noqa: E731
    else:
        wait = lambda: any(p.name.startswith("step-") for p in (tmp_path / "ckpt").glob("*.pt"))  # noqa: E731
    deadline = time.monotonic() + 240
    while not wait() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not marker.exists()
    os.killpg(proc.pid, signal.SIGTERM)  # as the worker stops a training: the launcher's whole group
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == ec.INTERRUPTED, out.decode()
    assert marker.exists()  # GPUFLEET_STOP_FILE
    lines = _lines(tmp_path)
    stopped = next(line for line in lines if line["type"] == "stopped")
    ckpts = [line for line in lines if line["type"] == "checkpoint"]
    newest = max((tmp_path / "ckpt").glob("step-*.pt"), key=lambda p: p.stat().st_mtime)
    # The checkpoint written in the grace is the newest, and of the last step rank 0 reported, where it resumes.
    assert ckpts and ckpts[-1]["path"] == str(newest)
    assert ckpts[-1]["step"] == int(newest.stem.split("-")[1])  # reported, or (no reports) read from the name
    if example == "backend_ddp":
        assert stopped["step"] == ckpts[-1]["step"]
    assert not [line for line in lines if line["type"] == "error"]


def test_out_of_memory_in_a_rank_is_reported_as_oom(tmp_path):
    script = (
        "import os, sys\n"
        "if os.environ['RANK'] == '1':\n"
        "    print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', file=sys.stderr)\n"
        "    sys.exit(1)\n"
        "import time; time.sleep(60)\n"
    )
    proc = _launch(_spec(tmp_path, ["train.py"], script=script))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == ec.OUT_OF_MEMORY, out
    err = next(line for line in _lines(tmp_path) if line["type"] == "error")
    assert err["rank"] == 1 and err["kind"] == "oom" and "CUDA out of memory" in err["message"]


def test_a_missing_program_fails_the_launch_with_a_reason(tmp_path):
    spec = _spec(tmp_path, ["train.py"])
    import json

    data = json.loads(spec.read_text())
    data["argv"] = ["no-such-program-here", "train.py"]
    spec.write_text(json.dumps(data))
    proc = _launch(spec)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == ec.CANNOT_RUN
    assert b"cannot start 'no-such-program-here'" in out


def test_tensorboard_scalars_in_the_output_dir_become_the_training_metrics(tmp_path):
    pytest.importorskip("tensorboard")
    script = (
        "import os\n"
        "from torch.utils.tensorboard import SummaryWriter\n"
        "w = SummaryWriter(os.path.join(os.environ['GPUFLEET_OUTPUT_DIR'], 'tb'))\n"
        "for step in range(1, 6):\n"
        "    w.add_scalar('train/loss', 1.0 / step, step)\n"
        "    w.add_scalar('lr', 0.01 * step, step)\n"
        "w.close()\n"
    )
    proc = _launch(_spec(tmp_path, ["train.py"], n=1, script=script, output_dir=str(tmp_path / "out")))
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out.decode()
    steps = [line for line in _lines(tmp_path) if line["type"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5]
    assert steps[1]["loss"] == 0.5 and abs(steps[1]["parts"]["lr"] - 0.02) < 1e-6
