"""Asking a session's Jupyter server whether it is up, and when it was last used (its REST API).

``/api/status`` gives ``last_activity`` (the newest request or kernel
message) and ``connections``; ``/api/kernels`` each kernel's
``execution_state``. ``no_track_activity`` keeps these polls from counting
as use themselves. Standard library only: this runs in the session's launcher.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import datetime, timezone
from typing import Any

TIMEOUT_S = 3.0


def _get(port: int, base_url: str, path: str, token: str) -> Any:
    url = f"http://127.0.0.1:{port}{base_url.rstrip('/')}/{path}?no_track_activity=1"
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # loopback http only
        return json.loads(resp.read())


def answers(port: int, base_url: str, token: str) -> bool:
    try:
        _get(port, base_url, "api/status", token)
        return True
    except (OSError, ValueError, urllib.error.URLError):
        return False


def activity(port: int, base_url: str, token: str) -> dict[str, Any] | None:
    """``{active_at, busy_kernels, connections}``: now while a kernel is busy or a client is connected."""
    try:
        status = _get(port, base_url, "api/status", token)
        kernels = _get(port, base_url, "api/kernels", token)
    except (OSError, ValueError, urllib.error.URLError):
        return None
    busy = sum(1 for k in kernels if k.get("execution_state") == "busy")
    connections = max(int(status.get("connections") or 0), sum(int(k.get("connections") or 0) for k in kernels))
    now = datetime.now(timezone.utc).isoformat()
    return {"active_at": now if busy or connections else status.get("last_activity"),
            "busy_kernels": busy, "connections": connections}
