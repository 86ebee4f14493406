"""`gpufleet session start | ls | show | open | stop | extend | shell | limit`: interactive GPU sessions on a server.

Like `gpufleet trainings`, these talk to a server through ``gpufleet.client``
(``--server``, else ``$GPUFLEET_SERVER``, else this machine's socket).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from gpufleet.commands.tables import Column, ServerOpt, WideOpt, labelled, make_console, print_lines, print_table
from gpufleet.devices.device import index_list

if TYPE_CHECKING:
    from gpufleet.commands.remote import Client

session_app = typer.Typer(help="Interactive sessions: a shell or a notebook on reserved GPUs.",
                          no_args_is_help=True)
out = make_console()
err = make_console(stderr=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="print the session as JSON")]
SessionArg = Annotated[str, typer.Argument(metavar="SESSION", help="the session's ID, the start of it, or its name")]
LIVE = ("queued", "starting", "running", "stopping")


def register(app: typer.Typer) -> None:
    app.add_typer(session_app, name="session")


def _fail(message: str) -> NoReturn:
    err.print(labelled("error:", message), highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def connect(server: str | None) -> Client:
    from gpufleet.commands.remote import Client

    client = Client(server)
    client.options = {"gpus": "--gpus", "memory_mb": "--memory", "hours": "--hours", "host": "--host"}
    return client


def resolve(client: Client, ref: str) -> str:
    """A full session ID from an ID, a unique start of one (as `session ls` shows it) or a name, as elsewhere;
    of several sessions with one name, the one not ended."""
    key = ref.strip().lower()
    if len(key) == 36:
        return key
    rows = client.list_sessions(limit=500).items
    found = [s.id for s in rows if s.id.startswith(key)]
    if not found:
        named = [s for s in rows if s.name == ref.strip()]
        found = [s.id for s in named if s.status not in ("stopped", "failed")] or [s.id for s in named]
    if len(found) != 1:
        _fail(f"no session's ID or name matches {ref!r} (`gpufleet session ls` lists them)" if not found else
              f"{ref!r} matches {len(found)} sessions ({', '.join(f[:8] for f in found[:5])}); give more of the ID")
    return found[0]


def _show(s: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(s, indent=2))
        return
    rows = [("id", s["id"]), ("name", s["name"]), ("owner", s["owner"]), ("mode", s["mode"]),
            ("status", s["status"] + (f" ({s['end_reason']})" if s["end_reason"] else "")),
            ("gpus", f"{s['gpus']}" + (f" on {s['host']}: {index_list(s['gpu_ids'] or [])}"
                                       if s["host"] else "")),
            ("time limit", f"{s['hours']:g}h" + (f", ends {s['ends_at']}" if s["ends_at"] else ""))]
    for key, label in (("wait_reason", "waiting"), ("status_reason", "reason"), ("idle_warned_at", "idle warned"),
                       ("idle_stop_at", "idle stop at"), ("url", "notebook"), ("shell", "shell")):
        if s.get(key):
            rows.append((label, str(s[key])))
    print_lines(out, rows, label=True)


@session_app.command("start")
def start(
    gpus: Annotated[int, typer.Option("--gpus", min=1, max=64, help="GPUs to reserve, on one host")] = 1,
    memory: Annotated[str | None, typer.Option("--memory", help="memory needed per GPU, e.g. 20GiB")] = None,
    hours: Annotated[float | None, typer.Option("--hours", help="time limit (default: the server's)")] = None,
    jupyter: Annotated[bool, typer.Option("--jupyter", help="start a Jupyter server in the session")] = False,
    host: Annotated[str | None, typer.Option("--host", help="run on this host")] = None,
    name: Annotated[str | None, typer.Option("--name")] = None,
    priority: Annotated[int, typer.Option("--priority")] = 0,
    preemptible: Annotated[bool, typer.Option("--preemptible", help="may be stopped for higher-priority work")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="wait until it runs (or ends)")] = False,
    as_json: JsonOpt = False,
    server: ServerOpt = None,
) -> None:
    """Queue a session; it runs when the scheduler gives it GPUs (`session show` says why it waits)."""
    from gpufleet.trainings.script import ScriptError, parse_memory

    try:
        memory_mb = -(-parse_memory(memory) // 2**20) if memory else None  # type: ignore[operator]
    except ScriptError as exc:
        _fail(str(exc).replace("memory", "--memory", 1))
    if hours is not None and hours <= 0:
        _fail(f"--hours {hours:g} must be more than 0")
    client = connect(server)
    s = client.start_session(gpus=gpus, memory_mb=memory_mb, hours=hours, jupyter=jupyter, host=host, name=name,
                             priority=priority, preemptible=preemptible)
    if wait:
        s = _wait(client, s.id)
    if not as_json:
        err.print(f"session {s.id} {s.status}" + (f": {s.wait_reason}" if s.wait_reason else ""), highlight=False)
    _show(s.model_dump(mode="json"), as_json)


def _wait(client: Client, sid: str, poll_s: float = 1.0) -> Any:
    while True:
        s = client.get_session(sid)
        if s.status not in ("queued", "starting"):
            return s
        time.sleep(poll_s)


@session_app.command("ls")
def ls(
    status: Annotated[list[str] | None,
                      typer.Option("--status", help="repeatable: queued, running, stopped, ...")] = None,
    owner: Annotated[str | None, typer.Option("--owner")] = None,
    all_: Annotated[bool, typer.Option("--all", help="also sessions that ended")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500)] = 50,
    as_json: JsonOpt = False,
    wide: WideOpt = False,
    server: ServerOpt = None,
) -> None:
    """List sessions, newest first (live ones unless --all or --status)."""
    wanted = status or (None if all_ else list(LIVE))
    page = connect(server).list_sessions(status=wanted, owner=owner, limit=limit)
    items = [s.model_dump(mode="json") for s in page.items]
    if as_json:
        print(json.dumps({"items": items, "total": page.total}, indent=2))
        return
    if not items:
        err.print("no sessions" + ("" if all_ or status else " running or queued (--all shows ended ones)"))
        return
    cols = [Column("id"), Column("owner"), Column("mode"), Column("status"), Column("gpus"), Column("host", drop=2),
            Column("ends", drop=3), Column("reason", drop=1, shorten=True)]
    # The short ID on a terminal (any unique start works), the whole one for scripts; gpus: how many.
    rows = [[s["id"][:8] if out.is_terminal else s["id"], s["owner"], s["mode"], s["status"], str(s["gpus"]),
             s["host"] or "-",
             (s["ends_at"] or "-")[:19], s["wait_reason"] or s["end_reason"] or s["url"] or ""] for s in items]
    print_table(out, cols, rows, wide=wide)


@session_app.command("show")
def show(ref: SessionArg, as_json: JsonOpt = False, server: ServerOpt = None) -> None:
    """One session: status, GPUs, time limit, idle state, where its notebook or shell is."""
    client = connect(server)
    _show(client.get_session(resolve(client, ref)).model_dump(mode="json"), as_json)


@session_app.command("stop")
def stop(ref: SessionArg, as_json: JsonOpt = False, server: ServerOpt = None) -> None:
    """Stop a session; its GPUs go back to the queue once its processes ended."""
    client = connect(server)
    s = client.stop_session(resolve(client, ref))
    if not as_json:
        err.print(f"session {s.id} {s.status}", highlight=False)
    _show(s.model_dump(mode="json"), as_json)


@session_app.command("open")
def open_(ref: SessionArg, server: ServerOpt = None,
          join: Annotated[bool, typer.Option("--join", help="admins: open another member's notebook (recorded on"
                                                             " the session; your browser can run code as her)")]
          = False) -> None:
    """Print a single-use address of the session's notebook (its own origin; works once, within a minute)."""
    client = connect(server)
    link = client.open_notebook(resolve(client, ref), join=join)
    err.print(f"open this in your browser within {link.expires_in_s} s; it lets one browser in, once",
              highlight=False)
    print(link.url)


@session_app.command("extend")
def extend(ref: SessionArg,
           hours: Annotated[float, typer.Option("--hours", help="hours to add to the time limit")],
           as_json: JsonOpt = False, server: ServerOpt = None) -> None:
    """Add time to a session, up to the maximum an admin set for you (or the server's)."""
    if hours <= 0:
        _fail(f"--hours {hours:g} must be more than 0")
    client = connect(server)
    s = client.extend_session(resolve(client, ref), hours)
    if not as_json:
        err.print(f"session {s.id}: time limit now {s.hours:g}h (ends {s.ends_at or 'after it starts'})",
                  highlight=False)
    _show(s.model_dump(mode="json"), as_json)


@session_app.command("shell", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def shell(ctx: typer.Context, ref: SessionArg, server: ServerOpt = None) -> None:
    """Open a shell in a running session here (on its host), or print the ssh command that does.

    `gpufleet session shell ID -- CMD ARGS` runs one command in it instead.
    """
    client = connect(server)
    target = client.session_shell(resolve(client, ref))
    argv = [a for a in ctx.args if a != "--"]
    if target.host not in _here():
        print(target.ssh + ("" if not argv else " -- " + " ".join(shlex.quote(a) for a in argv)))
        return
    from gpufleet.client.sessions import shell_env

    given, dropped = shell_env(target.env)
    if dropped:
        err.print(f"note: the server's answer set {', '.join(dropped)}; a session's shell takes only its GPU and "
                  "session variables", highlight=False, soft_wrap=True)
    env = dict(os.environ, **given)
    if not argv:
        argv = [os.environ.get("SHELL") or "/bin/bash"]
        err.print(f"shell in session {target.id} on {visible_gpus(given)}; exit to leave "
                  "(the session keeps running)", highlight=False)
    sys.stdout.flush()
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        _fail(f"cannot run {argv[0]!r}: {exc}")


def visible_gpus(env: dict[str, str]) -> str:
    """``GPUs 0,2`` (as nvidia-smi numbers them) from the session's environment."""
    from gpufleet.devices.device import visible_value

    ids = visible_value(env)
    return f"GPU{'s' if ',' in ids else ''} {ids}" if ids else "no GPU"


def _here() -> set[str]:
    from gpufleet.config import load_settings

    names = {socket.gethostname()}
    try:
        names.add(load_settings().host_name)
    except Exception:  # noqa: BLE001 - a broken config only loses one name to compare
        pass
    return names


@session_app.command("limit")
def limit(
    max_hours: Annotated[float, typer.Option("--max-hours", help="the most hours a session may last")],
    user: Annotated[str | None, typer.Option("--user")] = None,
    group: Annotated[str | None, typer.Option("--group")] = None,
    server: ServerOpt = None,
) -> None:
    """Set the longest a user's, or a group's members', sessions may last, extensions included (admins)."""
    if (user is None) == (group is None):
        _fail("give exactly one of --user NAME or --group NAME")
    if max_hours <= 0:
        _fail(f"--max-hours {max_hours:g} must be more than 0")
    kind, name = ("user", user) if user else ("group", group)
    r = connect(server).set_session_limit(kind, name or "", max_hours)
    err.print(f"sessions of {r.kind} {r.name} may last at most {r.max_hours:g} hours", highlight=False)
