"""Where the proxy connects for a notebook, and what it adds to every request there.

A notebook on this machine is reached on its loopback port. A notebook on
another GPU host is reached through that host's relay
(:mod:`gpufleet.api.proxy.relay`, served by ``gpufleet worker`` on
``GPUFLEET_SESSION_RELAY_PORT``): the proxy signs, per request, which
loopback port the relay may forward to, with a key derived from
``GPUFLEET_SECRET_KEY``, so the relay forwards only what a gpufleet server
asked for and the notebook's port stays on loopback.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.api.proxy.notebooks import Notebook
from gpufleet.api.security.signing import sign, unsign
from gpufleet.config import Settings

RELAY_HEADER = "x-gpufleet-relay"
RELAY_PURPOSE = "notebook-relay"
# Long enough for a request to cross the network, short enough that a copied header is soon worthless.
RELAY_TTL_S = 30


class Unreachable(Exception):
    """The notebook cannot be reached from here; the message says what to configure."""


@dataclass(frozen=True)
class Upstream:
    origin: str  # scheme://host:port of the first hop
    headers: tuple[tuple[str, str], ...]  # added to every request (the token, the relay's grant)

    @property
    def ws_origin(self) -> str:
        return "ws" + self.origin[len("http"):]

    def anonymous(self) -> Upstream:
        """The same notebook, reached as no one: without its token (a relay's grant kept)."""
        return Upstream(self.origin, tuple(h for h in self.headers if h[0] != "authorization"))


def token_header(token: str) -> tuple[str, str]:
    return ("authorization", f"token {token}")


def upstream_for(settings: Settings, notebook: Notebook) -> Upstream:
    assert notebook.port is not None and notebook.token is not None
    token = token_header(notebook.token)
    if notebook.host in (None, settings.host_name):
        return Upstream(f"http://127.0.0.1:{notebook.port}", (token,))
    if not settings.session_relay_port or not notebook.address:
        raise Unreachable(
            f"the notebook runs on host {notebook.host!r}, which this server reaches only through that host's"
            " session relay: run `gpufleet worker` there with GPUFLEET_SESSION_RELAY_PORT set (the same on"
            " every host) and its address registered")
    grant = sign(settings.secret_key, RELAY_PURPOSE, {"p": notebook.port, "s": notebook.session_id}, RELAY_TTL_S)
    host = f"[{notebook.address}]" if ":" in notebook.address else notebook.address
    return Upstream(f"http://{host}:{settings.session_relay_port}", (token, (RELAY_HEADER, grant)))


def relay_grant(settings: Settings, value: str | None, session_id: str) -> int | None:
    """The loopback port a relay request may reach (signed for this session by a server), or None."""
    payload = unsign(settings.secret_key, RELAY_PURPOSE, value or "")
    if payload is None or payload.get("s") != session_id:
        return None
    port = payload.get("p")
    return port if isinstance(port, int) and 0 < port < 65536 else None
