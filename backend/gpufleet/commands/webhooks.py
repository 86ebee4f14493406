"""`gpufleet webhooks add URL | ls | rm ID | test ID`: your own notifications, through the server.

Like the trainings commands these ask a server (``--server``, default
``$GPUFLEET_SERVER``, else this machine's server through its socket, as the
account that runs the command).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from gpufleet.commands.tables import ServerOpt, labelled, make_console

webhooks_app = typer.Typer(help="Your webhooks: notifications of your trainings and sessions.",
                           no_args_is_help=True)
out = make_console()
err = make_console(stderr=True)
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]


def _client(server: str | None):
    from gpufleet.commands.remote import Client

    c = Client(server)
    c.options = {"url": "URL", "format": "--format", "events": "--events"}
    return c


@webhooks_app.command("add")
def add(
    url: Annotated[str, typer.Argument(help="where to POST: an http:// or https:// URL")],
    format: Annotated[str,  # noqa: A002
                      typer.Option("--format", help="json (signed, generic) or slack (Slack/Mattermost)")] = "json",
    events: Annotated[str | None, typer.Option(
        "--events", help="comma-separated, e.g. training_failed,session_ready (default: all)")] = None,
    server: ServerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Register a webhook; prints its secret, which is shown only now."""
    chosen = [e.strip() for e in events.split(",") if e.strip()] if events is not None else None
    from gpufleet.client import GpufleetError

    with _client(server) as c:
        try:
            hook = c.add_webhook(url, format=format, events=chosen)
        except GpufleetError as exc:  # refused here, before anything was sent
            err.print(labelled("error:", c.in_options(str(exc))), highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
    if as_json:
        out.print_json(hook.model_dump_json())
        return
    out.print(f"webhook {hook.id} → {hook.url} ({hook.format}; {', '.join(hook.events)})", highlight=False)
    out.print(f"secret (shown only now; it signs X-Gpufleet-Signature): {hook.secret}", highlight=False)


@webhooks_app.command("ls")
def ls(server: ServerOpt = None, as_json: JsonOpt = False) -> None:
    """List your webhooks."""
    with _client(server) as c:
        hooks = c.webhooks()
    if as_json:
        out.print_json(hooks.model_dump_json())
        return
    if not hooks.data:
        out.print("no webhooks; add one with `gpufleet webhooks add URL`")
    for h in hooks.data:
        state = "" if h.enabled else " (off)"
        out.print(f"{h.id}  {h.format:5}  {h.url}  {','.join(h.events)}{state}", highlight=False)


@webhooks_app.command("rm")
def rm(hook_id: Annotated[str, typer.Argument(help="the webhook's id (`gpufleet webhooks ls`)")],
       server: ServerOpt = None) -> None:
    """Remove one of your webhooks."""
    with _client(server) as c:
        c.remove_webhook(hook_id)
    out.print(f"removed webhook {hook_id}", highlight=False)


@webhooks_app.command("test")
def test(hook_id: Annotated[str, typer.Argument(help="the webhook's id")], server: ServerOpt = None,
         as_json: JsonOpt = False) -> None:
    """Send a test notification now; says whether the receiver took it."""
    with _client(server) as c:
        result = c.test_webhook(hook_id)
    if as_json:
        out.print(json.dumps(result.model_dump()))
    elif result.delivered:
        out.print("delivered")
    else:
        out.print(f"not delivered: {result.error}", highlight=False)
    if not result.delivered:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(webhooks_app, name="webhooks")
