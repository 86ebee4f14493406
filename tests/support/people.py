"""Helpers for tests of sign-in and roles: users with tokens, and a small app behind the real auth layer.

The app mounts routes that use the same dependencies the product's routes use
(`CreatorUser`, `ensure_can_cancel`, `AdminUser`, a read with no dependency at
all), so these tests prove the layer on its own; tests against `create_app`
prove the product's routes use it.
"""

from __future__ import annotations

from dataclasses import dataclass

import json

import httpx
import pytest
from fastapi import APIRouter, FastAPI, WebSocket, WebSocketDisconnect
from fastapi.testclient import TestClient
from gpufleet.api.app import guarded_app
from gpufleet.api.pagekey import HEADER as PAGE_KEY_HEADER
from gpufleet.api.auth import authenticate_websocket
from gpufleet.api.deps import (
    AdminUser,
    CreatorUser,
    CurrentUser,
    PageDep,
    ensure_can_cancel,
)
from gpufleet.config import Settings
from gpufleet.db.session import session_scope
from gpufleet.users.accounts import add_user
from gpufleet.users.tokens import create_token

SECRET = "s3cret-for-tests-Jx4q-7TnV0pLr2sWcY9eHb1KmUa8ZgQd3F"


def browser_sign_in(client: httpx.Client, token: str, base: str = "", **kwargs) -> httpx.Response:
    """Sign ``client`` in as the dashboard does: the session cookie lands in its jar, and the page key from the
    answer's body goes on every later request as the header the dashboard sends (a cookie alone signs nothing in)."""
    answer = client.post(f"{base}/api/v1/auth/sign-in", json={"token": token}, **kwargs)
    if answer.status_code == 200:
        client.headers[PAGE_KEY_HEADER] = answer.json()["page_key"]
    return answer


def context_sign_in(ctx: object, dashboard: str, token: str) -> str:
    """Sign a Playwright browser context in as the dashboard's own sign-in form does: the cookie lands in the
    context, and the page key in the dashboard origin's storage (an init script that writes it on that origin
    only, never on a notebook's). Returns the page key, for a test's own request as the dashboard's page."""
    answer = ctx.request.post(f"{dashboard}/api/v1/auth/sign-in", data={"token": token})  # type: ignore[attr-defined]
    assert answer.status == 200, answer.text()
    key = answer.json()["page_key"]
    origin = json.dumps(dashboard.rstrip("/"))
    ctx.add_init_script(  # type: ignore[attr-defined]
        f"if (location.origin === {origin}) localStorage.setItem('gpufleet-page-key', {json.dumps(key)});")
    return key


@dataclass
class People:
    admin: str
    alice: str  # member
    bob: str  # member
    vic: str  # viewer
    names: dict[str, str]


def make_people(settings: Settings, suffix: str = "") -> People:
    tokens: dict[str, str] = {}
    names: dict[str, str] = {}
    with session_scope(settings) as sess:
        for key, role in (("admin", "admin"), ("alice", "member"), ("bob", "member"), ("vic", "viewer")):
            name = f"{key}{suffix}"
            add_user(sess, name, role)
            tokens[key] = create_token(sess, name).secret
            names[key] = name
    return People(tokens["admin"], tokens["alice"], tokens["bob"], tokens["vic"], names)


def ws_refused(client: TestClient, url: str, headers: dict[str, str] | None = None) -> int:
    """The close code a WebSocket at ``url`` is refused with (fails if it is let in and stays open)."""
    with pytest.raises(WebSocketDisconnect) as exc:
        with client.websocket_connect(url, headers=headers or {}) as ws:
            ws.receive_json()
    return exc.value.code


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def build_app(settings: Settings) -> FastAPI:
    router = APIRouter()
    created: list[str] = []

    @router.post("/api/v1/things")
    def create_thing(user: CreatorUser) -> dict:
        created.append(user.name)
        return {"owner": user.name}

    @router.post("/api/v1/things/batch")
    def create_things(body: dict, user: CreatorUser) -> dict:
        created.extend(user.name for _ in body["items"])
        return {"count": len(body["items"])}

    @router.post("/api/v1/things/{owner}/cancel")
    def cancel_thing(owner: str, user: CurrentUser) -> dict:
        ensure_can_cancel(user, owner)
        return {"cancelled_by": user.name}

    @router.post("/api/v1/gpus/drain")
    def drain(user: AdminUser) -> dict:
        return {"drained_by": user.name}

    @router.get("/api/v1/open-read")
    def open_read() -> dict:
        # Declares no user at all: the gate must still close it.
        return {"ok": True}

    @router.get("/metrics")
    def metrics() -> dict:
        return {"gpus": 0}

    @router.get("/api/v1/page")
    def page(p: PageDep) -> dict:
        return {"limit": p.limit, "offset": p.offset}

    @router.post("/api/v1/echo")
    def echo(body: dict) -> dict:
        return {"keys": len(body)}

    @router.websocket("/api/v1/ws")
    async def ws(websocket: WebSocket) -> None:
        user = authenticate_websocket(websocket, settings)
        if user is None:
            await websocket.close(code=1008)
            return
        await websocket.accept()
        await websocket.send_json({"user": user.name})
        try:
            while True:
                msg = await websocket.receive_text()
                await websocket.send_json({"echo": len(msg)})
        except WebSocketDisconnect:
            pass

    guarded = guarded_app(settings, router)
    guarded.state.created = created
    return guarded
