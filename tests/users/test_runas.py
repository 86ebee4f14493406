"""Which Unix account a training runs as (gpufleet.users.runas), with real accounts made by useradd."""

from __future__ import annotations

import os
import pwd
import subprocess

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.config import Settings
from gpufleet.db.session import session_scope
from gpufleet.users.accounts import UserError, add_user, get_user
from gpufleet.users.runas import RunAsError, for_owner, resolve, set_mapping
from gpufleet.users.tokens import create_token
from support.people import SECRET, browser_sign_in
from support.servers import cli
from support.unix import short_name, unix_account

SERVER = pwd.getpwuid(os.geteuid()).pw_name


def test_the_rule_in_order() -> None:
    with unix_account(short_name("own")) as own, unix_account(short_name("map")) as mapped, \
            unix_account(short_name("run"), system=True) as run:
        # 1. the mapping wins; 2. a login account of the user's own name; 4. the run account.
        assert resolve(run.pw_name, own.pw_name, "member", mapped.pw_name).name == mapped.pw_name
        same = resolve(run.pw_name, own.pw_name, "member", None)
        assert (same.name, same.uid, same.source) == (own.pw_name, own.pw_uid, "same-name")
        fallback = resolve(run.pw_name, "someone-else", "member", None)
        assert (fallback.name, fallback.source) == (run.pw_name, "run-account")
        # 3. an admin, and a training with no user row (the implicit local admin), run as the server's account.
        assert resolve(run.pw_name, "boss", "admin", None).name == SERVER
        assert resolve(run.pw_name, "o", None, None).source == "server"
        # A system account that shares a member's name is not that member's.
        assert resolve(run.pw_name, run.pw_name, "member", None).source == "run-account"


def test_never_root_and_never_the_server_for_a_member() -> None:
    with pytest.raises(RunAsError, match="root"):
        resolve("gpufleet-run", "alice", "member", "root")
    with pytest.raises(RunAsError, match="root; trainings never run as root"):
        resolve("root", "alice", "member", None)
    with pytest.raises(RunAsError, match="does not exist on this host"):
        resolve("gpufleet-run", "alice", "member", "no-such-account-x")
    with pytest.raises(RunAsError, match=r"useradd --system .*no-such-run-x"):
        resolve("no-such-run-x", "alice", "member", None)


def test_map_with_the_cli_and_the_api(db_settings: Settings, tmp_path) -> None:
    name = short_name("u")
    with unix_account(short_name("map")) as mapped:
        with session_scope(db_settings) as sess:
            add_user(sess, name, "member")
            admin = short_name("a")
            add_user(sess, admin, "admin")
            admin_token = create_token(sess, admin).secret
            member_token = create_token(sess, name).secret
            with pytest.raises(UserError, match="root"):
                set_mapping(sess, name, "root")
        env = {"GPUFLEET_DATABASE_URL": db_settings.database_url or ""}
        data = db_settings.data_dir
        cli(data, "users", "map", name, "--unix", mapped.pw_name, **env)
        with session_scope(db_settings) as sess:
            assert get_user(sess, name).unix_account == mapped.pw_name
            assert for_owner(sess, "gpufleet-run", name).uid == mapped.pw_uid
        cli(data, "users", "map", name, "--clear", **env)
        with session_scope(db_settings) as sess:
            assert get_user(sess, name).unix_account is None
        on = db_settings.model_copy(update={"auth": "on", "secret_key": SECRET})
        with TestClient(create_app(on)) as c:
            path = f"/api/v1/users/{name}/unix-account"
            put = c.put(path, json={"unix_account": mapped.pw_name}, headers={"Authorization": f"Bearer {admin_token}"})
            assert put.status_code == 200 and put.json() == {"user": name, "unix_account": mapped.pw_name}
            assert c.put(path, json={"unix_account": "root"},
                         headers={"Authorization": f"Bearer {admin_token}"}).status_code == 422
            assert c.put(path, json={"unix_account": None},
                         headers={"Authorization": f"Bearer {member_token}"}).status_code == 403
            assert c.put("/api/v1/users/nobody-here/unix-account", json={"unix_account": None},
                         headers={"Authorization": f"Bearer {admin_token}"}).status_code == 404
        with session_scope(db_settings) as sess:
            assert get_user(sess, name).unix_account == mapped.pw_name


def test_mapping_onto_another_users_account_needs_force_and_is_recorded(db_settings: Settings, caplog) -> None:
    name, other, third = short_name("mf"), short_name("mo"), short_name("mt")
    with unix_account(other) as theirs:
        with session_scope(db_settings) as sess:
            for user in (name, other, third):
                add_user(sess, user, "member")
            get_user(sess, third).unix_account = "shared-x"
        for account, holder in ((theirs.pw_name, other), ("shared-x", third)):
            with caplog.at_level("WARNING", logger="gpufleet.audit"), session_scope(db_settings) as sess, \
                    pytest.raises(UserError, match=f"belongs to gpufleet user {holder}.*force"):
                set_mapping(sess, name, account, by="admin-x")
            assert f"refused: admin-x asked to map user {name} to Unix account {account}, which is {holder}'s" \
                in caplog.text
        with session_scope(db_settings) as sess:
            assert get_user(sess, name).unix_account is None
        caplog.clear()
        with caplog.at_level("WARNING", logger="gpufleet.audit"), session_scope(db_settings) as sess:
            set_mapping(sess, name, theirs.pw_name, force=True, by="admin-x")
        assert f"admin-x mapped user {name} to Unix account {theirs.pw_name} (forced over {other})" in caplog.text
        with session_scope(db_settings) as sess:
            assert get_user(sess, name).unix_account == theirs.pw_name
        # The CLI says why, and maps with --force.
        env = {"GPUFLEET_DATABASE_URL": db_settings.database_url or ""}
        with pytest.raises(subprocess.CalledProcessError) as refused:
            cli(db_settings.data_dir, "users", "map", third, "--unix", theirs.pw_name, **env)
        assert "--force" in refused.value.stderr
        cli(db_settings.data_dir, "users", "map", third, "--unix", theirs.pw_name, "--force", **env)


def test_the_api_maps_only_with_a_token_never_the_browsers_cookie(db_settings: Settings) -> None:
    name = short_name("mc")
    with session_scope(db_settings) as sess:
        add_user(sess, name, "member")
        admin = short_name("ac")
        add_user(sess, admin, "admin")
        admin_token = create_token(sess, admin).secret
    on = db_settings.model_copy(update={"auth": "on", "secret_key": SECRET})
    with TestClient(create_app(on)) as c:
        assert browser_sign_in(c, admin_token).status_code == 200
        path = f"/api/v1/users/{name}/unix-account"
        refused = c.put(path, json={"unix_account": "nobody-x"}, headers={"Origin": "http://testserver"})
        assert refused.status_code == 403 and "second step" in refused.json()["detail"]
        c.cookies.clear()
        ok = c.put(path, json={"unix_account": "nobody-x"}, headers={"Authorization": f"Bearer {admin_token}"})
        assert ok.status_code == 200
        taken = c.put(f"/api/v1/users/{admin}/unix-account", json={"unix_account": "nobody-x"},
                      headers={"Authorization": f"Bearer {admin_token}"})
        assert taken.status_code == 409 and "force" in taken.json()["detail"]
        forced = c.put(f"/api/v1/users/{admin}/unix-account", json={"unix_account": "nobody-x", "force": True},
                       headers={"Authorization": f"Bearer {admin_token}"})
        assert forced.status_code == 200
