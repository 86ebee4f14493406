"""Section ``sessions``: interactive sessions (``GPUFLEET_SESSION_*``) — their time limits, the idle rule, and where
notebooks are served."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator


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
    # Notebooks are served from an origin of their own, never the dashboard's (api/proxy/origin.py,
    # docs/notebooks.md). `serve` listens for them on sessions_port (None: the API's port + 1; 0: it serves
    # no notebooks), and sessions_origin says how a browser reaches that listener: "" for the dashboard's
    # own host name on that port, "https://notebooks.example.org" behind a proxy, or a host name per
    # session, "https://{id}.nb.example.org" (wildcard DNS and certificate).
    sessions_port: int | None = Field(default=None, ge=0, le=65535)
    sessions_origin: str = Field(default="", max_length=200)

    @field_validator("sessions_port", mode="before")
    @classmethod
    def _port_unset(cls, value: object) -> object:
        return None if value == "" else value  # GPUFLEET_SESSIONS_PORT= (empty), as a child gets None: the default

    @field_validator("sessions_origin")
    @classmethod
    def _origin_shape(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if not value:
            return ""
        scheme, sep, rest = value.partition("://")
        host = rest.split(":", 1)[0]
        if scheme not in ("http", "https") or not sep or not host or "/" in rest or "?" in rest or "#" in rest:
            raise ValueError(f"GPUFLEET_SESSIONS_ORIGIN must look like https://notebooks.example.org[:port] or"
                             f" https://{{id}}.nb.example.org (a host name per session), not {value!r}")
        if "{" in rest.replace("{id}", ""):
            raise ValueError("GPUFLEET_SESSIONS_ORIGIN may hold {id} (the session's id) and nothing else in braces")
        return value
