"""On a share, PyTorch's allocator is capped in the work's own process before the member's first line.

No GPU here: a stand-in ``torch`` package (the GPU double: one 80 GB CUDA device whose allocator records
the fraction set) sits on the rank's path, and the member's script records its first line; the cap
must come first. Real PyTorch on this CPU-only machine would see no GPU and set nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpufleet.engine.spec import LaunchSpec
from gpufleet.rankpath import gpufleet_share
from gpufleet.trainings.script_warm import rank_main  # noqa: F401 - the warm rank calls the same cap
from gpufleet.trainings.venv import RANK_PATH

TOTAL = 80 * 1024**3
FAKE_TORCH = f"""
import json, os
class _Props:
    total_memory = {TOTAL}
class cuda:
    @staticmethod
    def is_available(): return True
    @staticmethod
    def device_count(): return 1
    @staticmethod
    def get_device_properties(i): return _Props()
    @staticmethod
    def set_per_process_memory_fraction(fraction, device):
        with open(os.environ["EVENTS"], "a") as f:
            f.write(json.dumps({{"cap": fraction, "device": device}}) + "\\n")
"""
SCRIPT = """
import json, os
with open(os.environ["EVENTS"], "a") as f:
    f.write(json.dumps({"first_line": True}) + "\\n")
"""


def _run(tmp_path: Path, env_extra: dict[str, str], paths: list[str]) -> list[dict]:
    (tmp_path / "fake" / "torch").mkdir(parents=True)
    (tmp_path / "fake" / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (tmp_path / "train.py").write_text(SCRIPT)
    events = tmp_path / "events.jsonl"
    env = {"PATH": os.environ.get("PATH", ""), "EVENTS": str(events), **env_extra,
           "PYTHONPATH": os.pathsep.join([*paths, str(tmp_path / "fake")])}
    subprocess.run([sys.executable, "-S", "-c", "import site; site.main(); "
                    "import runpy; runpy.run_path('train.py', run_name='__main__')"],
                   cwd=tmp_path, env=env, check=True, timeout=60)
    return [json.loads(x) for x in events.read_text().splitlines()]


def test_a_cold_script_rank_on_a_share_is_capped_before_its_first_line(tmp_path):
    got = _run(tmp_path, {"GPUFLEET_SHARE_MB": "10240"}, [str(RANK_PATH / "share"), str(RANK_PATH)])
    assert got[0] == {"cap": (10240 - gpufleet_share.CONTEXT_MB) * 1024**2 / TOTAL, "device": 0}
    assert got[1] == {"first_line": True}


def test_a_whole_gpu_is_not_capped(tmp_path):
    # The launcher puts share/ on the path only for a share; even there, no share variable means no cap.
    got = _run(tmp_path, {}, [str(RANK_PATH / "share"), str(RANK_PATH)])
    assert got == [{"first_line": True}]


def test_a_members_own_sitecustomize_still_runs_after_the_cap(tmp_path):
    own = tmp_path / "venv-site"
    own.mkdir()
    (own / "sitecustomize.py").write_text(
        "import json, os\nopen(os.environ['EVENTS'], 'a').write(json.dumps({'own_site': True}) + '\\n')\n")
    got = _run(tmp_path, {"GPUFLEET_SHARE_MB": "4096"}, [str(RANK_PATH / "share"), str(RANK_PATH), str(own)])
    assert [next(iter(e)) for e in got] == ["cap", "own_site", "first_line"]


def test_the_recipe_launcher_gives_its_ranks_the_share():
    spec = LaunchSpec(recipe="mlp", config={}, devices=["cuda:2"], checkpoint_dir="/c", progress_file="/p",
                      share_mb=8192)
    assert spec.visible_devices_env()["GPUFLEET_SHARE_MB"] == "8192"
    whole = LaunchSpec(recipe="mlp", config={}, devices=["cuda:2"], checkpoint_dir="/c", progress_file="/p")
    assert "GPUFLEET_SHARE_MB" not in whole.visible_devices_env()


def test_the_cap_leaves_the_context_outside_and_never_exceeds_the_gpu():
    assert gpufleet_share.allocator_mb(10240) == 10240 - gpufleet_share.CONTEXT_MB
    assert gpufleet_share.allocator_mb(600) == 300
    assert gpufleet_share.share_of({"GPUFLEET_SHARE_MB": "x"}) is None
    assert gpufleet_share.share_of({"GPUFLEET_SHARE_MB": "12"}) == 12
