"""Local accounts as gpufleet users: made on first use, then an admin's to change or disable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.accounts import unix_accounts
from support.unix import short_name, unix_account
from gpufleet.config import Settings
from gpufleet.db.session import session_scope
from gpufleet.users.accounts import UserError, get_user, set_disabled, set_role
from gpufleet.users.local import local_account_user


def test_an_account_is_a_member_of_its_name_until_an_admin_changes_it(db_settings: Settings) -> None:
    with unix_accounts(1) as (ann,):
        with session_scope(db_settings) as sess:
            first = local_account_user(sess, ann.uid, server_uid=os.geteuid())
            assert (first.name, first.role) == (ann.name, "member")
            assert get_user(sess, ann.name).id == first.user_id
        with session_scope(db_settings) as sess:
            # The same row on later calls, whatever role an admin gives it.
            set_role(sess, ann.name, "viewer")
        with session_scope(db_settings) as sess:
            again = local_account_user(sess, ann.uid, server_uid=os.geteuid())
            assert (again.user_id, again.role) == (first.user_id, "viewer")
            set_disabled(sess, ann.name)
        with session_scope(db_settings) as sess, pytest.raises(UserError, match="disabled"):
            local_account_user(sess, ann.uid, server_uid=os.geteuid())


def test_root_and_the_servers_account_are_admins_whatever_their_row_says(db_settings: Settings) -> None:
    with unix_accounts(1) as (svc,):
        with session_scope(db_settings) as sess:
            assert local_account_user(sess, svc.uid, server_uid=svc.uid).role == "admin"
            set_role(sess, svc.name, "viewer")
            set_disabled(sess, svc.name)
        with session_scope(db_settings) as sess:
            assert local_account_user(sess, svc.uid, server_uid=svc.uid).role == "admin"
            # To any other server it is an ordinary, disabled account.
            with pytest.raises(UserError, match="disabled"):
                local_account_user(sess, svc.uid, server_uid=os.geteuid())


def test_an_account_without_a_usable_name_is_refused_with_why(db_settings: Settings) -> None:
    with session_scope(db_settings) as sess, pytest.raises(UserError, match="no account name"):
        local_account_user(sess, 4_000_000, server_uid=os.geteuid())


def test_the_run_account_is_no_one_on_the_socket(db_settings: Settings) -> None:
    # Code of every member without an account of their own runs as it: on the socket it would act for all of them.
    from gpufleet.api.auth import AuthError, peer_user
    from gpufleet.api.unixsocket import Peer

    with unix_account(short_name("run"), system=True) as run:
        settings = db_settings.model_copy(update={"run_account": run.pw_name})
        with pytest.raises(AuthError, match="GPUFLEET_RUN_ACCOUNT") as refused:
            peer_user(settings, Peer(pid=1, uid=run.pw_uid, gid=run.pw_gid))
        assert refused.value.status == 403
        with session_scope(settings) as sess, pytest.raises(UserError, match="no user named"):
            get_user(sess, run.pw_name)


def test_where_the_socket_is_for_the_server_and_where_the_cli_looks(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path) -> None:
    from gpufleet import datadir

    shared = tmp_path / "run-gpufleet"  # stands for /run/gpufleet, the machine's place
    monkeypatch.setattr(datadir, "SHARED_SOCKET_DIR", shared)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1234")
    monkeypatch.delenv("GPUFLEET_UNIX_SOCKET", raising=False)
    # Root's server is the machine's; another account's is its own, unless it may use the machine's place.
    monkeypatch.setattr(datadir.os, "geteuid", lambda: 0)
    assert datadir.default_socket_path() == shared / "gpufleet.sock"
    monkeypatch.setattr(datadir.os, "geteuid", lambda: 1234)
    monkeypatch.setattr(datadir.os, "access", lambda *_: False)
    shared.mkdir()
    assert datadir.default_socket_path() == Path("/run/user/1234/gpufleet/gpufleet.sock")
    # The CLI tries the machine's server first (only root makes its folder), then its account's own (checked
    # as personal: anyone may make a folder in /tmp); GPUFLEET_UNIX_SOCKET names one, or none.
    assert datadir.socket_candidates() == [(shared / "gpufleet.sock", False),
                                           (Path("/run/user/1234/gpufleet/gpufleet.sock"), True)]
    monkeypatch.setenv("GPUFLEET_UNIX_SOCKET", "off")
    assert datadir.socket_candidates() == []
