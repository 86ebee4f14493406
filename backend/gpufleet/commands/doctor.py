"""``gpufleet doctor``: one table that says whether this host runs gpufleet as it should.

What an operator runs after installing on a new box (see README, "GPU hosts").
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from gpufleet.commands.tables import Column, labelled, print_table

QuickOpt = Annotated[bool, typer.Option("--quick", help="skip the tests and the benchmark (seconds, not minutes)")]


def doctor(quick: QuickOpt = False) -> None:
    """Check this host: GPUs, CUDA context, NVML cost, estimate vs measured, DDP overhead."""
    from gpufleet.commands import doctor_checks as checks
    from gpufleet.config import ConfigError, get_settings
    from gpufleet.devices.backend import device_backend

    console = Console(markup=False)
    try:
        settings = get_settings()
    except ConfigError as exc:
        Console(stderr=True, markup=False).print(labelled("error:", exc), highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    backend = device_backend(settings)
    gpus = [g for g in backend.detect_gpus() if g.healthy]
    real_cuda = not backend.simulated and any(g.backend == "cuda" for g in gpus)
    rows = [checks.torch_row()]
    if gpus:
        rows += checks.gpu_rows(backend, gpus, backend.simulated)
        rows.append(checks.nvml_cost_row(backend.nvml, gpus, backend.simulated))
    else:
        console.print("No GPU on this machine: the GPU checks are skipped; the simulated fleet's "
                      "NVML and context, and the CPU benchmark, run instead.")
        sim, sim_gpus = checks.simulated_fleet(settings)
        rows += checks.gpu_rows(sim, sim_gpus, True)
        rows.append(checks.nvml_cost_row(sim.nvml, sim_gpus, True))
    root = checks.checkout()
    if quick:
        rows.append(checks.Row("gpu-marked tests", "skipped", "--quick"))
        rows.append(checks.Row("DDP overhead", "skipped", "--quick"))
    else:
        if real_cuda:
            rows += checks.gpu_tests_rows(root)
        else:
            rows.append(checks.Row("gpu-marked tests", "skipped", "no CUDA GPU: the estimate is checked on one"))
        rows.append(checks.bench_row(root, "cuda" if real_cuda else "cpu"))
    marks = {True: Text("ok", style="green"), False: Text("FAIL", style="bold red"), None: Text("-")}
    columns = [Column("check"), Column("result", justify="right"), Column(""),
               Column("detail", drop=1, shorten=True, min_width=20)]
    print_table(console, columns, [[r.check, r.result, marks[r.ok], r.detail] for r in rows],
                title="gpufleet doctor")
    if any(r.ok is False for r in rows):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
