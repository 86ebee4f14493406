"""What the OpenAPI document names beside the routes' own models.

The live stream's frames (no route returns them: they go over the WebSocket)
and the training statuses as named enums, so that the dashboard's generated
types (``frontend/src/api/schema.ts``) have them: ``LiveMessage`` and the
models it is made of, ``LiveRequest``, ``TrainingStatus``, ``FinalStatus``.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from gpufleet.db.statuses import FinalStatus, TrainingStatus
from gpufleet.wire.live import LiveMessage, LiveRequest

REF = "#/components/schemas/{model}"
NAMED: dict[str, Any] = {
    "LiveMessage": LiveMessage,
    "LiveRequest": LiveRequest,
    "TrainingStatus": TrainingStatus,
    "FinalStatus": FinalStatus,
}


def extra_components() -> dict[str, Any]:
    """Schemas to add under ``components.schemas``: the named types and every model they use."""
    out: dict[str, Any] = {}
    for name, tp in NAMED.items():
        schema = TypeAdapter(tp).json_schema(ref_template=REF)
        out.update(schema.pop("$defs", {}))
        out[name] = {"title": name, **schema}
    for schema in out.values():
        # A frame's optional field is left out, not sent as null: no default, so generated
        # clients read it as optional (openapi-typescript makes a field with a default required).
        for prop in schema.get("properties", {}).values():
            prop.pop("default", None)
    return out
