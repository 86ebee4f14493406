"""The keywords gpufleet hands torch's DDP and FSDP wrappers exist in the installed torch."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest
import torch
from gpufleet.engine import compat


def _params(fn) -> set[str]:
    return set(inspect.signature(fn).parameters)


@pytest.mark.parametrize("sync_buffers", [True, False])
@pytest.mark.parametrize("bucket_mb", [None, 25.0])
def test_ddp_keywords_exist_in_the_installed_torch(sync_buffers: bool, bucket_mb: float | None) -> None:
    from torch.nn.parallel import DistributedDataParallel

    kw = compat.ddp_kwargs(sync_buffers, None, bucket_mb)
    assert set(kw) <= _params(DistributedDataParallel.__init__), set(kw) - _params(DistributedDataParallel.__init__)


def test_fully_shard_keywords_exist_in_the_installed_torch() -> None:
    fully_shard = compat.fully_shard_fn()
    assert set(compat.fully_shard_kwargs(True)) <= _params(fully_shard)


class _DDPOfTorch24:
    """DistributedDataParallel.__init__ as torch 2.4 declares it (no forward_sync_buffers)."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, delay_all_reduce_named_params=None,
                 param_to_hook_all_reduce=None, mixed_precision=None, device_mesh=None) -> None:
        pass


@pytest.mark.parametrize("sync_buffers", [True, False])
def test_an_older_torch_gets_only_keywords_it_knows(sync_buffers: bool) -> None:
    kw = compat.ddp_kwargs(sync_buffers, [0], 25.0, ddp=_DDPOfTorch24)
    assert set(kw) <= _params(_DDPOfTorch24.__init__)
    assert kw.get("broadcast_buffers", True) is sync_buffers


def test_the_installed_torch_is_in_the_declared_range() -> None:
    from importlib.metadata import requires

    (spec,) = [r for r in requires("gpufleet") if r.startswith("torch")]
    assert spec.replace(" ", "") == f"torch>={compat.OLDEST_TORCH}"
    installed = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    assert installed >= tuple(int(x) for x in compat.OLDEST_TORCH.split("."))


def test_real_ddp_accepts_them_in_a_gloo_world(tmp_path) -> None:
    # In a process of its own: a DDP reducer outliving its gloo group can hang the process
    # that made them when it is collected, and that process must not be pytest's. It leaves
    # with os._exit, as the launcher's ranks do (engine/launch.py): gloo's threads can abort an
    # interpreter's teardown ("terminate called without an active exception") after all went well.
    script = f"""
import os, sys
import torch, torch.distributed as dist
from gpufleet.engine import compat
dist.init_process_group("gloo", init_method="file://{tmp_path / 'rdv'}", rank=0, world_size=1)
model = torch.nn.Linear(4, 2)
wrapped = compat.ddp_class()(model, **compat.ddp_kwargs(False, None, 1.0))
wrapped(torch.ones(3, 4)).sum().backward()
assert model.weight.grad is not None
del wrapped
dist.destroy_process_group()
print("ok")
sys.stdout.flush()
os._exit(0)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


def test_an_out_of_memory_error_is_known_without_torch_s_top_level_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch.OutOfMemoryError is new (device-neutral); older releases of the range have torch.cuda's only.
    from gpufleet.engine import drills
    from gpufleet.engine.launch import classify

    monkeypatch.delattr(torch, "OutOfMemoryError")
    assert compat.out_of_memory_error() is torch.cuda.OutOfMemoryError
    assert classify(torch.cuda.OutOfMemoryError("CUDA error")) == "oom"
    with pytest.raises(torch.cuda.OutOfMemoryError):
        drills.raise_fault("oom", 1, 5)
