"""What a Slurm task's node reads of its grant: the GPUs Slurm made visible, by index or MIG instance."""

from __future__ import annotations

from gpufleet.pools.node import granted

MIG = "MIG-c7384736-a75d-5afc-978f-d2f1294409fd"


def test_the_node_takes_the_gpus_slurm_granted() -> None:
    assert granted({"CUDA_VISIBLE_DEVICES": "2,3"}, 2).labels == ["cuda:2", "cuda:3"]
    assert granted({"CUDA_VISIBLE_DEVICES": "2,3,5"}, 2).indexes == [2, 3]


def test_a_mig_instance_slurm_granted_reaches_the_launcher_by_its_uuid() -> None:
    assert granted({"CUDA_VISIBLE_DEVICES": MIG}, 1).env()["CUDA_VISIBLE_DEVICES"] == MIG


def test_without_a_readable_grant_the_node_numbers_its_own_gpus() -> None:
    for environ in ({}, {"CUDA_VISIBLE_DEVICES": ""}, {"CUDA_VISIBLE_DEVICES": "0"},
                    {"CUDA_VISIBLE_DEVICES": "no such gpu"}):
        assert granted(environ, 2).indexes == [0, 1], environ
