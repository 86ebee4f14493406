"""Every power that outlasts the page needs a second step beyond the browser's sign-in.

A signed-in dashboard sends its cookie and its page key; a script injected into
the dashboard's own origin could send both. So a new token, a new or changed
user, a pool added or removed, a Unix-account mapping and a sign-in link take
the person's API token sent with the request (or the CLI on the server's
socket): with the browser's sign-in alone each is a 403 that names the second
step, and nothing is written.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpufleet.db.session import session_scope
from gpufleet.users import directory
from gpufleet.users.tokens import list_tokens
from support.people import People, bearer, browser_sign_in

HERE = {"Origin": "http://testserver"}


def _asks(people: People) -> list[tuple[str, str, dict | None]]:
    alice = people.names["alice"]
    return [
        ("POST", "/api/v1/tokens", {"user": alice, "name": "from-a-page"}),
        ("POST", "/api/v1/users", {"name": f"mallory{alice[-6:]}", "role": "admin"}),
        ("PATCH", f"/api/v1/users/{alice}", {"role": "admin"}),
        ("PATCH", f"/api/v1/users/{alice}", {"run_code": True}),
        ("PATCH", f"/api/v1/users/{alice}", {"disabled": True}),
        ("POST", "/api/v1/pools", {"name": "gpu-pool", "partition": "gpu"}),
        ("DELETE", "/api/v1/pools/gpu-pool", None),
        ("PUT", f"/api/v1/users/{alice}/unix-account", {"unix_account": "nobody"}),
        ("POST", "/api/v1/auth/sign-in-link", None),
    ]


def _team(app_client: TestClient) -> tuple[list, int]:
    settings = app_client.app.state.settings
    with session_scope(settings) as sess:
        users = sorted((v.name, v.role, v.disabled, v.run_code, v.unix_account) for v in directory.user_views(sess))
        return users, len(list_tokens(sess, None))


def test_each_power_that_outlasts_the_page_is_refused_on_the_browsers_sign_in_alone(
    app_client: TestClient, people: People,
) -> None:
    assert browser_sign_in(app_client, people.admin).status_code == 200
    assert app_client.get("/api/v1/auth/whoami").json()["via"] == "session"
    before = _team(app_client)
    for method, path, body in _asks(people):
        r = app_client.request(method, path, json=body, headers=HERE)
        assert r.status_code == 403, (method, path, r.status_code, r.text)
        assert "second step" in r.json()["detail"], (method, path, r.text)
    assert _team(app_client) == before


def test_the_same_powers_with_the_admins_token_go_through(app_client: TestClient, people: People) -> None:
    app_client.cookies.clear()
    alice = people.names["alice"]
    made = app_client.post("/api/v1/tokens", json={"user": alice, "name": "ci"}, headers=bearer(people.admin))
    assert made.status_code == 201 and made.json()["secret"]
    added = app_client.post("/api/v1/users", json={"name": f"carol{alice[-6:]}", "role": "member"},
                            headers=bearer(people.admin))
    assert added.status_code == 201, added.text
    changed = app_client.patch(f"/api/v1/users/{alice}", json={"run_code": True}, headers=bearer(people.admin))
    assert changed.status_code == 200 and changed.json()["run_code"] is True
    # A pool is refused for what it is (here: no Slurm answers), no longer for the missing second step.
    pool = app_client.post("/api/v1/pools", json={"name": "gpu-pool", "partition": "gpu"}, headers=bearer(people.admin))
    assert pool.status_code != 403 and "second step" not in pool.text
