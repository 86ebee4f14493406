"""Which notebook a ``/sessions/{id}/`` path names, and who may open it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.api.auth import AuthUser

PREFIX = "/sessions/"
# A session's id is a UUID; anything else under the prefix (the dashboard's /sessions/new) is not a notebook.
_ID = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")


@dataclass(frozen=True)
class Notebook:
    """Where a session's Jupyter server listens, and whose it is."""

    session_id: str
    owner: str
    status: str
    host: str | None = None  # the GPU host's name in the fleet
    port: int | None = None  # its loopback port there; None until the worker started it
    token: str | None = None  # the server's token; never shown to the user
    address: str | None = None  # the host's address, for its relay when it is not this machine

    @property
    def reachable(self) -> bool:
        return self.status == "running" and self.port is not None and self.token is not None


def split_path(path: str) -> tuple[str, str] | None:
    """``/sessions/ID/rest`` → ``(ID, "/sessions/ID/rest")``; None when ID is not a session's id."""
    if not path.startswith(PREFIX):
        return None
    session_id = path[len(PREFIX):].split("/", 1)[0]
    return (session_id, path) if _ID.match(session_id) else None


def may_open(user: AuthUser, notebook: Notebook, *, joined: bool = False) -> bool:
    """A notebook runs code as its owner: only the owner may reach it, and an admin who explicitly joined
    it (``joined``: the pass says so). Without sign-in (the local admin) there is no one else."""
    return user.name == notebook.owner or user.via == "local" or (joined and user.is_admin)
