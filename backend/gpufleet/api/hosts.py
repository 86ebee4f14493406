"""HTTP side of the unknown-host rule (``scheduling.hosts``): a 404 naming the known hosts."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from sqlalchemy.orm import Session

from gpufleet.api.security.openapi import error_response
from gpufleet.scheduling.hosts import UnknownHost, require_host

# For ``responses=`` on every route that takes a host.
UNKNOWN_HOST: dict[int | str, dict[str, Any]] = {404: error_response("The host named is not registered; "
                                                                      "the message lists the known hosts")}


def check_host(sess: Session, name: str | None) -> None:
    """Nothing when ``name`` is ``None`` or registered; else 404 with the known hosts."""
    if name is None:
        return
    try:
        require_host(sess, name)
    except UnknownHost as exc:
        raise HTTPException(404, str(exc)) from None
