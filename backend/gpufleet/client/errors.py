"""What a call to a gpufleet server can end in, as exceptions a caller can catch by kind.

Every refusal carries the server's own sentence (``detail``) and the HTTP
status, so ``str(exc)`` is something a person can act on. FastAPI's list of
field errors is joined into one line (``config.lr: Input should be …``).
"""

from __future__ import annotations

from typing import Any


class GpufleetError(Exception):
    """Anything that kept a call from getting its answer."""


class ServerUnreachable(GpufleetError):
    """No HTTP answer at all: wrong address, server down, or a timeout."""

    def __init__(self, server: str, reason: str, message: str | None = None):
        self.server = server
        self.reason = reason
        super().__init__(message or f"cannot reach the server at {server}: {reason}")


class NoAnswer(ServerUnreachable):
    """The request reached the server (it was sent, or being sent), and no answer came: a read timeout, or the
    connection closed first. A request that changes something may have been done; ``method`` says which."""

    def __init__(self, server: str, reason: str, method: str = "", path: str = ""):
        self.method = method
        self.path = path
        super().__init__(server, reason, f"the server at {server} did not answer {method} {path} ({reason})")

    @property
    def may_have_been_done(self) -> bool:
        return self.method.upper() not in ("GET", "HEAD", "OPTIONS")


class InvalidRequest(GpufleetError, ValueError):
    """A request the client refused before sending it: a wrong field name or value.

    ``problems`` lists ``(field, message)``; the message names each field.
    """

    def __init__(self, what: str, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__(f"{what}: " + "; ".join(f"{f}: {m}" if f else m for f, m in problems))

    @classmethod
    def from_pydantic(cls, what: str, errors: list[Any]) -> InvalidRequest:
        problems = []
        for e in errors:
            field = ".".join(str(x) for x in e.get("loc", ()))
            msg = "unknown field" if e.get("type") == "extra_forbidden" else str(e.get("msg"))
            problems.append((field, msg))
        return cls(what, problems)


class UnknownTraining(GpufleetError, LookupError):
    """No training has this ID, ID prefix or name (among those the caller may see)."""

    def __init__(self, ref: str):
        self.ref = ref
        super().__init__(f"no training has the ID, ID prefix or name {ref!r}; `gpufleet trainings ls` lists them")


class AmbiguousTraining(GpufleetError, LookupError):
    """Several trainings match this ID prefix or name; ``matches`` lists them (ID, name, status)."""

    def __init__(self, ref: str, matches: list[tuple[str, str, str]], count: int):
        self.ref = ref
        self.matches = matches
        shown = ", ".join(f"{tid} ({name}, {status})" for tid, name, status in matches)
        more = f" and {count - len(matches)} more" if count > len(matches) else ""
        super().__init__(f"{ref!r} names {count} trainings: {shown}{more}; give more of the ID")


class APIError(GpufleetError):
    """The server answered with a 4xx or 5xx status."""

    status: int = 0

    def __init__(self, status: int, detail: Any, *, method: str = "", path: str = "",
                 headers: dict[str, str] | None = None):
        self.status = status
        # The server's detail as sent: a sentence, or FastAPI's list of field errors.
        self.detail = detail
        self.method = method
        self.path = path
        self.headers = headers or {}
        super().__init__(f"{describe_detail(detail)} (HTTP {status})")

    @property
    def message(self) -> str:
        """The server's message in one line, without the status."""
        return describe_detail(self.detail)


class BadRequest(APIError):
    status = 400


class Unauthorized(APIError):
    """Not signed in: set ``GPUFLEET_TOKEN`` (from ``gpufleet tokens create``) or pass ``token=``."""

    status = 401


class Forbidden(APIError):
    status = 403


class NotFound(APIError):
    status = 404


class MethodNotAllowed(APIError):
    status = 405


class Conflict(APIError):
    status = 409


class PayloadTooLarge(APIError):
    status = 413


class ValidationFailed(APIError):
    """The request is not valid: every problem is in ``detail``."""

    status = 422


class RateLimited(APIError):
    """Over a rate limit or the queued-trainings cap, still so after the client's retries."""

    status = 429

    @property
    def retry_after(self) -> float | None:
        return parse_retry_after(self.headers.get("retry-after"))


class ServerError(APIError):
    """The server failed (5xx); the request may or may not have taken effect."""


BY_STATUS: dict[int, type[APIError]] = {
    cls.status: cls
    for cls in (BadRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed, Conflict, PayloadTooLarge,
                ValidationFailed, RateLimited)
}


def error_for(status: int, detail: Any, **kw: Any) -> APIError:
    cls = BY_STATUS.get(status) or (ServerError if status >= 500 else APIError)
    err = cls(status, detail, **kw)
    err.status = status
    return err


def describe_detail(detail: Any) -> str:
    if isinstance(detail, list):  # FastAPI's field errors
        parts = []
        for d in detail:
            if isinstance(d, dict):
                loc = ".".join(str(x) for x in d.get("loc", []) if x not in ("body", "query", "path"))
                parts.append(f"{loc}: {d.get('msg')}" if loc else str(d.get("msg")))
            else:
                parts.append(str(d))
        return "; ".join(parts)
    return str(detail)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date); ``None`` if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    from datetime import datetime, timezone
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())
