"""A shared machine: two Unix accounts use one `gpufleet serve`, started by root with the defaults.

Each account's CLI reaches the server through its Unix socket, and the server
knows the account from the kernel (SO_PEERCRED): each is a member of its own
name, and neither can cancel the other's training. Over TCP from loopback a
request without credentials is refused, and `gpufleet open`, run by an
account, signs Chromium in as that account.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.accounts import Account, run_as, unix_accounts
from support.servers import ServedProcess, cli, serve_process, socket_path

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def shared_box(dashboard_built: Path, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[tuple[ServedProcess, list[Account], dict[str, str]]]:
    with unix_accounts(2) as people:
        data = tmp_path_factory.mktemp("shared-box")
        # GPUFLEET_AUTH=None: the product's default (sign-in), not the tests' single-user mode.
        with serve_process(data, GPUFLEET_AUTH=None) as srv:
            yield srv, people, {"GPUFLEET_UNIX_SOCKET": str(socket_path(data))}


def _ok(result) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_each_account_is_a_member_of_its_own_name(shared_box) -> None:
    _, (alice, bob), env = shared_box
    for person in (alice, bob):
        assert _ok(run_as(person, "whoami", env=env)).split() == [person.name, "member", "socket"]


def test_accounts_cannot_cancel_each_others_trainings(shared_box) -> None:
    _, (alice, bob), env = shared_box
    submitted = _ok(run_as(alice, "train", "--recipe", "mlp", "--no-follow", "--name", "alice-run",
                           "--set", "max_steps=1000000", env=env))
    tid = submitted.split("submitted ", 1)[1].split()[0]
    listed = _ok(run_as(bob, "trainings", "ls", env=env))
    assert "alice-run" in listed and alice.name in listed

    refused = run_as(bob, "trainings", "cancel", tid, env=env)
    assert refused.returncode != 0
    assert "403" in refused.stderr or "belongs to" in refused.stderr, refused.stderr
    # Its owner may.
    _ok(run_as(alice, "trainings", "cancel", tid, env=env))


def test_loopback_tcp_without_credentials_is_refused(shared_box) -> None:
    srv, _, _ = shared_box
    r = httpx.get(f"{srv.url}/api/v1/auth/whoami", timeout=10)
    assert r.status_code == 401
    assert httpx.get(f"{srv.url}/api/v1/trainings", timeout=10).status_code == 401
    # A header cannot claim an account: only a connection on the socket carries one.
    forged = httpx.get(f"{srv.url}/api/v1/auth/whoami", headers={"X-Forwarded-User": "root", "X-Remote-User": "root"})
    assert forged.status_code == 401


def test_gpufleet_open_signs_the_right_account_in(browser, shared_box) -> None:
    srv, (alice, _), env = shared_box
    out = _ok(run_as(alice, "open", "--no-browser", env=env))
    link = out.strip().splitlines()[-1].strip()
    assert link.startswith(f"{srv.url}/api/v1/auth/link?code=")

    ctx = browser.new_context(base_url=srv.url, viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.set_default_timeout(15_000)
    try:
        page.goto(link)
        # The link leads to the dashboard, signed in: no sign-in form, the fleet shows.
        page.wait_for_function("document.querySelectorAll(\"[data-testid^='gpu-card-']\").length === 2",
                               timeout=40_000)
        assert not page.get_by_role("dialog", name="Sign in").is_visible()
        # The link's redirect handed the page its session's key, kept in its own storage and out of the address.
        assert "gpufleet-key" not in page.url
        me = page.evaluate("""fetch('/api/v1/auth/whoami',
            {headers: {'X-Gpufleet-Key': localStorage.getItem('gpufleet-page-key')}}).then(r => r.json())""")
        assert (me["name"], me["role"], me["via"]) == (alice.name, "member", "session")
        assert all(c["httpOnly"] for c in ctx.cookies())
    finally:
        ctx.close()

    # Once: a second browser following the same link is not signed in.
    again = httpx.get(link, follow_redirects=False, timeout=10)
    assert again.status_code == 401 and "used already" in again.json()["detail"]


def test_an_admin_disables_an_account_and_its_next_call_is_refused(shared_box) -> None:
    srv, (_, bob), env = shared_box
    cli(srv.data_dir, "users", "disable", bob.name)
    refused = run_as(bob, "whoami", env=env)
    assert refused.returncode != 0 and "disabled" in refused.stderr, refused.stdout + refused.stderr
    cli(srv.data_dir, "users", "enable", bob.name)
    assert _ok(run_as(bob, "whoami", env=env)).split() == [bob.name, "member", "socket"]
