"""The settings of interactive sessions (``GPUFLEET_SESSION_*``), a part of :class:`gpufleet.config.Settings`.

Kept beside ``config.py`` so that file stays readable; ``Settings`` inherits
these fields, so they are read, checked and documented the same way.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SessionSettings(BaseModel):
    # A session's time limit when it asks for none, and the most hours (extensions included) a
    # session may last unless an admin set another maximum for its owner or a group of theirs.
    session_default_hours: float = Field(default=4.0, gt=0, le=24 * 365)
    session_max_hours: float = Field(default=24.0, gt=0, le=24 * 365)
    # Idle rule: GPUs below this utilisation and (notebooks) no busy kernel, no connection and no
    # request for the window -> a session_idle_warning event; after the grace, stopped (action stop).
    session_idle_action: Literal["off", "warn", "stop"] = "stop"
    session_idle_threshold_percent: float = Field(default=5.0, ge=0, le=100)
    session_idle_window_s: float = Field(default=3600.0, ge=5, le=30 * 86400)
    session_idle_grace_s: float = Field(default=600.0, ge=0, le=7 * 86400)
    # How long the worker waits for a notebook server to answer before the session fails.
    session_start_timeout_s: float = Field(default=120.0, gt=0, le=3600)
    # The port each worker serves its notebook relay on, for a server on another machine
    # (api/proxy/relay.py, docs/notebooks.md); the same on every host. 0: off.
    session_relay_port: int = Field(default=0, ge=0, le=65535)
