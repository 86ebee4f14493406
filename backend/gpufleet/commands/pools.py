"""`gpufleet pools add slurm NAME --partition P | ls | rm NAME`: places an existing scheduler owns.

A pool is a Slurm partition gpufleet submits trainings to, as each member's
own Unix account (docs/slurm.md). These ask a server (``--server``, default
``$GPUFLEET_SERVER``, else this machine's server through its socket).
"""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.commands.tables import labelled, make_console

pools_app = typer.Typer(help="Pools: Slurm partitions trainings can run in, beside the team's hosts.",
                        no_args_is_help=True)
add_app = typer.Typer(help="Add a pool (admins).", no_args_is_help=True)
pools_app.add_typer(add_app, name="add")
out = make_console()
err = make_console(stderr=True)
ServerOpt = Annotated[str | None, typer.Option(help="server URL (default: $GPUFLEET_SERVER, else this machine's)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
# The fields whose names a refusal may use, as the options that set them (plain words stay words).
OPTIONS = {"gpus_per_node": "--gpus-per-node", "gpu_model": "--gpu-model", "gpu_memory_mb": "--gpu-memory",
           "checkpoint_root": "--checkpoint-root"}


def _client(server: str | None):
    from gpufleet.commands.remote import Client

    c = Client(server)
    c.options = OPTIONS
    return c


def _refused(c, exc: Exception) -> None:
    err.print(labelled("error:", c.in_options(str(exc))), highlight=False, soft_wrap=True)
    raise typer.Exit(2) from None


@add_app.command("slurm")
def add_slurm(
    name: Annotated[str, typer.Argument(help="the pool's name, e.g. cluster")],
    partition: Annotated[str, typer.Option("--partition", help="the Slurm partition its jobs go to")],
    account: Annotated[str | None, typer.Option("--account", help="the Slurm account jobs are charged to")] = None,
    gpus_per_node: Annotated[int | None, typer.Option("--gpus-per-node", min=1, max=64)] = None,
    gpu_model: Annotated[str | None, typer.Option("--gpu-model", help="e.g. H100-80GB")] = None,
    gpu_memory: Annotated[int | None, typer.Option("--gpu-memory", min=1, max=4096, help="GiB per GPU")] = None,
    checkpoint_root: Annotated[str | None, typer.Option(
        "--checkpoint-root",
        help="a folder on the cluster's shared file system this host sees at the same path")] = None,
    python: Annotated[str | None, typer.Option("--python", help="the nodes' Python with gpufleet installed")] = None,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a Slurm partition as a pool; the server checks that the cluster answers and has the partition."""
    from gpufleet.client import GpufleetError

    with _client(server) as c:
        try:
            pool = c.add_pool(name, partition, account=account, gpus_per_node=gpus_per_node, gpu_model=gpu_model,
                              gpu_memory_mb=gpu_memory * 1024 if gpu_memory else None,
                              checkpoint_root=checkpoint_root, python=python)
        except GpufleetError as exc:
            _refused(c, exc)
    if as_json:
        out.print_json(pool.model_dump_json())
        return
    out.print(f"pool {pool.name}: Slurm partition {pool.partition}; checkpoints under {pool.checkpoint_root}",
              highlight=False)


@pools_app.command("ls")
def ls(server: ServerOpt = None, as_json: JsonOpt = False) -> None:
    """The pools, with each partition's nodes and GPUs as Slurm reports them now."""
    with _client(server) as c:
        pools = c.pools()
    if as_json:
        out.print_json(pools.model_dump_json())
        return
    if not pools.data:
        out.print("no pools; an admin adds one with `gpufleet pools add slurm NAME --partition P`")
    for p in pools.data:
        model = f", {p.gpu_model}" if p.gpu_model else ""
        out.print(f"{p.name}  slurm partition {p.partition}{model}", highlight=False)
        if p.error:
            out.print(f"  {p.error}", highlight=False)
        for n in p.nodes or []:
            out.print(f"  {n.name:16} {n.state:10} gpus {n.gres} used {n.gres_used}  cpus {n.cpus}", highlight=False)


@pools_app.command("rm")
def rm(name: Annotated[str, typer.Argument(help="the pool's name")], server: ServerOpt = None) -> None:
    """Remove a pool (admins); refused while it has trainings that are queued or running."""
    from gpufleet.client import GpufleetError

    with _client(server) as c:
        try:
            c.remove_pool(name)
        except GpufleetError as exc:
            _refused(c, exc)
    out.print(f"removed pool {name}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(pools_app, name="pools")
