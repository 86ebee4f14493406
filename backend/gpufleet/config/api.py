"""Section ``api``: the API's address, sign-in, who may read what, and the limits on requests."""

from __future__ import annotations

import ipaddress
import socket
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from gpufleet.config.networks import ip_networks

DEFAULT_SECRET = "change-me"
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


class ApiSettings(BaseModel):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    cors_origins: list[str] = Field(default_factory=list)
    secret_key: str = DEFAULT_SECRET
    # Sign-in over TCP: ``on`` (``auto``: its older name); ``off``: single-user mode, loopback callers are admin.
    auth: Literal["on", "off", "auto"] = "on"
    # The Unix socket for local accounts: empty for the default (datadir.default_socket_path), ``off``, or a path;
    # and how long a `gpufleet open` sign-in link stays valid (it works once).
    unix_socket: str = ""
    sign_in_link_ttl_s: int = Field(default=120, ge=10, le=3600)
    # Host names (``gpus.example.org``, ``*.example.org``) the API answers to.
    # Without sign-in only loopback names are served whatever this says
    # (plus the names listed here); with sign-in, empty means any name.
    allowed_hosts: list[str] = Field(default_factory=list)
    # Addresses or networks of reverse proxies whose X-Forwarded-For/-Proto
    # headers count. Empty: no proxy header is trusted from anyone.
    trusted_proxies: list[str] = Field(default_factory=list)
    # One line per HTTP request on serve's output (uvicorn's access log: client, request line, status).
    access_log: bool = False
    # Who may read a training's config, events and logs: only its owner and admins (``owner``, the
    # default: logs often hold secrets a script printed), or the whole team (``team``).
    training_visibility: Literal["team", "owner"] = "owner"
    # API requests served at once per process; beyond it a request gets 429
    # with Retry-After at once instead of waiting for a connection. 0: the
    # pool size plus overflow, less a few for the scheduler and the streams,
    # and at most a few per core.
    max_concurrent_requests: int = Field(default=0, ge=0, le=100000)
    # Sign-in sessions, stream tickets, and the limits on requests (gpufleet.api.auth and
    # gpufleet.api.security.ratelimits).
    session_ttl_s: int = Field(default=12 * 3600, ge=60, le=30 * 86400)
    ws_ticket_ttl_s: int = Field(default=30, ge=5, le=300)
    create_rate_per_minute: int = Field(default=30, ge=1, le=10000)
    max_request_bytes: int = Field(default=1024 * 1024, ge=1024, le=1024 * 1024 * 1024)
    max_ws_message_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)

    @field_validator("trusted_proxies")
    @classmethod
    def _check_proxies(cls, v: list[str]) -> list[str]:
        return ip_networks(v, "an IP address or network (e.g. 172.28.0.1 or 10.0.0.0/8)")

    @field_validator("allowed_hosts")
    @classmethod
    def _check_hosts(cls, v: list[str]) -> list[str]:
        out = []
        for item in v:
            name = item.strip().lower()
            if not name or "/" in name or " " in name or name == "*":
                raise ValueError(f"{item!r} is not a host name such as gpus.example.org or *.example.org")
            out.append(name)
        return out

    @property
    def is_loopback(self) -> bool:
        return is_loopback_address(self.host)


@lru_cache(maxsize=64)
def is_loopback_address(host: str) -> bool:
    """Whether ``host`` is a loopback address, or a name whose every address is loopback.

    Decided from the parsed address, never from how the text starts:
    ``127.0.0.1.nip.io`` is a public name that may resolve anywhere. A name
    that does not resolve is not loopback.
    """
    text = host.strip().strip("[]")
    if not text:
        return False
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(text, None)
    except (OSError, UnicodeError):
        return False
    addresses = {str(info[4][0]).split("%", 1)[0] for info in infos}
    try:
        return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)
    except ValueError:
        return False
