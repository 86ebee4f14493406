"""Complete the OpenAPI schema with the refusals the auth layer answers with.

The gate and the limits answer before any route runs (401, 403, 413, 429), so
routes cannot declare these themselves. Declaring them keeps the schema honest
for the generated TypeScript client and for schemathesis.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from gpufleet.api.limits import SIGN_IN_PATH


class ErrorDetail(BaseModel):
    detail: str


def _uses(dependant: Any, fn: Any) -> bool:
    return any(d.call is fn or _uses(d, fn) for d in dependant.dependencies)


def _creator_operations(app: FastAPI) -> set[tuple[str, str]]:
    """(path, method) of every route that depends on ``require_creator``."""
    from fastapi.routing import APIRoute

    from gpufleet.api.deps import require_creator

    try:
        # FastAPI >= 0.13x mounts included routers lazily; this walks into them.
        from fastapi.routing import iter_route_contexts

        pairs = [(c.original_route, c.path) for c in iter_route_contexts(app.routes)]
    except ImportError:  # older FastAPI copies routes into app.routes
        pairs = [(r, getattr(r, "path", None)) for r in app.routes]
    found: set[tuple[str, str]] = set()
    for route, path in pairs:
        if isinstance(route, APIRoute) and path and _uses(route.dependant, require_creator):
            found.update((path, m.lower()) for m in route.methods)
    return found


def document_refusals(app: FastAPI) -> None:
    """Declare 401/403/413/429 where the auth layer can answer with them, so the schema is honest.

    The gate and the limits answer before any route runs, so the routes cannot
    declare these themselves; the generated schema is completed instead.
    """
    from gpufleet.api.security.gate import is_gated

    generate = app.openapi

    def ref(description: str) -> dict[str, Any]:
        return {
            "description": description,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorDetail"}}},
        }

    done: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        schema = generate()
        # FastAPI caches the schema until routes change; complete each one once.
        if done and done[0] is schema:
            return schema
        creators = _creator_operations(app)
        schema.setdefault("components", {}).setdefault("schemas", {}).setdefault(
            "ErrorDetail", ErrorDetail.model_json_schema()
        )
        for path, ops in schema.get("paths", {}).items():
            if not (is_gated(path) or path == SIGN_IN_PATH):
                continue
            for method, op in ops.items():
                if not isinstance(op, dict) or "responses" not in op:
                    continue
                extra: dict[str, dict[str, Any]] = {}
                if "requestBody" in op:
                    extra["413"] = ref("Request body too large")
                if is_gated(path):
                    extra["401"] = ref("Not signed in, or the credentials are not valid")
                    extra["403"] = ref("Signed in, but not allowed to do this")
                if path == SIGN_IN_PATH:
                    extra["401"] = ref("The token is not valid")
                if path == SIGN_IN_PATH or (path, method) in creators:
                    extra["429"] = ref("Over a rate limit or the queued-trainings cap")
                for code, spec in extra.items():
                    op["responses"].setdefault(code, spec)
        done[:] = [schema]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
