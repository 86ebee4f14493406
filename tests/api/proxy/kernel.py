"""Run one cell on a Jupyter kernel over its WebSocket (the JSON form of the kernel protocol)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from typing import Any


def execute_request(code: str) -> dict[str, Any]:
    return {
        "header": {"msg_id": uuid.uuid4().hex, "msg_type": "execute_request", "username": "", "version": "5.3",
                   "session": uuid.uuid4().hex, "date": datetime.now(timezone.utc).isoformat()},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True},
    }


def run_cell(ws: Any, code: str, timeout: float = 120) -> str:
    """What the cell printed. ``ws``: a connected websockets sync client on the kernel's channels."""
    request = execute_request(code)
    ws.send(json.dumps(request))
    printed = ""
    while True:
        message = json.loads(ws.recv(timeout=timeout))
        if message.get("parent_header", {}).get("msg_id") != request["header"]["msg_id"]:
            continue
        kind = message["header"]["msg_type"]
        if kind == "stream":
            printed += message["content"]["text"]
        elif kind == "error":
            raise AssertionError(message["content"])
        elif kind == "status" and message["content"]["execution_state"] == "idle":
            return printed
