"""Creates that can be retried safely: each one is sent with an ``Idempotency-Key`` of its own.

A create whose answer never came (a timeout, a dropped connection) may or may
not have happened. Sent again with the same key, the server answers with the
first answer instead of creating a second training, session or sweep
(``gpufleet.api.idempotency``), so :meth:`CreateCalls.create` retries it.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")


class CreateCalls:
    """Over the methods ``Client`` provides (``_send``) and its ``create_retries``."""

    _send: Any
    create_retries: int

    def create(self, path: str, body: dict[str, Any]) -> Any:
        """The JSON answer of a create (``POST`` to ``path``), retried with the same key when unanswered."""
        r = self._send("POST", path, json=body, headers={"Idempotency-Key": str(uuid.uuid4())},
                       unanswered_retries=self.create_retries)
        return r.json()

    def _create(self, model: type[M], path: str, body: BaseModel | dict[str, Any]) -> M:
        payload = body if isinstance(body, dict) else body.model_dump(mode="json", exclude_unset=True)
        return model.model_validate(self.create(path, payload))
