"""What a command-line client sends to prove who it is.

A person keeps their token in ``GPUFLEET_TOKEN`` (from `gpufleet tokens
create`); commands that talk to a server add :func:`client_headers` to every
request. A server on loopback without sign-in needs none, so an unset variable
is not an error here: the server answers 401 with what to do.
"""

from __future__ import annotations

import os

TOKEN_ENV = "GPUFLEET_TOKEN"


def client_headers(token: str | None = None) -> dict[str, str]:
    """``Authorization: Bearer …`` from ``token`` or ``GPUFLEET_TOKEN``; empty when neither is set."""
    value = (token if token is not None else os.environ.get(TOKEN_ENV, "")).strip()
    return {"Authorization": f"Bearer {value}"} if value else {}
