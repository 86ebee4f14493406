"""Complete the OpenAPI schema with the refusals every route may answer with.

The gate and the limits answer before any route runs (401, 403, 413, 429),
FastAPI answers 400 for a body that is not JSON, and a path that names a
missing thing answers 404, so routes do not declare these one by one.
Declaring them keeps the schema honest for the generated TypeScript client and
for schemathesis (tests/fuzz).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from gpufleet.api.limits import SIGN_IN_PATH


# Operations that may trace a config's memory (gpufleet.scheduling.memory_pool), so are rate-limited.
ESTIMATING_OPERATIONS = frozenset({"gpus-recommend", "gpus-recommend-config", "gpus-validate"})


class ErrorDetail(BaseModel):
    detail: str


def _uses(dependant: Any, fn: Any) -> bool:
    return any(d.call is fn or _uses(d, fn) for d in dependant.dependencies)


def _widen_validation_error(components: dict[str, Any]) -> None:
    """A 422 carries either FastAPI's list of field errors or one sentence.

    Routes refuse input the schema cannot express (a GPU that does not exist,
    two fields that exclude each other) with ``HTTPException(422, "…")``, whose
    ``detail`` is a string; the generated schema only knew the list form.
    """
    hve = components.get("HTTPValidationError")
    if not hve or "properties" not in hve or "detail" not in hve["properties"]:
        return
    listed = hve["properties"]["detail"]
    if "anyOf" in listed:
        return
    hve["properties"]["detail"] = {
        "anyOf": [{k: v for k, v in listed.items() if k != "title"}, {"type": "string"}],
        "title": listed.get("title", "Detail"),
    }


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
    """Declare 400/401/403/404/413/429 where they can happen, so the schema is honest.

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
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.setdefault("ErrorDetail", ErrorDetail.model_json_schema())
        _widen_validation_error(components)
        for path, ops in schema.get("paths", {}).items():
            if not (path.startswith("/api/") or is_gated(path)):
                continue
            for method, op in ops.items():
                if not isinstance(op, dict) or "responses" not in op:
                    continue
                extra: dict[str, dict[str, Any]] = {}
                if "requestBody" in op:
                    # FastAPI answers 400 itself when the body is not JSON at all.
                    extra["400"] = ref("The body is not valid JSON")
                    extra["413"] = ref("Request body too large")
                if any(p.get("in") == "path" for p in op.get("parameters", [])):
                    extra["404"] = ref("What the path names does not exist")
                # HostGuard refuses a Host name the server does not answer to.
                extra.setdefault("400", ref("The Host header names a host this server does not answer to"))
                # NulGuard refuses U+0000 in any path, query or body.
                extra["422"] = ref("The request contains a NUL character")
                if is_gated(path):
                    extra["401"] = ref("Not signed in, or the credentials are not valid")
                    extra["403"] = ref("Signed in, but not allowed to do this")
                if path == SIGN_IN_PATH:
                    extra["401"] = ref("The token is not valid")
                    extra["403"] = ref("Signing in from this Origin is not allowed")
                if path == SIGN_IN_PATH or (path, method) in creators:
                    extra["429"] = ref("Over a rate limit or the queued-trainings cap")
                if op.get("operationId") in ESTIMATING_OPERATIONS:
                    extra["429"] = ref("Over the memory-estimate rate, or too many estimates waiting")
                for code, spec in extra.items():
                    op["responses"].setdefault(code, spec)
        done[:] = [schema]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
