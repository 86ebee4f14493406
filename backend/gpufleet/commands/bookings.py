"""`gpufleet book …` and `gpufleet bookings ls | show | cancel | free | feed`: GPUs held ahead, through the server.

Times are read in ``--tz`` (default: this machine's zone, from ``TZ`` or /etc/localtime, else UTC) unless they
carry an offset, and shown in it. Like the trainings commands these ask a server (``--server``, default
``$GPUFLEET_SERVER``, else this machine's server through its socket, as the account that runs the command).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from gpufleet.commands.tables import ServerOpt, make_console

bookings_app = typer.Typer(help="Bookings: GPUs held ahead for a window (`gpufleet book` makes one).",
                           no_args_is_help=True)
out = make_console()
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
TzOpt = Annotated[str | None, typer.Option("--tz", help="the IANA time zone of the times (default: this machine's)")]
OPTIONS = {"start": "--start", "end": "--end", "hours": "--hours", "gpus": "--gpus", "host": "--host",
           "gpu_indices": "--gpu", "model": "--model", "owner": "--for", "time_zone": "--tz", "reason": "--reason"}


def local_zone() -> str:
    """This machine's zone's IANA name: ``TZ``, else where /etc/localtime points, else UTC."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz:
        return tz
    try:
        target = str(Path("/etc/localtime").resolve())
    except OSError:
        return "UTC"
    return target.split("zoneinfo/", 1)[1] if "zoneinfo/" in target else "UTC"


def _client(server: str | None):
    from gpufleet.commands.remote import Client

    c = Client(server)
    c.options = OPTIONS
    return c


def _line(b: Any) -> str:
    where = ", ".join(f"{g.host}:{g.index}" for g in b.gpus)
    note = f"  {b.reason}" if b.reason else ""
    kind = "" if b.kind == "booking" else f" [{b.kind}]"
    return (f"{b.id}  {b.owner}{kind}  {b.start_local} → {b.end_local}  {b.gpu_count} GPU(s) {where}  "
            f"{b.state}{note}")


def book(
    gpus: Annotated[int, typer.Option("--gpus", min=1, help="how many GPUs (on one host)")],
    start: Annotated[str, typer.Option("--start", help="e.g. 2026-12-04T14:00 (in --tz unless it has an offset)")],
    end: Annotated[str | None, typer.Option("--end", help="when it ends (or --hours)")] = None,
    hours: Annotated[float | None, typer.Option("--hours", help="how long")] = None,
    host: Annotated[str | None, typer.Option("--host", help="on this host (default: wherever they fit)")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="exactly these GPUs of --host, e.g. 0,1")] = None,
    model: Annotated[str | None, typer.Option("--model", help="GPUs of this model (its full name)")] = None,
    owner: Annotated[str | None, typer.Option("--for", help="for this user (admins)")] = None,
    maintenance: Annotated[bool, typer.Option("--maintenance", help="block the GPUs for maintenance (admins)")
                           ] = False,
    reason: Annotated[str | None, typer.Option("--reason", help="what it is for, shown to everyone")] = None,
    tz: TzOpt = None,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Book GPUs for a window; refused with the booking in the way and the next free window when they are taken."""
    from gpufleet.commands.remote import fail

    fields: dict[str, Any] = {"gpus": gpus, "start": start, "time_zone": tz or local_zone(),
                              "kind": "maintenance" if maintenance else "booking"}
    for name, value in (("end", end), ("hours", hours), ("host", host), ("model", model), ("owner", owner),
                        ("reason", reason)):
        if value is not None:
            fields[name] = value
    if gpu is not None:
        try:
            fields["gpu_indices"] = [int(x) for x in gpu.split(",") if x.strip()]
        except ValueError:
            fail(f"--gpu takes GPU indices like 0,1, not {gpu!r}")
    with _client(server) as c:
        b = c.book(**fields)
    if as_json:
        out.print_json(b.model_dump_json())
        return
    out.print(f"booked {_line(b)}", highlight=False, soft_wrap=True)


@bookings_app.command("ls")
def ls(mine: Annotated[bool, typer.Option("--mine", help="only yours")] = False,
       released: Annotated[bool, typer.Option("--released", help="cancelled and released ones too")] = False,
       tz: TzOpt = None, server: ServerOpt = None, as_json: JsonOpt = False) -> None:
    """Bookings not yet over, by start, times in your zone."""
    with _client(server) as c:
        found = c.bookings(mine=mine, tz=tz or local_zone(), released=released)
    if as_json:
        out.print_json(found.model_dump_json())
        return
    if not found.data:
        out.print("no bookings; make one with `gpufleet book --gpus N --start TIME --hours H`")
    for b in found.data:
        out.print(_line(b), highlight=False, soft_wrap=True)


@bookings_app.command("show")
def show(booking_id: Annotated[str, typer.Argument(help="the booking's id")], tz: TzOpt = None,
         server: ServerOpt = None, as_json: JsonOpt = False) -> None:
    with _client(server) as c:
        b = c.booking(booking_id, tz=tz or local_zone())
    if as_json:
        out.print_json(b.model_dump_json())
        return
    out.print(_line(b), highlight=False, soft_wrap=True)
    out.print(f"booked by {b.created_by}; asked in {b.time_zone}; shown in {b.shown_in}", highlight=False)
    if b.released_at:
        out.print(f"released {b.released_at:%Y-%m-%d %H:%M} UTC: {b.release_reason}", highlight=False)


@bookings_app.command("cancel")
def cancel(booking_id: Annotated[str, typer.Argument(help="the booking's id")], server: ServerOpt = None) -> None:
    """Cancel a booking: its GPUs are free from now."""
    with _client(server) as c:
        b = c.cancel_booking(booking_id)
    out.print(f"cancelled {b.id}", highlight=False)


@bookings_app.command("free")
def free(gpus: Annotated[int, typer.Option("--gpus", min=1)], hours: Annotated[float, typer.Option("--hours")],
         host: Annotated[str | None, typer.Option("--host")] = None,
         model: Annotated[str | None, typer.Option("--model")] = None, server: ServerOpt = None) -> None:
    """The next window of --hours in which --gpus GPUs on one host are free."""
    with _client(server) as c:
        found = c.next_free(gpus, hours, host=host, model=model)
    if found.window is None:
        out.print("no window that long is free within the furthest-ahead limit")
    else:
        out.print(f"free {found.window.start:%Y-%m-%d %H:%M} → {found.window.end:%Y-%m-%d %H:%M} UTC",
                  highlight=False)


@bookings_app.command("feed")
def feed(group: Annotated[str | None, typer.Option("--group", help="a team's bookings (a group you are in)")] = None,
         server: ServerOpt = None) -> None:
    """A secret iCalendar feed address for a calendar app (yours, or --group's); asking again ends the old one."""
    with _client(server) as c:
        made = c.booking_feed(group)
    out.print(made.url, highlight=False, soft_wrap=True)
    out.print("Keep it secret: it reads this feed only (it signs in nowhere). Run this again to rotate it.",
              highlight=False)


def register(app: typer.Typer) -> None:
    app.command("book")(book)
    app.add_typer(bookings_app, name="bookings")
