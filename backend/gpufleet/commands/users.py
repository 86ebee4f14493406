"""`gpufleet users add|list|disable|enable|set-role|grant|revoke|map` and `gpufleet tokens create|list|revoke`.

These talk to the database directly: whoever can run them on the server can
already read its configuration, which is the trust boundary for making admins.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.table import Table

from gpufleet.commands.tables import labelled, make_console

users_app = typer.Typer(help="People who use this server, and their roles.", no_args_is_help=True)
tokens_app = typer.Typer(help="API tokens (shown once at creation, stored hashed).", no_args_is_help=True)

out = make_console()
err = make_console(stderr=True)

RoleOpt = Annotated[str, typer.Option("--role", help="admin | member | viewer")]


def _fail(message: str) -> None:
    err.print(labelled("error:", message), highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _session(write: bool = True):
    """A committing session on a reachable, up-to-date database (or exit with why not).

    A write holds SQLite's write lock from its first statement, waiting for it
    at most ``GPUFLEET_CLI_BUSY_TIMEOUT_S``: reading first and writing after
    fails at once when a worker wrote in between, which a busy timeout cannot help.
    """
    from gpufleet.config import ConfigError, get_settings
    from gpufleet.db.session import check_database, session_scope, upgrade_database, write_session

    try:
        settings = get_settings()
        check_database(settings)
        if settings.is_sqlite:
            # The embedded database is created on first use, as `serve` does.
            upgrade_database(settings)
    except ConfigError as exc:
        _fail(str(exc))
    return write_session(settings, settings.cli_busy_timeout_s) if write else session_scope(settings)


def emit_table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A table on a terminal; tab-separated lines for scripts (`| cut -f2`)."""
    if out.is_terminal:
        table = Table(*headers)
        for row in rows:
            table.add_row(*row)
        out.print(table)
        return
    for row in (headers, *rows):
        print("\t".join(row))


def run_in_session(fn, write: bool = True):
    from gpufleet.db.session import is_locked
    from gpufleet.users.accounts import UserError

    try:
        with _session(write) as sess:
            return fn(sess)
    except UserError as exc:
        _fail(str(exc))
    except Exception as exc:
        if not is_locked(exc):
            raise
        from gpufleet.config import get_settings

        _fail(f"the database is busy: another process held its write lock for more than "
              f"{get_settings().cli_busy_timeout_s:g} s (GPUFLEET_CLI_BUSY_TIMEOUT_S); nothing was changed, "
              "try again")


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(help="lowercase user name, e.g. alice")],
    role: RoleOpt = "member",
    token: Annotated[bool, typer.Option("--token/--no-token", help="also create a first API token")] = False,
) -> None:
    """Add a user."""
    from gpufleet.users.accounts import add_user
    from gpufleet.users.tokens import create_token

    def work(sess):
        add_user(sess, name, role)
        return create_token(sess, name) if token else None

    created = run_in_session(work)
    err.print(f"added user {name} ({role})", highlight=False)
    if created is not None:
        _print_token(created)
    else:
        err.print(f"create a token with `gpufleet tokens create {name}`", highlight=False)


@users_app.command("ls")
@users_app.command("list", hidden=True)  # the older name, kept for scripts
def users_list() -> None:
    """List users, their roles, live tokens and granted permissions."""
    from gpufleet.users.accounts import PERMISSIONS, list_users
    from gpufleet.users.tokens import live_token_counts

    def work(sess):
        live = live_token_counts(sess)
        # An admin (root and the server's account among them) has every permission, granted or not.
        return [(u.name, u.role, u.disabled, live.get(u.name, 0), u.created_at,
                 "all (admin)" if u.role == "admin" else ",".join(p for p in PERMISSIONS if getattr(u, p)) or "-")
                for u in list_users(sess)]

    rows = run_in_session(work, write=False)
    emit_table(
        ("name", "role", "state", "live tokens", "created", "permissions"),
        [
            (name, role, "disabled" if disabled else "active", str(count), f"{created:%Y-%m-%d %H:%M}", granted)
            for name, role, disabled, count, created, granted in rows
        ],
    )
    if not rows:
        err.print("no users yet; add one with `gpufleet users add NAME --role admin --token`")


def _set_disabled(name: str, disabled: bool) -> None:
    from gpufleet.users.accounts import set_disabled

    run_in_session(lambda sess: set_disabled(sess, name, disabled))
    state = "disabled: its tokens and sessions no longer work" if disabled else "enabled"
    err.print(f"user {name} {state}", highlight=False)


@users_app.command("disable")
def users_disable(name: str) -> None:
    """Disable a user: every token and session of theirs stops working at once."""
    _set_disabled(name, True)


@users_app.command("enable")
def users_enable(name: str) -> None:
    """Enable a disabled user again."""
    _set_disabled(name, False)


@users_app.command("set-role")
def users_set_role(name: str, role: Annotated[str, typer.Argument(help="admin | member | viewer")]) -> None:
    """Change a user's role."""
    from gpufleet.users.accounts import set_role

    run_in_session(lambda sess: set_role(sess, name, role))
    err.print(f"user {name} is now {role}", highlight=False)


def _set_permission(name: str, permission: str, allowed: bool) -> None:
    from gpufleet.users.accounts import PERMISSIONS, set_permission

    run_in_session(lambda sess: set_permission(sess, name, permission, allowed))
    err.print(f"user {name} {'may now' if allowed else 'may no longer'} {PERMISSIONS[permission]}", highlight=False)


@users_app.command("grant")
def users_grant(name: str, permission: Annotated[str, typer.Argument(
        help="run_code: submit their own code; non_preemptible: ask for trainings that cannot be preempted")]) -> None:
    """Grant a permission (admins have every one)."""
    _set_permission(name, permission, True)


@users_app.command("revoke")
def users_revoke(name: str, permission: Annotated[str, typer.Argument(help="run_code | non_preemptible")]) -> None:
    """Take a permission back."""
    _set_permission(name, permission, False)


@users_app.command("map")
def users_map(
    name: str,
    unix: Annotated[str | None, typer.Option("--unix", help="the Unix account NAME's trainings run as")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="back to the same-name account or the run account")] = False,
    force: Annotated[bool, typer.Option("--force", help="map even onto an account another gpufleet user's "
                                                        "trainings run as")] = False,
) -> None:
    """Map a user to the Unix account their trainings run as (see docs/operations.md, security model)."""
    from gpufleet.users.runas import exists_here, set_mapping

    if (unix is None) == (not clear):
        _fail("give --unix ACCOUNT, or --clear")
    run_in_session(lambda sess: set_mapping(sess, name, unix, force=force, by=f"the CLI (uid {os.getuid()})"))
    if unix is None:
        err.print(f"user {name}'s trainings run as the Unix account {name} if it exists, else the run account",
                  highlight=False)
        return
    err.print(f"user {name}'s trainings run as Unix account {unix}", highlight=False)
    if not exists_here(unix):
        err.print(f"note: there is no Unix account {unix!r} on this machine; each worker host needs one",
                  highlight=False)


def _print_token(created) -> None:
    expiry = f", expires {created.expires_at:%Y-%m-%d}" if created.expires_at else ""
    err.print(
        f"token {created.prefix}… for {created.user} ({created.name}{expiry}); it is shown once, store it now:",
        highlight=False,
    )
    # The secret alone on stdout, so `TOKEN=$(gpufleet tokens create alice)` works.
    print(created.secret)


@tokens_app.command("create")
def tokens_create(
    user: Annotated[str, typer.Argument(help="the user the token acts as")],
    name: Annotated[str, typer.Option("--name", help="a label, e.g. laptop or ci")] = "default",
    expires_days: Annotated[int | None, typer.Option("--expires-days", help="days until it expires")] = None,
) -> None:
    """Create an API token for a user and print it (once)."""
    from gpufleet.users.tokens import create_token

    _print_token(run_in_session(lambda sess: create_token(sess, user, name, expires_days)))


@tokens_app.command("ls")
@tokens_app.command("list", hidden=True)
def tokens_list(user: Annotated[str | None, typer.Option("--user", help="only this user's tokens")] = None) -> None:
    """List tokens by prefix (the secrets are not stored)."""
    from gpufleet.users.tokens import list_tokens

    def work(sess):
        return [
            (str(t.id), t.prefix, owner, t.name, t.created_at, t.expires_at, t.revoked_at, t.last_used_at)
            for t, owner in list_tokens(sess, user)
        ]

    def fmt(d) -> str:
        return f"{d:%Y-%m-%d %H:%M}" if d else "-"

    emit_table(
        ("id", "prefix", "user", "name", "created", "expires", "state", "last used"),
        [
            (tid, prefix, owner, label, fmt(created), fmt(expires), "revoked" if revoked else "live", fmt(used))
            for tid, prefix, owner, label, created, expires, revoked, used in run_in_session(work, write=False)
        ],
    )


@tokens_app.command("revoke")
def tokens_revoke(
    ident: Annotated[str, typer.Argument(help="token id or prefix (see `gpufleet tokens list`)")],
) -> None:
    """Revoke a token; sessions opened with it end too."""
    from gpufleet.users.tokens import revoke_token

    prefix = run_in_session(lambda sess: revoke_token(sess, ident).prefix)
    err.print(f"token {prefix}… revoked", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(users_app, name="users")
    app.add_typer(tokens_app, name="tokens")
