"""Where a browser opens a notebook: a host name of its own per notebook, and the names a request may use.

Browsers keep cookies and storage per host name, not per port, and on a
machine with members' shells any member may listen on any loopback port
above 1024. So every notebook gets a host name of its own:

- the loopback default (the dashboard reached as ``127.0.0.1``,
  ``localhost`` or ``[::1]``): ``<id>.nb.localhost`` on the sessions port;
  browsers resolve every ``*.localhost`` name to loopback themselves
  (RFC 6761 §6.3), so no DNS is involved;
- ``GPUFLEET_SESSIONS_ORIGIN`` with ``{id}`` (``https://{id}.nb.example.org``,
  a wildcard name behind a proxy): that name with the session's id;
- ``GPUFLEET_SESSIONS_ORIGIN`` without it, or a dashboard reached under
  another name with no setting: one host name for all notebooks, each
  notebook's cookie then scoped to its own path (see docs/notebooks.md).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from gpufleet.api.security.hosts import LOOPBACK_NAMES, host_allowed, host_name
from gpufleet.config import Settings

LOOPBACK_DOMAIN = "nb.localhost"


class NoNotebookOrigin(Exception):
    """This server serves no notebooks (``GPUFLEET_SESSIONS_PORT=0`` and no ``GPUFLEET_SESSIONS_ORIGIN``)."""


class WrongHost(Exception):
    """A request names a host this session's notebook is not served under; the message says which."""


def sessions_port(settings: Settings) -> int:
    """The port `serve` listens on for notebooks: ``GPUFLEET_SESSIONS_PORT``, else the API's port + 1; 0: none."""
    if settings.sessions_port is not None:
        return settings.sessions_port
    return settings.port + 1 if settings.port < 65535 else 0


def loopback_host(session_id: str) -> str:
    """The notebook's own name on the loopback default."""
    return f"{session_id.lower()}.{LOOPBACK_DOMAIN}"


def is_loopback(name: str) -> bool:
    return name in LOOPBACK_NAMES or name == "localhost" or name.endswith(".localhost")


def notebook_origin(settings: Settings, session_id: str, scheme: str, host_name_: str) -> str:
    """The origin a browser opens session ``session_id``'s notebook at.

    ``GPUFLEET_SESSIONS_ORIGIN`` when set (``{id}`` filled in); else, when the
    dashboard was reached on loopback (``host_name_``), the notebook's own
    ``<id>.nb.localhost`` on the sessions port; else that host name on the sessions port.
    """
    if settings.sessions_origin:
        return settings.sessions_origin.replace("{id}", session_id)
    port = sessions_port(settings)
    if not port:
        raise NoNotebookOrigin("this server serves no notebooks: GPUFLEET_SESSIONS_PORT is 0 and"
                               " GPUFLEET_SESSIONS_ORIGIN is not set")
    if is_loopback(host_name_.lower()):
        return f"{scheme}://{loopback_host(session_id)}:{port}"
    host = f"[{host_name_}]" if ":" in host_name_ else host_name_
    return f"{scheme}://{host}:{port}"


def own_host_name(settings: Settings) -> bool:
    """Whether each notebook is served under a host name of its own (else one name for all, per path)."""
    return not settings.sessions_origin or "{id}" in settings.sessions_origin


def check_host(settings: Settings, header: str | None, session_id: str) -> None:
    """Refuse (:class:`WrongHost`) a request for this notebook under any name but its own."""
    name = host_name(header or "")
    if settings.sessions_origin:
        wanted = urlsplit(settings.sessions_origin.replace("{id}", session_id)).hostname
        if name is not None and wanted is not None and name == wanted.lower():
            return
    elif name is not None and is_loopback(name):
        if name == loopback_host(session_id):
            return
    elif host_allowed(header, settings):
        return
    raise WrongHost(f"this server does not serve session {session_id}'s notebook under the host name {header!r};"
                    " open it from the dashboard (GPUFLEET_SESSIONS_ORIGIN, GPUFLEET_ALLOWED_HOSTS)")
