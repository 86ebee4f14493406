"""Where a session's notebook server is, for gpufleet's proxy at ``/sessions/{id}/``.

The worker starts the Jupyter server on the session's host, bound to
127.0.0.1 on the port stored here, under ``base_url`` (so no path is
rewritten), and accepting only the token stored here, which no browser ever
sees: the proxy adds ``Authorization: token …`` to what it forwards.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.db.interactive import TrainingSession
from gpufleet.db.models import Host
from gpufleet.interactive.view import base_url
from gpufleet.lifecycle.models import Training

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class NotebookTarget:
    session_id: uuid.UUID
    owner: str
    host: str
    address: str  # where the server listens on its host (loopback)
    host_address: str | None  # the host's registered address, to reach it from another machine
    port: int
    token: str
    base_url: str


def notebook_target(sess: Session, session_id: uuid.UUID) -> NotebookTarget | None:
    """None unless the session exists, runs a notebook, is running and its server's port is stored."""
    row = sess.execute(
        select(Training.owner, Training.status, Host.name, Host.address, TrainingSession.port, TrainingSession.token)
        .join(TrainingSession, TrainingSession.training_id == Training.id)
        .join(Host, Host.id == Training.host_id)
        .where(Training.id == session_id, TrainingSession.jupyter.is_(True))
    ).one_or_none()
    if row is None:
        return None
    owner, status, host, address, port, token = row
    if status != "running" or not port or not token:
        return None
    return NotebookTarget(session_id=session_id, owner=owner, host=host, address=LOOPBACK, host_address=address,
                          port=port, token=token, base_url=base_url(session_id))


def may_open(user_name: str, role: str, target: NotebookTarget) -> bool:
    """The session's owner and admins may open its notebook; nobody else."""
    return role == "admin" or user_name == target.owner
