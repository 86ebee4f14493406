"""Bodies of signing in and out, who am I, and WebSocket and download tickets."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SignIn(BaseModel):
    token: str = Field(min_length=1, max_length=256, description="an API token from `gpufleet tokens create`")


class WhoAmI(BaseModel):
    name: str
    role: Literal["admin", "member", "viewer"]
    # How this request was authenticated: token | session | socket | local.
    via: str
    auth_required: bool


class SignedIn(WhoAmI):
    # The session's second part: send it as the X-Gpufleet-Key header on every request beside the cookie
    # (the dashboard keeps it in its own origin's storage). It is shown in this answer only.
    page_key: str


class DownloadTicketAsk(BaseModel):
    path: str = Field(min_length=1, max_length=2048, description="the download's path, e.g."
                      " /api/v1/trainings/<id>/files/checkpoints/step-10.pt")


class DownloadTicket(BaseModel):
    # Navigate to it: it opens that one download once, within expires_in_s.
    url: str
    expires_in_s: int


class SignedOut(BaseModel):
    signed_out: bool


class WSTicket(BaseModel):
    ticket: str
    expires_in_s: int
    # Where to use it: append ?ticket=… to this path.
    url: str


class SignInLink(BaseModel):
    # Open it in a browser on this machine: it signs the browser in once, then is spent.
    url: str
    # The same link from the server's root, for another way in (a tunnel, a proxy).
    path: str
    expires_in_s: int
