"""What `trainings ls|show` and `train --local` print: 80 columns, binary sizes, 4-digit losses, whole paths."""

from __future__ import annotations

import io

from rich.console import Console

from gpufleet.commands.tables import print_table
from gpufleet.commands.train import _summary
from gpufleet.commands.trainings import LS_COLUMNS, show_fields
from gpufleet.engine.spec import LaunchSpec

TRAINING = {
    "id": "5f0c3a52-9a1e-4a77-8d0e-2b7f0c1d9e11", "name": "sae-sweep-lr-3e-4-with-a-long-name",
    "owner": "lorenzo", "recipe": "sae", "status": "running", "status_reason": None,
    "wait_reason": None, "host_name": "a100-node-017.cluster.example.org", "gpu_ids": [0, 1, 2, 3],
    "world_size": 4, "distributed": True, "step": 120, "max_steps": 2000, "last_loss": 0.012345678901234567,
    "restarts": 0, "max_restarts": 2, "attempt": 1,
    "last_checkpoint": "/var/lib/gpufleet/checkpoints/5f0c3a52-9a1e-4a77-8d0e-2b7f0c1d9e11/step-100",
    "selection": None, "memory_estimate": 1234567890, "measured_peak_memory": 3 * 2**30,
}


def test_show_prints_binary_sizes_and_four_digit_losses():
    fields = dict(show_fields(TRAINING))
    assert fields["step"] == "120/2000  loss 0.01235"
    assert fields["memory"] == "estimate 1.1 GiB, measured peak 3.0 GiB"
    assert fields["checkpoint"] == TRAINING["last_checkpoint"]


def test_ls_fits_80_columns():
    buf = io.StringIO()
    row = [TRAINING["id"][:8], TRAINING["name"], "lorenzo", "queued", TRAINING["host_name"], "auto×4",
           "0/2000", "needs 4 free GPU(s) with 11.2 GiB free on one host; host a100-node-017 has one free"]
    print_table(Console(file=buf, width=80, force_terminal=True, color_system=None), LS_COLUMNS, [row] * 3)
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80, buf.getvalue()
    assert all(line.count("\n") == 0 for line in lines) and "5f0c3a52" in buf.getvalue()
    assert sum("queued" in line for line in lines) == 3  # one line per training, none wrapped


def test_train_summary_never_cuts_paths_at_80_columns(tmp_path):
    deep = tmp_path / "a-very-long-directory-name-for-checkpoints" / "local-mlp-20260101-000000"
    spec = LaunchSpec(recipe="mlp", config={}, devices=["cpu"], checkpoint_dir=str(deep),
                      progress_file=str(deep / "progress-of-this-local-training-run.jsonl"))
    records = [
        {"type": "step", "step": 12, "loss": 0.123456789, "parts": {"mse": 0.0987654321}, "samples_per_s": 1234.5},
        {"type": "peak_memory", "per_rank": [123456789]},
        {"type": "checkpoint", "step": 12, "path": str(deep / "step-12")},
    ]
    buf = io.StringIO()
    _summary(records, 0, spec, Console(file=buf, width=80))
    out = buf.getvalue()
    assert str(deep / "step-12") in out and spec.progress_file in out and "…" not in out
    assert "0.1235" in out and "0.09877" in out and "118 MiB" in out
