"""`gpufleet users …` and `gpufleet tokens …` on the embedded database and on PostgreSQL."""

from __future__ import annotations


import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from gpufleet.cli import app
from gpufleet.config import get_settings
from gpufleet.db.models import APIToken, User
from gpufleet.db.session import session_scope
from gpufleet.users.tokens import authenticate_token, hash_token

runner = CliRunner()


def run(*args: str):
    result = runner.invoke(app, list(args))
    return result


def test_add_list_token_and_use_it(cli_db: str) -> None:
    name = cli_db
    r = run("users", "add", name, "--role", "admin", "--token")
    assert r.exit_code == 0, r.output
    secret = r.stdout.strip().splitlines()[-1]
    assert secret.startswith("gf_")
    with session_scope(get_settings()) as sess:
        user = sess.scalars(select(User).where(User.name == name)).one()
        assert user.role == "admin"
        stored = sess.scalars(select(APIToken).where(APIToken.user_id == user.id)).one()
        # Only the hash is stored, never the secret itself.
        assert stored.token_hash == hash_token(secret) and secret not in (stored.token_hash, stored.prefix)
        owner = authenticate_token(sess, secret)
        assert not isinstance(owner, str) and owner.name == name
    listing = run("users", "list")
    assert listing.exit_code == 0
    assert [name, "admin", "active", "1"] in [line.split("\t")[:4] for line in listing.stdout.splitlines()]
    # An admin holds every permission: the listing says so rather than "-".
    [mine] = [line.split("\t") for line in listing.stdout.splitlines() if line.startswith(name + "\t")]
    assert mine[-1] == "all (admin)", mine


def test_tokens_create_revoke_and_disable(cli_db: str) -> None:
    name = cli_db
    assert run("users", "add", name).exit_code == 0
    r = run("tokens", "create", name, "--name", "laptop", "--expires-days", "30")
    assert r.exit_code == 0, r.output
    secret = r.stdout.strip()
    assert secret.startswith("gf_") and len(secret.splitlines()) == 1
    listed = run("tokens", "list", "--user", name)
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    assert rows[0][:3] == ["id", "prefix", "user"]
    assert rows[1][1:4] == [secret[:10], name, "laptop"] and rows[1][6] == "live"
    assert secret not in listed.stdout
    assert run("tokens", "revoke", secret[:10]).exit_code == 0
    with session_scope(get_settings()) as sess:
        assert authenticate_token(sess, secret) == "the bearer token was revoked"
    second = run("tokens", "create", name).stdout.strip()
    assert run("users", "disable", name).exit_code == 0
    with session_scope(get_settings()) as sess:
        assert authenticate_token(sess, second) == f"user {name!r} is disabled"
    assert run("users", "enable", name).exit_code == 0
    assert run("users", "set-role", name, "viewer").exit_code == 0
    with session_scope(get_settings()) as sess:
        owner = authenticate_token(sess, second)
        assert not isinstance(owner, str) and owner.role == "viewer"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("users", "add", "Bad Name"), "not allowed"),
        (("users", "add", "local"), "reserved"),
        (("users", "add", "{name}", "--role", "root"), "not one of admin, member, viewer"),
        (("users", "disable", "nobody-{name}"), "no user named"),
        (("tokens", "create", "nobody-{name}"), "gpufleet users add"),
        (("tokens", "create", "{existing}", "--expires-days", "0"), "between 1 and 3650"),
        (("tokens", "revoke", "gf_nothere"), "no token with id or prefix"),
        (("users", "set-role", "{existing}", "owner"), "not one of"),
    ],
)
def test_bad_input_says_what_to_fix_and_writes_nothing(cli_db: str, args: tuple[str, ...], needle: str) -> None:
    existing = cli_db + "x"
    assert run("users", "add", existing).exit_code == 0
    with session_scope(get_settings()) as sess:
        before = (len(list(sess.scalars(select(User.id)))), len(list(sess.scalars(select(APIToken.id)))))
    r = run(*(a.format(name=cli_db, existing=existing) for a in args))
    assert r.exit_code == 2
    assert needle in " ".join(r.stderr.split())
    with session_scope(get_settings()) as sess:
        after = (len(list(sess.scalars(select(User.id)))), len(list(sess.scalars(select(APIToken.id)))))
        assert after == before
        assert sess.scalars(select(User.role).where(User.name == existing)).one() == "member"


def test_duplicate_user_is_refused(cli_db: str) -> None:
    assert run("users", "add", cli_db).exit_code == 0
    r = run("users", "add", cli_db, "--role", "admin")
    assert r.exit_code == 2 and "already exists" in r.stderr
