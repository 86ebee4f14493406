"""The README's five-line checkpoint/resume contract, run as written: asked to stop, it checkpoints and
leaves; started again with GPUFLEET_RESUME_FROM, it carries on after that step.

The lines are taken from README.md itself (the first Python block under "Cancel and resume"), with
only what the README leaves to the reader defined before them: a model and its training step.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[2] / "README.md"
PREAMBLE = "import torch\nmodel = torch.nn.Linear(2, 1)\ndef train_one_step(m):\n    return 0.5\n"


def _contract() -> str:
    text = README.read_text()
    section = text.split("## Cancel and resume", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _run(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(PREAMBLE + _contract())
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    return subprocess.run([sys.executable, str(script)], env={**base, **env}, capture_output=True, text=True,
                          timeout=120)


def test_the_readmes_contract_checkpoints_on_a_stop_and_resumes_after_that_step(tmp_path):
    ckpt, stop = tmp_path / "ckpt", tmp_path / "stop"
    ckpt.mkdir()
    stop.touch()  # gpufleet asked it to stop (the stop file a cancel creates)
    env = {"GPUFLEET_CHECKPOINT_DIR": str(ckpt), "GPUFLEET_STOP_FILE": str(stop), "GPUFLEET_RESUME_FROM": ""}
    first = _run(tmp_path, env)
    assert first.returncode == 0, first.stderr
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-0000000.pt"]  # checkpointed, then left
    assert set(torch.load(ckpt / "step-0000000.pt")) == {"step", "model"}
    again = _run(tmp_path, {**env, "GPUFLEET_RESUME_FROM": str(ckpt / "step-0000000.pt")})
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in ckpt.iterdir()) == ["step-0000000.pt", "step-0000001.pt"]
    assert torch.load(ckpt / "step-0000001.pt")["step"] == 1  # carried on after the step it stopped at
