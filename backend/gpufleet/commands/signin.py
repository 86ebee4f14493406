"""`gpufleet open`: sign a browser on this machine in as the account that runs the command; `gpufleet whoami`.

The command asks the server, through its Unix socket (where the server knows
the account), for a single-use sign-in link, prints it, and opens it in a
browser when this session has a display — as Jupyter prints its token URL.
"""

from __future__ import annotations

import os
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from gpufleet.commands.tables import labelled

out = Console(highlight=False, soft_wrap=True, markup=False)


def _fail(message: str) -> NoReturn:
    Console(stderr=True, markup=False).print(labelled("error:", message), highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _has_display() -> bool:
    # Without one, Python's webbrowser falls back to a text browser in this terminal.
    return any(os.environ.get(v) for v in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER"))


def open_dashboard(
    server: Annotated[str | None,
                      typer.Option(help="server URL (default: this machine's server, through its socket)")] = None,
    browser: Annotated[bool, typer.Option(help="open the link in a browser (when this session has a display)")] = True,
) -> None:
    """Print (and open) a single-use link that signs a browser in to the dashboard as you."""
    from gpufleet.commands.remote import Client

    with Client(server) as c:
        link = c.call("POST", "/api/v1/auth/sign-in-link")
    minutes = max(1, int(link["expires_in_s"]) // 60)
    out.print(f"open this link to sign in (it works once, within {minutes} min):\n  {link['url']}")
    if browser and _has_display():
        import webbrowser

        if not webbrowser.open(link["url"]):
            out.print("(no browser could be started; copy the link)")


def whoami(
    server: Annotated[str | None,
                      typer.Option(help="server URL (default: this machine's server, through its socket)")] = None,
) -> None:
    """Who the server takes you for: your user, its role, and how you were recognised."""
    from gpufleet.commands.remote import Client

    with Client(server) as c:
        me = c.call("GET", "/api/v1/auth/whoami")
    out.print(f"{me['name']}\t{me['role']}\t{me['via']}")


def register(app: typer.Typer) -> None:
    app.command("open")(open_dashboard)
    app.command("whoami")(whoami)
