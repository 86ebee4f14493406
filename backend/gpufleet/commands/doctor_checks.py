"""The checks of ``gpufleet doctor``: each returns rows (check, result, detail, ok).

On a GPU host they measure the real thing: the CUDA context per GPU model, the
cost of one NVML sampling round, the gpu-marked tests with the estimate against
what NVML measures, and the DDP loop's overhead on ``cuda``. Without a GPU each
says so and runs what it can here: the simulated fleet's NVML and context, and
the overhead bench on the CPU.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The estimate's bound on a real GPU, as against the reference runs (tests/scheduling/
# test_estimate_reference.py): at most 2 % under what NVML measures, at most 5 % over.
ESTIMATE_UNDER, ESTIMATE_OVER = 0.02, 0.05


@dataclass
class Row:
    check: str
    result: str
    detail: str = ""
    ok: bool | None = None  # None: informational or skipped


def checkout() -> Path | None:
    """The source checkout (with tests/ and bench/) this gpufleet runs from, if any."""
    for root in (Path.cwd(), Path(__file__).resolve().parents[3]):
        if (root / "tests" / "scheduling").is_dir() and (root / "bench" / "ddp_overhead.py").is_file():
            return root
    return None


def torch_row() -> Row:
    import torch

    from gpufleet.engine.compat import OLDEST_TORCH

    cuda = torch.version.cuda or "none"
    have = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    ok = have >= tuple(int(x) for x in OLDEST_TORCH.split("."))
    return Row("torch", torch.__version__, f"CUDA build {cuda}; supported: >= {OLDEST_TORCH}", ok)


def gpu_rows(backend: Any, gpus: list[Any], simulated: bool) -> list[Row]:
    label = " (simulated)" if simulated else ""
    names = sorted({g.name or "?" for g in gpus})
    rows = [Row("GPUs" + label, str(len(gpus)), ", ".join(names))]
    contexts = backend.context_bytes(gpus)
    for name in names:
        figures = {contexts[g.index] for g in gpus if g.name == name and g.index in contexts}
        if figures:
            how = "configured (GPUFLEET_SIM_CONTEXT_MB)" if simulated else "measured by a probe process"
            rows.append(Row(f"CUDA context{label}", f"{max(figures) / 2**20:.0f} MiB", f"{name}: {how}"))
        else:
            rows.append(Row(f"CUDA context{label}", "not measured", f"{name}: no CUDA probe possible", None))
    return rows


def nvml_cost_row(nvml: Any, gpus: list[Any], simulated: bool, rounds: int = 50) -> Row:
    """Median time of one sampling round: memory, utilization and processes of every NVIDIA GPU."""
    cuda = [g for g in gpus if g.backend == "cuda"]
    label = " (simulated)" if simulated else ""
    if not cuda:
        return Row("NVML sample" + label, "skipped", "no NVIDIA GPU")
    nvml.nvmlInit()
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(g.device_id) for g in cuda]
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for h in handles:
                nvml.nvmlDeviceGetMemoryInfo(h)
                nvml.nvmlDeviceGetUtilizationRates(h)
                nvml.nvmlDeviceGetComputeRunningProcesses(h)
            times.append(time.perf_counter() - t0)
    finally:
        nvml.nvmlShutdown()
    return Row("NVML sample" + label, f"{statistics.median(times) * 1e3:.2f} ms",
               f"median of {rounds} rounds over {len(cuda)} GPU(s)")


def simulated_fleet(settings: Any) -> tuple[Any, list[Any]]:
    """A throwaway simulated fleet (one H100) for a machine without GPUs."""
    from gpufleet.config import load_settings
    from gpufleet.devices.backend import device_backend

    tmp = Path(tempfile.mkdtemp(prefix="gpufleet-doctor-"))
    sim = load_settings(data_dir=tmp, simulate="1xH100-80GB", host_name="doctor",
                        sim_context_mb=settings.sim_context_mb)
    backend = device_backend(sim)
    return backend, backend.detect_gpus()


# The mark as code applies it: a decorator, ``pytestmark = pytest.mark.gpu``, or an item of a pytestmark list.
_GPU_MARK = re.compile(r"^(?:\s*@|pytestmark\s*=\s*\[?\s*|\s+)pytest\.mark\.gpu\b", re.MULTILINE)


def gpu_test_files(root: Path) -> list[str]:
    """The test files that hold gpu-marked tests, relative to ``root``. The doctor collects
    only these: collecting the whole suite imports every test-only package (browsers,
    property testing, …), which a GPU host with only gpufleet's dependencies and pytest lacks."""
    found = []
    for path in sorted((root / "tests").rglob("test_*.py")):
        try:
            if _GPU_MARK.search(path.read_text(errors="replace")):
                found.append(str(path.relative_to(root)))
        except OSError:
            continue
    return found


def gpu_tests_rows(root: Path | None) -> list[Row]:
    """The gpu-marked tests, and the estimate-versus-measured lines test_memory_gpu prints."""
    if root is None:
        return [Row("gpu-marked tests", "skipped", "no source checkout here (tests/ is not installed)")]
    files = gpu_test_files(root)
    if not files:
        return [Row("gpu-marked tests", "none found", f"no test file under {root / 'tests'} is gpu-marked", False)]
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-s", "-p", "no:cacheprovider",
                           *files], cwd=root, capture_output=True, text=True)
    tail = (done.stdout.strip().splitlines() or ["no output"])[-1]
    rows = [Row("gpu-marked tests", "passed" if done.returncode == 0 else f"exit {done.returncode}", tail,
                done.returncode == 0)]
    return rows + estimate_rows(done.stdout)


def estimate_line(recipe: str, values: dict, batch: int, precision: str, estimated: int, measured: int,
                  detail: str, first_step: int | None = None) -> str:
    """The line tests/scheduling/test_memory_gpu.py prints per case, which the table reads back:
    ``measured`` is NVML's figure at the steady state (after step 3), ``first_step`` after step 1."""
    signed = (estimated - measured) / measured
    step1 = f" step1 {first_step}" if first_step is not None else ""
    return (f"ESTIMATE {recipe} {values} batch {batch} {precision}: estimated {estimated} measured {measured}"
            f"{step1} ({detail}) error {signed:+.2%}")


_ESTIMATE = re.compile(r"ESTIMATE (\S+) (.*?) batch (\d+) (\S+): estimated (\d+) measured (\d+)(?: step1 (\d+))?"
                       r" .* error ([-+][\d.]+)%")


def estimate_rows(output: str) -> list[Row]:
    """One row per estimate line in ``output``; a row saying none came when there is none."""
    rows = []
    for m in _ESTIMATE.finditer(output):
        recipe, values, batch, precision, est, measured, step1, err = m.groups()
        first = f"; after step 1 {int(step1) / 2**20:,.0f} MiB" if step1 else ""
        # The variant tells apart cases of one recipe (an SAE's topk and relu).
        variant = re.search(r"'variant': '([\w-]+)'", values)
        name = f"{recipe} {variant.group(1)}" if variant else recipe
        rows.append(Row(f"estimate {name} b{batch} {precision}",
                        f"{int(est) / 2**20:,.0f} / {int(measured) / 2**20:,.0f} MiB",
                        f"estimated / NVML-measured at step 3, error {err}%{first}",
                        -ESTIMATE_UNDER * 100 <= float(err) <= ESTIMATE_OVER * 100))
    if not rows:
        rows.append(Row("estimate vs measured", "no cases ran",
                        "tests/scheduling/test_memory_gpu.py printed no estimate (skipped?)", False))
    return rows


def bench_row(root: Path | None, device: str) -> Row:
    name = f"DDP overhead ({device})"
    if root is None:
        return Row(name, "skipped", "no source checkout here (bench/ is not installed)")
    # On a GPU the model the goal is set for: big enough that a loop waiting for the device shows.
    size = "gpu" if device == "cuda" else "small"
    done = subprocess.run([sys.executable, "bench/ddp_overhead.py", "--device", device, "--world", "1",
                           "--rounds", "6", "--steps", "20", "--size", size, "--no-scaling"],
                          cwd=root, capture_output=True, text=True)
    m = re.search(r"ratio ours/bare ([\d.]+)\s+\(goal", done.stdout)
    if done.returncode != 0 or m is None:
        return Row(name, "failed", (done.stderr.strip().splitlines() or ["no output"])[-1], False)
    ratio = float(m.group(1))
    return Row(name, f"{ratio:.3f}", f"ours / bare DDP samples/s, one rank, {size} model (goal >= 0.99 on a GPU)",
               ratio >= 0.99 if device == "cuda" else None)
