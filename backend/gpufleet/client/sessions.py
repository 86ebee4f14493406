"""The client's calls for interactive sessions (mixed into ``gpufleet.client.Client``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpufleet import wire
from gpufleet.devices.device import DEVICE_ENV
from gpufleet.client.sharing import checked

if TYPE_CHECKING:
    from gpufleet.wire.sessions import (
        NotebookOpen,
        SessionCreate,
        SessionLimitPublic,
        SessionList,
        SessionPublic,
        ShellTarget,
    )

API = "/api/v1/sessions"
# What a session's shell takes from the server's answer: which GPUs it sees, and which session it is in.
# Nothing else: PATH, LD_*, BASH_ENV, ENV, PROMPT_COMMAND, PYTHON* or GPUFLEET_SERVER from an answer would
# decide what the shell runs, as the caller.
SHELL_ENV = DEVICE_ENV | {"GPUFLEET_SESSION_ID", "GPUFLEET_TRAINING_ID"}


def shell_env(given: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The variables of a shell target a shell may take, and the names it leaves out."""
    kept = {k: v for k, v in given.items() if k in SHELL_ENV and "\x00" not in v}
    return kept, sorted(set(given) - set(kept))


class SessionCalls:
    """Start, list, show, stop and extend sessions, over the methods ``Client`` provides."""

    _get: Any
    _post: Any
    _create: Any
    _send: Any

    def start_session(self, body: SessionCreate | None = None, **fields: Any) -> SessionPublic:
        """Queue a session: ``start_session(gpus=1, jupyter=True, hours=2)``."""
        body = body or checked(wire.SessionCreate, "session", **fields)
        return self._create(wire.SessionPublic, API, body)

    def list_sessions(self, *, status: str | list[str] | None = None, owner: str | None = None,
                      limit: int = 50, offset: int = 0) -> SessionList:
        return self._get(wire.SessionList, API, status=status, owner=owner, limit=limit, offset=offset)

    def get_session(self, session_id: str) -> SessionPublic:
        return self._get(wire.SessionPublic, f"{API}/{session_id}")

    def stop_session(self, session_id: str) -> SessionPublic:
        return self._post(wire.SessionPublic, f"{API}/{session_id}/stop")

    def extend_session(self, session_id: str, hours: float) -> SessionPublic:
        return self._post(wire.SessionPublic, f"{API}/{session_id}/extend",
                          checked(wire.SessionExtend, "extend", hours=hours))

    def open_notebook(self, session_id: str, join: bool = False) -> NotebookOpen:
        """A single-use address of the session's notebook on its own origin: its owner's, or (``join``) an
        admin's for another member's notebook, recorded on the session."""
        return self._post(wire.NotebookOpen, f"{API}/{session_id}/{'join' if join else 'open'}")

    def session_shell(self, session_id: str) -> ShellTarget:
        return self._post(wire.ShellTarget, f"{API}/{session_id}/shell")

    def session_limits(self) -> list[SessionLimitPublic]:
        return [wire.SessionLimitPublic.model_validate(x) for x in self._send("GET", f"{API}/limits").json()]

    def set_session_limit(self, kind: str, name: str, max_hours: float) -> SessionLimitPublic:
        body = checked(wire.SessionLimitSet, "limit", max_hours=max_hours).model_dump(mode="json")
        answer = self._send("PUT", f"{API}/limits/{kind}/{name}", json=body)
        return wire.SessionLimitPublic.model_validate(answer.json())
