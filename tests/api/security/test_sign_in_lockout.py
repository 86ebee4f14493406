"""Sign-in cannot be locked by a neighbour: failures are limited per source and per account they were meant
for, and a valid sign-in always goes through.

The attack: from the admin's own address (everyone on one machine, or behind
one proxy, shares it), an attacker sends wrong tokens as fast as the server
answers, some of them carrying the admin's token prefix. The attacker is
told to stop (429); the admin signs in every time. Behind a trusted proxy,
the forwarded address is the source, and a client that is not the proxy
cannot claim an address with a header.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from gpufleet.api.security.ratelimits import SIGN_IN_ACCOUNT_FAILURES_PER_MINUTE, SIGN_IN_FAILURES_PER_MINUTE
from support.servers import make_token, serve_process

LIMIT = SIGN_IN_FAILURES_PER_MINUTE


def _wrong() -> str:
    return "gf_" + secrets.token_urlsafe(32)


def test_a_neighbour_hammering_wrong_tokens_never_keeps_the_admin_out(app_client: TestClient, people) -> None:
    attacker, admin = [], []
    for round_ in range(3 * LIMIT):
        attacker.append(app_client.post("/api/v1/auth/sign-in", json={"token": _wrong()}).status_code)
        if round_ % 6 == 0:
            admin.append(app_client.post("/api/v1/auth/sign-in", json={"token": people.admin}).status_code)
    # The attacker is refused, and told to wait once over the limit ...
    assert set(attacker[:LIMIT]) == {401} and set(attacker[LIMIT + 1:]) == {429}, attacker
    # ... while every one of the admin's sign-ins, from the same address, succeeded.
    assert admin == [200] * len(admin) and len(admin) >= 10


def test_failures_meant_for_one_account_are_limited_and_its_owner_still_signs_in(app_client: TestClient,
                                                                                 people) -> None:
    # Wrong tokens with the admin's shown prefix (`gpufleet tokens list` shows it): meant for the admin.
    per_account = SIGN_IN_ACCOUNT_FAILURES_PER_MINUTE
    aimed = [people.admin[:10] + secrets.token_urlsafe(32)[:33] for _ in range(per_account)]
    codes = [app_client.post("/api/v1/auth/sign-in", json={"token": t}).status_code for t in aimed]
    last = app_client.post("/api/v1/auth/sign-in", json={"token": aimed[0]})
    assert codes == [401] * per_account and last.status_code == 429
    # The account's limit (the source's is not reached yet), and how long to wait.
    assert f"too many failed sign-ins as {people.names['admin']}" in last.json()["detail"]
    assert int(last.headers["retry-after"]) >= 1
    # Another account's wrong token from the same source is a plain 401: only the aimed account is limited.
    assert app_client.post("/api/v1/auth/sign-in", json={"token": _wrong()}).status_code == 401
    assert app_client.post("/api/v1/auth/sign-in", json={"token": people.admin}).status_code == 200


def _post(client: httpx.Client, url: str, token: str, claimed: str | None = None) -> httpx.Response:
    headers = {"X-Forwarded-For": claimed} if claimed else {}
    return client.post(f"{url}/api/v1/auth/sign-in", json={"token": token}, headers=headers)


def test_behind_a_trusted_proxy_the_forwarded_address_counts_and_no_one_else_may_claim_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    token = make_token(data, "boss", "admin", GPUFLEET_AUTH=None)
    admins_address, attackers_address = "198.51.100.7", "203.0.113.9"
    with serve_process(data, GPUFLEET_AUTH=None, GPUFLEET_TRUSTED_PROXIES='["127.0.0.2"]') as srv, \
            httpx.Client(timeout=30) as direct, \
            httpx.Client(timeout=30, transport=httpx.HTTPTransport(local_address="127.0.0.2")) as proxy:
        # Not the proxy: its header is ignored, so it fails as 127.0.0.1, whatever address it claims.
        claimed = [_post(direct, srv.url, _wrong(), admins_address).status_code for _ in range(LIMIT + 2)]
        assert claimed[-1] == 429, claimed
        assert "from 127.0.0.1" in _post(direct, srv.url, _wrong(), admins_address).json()["detail"]
        # Through the proxy, each client is its forwarded address: the attacker's is limited ...
        hammered = [_post(proxy, srv.url, _wrong(), attackers_address).status_code for _ in range(LIMIT + 2)]
        assert hammered[-1] == 429 and "from 203.0.113.9" in _post(proxy, srv.url, _wrong(),
                                                                    attackers_address).json()["detail"]
        # ... the admin's address was never charged (a failure there is a plain 401), and she signs in.
        assert _post(proxy, srv.url, _wrong(), admins_address).status_code == 401
        assert _post(proxy, srv.url, token, admins_address).status_code == 200
        # A valid token from the limited direct client goes through too.
        assert _post(direct, srv.url, token).status_code == 200
