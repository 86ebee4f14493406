"""What a pool request is refused with: the message says what to fix."""

from __future__ import annotations


class PoolError(ValueError):
    """A pool request that cannot be met; the message says what to fix. ``status``: the HTTP answer."""

    def __init__(self, message: str, status: int = 422, field: str | None = None):
        super().__init__(message)
        self.status = status
        self.field = field
