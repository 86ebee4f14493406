"""Where the proxy learns of a session's notebook: the sessions' own record, or what a test puts in its place."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from gpufleet.api.proxy.notebooks import Notebook
from gpufleet.config import Settings
from gpufleet.db.interactive import TrainingSession
from gpufleet.db.models import Training
from gpufleet.db.session import session_scope

Locator = Callable[[Settings, str], "Notebook | None"]


def notebook_of_session(settings: Settings, session_id: str) -> Notebook | None:
    """The notebook of session ``session_id``, or None when there is no such session.

    A session that is not running a notebook (queued, ended, a shell) still
    says whose it is and its status, so a stranger gets 403 and its owner 409.
    """
    from gpufleet.interactive.notebook import notebook_target

    try:
        sid = uuid.UUID(session_id)
    except ValueError:
        return None
    with session_scope(settings) as sess:
        target = notebook_target(sess, sid)
        if target is not None:
            return Notebook(str(sid), target.owner, "running", target.host, target.port, target.token,
                            target.host_address)
        row = sess.get(Training, sid)
        if row is None or sess.get(TrainingSession, sid) is None:  # none, or a training's
            return None
        status = row.status if row.status != "running" else "running without a notebook"
        return Notebook(str(sid), row.owner, status)


def locator_of(app: Any) -> Locator:
    """The app's way of finding notebooks: ``app.state.notebook_locator`` when set (tests), else the sessions'."""
    state = getattr(app, "state", None)
    found = getattr(state, "notebook_locator", None) if state is not None else None
    return found or notebook_of_session
