"""The one rule for a request that names a host: it must be registered, or the answer says which are.

Every route that takes a host (a path segment, a ``host`` filter, a ``host``
field of a body) asks :func:`require_host` first, so an unknown host means the
same thing everywhere: 404, naming the known hosts. An empty list for a typo
would read as "that host has no GPUs".
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.db.models import Host


class UnknownHost(LookupError):
    """``str(exc)`` is the sentence to show: the name asked for and the hosts there are."""

    def __init__(self, name: str, known: list[str]):
        self.name = name
        self.known = known
        listed = ", ".join(known) if known else "none yet (start `gpufleet serve` or a worker on a GPU host)"
        super().__init__(f"host {name!r} is not known; known hosts: {listed}")


def require_host(sess: Session, name: str) -> Host:
    """The registered host called ``name``; :class:`UnknownHost` if there is none."""
    host = sess.scalar(select(Host).where(Host.name == name))
    if host is None:
        raise UnknownHost(name, list(sess.scalars(select(Host.name).order_by(Host.name))))
    return host
