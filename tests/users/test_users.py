"""The users domain on its own: no HTTP, no CLI, one session per step as a command or a request uses it."""

from __future__ import annotations

import ast
import uuid
from pathlib import Path

import pytest

import gpufleet.users
from gpufleet.config import Settings
from gpufleet.db.session import session_scope
from gpufleet.users.accounts import UserError, add_user, get_user, list_users, set_disabled, set_role
from gpufleet.users.tokens import (
    authenticate_token,
    check_session_owner,
    create_token,
    live_token_counts,
    revoke_token,
)


def _name() -> str:
    return "u" + uuid.uuid4().hex[:8]


def test_names_and_roles_are_checked_before_anything_is_written(db_settings: Settings) -> None:
    name = _name()
    with session_scope(db_settings) as sess:
        for bad, why in (("Alice", "not allowed"), ("local", "reserved"), ("", "not allowed")):
            with pytest.raises(UserError, match=why):
                add_user(sess, bad)
        with pytest.raises(UserError, match="not one of admin, member, viewer"):
            add_user(sess, name, "owner")
    with session_scope(db_settings) as sess:
        assert name not in {u.name for u in list_users(sess)}
        add_user(sess, name, "viewer")
    with session_scope(db_settings) as sess, pytest.raises(UserError, match="already exists"):
        add_user(sess, name)


def test_set_role_changes_what_a_token_acts_as(db_settings: Settings) -> None:
    name = _name()
    with session_scope(db_settings) as sess:
        add_user(sess, name, "viewer")
        secret = create_token(sess, name).secret
    with session_scope(db_settings) as sess:
        with pytest.raises(UserError, match="not one of"):
            set_role(sess, name, "root")
        set_role(sess, name, "member")
    with session_scope(db_settings) as sess:
        owner = authenticate_token(sess, secret)
        assert not isinstance(owner, str) and (owner.name, owner.role) == (name, "member")
        with pytest.raises(UserError, match=f"no user named 'nobody-{name}'"):
            set_role(sess, f"nobody-{name}", "member")


def test_live_tokens_leave_out_revoked_ones_and_a_disabled_user_is_refused(db_settings: Settings) -> None:
    name = _name()
    with session_scope(db_settings) as sess:
        user_id = add_user(sess, name).id
        kept = create_token(sess, name, "laptop")
        gone = create_token(sess, name, "ci", expires_days=7)
    with session_scope(db_settings) as sess:
        assert live_token_counts(sess)[name] == 2
        revoke_token(sess, gone.prefix)
    with session_scope(db_settings) as sess:
        assert live_token_counts(sess)[name] == 1
        assert authenticate_token(sess, gone.secret) == "the bearer token was revoked"
        assert check_session_owner(sess, user_id, gone.id) == (
            "the token this session was opened with was revoked; sign in again")
        assert not isinstance(check_session_owner(sess, user_id, kept.id), str)
        set_disabled(sess, name)
    with session_scope(db_settings) as sess:
        assert get_user(sess, name).disabled
        assert authenticate_token(sess, kept.secret) == f"user {name!r} is disabled"
        with pytest.raises(UserError, match="is disabled"):
            create_token(sess, name)


def test_the_users_package_knows_nothing_of_http() -> None:
    root = Path(gpufleet.users.__file__).parent
    imported = set()
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
    assert not {m for m in imported if m.split(".")[0] in ("fastapi", "starlette", "httpx")
                or m.startswith("gpufleet.api")}, imported
