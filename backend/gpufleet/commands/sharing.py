"""`gpufleet groups …`, `gpufleet users set-quota` (limits, share, priority cap) and `gpufleet usage`.

Groups and quotas work on the server's database directly, like `gpufleet
users`: whoever can run them there can read its configuration already. Over
HTTP the same changes belong to an admin. `gpufleet usage` asks a server
(``--server``, default ``$GPUFLEET_SERVER``), or with ``--local`` reads the
database here.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, NoReturn

import typer

from gpufleet.commands import users
from gpufleet.commands.tables import ServerOpt, labelled, make_console

groups_app = typer.Typer(help="Groups of users and their quotas (admins).", no_args_is_help=True)
err = make_console(stderr=True)

MaxGpusOpt = Annotated[str | None, typer.Option("--max-gpus", help="GPUs held at once, or 'none' for no limit")]
HoursOpt = Annotated[str | None, typer.Option("--gpu-hours-week",
                                              help="GPU-hours held over a rolling 7 days, or 'none'")]
PriorityOpt = Annotated[str | None, typer.Option(
    "--max-priority", help="the highest priority a member may give a training (0-1000), or 'none' for the default")]
# A booking limit's 'none': for a user the server's default (GPUFLEET_BOOKING_*), for a group no limit.
BookHoursOpt = Annotated[str | None, typer.Option(
    "--book-hours-week", help="GPU-hours of bookings starting in one week, or 'none'")]
BookGpusOpt = Annotated[str | None, typer.Option("--book-max-gpus", help="GPUs bookings hold at once, or 'none'")]
BookLongestOpt = Annotated[str | None, typer.Option("--book-max-hours", help="the longest booking (hours), or 'none'")]
BookAheadOpt = Annotated[str | None, typer.Option(
    "--book-ahead-days", help="how many days ahead a booking may start, or 'none'")]


def _admin_here() -> str:
    """Who sets a cap from this command line, as a refused member is told."""
    import getpass

    return f"{getpass.getuser()} (command line)"


def _fail(message: str) -> NoReturn:
    err.print(labelled("error:", message), highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _bookings(have: Any, hours: str | None, gpus: str | None, longest: str | None, ahead: str | None) -> Any:
    """The booking limits asked for, each one not given kept as it was."""
    from gpufleet.users.groups import BookingLimits

    return BookingLimits(_number("--book-hours-week", hours, float, have.hours_per_week),
                         _number("--book-max-gpus", gpus, int, have.max_gpus),
                         _number("--book-max-hours", longest, float, have.max_hours),
                         _number("--book-ahead-days", ahead, float, have.max_ahead_days))


def _number(option: str, value: str | None, kind: type, current: Any) -> Any:
    """The option's value: unchanged when not given, None for 'none', else a number of ``kind``."""
    if value is None:
        return current
    if value.strip().lower() == "none":
        return None
    try:
        return kind(value)
    except ValueError:
        _fail(f"{option} {value!r} is not {'a whole number' if kind is int else 'a number'} or 'none'")


@groups_app.command("create")
def groups_create(name: Annotated[str, typer.Argument(help="lowercase group name, e.g. vision")]) -> None:
    """Create an empty group."""
    from gpufleet.users.groups import create_group

    users.run_in_session(lambda sess: create_group(sess, name))
    err.print(f"created group {name}; add people with `gpufleet groups add {name} USER`", highlight=False)


@groups_app.command("ls")
@groups_app.command("list", hidden=True)
def groups_list() -> None:
    """List groups, their members and quotas."""
    from gpufleet.users.groups import list_groups

    views = users.run_in_session(list_groups, write=False)

    def fmt(v: Any) -> str:
        return "-" if v is None else f"{v:g}"

    users.emit_table(("name", "members", "max GPUs", "GPU-hours/week", "max priority", "bookings"),
                     [(v.name, ",".join(v.members) or "-", fmt(v.limits.max_gpus), fmt(v.limits.gpu_hours_per_week),
                       fmt(v.limits.max_priority), describe_bookings(v.limits.bookings)) for v in views])
    if not views:
        err.print("no groups yet; create one with `gpufleet groups create NAME`")


@groups_app.command("delete")
def groups_delete(name: str) -> None:
    """Delete a group and its quota (its users stay)."""
    from gpufleet.users.groups import delete_group

    users.run_in_session(lambda sess: delete_group(sess, name))
    err.print(f"deleted group {name}", highlight=False)


@groups_app.command("add")
def groups_add(name: str, members: Annotated[list[str], typer.Argument(help="user names")]) -> None:
    """Add users to a group (all or none: one refused name adds nobody)."""
    from gpufleet.users.groups import add_member

    if len(set(members)) != len(members):
        _fail(f"a user is named twice in {' '.join(members)}; name each once")

    def work(sess) -> None:
        for m in members:
            add_member(sess, name, m)

    users.run_in_session(work)
    err.print(f"added {', '.join(members)} to group {name}", highlight=False)


@groups_app.command("remove")
def groups_remove(name: str, member: str) -> None:
    """Take a user out of a group."""
    from gpufleet.users.groups import remove_member

    users.run_in_session(lambda sess: remove_member(sess, name, member))
    err.print(f"removed {member} from group {name}", highlight=False)


@groups_app.command("set-quota")
def groups_set_quota(name: str, max_gpus: MaxGpusOpt = None, hours: HoursOpt = None,
                     max_priority: PriorityOpt = None, book_hours: BookHoursOpt = None, book_gpus: BookGpusOpt = None,
                     book_longest: BookLongestOpt = None, book_ahead: BookAheadOpt = None) -> None:
    """Set a group's quota, priority cap and booking limits (options not given keep their value).

    A group's booking limits count all its members' bookings together; 'none' is no limit."""
    from gpufleet.users.groups import Limits, list_groups, set_group_quota

    def work(sess) -> Limits:
        have = next((v.limits for v in list_groups(sess) if v.name == name), Limits())
        limits = Limits(_number("--max-gpus", max_gpus, int, have.max_gpus),
                        _number("--gpu-hours-week", hours, float, have.gpu_hours_per_week),
                        max_priority=_number("--max-priority", max_priority, int, have.max_priority),
                        bookings=_bookings(have.bookings, book_hours, book_gpus, book_longest, book_ahead))
        return set_group_quota(sess, name, limits, set_by=_admin_here())

    done = users.run_in_session(work)
    err.print(f"group {name}: {_describe(done)}", highlight=False)


def users_set_quota(
    name: str, max_gpus: MaxGpusOpt = None, hours: HoursOpt = None,
    share: Annotated[float | None, typer.Option("--share", help="fair-share weight (default 1)")] = None,
    max_priority: PriorityOpt = None, book_hours: BookHoursOpt = None, book_gpus: BookGpusOpt = None,
    book_longest: BookLongestOpt = None, book_ahead: BookAheadOpt = None,
) -> None:
    """Set a user's quota, fair share, priority cap and booking limits (options not given keep their value).

    A booking limit's 'none' is the server's default for members (GPUFLEET_BOOKING_*)."""
    from gpufleet.users.groups import Limits, set_user_quota, user_limits

    def work(sess) -> Limits:
        have = user_limits(sess, name)
        limits = Limits(_number("--max-gpus", max_gpus, int, have.max_gpus),
                        _number("--gpu-hours-week", hours, float, have.gpu_hours_per_week),
                        have.share if share is None else share,
                        _number("--max-priority", max_priority, int, have.max_priority),
                        bookings=_bookings(have.bookings, book_hours, book_gpus, book_longest, book_ahead))
        return set_user_quota(sess, name, limits, set_by=_admin_here())

    done = users.run_in_session(work)
    err.print(f"user {name}: {_describe(done)}, share {done.share:g}", highlight=False)


def _describe(limits: Any) -> str:
    gpus = "no GPU limit" if limits.max_gpus is None else f"at most {limits.max_gpus} GPUs at once"
    hours = "" if limits.gpu_hours_per_week is None else f", {limits.gpu_hours_per_week:g} GPU-hours a week"
    prio = "" if limits.max_priority is None else f", priority at most {limits.max_priority}"
    booked = describe_bookings(limits.bookings)
    return gpus + hours + prio + (f"; bookings: {booked}" if booked != "-" else "")


def describe_bookings(b: Any) -> str:
    """A quota's booking limits in words ('-' for none set)."""
    parts = [f"{b.max_gpus} GPUs at once" if b.max_gpus is not None else "",
             f"{b.hours_per_week:g} GPU-hours a week" if b.hours_per_week is not None else "",
             f"{b.max_hours:g} h longest" if b.max_hours is not None else "",
             f"{b.max_ahead_days:g} days ahead" if b.max_ahead_days is not None else ""]
    return ", ".join(p for p in parts if p) or "-"


def _usage_from_database(by: str, first: str | None, last: str | None) -> dict[str, Any]:
    from datetime import timedelta

    from gpufleet.config import ConfigError, get_settings
    from gpufleet.db.session import missing_sqlite_file, session_scope
    from gpufleet.db.types import utcnow
    from gpufleet.trainings.service import training_names
    from gpufleet.users.usage import UsageError, parse_day, row_fields, usage_report

    try:
        settings = get_settings()
    except ConfigError as exc:
        _fail(str(exc))
    missing = missing_sqlite_file(settings)
    if missing is not None:
        _fail(f"no database at {missing}: run `gpufleet serve` first, set GPUFLEET_DATABASE_URL, "
              "or drop --local to ask a server")
    try:
        to_day = parse_day("--to", last, utcnow().date())
        from_day = parse_day("--from", first, to_day - timedelta(days=6))
        with session_scope(settings) as sess:
            rows = usage_report(sess, by, from_day, to_day)
            names = training_names(sess, [r.name for r in rows]) if by == "training" else {}
    except UsageError as exc:
        _fail(str(exc))
    return {"by": by, "from": str(from_day), "to": str(to_day), "data": [
        {"day": str(r.day), **row_fields(r), "training_name": names.get(r.name)} for r in rows]}


def _usage_from_server(server: str | None, by: str, first: str | None, last: str | None) -> dict[str, Any]:
    from gpufleet.commands.remote import Client

    params = {k: v for k, v in {"by": by, "from": first, "to": last}.items() if v}
    with Client(server) as c:
        return c.call("GET", "/api/v1/usage", params=params)


def usage(
    by: Annotated[str, typer.Option("--by", help="user, group or training")] = "user",
    first: Annotated[str | None,
                     typer.Option("--from", help="first UTC day, YYYY-MM-DD (default 6 days before --to)")] = None,
    last: Annotated[str | None, typer.Option("--to", help="last UTC day, YYYY-MM-DD (default today)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON for scripts")] = False,
    server: ServerOpt = None,
    local: Annotated[bool, typer.Option("--local", help="read the database here instead of asking a server")] = False,
) -> None:
    """GPU-hours per UTC day and user (or group, or training): held (reserved) and used (weighted by utilisation)."""
    if by not in ("user", "group", "training"):
        _fail(f"--by {by!r} is not user, group or training")
    report = _usage_from_database(by, first, last) if local else _usage_from_server(server, by, first, last)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    # Beside the team's hosts, what ran on Slurm pools (part of held; Slurm reports no utilisation).
    pools = any(r.get("gpu_seconds_pool") for r in report["data"])
    # Bookings: the GPU time booked, and the part of it the booker's own work used.
    booked = any(r.get("gpu_seconds_booked") for r in report["data"])
    users.emit_table(("day", by, "GPU-hours held", "GPU-hours used", "trainings",
                      *(["of held, on pools"] if pools else []), *(["booked", "of booked, used"] if booked else [])),
                     [(r["day"], _row_name(r), f"{r['gpu_hours_held']:.2f}", f"{r['gpu_hours_used']:.2f}",
                       str(r["trainings"]), *([f"{r.get('gpu_hours_pool', 0):.2f}"] if pools else []),
                       *([f"{r.get('gpu_hours_booked', 0):.2f}", f"{r.get('gpu_hours_booked_used', 0):.2f}"]
                         if booked else []))
                      for r in report["data"]])
    if not report["data"]:
        err.print(f"no GPU was held from {report['from']} to {report['to']}", highlight=False)
    _print_stored(report, by)


def _print_stored(report: dict[str, Any], by: str) -> None:
    """What the checkpoint store holds now, by the same rows, when the server has one."""
    if report.get("stored_error"):
        err.print(report["stored_error"], highlight=False)
    if report.get("stored") is None or not report.get("store"):
        return
    typer.echo(f"\ncheckpoints stored now in {report['store']}:")
    users.emit_table((by, "bytes", "size"), [(_row_name(r), str(r["bytes"]), _size(r["bytes"]))
                                            for r in report["stored"]])
    if not report["stored"]:
        err.print("the store holds no checkpoint yet", highlight=False)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _row_name(row: dict[str, Any]) -> str:
    """A user or a group as is; a training by its name and the start of its ID (what `trainings` commands take)."""
    if row.get("training_name"):
        return f"{row['training_name']} ({row['name'][:8]})"
    return row["name"]


def register(app: typer.Typer) -> None:
    users.users_app.command("set-quota")(users_set_quota)
    app.add_typer(groups_app, name="groups")
    app.command("usage")(usage)
