"""Configs, the recipe registry, the launch spec and data paths: the torch-free
contracts the API and the jobs supervisor rely on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.engine.config import TrainingConfigError, parse_overrides, read_config_file
from gpufleet.engine.paths import DataPathError, resolve_data_path
from gpufleet.engine.recipes import get_recipe, recipe_names
from gpufleet.engine.spec import LaunchSpec, parse_devices


def test_registry_finds_builtin_recipes_through_entry_points():
    assert {"sae", "mlp"} <= set(recipe_names())
    assert get_recipe("sae").name == "sae"
    with pytest.raises(TrainingConfigError) as exc:
        get_recipe("gpt5")
    assert "gpt5" in str(exc.value) and "sae" in str(exc.value)


def test_torch_free_modules_do_not_import_torch():
    code = ("import sys; import gpufleet.engine.recipes as r, gpufleet.engine.spec, "
            "gpufleet.engine.paths, gpufleet.engine.exitcodes, gpufleet.engine.launch, "
            "gpufleet.engine.progress; r.get_recipe('sae').resolve_config({'max_steps': 3}); "
            "r.get_recipe('mlp').resolve_config({}); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_resolve_config_coerces_strings_and_names_bad_fields():
    sae = get_recipe("sae")
    cfg = sae.resolve_config({"max_steps": "50", "lr": "3e-4", "variant": "relu", "grad_clip": "null"})
    assert (cfg.max_steps, cfg.lr, cfg.variant, cfg.grad_clip) == (50, 3e-4, "relu", None)
    cases = {
        "max_stepz": 5,  # unknown field
        "max_steps": "many",  # wrong type
        "precision": "fp8",  # not a choice
        "k": 100000,  # recipe validation
        "strategy": "zero3",
        "lr": -1,
    }
    for field, value in cases.items():
        with pytest.raises(ValueError) as exc:
            sae.resolve_config({field: value})
        assert isinstance(exc.value, TrainingConfigError)
        assert exc.value.field == field, (field, str(exc.value))
    mlp = get_recipe("mlp")
    assert mlp.resolve_config({"hidden": "32,8"}).hidden == [32, 8]
    with pytest.raises(TrainingConfigError, match="out_features"):
        mlp.resolve_config({"task": "classification", "out_features": 1})


def test_every_config_problem_is_reported_at_once():
    sae = get_recipe("sae")
    with pytest.raises(TrainingConfigError) as exc:
        sae.resolve_config({"d_in": "abc", "lr": -1, "bogus": 1, "precision": "fp8", "k": 10**6})
    fields = [f for f, _ in exc.value.problems]
    assert sorted(fields) == ["bogus", "d_in", "k", "lr", "precision"], exc.value.problems
    for name in fields:
        assert name in str(exc.value)
    # A field that could not be read is not blamed a second time by validation.
    with pytest.raises(TrainingConfigError) as exc:
        sae.resolve_config({"max_steps": "many", "warmup_steps": 5})
    assert [f for f, _ in exc.value.problems] == ["max_steps"]
    mlp = get_recipe("mlp")
    with pytest.raises(TrainingConfigError) as exc:
        mlp.resolve_config({"in_features": 0, "hidden": [8, 0], "synthetic_noise": -1, "log_every": 0})
    assert sorted(f for f, _ in exc.value.problems) == ["hidden", "in_features", "log_every", "synthetic_noise"]


def test_batch_layout_keeps_the_global_batch():
    sae = get_recipe("sae")
    cfg = sae.resolve_config({"global_batch_size": 256})
    assert cfg.batch_layout(1) == (256, 1)
    assert cfg.batch_layout(4) == (64, 1)
    # The out-of-memory rebalance: half the micro batch, twice the accumulation.
    cfg = sae.resolve_config({"global_batch_size": 256, "micro_batch_size": 32, "grad_accum_steps": 4})
    assert cfg.batch_layout(2) == (32, 4)
    with pytest.raises(TrainingConfigError, match="micro_batch_size"):
        cfg.batch_layout(4)
    with pytest.raises(TrainingConfigError, match="global_batch_size"):
        sae.resolve_config({"global_batch_size": 10}).batch_layout(4)


def test_yaml_file_and_overrides(tmp_path: Path):
    f = tmp_path / "run.yaml"
    f.write_text("max_steps: 10\nlr: 0.01\nvariant: relu\n")
    values = read_config_file(f)
    f.write_text("lr: 3e-4\nweight_decay: -1E+2\nname: 3e-4x\nlist: [1e-3, 2]\n")
    assert read_config_file(f) == {"lr": 3e-4, "weight_decay": -100.0, "name": "3e-4x", "list": [1e-3, 2]}
    values.update(parse_overrides(["max_steps=200", "lr=3e-4"]))
    cfg = get_recipe("sae").resolve_config(values)
    assert (cfg.max_steps, cfg.lr, cfg.variant) == (200, 3e-4, "relu")
    with pytest.raises(TrainingConfigError, match="FIELD=VALUE"):
        parse_overrides(["max_steps"])
    (tmp_path / "bad.yaml").write_text("- a list\n")
    with pytest.raises(TrainingConfigError, match="mapping"):
        read_config_file(tmp_path / "bad.yaml")


def test_a_recipe_can_run_on_a_mig_instance_named_by_its_uuid():
    mig = "MIG-c7384736-a75d-5afc-978f-d2f1294409fd"
    assert parse_devices(f"cuda:{mig}") == [f"cuda:{mig}"] and parse_devices(mig) == [f"cuda:{mig}"]
    spec = LaunchSpec(devices=[f"cuda:{mig}"], recipe="sae", config={}, checkpoint_dir="c", progress_file="p")
    # The launcher shows the rank that one instance, which it then sees as its cuda:0.
    assert spec.visible_devices_env() == {"CUDA_VISIBLE_DEVICES": mig, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert spec.run_devices() == ["cuda:0"] and spec.backend == "cuda"
    for bad in ("hip:MIG-1", "cuda:MIG-a b", "cuda:-1"):
        with pytest.raises(TrainingConfigError, match="cannot read device"):
            parse_devices(bad)


def test_device_forms_and_launch_spec_validation(tmp_path: Path):
    assert parse_devices("0,1") == ["cuda:0", "cuda:1"]
    assert parse_devices("cuda:0,hip:1") == ["cuda:0", "hip:1"]
    assert parse_devices("cpu", world_size=2) == ["cpu", "cpu"]
    with pytest.raises(TrainingConfigError, match="cannot read"):
        parse_devices("gpu7")
    base = dict(recipe="sae", config={}, checkpoint_dir="c", progress_file="p")
    spec = LaunchSpec(devices=["cuda:3", "cuda:5"], **base)
    assert spec.run_devices() == ["cuda:0", "cuda:1"]
    assert spec.visible_devices_env() == {"CUDA_VISIBLE_DEVICES": "3,5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    sim = LaunchSpec(devices=["cuda:3", "cuda:5"], ranks_on_cpu=True, **base)
    assert sim.run_devices() == ["cpu", "cpu"] and sim.visible_devices_env() == {}
    # GPUs of several vendors are one training (engine/parallel.py); the CPU with GPUs is not.
    assert LaunchSpec(devices=["cuda:0", "xpu:0"], **base).mixed_vendors
    with pytest.raises(TrainingConfigError, match="mix the CPU with GPUs"):
        LaunchSpec(devices=["cuda:0", "cpu"], **base)
    with pytest.raises(TrainingConfigError, match="twice"):
        LaunchSpec(devices=["cuda:0", "cuda:0"], **base)
    path = spec.write(tmp_path / "s.json")
    assert LaunchSpec.read(path) == spec
    (tmp_path / "bad.json").write_text('{"recipe": "sae"}')
    with pytest.raises(TrainingConfigError, match="missing"):
        LaunchSpec.read(tmp_path / "bad.json")


def test_data_path_must_stay_under_the_root(tmp_path: Path):
    root = tmp_path / "data"
    (root / "sub").mkdir(parents=True)
    good = root / "sub" / "acts.npy"
    good.write_bytes(b"x")
    (tmp_path / "secret.npy").write_bytes(b"x")
    (root / "link.npy").symlink_to(tmp_path / "secret.npy")
    assert resolve_data_path(root, "sub/acts.npy") == good.resolve()
    assert resolve_data_path(root, str(good)) == good.resolve()
    for bad, why in [("../secret.npy", "outside"), (str(tmp_path / "secret.npy"), "outside"),
                     ("link.npy", "outside"), ("sub/missing.npy", "does not exist"),
                     ("sub/acts.csv", "unsupported")]:
        with pytest.raises(DataPathError, match=why) as exc:
            resolve_data_path(root, bad)
        assert exc.value.field == "data_path"
    with pytest.raises(DataPathError, match="no data root"):
        resolve_data_path(None, "sub/acts.npy")


def test_the_example_configs_are_valid_and_the_readme_points_to_them():
    root = Path(__file__).resolve().parents[2]
    examples = sorted((root / "examples").glob("*.yaml"))
    assert {p.stem for p in examples} >= {"sae", "mlp"}
    # Sweep files are sweeps: each names its recipe, or a script (tests/sweeps check what they start).
    sweeps = [p for p in examples if p.stem.startswith("sweep-")]
    assert sweeps
    for path in sweeps:
        from gpufleet.client.sweeps import read_sweep_file
        from gpufleet.wire.sweep_requests import SweepCreate

        body = read_sweep_file(path)
        if "script" in body:  # the CLI uploads script.dir and sends its hash
            assert (path.parent / body["script"]["dir"]).is_dir(), path
            continue
        spec = SweepCreate.model_validate(body)
        get_recipe(spec.recipe).resolve_config(spec.config)
    for path in set(examples) - set(sweeps):
        cfg = get_recipe(path.stem).resolve_config(read_config_file(path))
        cfg.batch_layout(2)  # the README runs the sae example on two ranks
    readme = (root / "README.md").read_text()
    assert "examples/sae.yaml" in readme and "examples/mlp.yaml" in readme
    assert "run.yaml" not in readme


def test_numbers_are_never_true_or_false_and_names_may_be_numbers():
    mlp = get_recipe("mlp")
    with pytest.raises(TrainingConfigError) as exc:
        mlp.resolve_config({"max_steps": True, "lr": False, "hidden": [8, True], "grad_clip": True})
    assert sorted(f for f, _ in exc.value.problems) == ["grad_clip", "hidden", "lr", "max_steps"]
    assert "must be a number" in str(exc.value) and "list of numbers" in str(exc.value)
    cfg = mlp.resolve_config({"x_key": 5, "hidden": "[8, 4]", "max_steps": 50.0, "data_path": "~"})
    assert (cfg.x_key, cfg.hidden, cfg.max_steps, cfg.data_path) == ("5", [8, 4], 50, None)
