"""How a newcomer's server and a personal workstation's server let people in.

- The default (`bash scripts/start.sh`, i.e. `gpufleet serve --link`): sign-in
  is on, and the server prints a single-use link that signs a browser in as
  the account that started it.
- Single-user mode (`GPUFLEET_AUTH=off`): the old behaviour, every loopback
  caller is the admin `local`, with a warning at start when more than one
  person has an account on the machine.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from support.accounts import unix_accounts
from support.servers import serve_process, socket_path

pytestmark = pytest.mark.slow


def _link(log: str) -> str:
    found = re.findall(r"(http://127\.0\.0\.1:\d+/api/v1/auth/link\?code=\S+)", log)
    assert found, log
    return found[-1]


def test_the_first_commands_link_signs_its_account_in(tmp_path: Path) -> None:
    with serve_process(tmp_path / "data", "--link", GPUFLEET_AUTH=None) as srv:
        assert httpx.get(f"{srv.url}/api/v1/auth/whoami", timeout=10).status_code == 401
        with httpx.Client(base_url=srv.url, timeout=10, follow_redirects=True) as browser:
            r = browser.get(_link(srv.log_tail(1 << 20)))
            # Signed in (the session cookie), sent on to the dashboard with the session's page key in the
            # fragment, which no request carries: the cookie alone signs nothing in.
            assert r.status_code == 200 and r.url.path == "/"
            location = r.history[0].headers["location"]
            assert location.startswith("/#gpufleet-key=")
            assert browser.get("/api/v1/auth/whoami").status_code == 401
            browser.headers["X-Gpufleet-Key"] = location.split("=", 1)[1]
            me = browser.get("/api/v1/auth/whoami").json()
            assert (me["name"], me["role"], me["via"], me["auth_required"]) == ("root", "admin", "session", True)
            assert browser.post("/api/v1/auth/sign-out").status_code == 200
        # The secret that signs sessions was made for this install, private to it.
        assert (tmp_path / "data" / "secret_key").stat().st_mode & 0o077 == 0
        assert socket_path(tmp_path / "data").is_socket()
        srv.stop()
        # A stopped server leaves no socket behind.
        assert not socket_path(tmp_path / "data").exists()


def test_single_user_mode_is_asked_for_and_warns_on_a_shared_machine(tmp_path: Path) -> None:
    with unix_accounts(2) as people:
        with serve_process(tmp_path / "data", GPUFLEET_AUTH="off") as srv:
            me = httpx.get(f"{srv.url}/api/v1/auth/whoami", timeout=10).json()
            assert me == {"name": "local", "role": "admin", "via": "local", "auth_required": False}
            log = " ".join(srv.log_tail(1 << 20).split())
    assert "single-user mode (GPUFLEET_AUTH=off)" in log
    assert "warning:" in log and all(p.name in log for p in people)
