"""CUDA paths: NCCL, autocast, the launcher narrowing CUDA_VISIBLE_DEVICES.

Skipped where no CUDA GPU is present (CI here); run on a GPU host with
``pytest -m gpu tests/engine``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpufleet.devices.ops import backend_ops
from gpufleet.engine import exitcodes
from gpufleet.engine.distributed import DistributedTrainer
from gpufleet.engine.recipes import get_recipe
from gpufleet.engine.trainer import Trainer

from .conftest import tiny_sae

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _gpu(i: int = 0) -> str:
    return f"cuda:{i}"


def test_nccl_process_group_with_one_rank_trains_under_ddp(tmp_path: Path):
    r = get_recipe("sae")
    cfg = r.resolve_config(tiny_sae(max_steps=20, checkpoint_every=10))
    dt = DistributedTrainer([_gpu()], cfg, use_process_group=True, collective_timeout_s=30)
    t = Trainer(r, cfg, dist_trainer=dt, checkpoint_dir=tmp_path / "ck")
    try:
        result = t.train()
        assert torch.distributed.get_backend() == "nccl"
        assert t.strategy == "ddp" and type(t.model).__name__ == "DistributedDataParallel"
        assert t.model.device_ids == [0]
        assert result.step == 20 and result.last_metrics["loss"] < 10
    finally:
        t.close()
    assert not torch.distributed.is_initialized()  # cleanup destroyed the group
    state = torch.load(tmp_path / "ck" / "step-20" / "model.pt", weights_only=True)
    assert "W_dec" in state and state["W_dec"].device.type == "cpu"


@pytest.mark.parametrize("precision,dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_autocast_runs_the_model_in_low_precision(precision, dtype):
    r = get_recipe("mlp")
    cfg = r.resolve_config({"precision": precision, "max_steps": 10, "log_every": 5, "hidden": [64]})
    t = Trainer(r, cfg, devices=[_gpu()])
    t.setup()
    seen = []
    t.raw_model.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    result = t.train()
    assert seen and all(d == dtype for d in seen)
    assert t.scaler.is_enabled() == (precision == "fp16")
    assert result.last_metrics["loss"] == result.last_metrics["loss"]  # not NaN
    assert next(t.raw_model.parameters()).dtype == torch.float32  # master weights stay fp32


def test_launcher_narrows_visible_devices_and_reports_gpu_memory(launch_factory):
    last = torch.cuda.device_count() - 1
    launch = launch_factory("sae", tiny_sae(max_steps=10), [_gpu(last)], env={"CUDA_VISIBLE_DEVICES": ""})
    # The parent's own CUDA_VISIBLE_DEVICES must not matter: the launcher sets it.
    launch.env.pop("CUDA_VISIBLE_DEVICES")
    assert launch.run(timeout=300) == exitcodes.SUCCEEDED, launch.err
    start = launch.of_type("start")[0]
    assert start["visible_devices"] == {"CUDA_VISIBLE_DEVICES": str(last), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert start["run_devices"] == ["cuda:0"]
    peak = launch.of_type("peak_memory")[-1]
    assert peak["device_kind"] == "cuda" and peak["per_rank"][0] > 0


def test_backend_ops_on_cuda():
    ops = backend_ops(_gpu())
    assert ops.dist_backend == "nccl" and ops.is_accelerator
    free, total = ops.memory_info()
    assert 0 < free <= total
    ops.reset_peak_memory_stats()
    x = torch.ones(1024, 1024, device=ops.device)
    ops.synchronize()
    assert ops.max_memory_allocated() >= x.numel() * 4
    with ops.autocast(torch.bfloat16):
        assert (x @ x).dtype == torch.bfloat16
    assert ops.grad_scaler(True).is_enabled()
