"""Complete the OpenAPI schema with sign-in and the refusals every route may answer with.

The gate and the limits answer before any route runs (401, 403, 413, 429),
FastAPI answers 400 for a body that is not even UTF-8 (422 for text that is
not JSON), and a path that names a
missing thing answers 404, so routes do not declare these one by one; what
only one route answers (409 on cancel, 503 on /healthz) it declares itself
with ``responses=``. The creates that take an ``Idempotency-Key``
(``gpufleet.api.idempotency``) declare it, the ``Idempotent-Replayed`` header
of a replayed answer and the 409 of a reused key. Sign-in is declared as two security schemes (a bearer
token, the dashboard's session cookie) with ``security`` on every gated
operation and none on the open ones, so generated clients know a token is
needed and ``/docs`` has an Authorize button. Declaring all this keeps the
schema honest for generated clients, for schemathesis (tests/fuzz) and for the
route walk (tests/api/test_openapi_contract.py).
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from gpufleet.api.deps import require_admin, require_creator, require_member
from gpufleet.api.idempotency import CREATES, MAX_KEY
from gpufleet.api.security.asgi import SIGN_IN_PATH, is_gated
from gpufleet.api.security.policy import auth_required


# Operations that may trace a config's memory (gpufleet.scheduling.memory_pool), so are rate-limited.
ESTIMATING_OPERATIONS = frozenset({"gpus-recommend", "gpus-recommend-config", "gpus-validate"})


class ErrorDetail(BaseModel):
    detail: str


BEARER = "bearerAuth"
COOKIE = "sessionCookie"
SECURITY_SCHEMES: dict[str, dict[str, Any]] = {
    BEARER: {
        "type": "http",
        "scheme": "bearer",
        "description": "An API token from `gpufleet tokens create USER`, sent as `Authorization: Bearer <token>`.",
    },
    COOKIE: {
        "type": "apiKey",
        "in": "cookie",
        "name": "gpufleet_session",
        "description": "The dashboard's session, set by `POST /api/v1/auth/sign-in` (named"
                       " `__Host-gpufleet_session` over https). A write with it counts only from the dashboard's"
                       " own origin, and only as JSON.",
    },
}


# Every 429 and 503 under /api/ carries it (the limits, admission, a database outage, a busy estimate pool).
RETRY_AFTER = {
    "description": "seconds to wait before sending the request again; nothing was done",
    "schema": {"type": "integer", "minimum": 0},
}


def error_response(description: str) -> dict[str, Any]:
    """A ``responses=`` entry whose body is ``ErrorDetail`` (for routes that declare their own codes)."""
    return {"description": description, "model": ErrorDetail}


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


def api_routes(app: FastAPI) -> list[tuple[Any, str]]:
    """Every ``APIRoute`` of the app with its full path, walking into included routers."""
    from fastapi.routing import APIRoute

    try:
        # FastAPI >= 0.13x mounts included routers lazily; this walks into them.
        from fastapi.routing import iter_route_contexts

        pairs = [(c.original_route, c.path) for c in iter_route_contexts(app.routes)]
    except ImportError:  # older FastAPI copies routes into app.routes
        pairs = [(r, getattr(r, "path", None)) for r in app.routes]
    # As the schema writes it: "{training_id}", not the route's "{training_id:uuid}".
    return [(route, re.sub(r"\{(\w+):\w+\}", r"{\1}", path)) for route, path in pairs
            if isinstance(route, APIRoute) and path]


def _operations_using(app: FastAPI, *deps: Any) -> set[tuple[str, str]]:
    """(path, method) of every route that depends, at any depth, on one of ``deps``."""
    found: set[tuple[str, str]] = set()
    for route, path in api_routes(app):
        if any(_uses(route.dependant, d) for d in deps):
            found.update((path, m.lower()) for m in route.methods)
    return found


def document_refusals(app: FastAPI) -> None:
    """Declare sign-in and 401/403/404/413/422/429/503 where they can happen, so the schema is honest.

    The gate and the limits answer before any route runs, so the routes cannot
    declare these themselves; the generated schema is completed instead.
    """
    generate = app.openapi
    done: list[dict[str, Any]] = []

    def openapi() -> dict[str, Any]:
        schema = generate()
        # FastAPI caches the schema until routes change; complete each one once.
        if done and done[0] is schema:
            return schema
        _complete(app, schema)
        done[:] = [schema]
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _ref(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorDetail"}}},
    }


# HostGuard answers before any route, /healthz included.
_HOST_REFUSED = "The Host header names a host this server does not answer to"


def _complete(app: FastAPI, schema: dict[str, Any]) -> None:
    creators = _operations_using(app, require_creator)
    # 403 is a role refusal (these dependencies) or a cross-site refusal of a state-changing request.
    role_checked = _operations_using(app, require_member, require_admin)
    settings = getattr(app.state, "settings", None)
    anonymous_ok = settings is not None and not auth_required(settings)
    schema.setdefault("components", {}).setdefault("securitySchemes", {}).update(SECURITY_SCHEMES)
    components = schema["components"].setdefault("schemas", {})
    components.setdefault("ErrorDetail", ErrorDetail.model_json_schema())
    _widen_validation_error(components)
    for path, ops in schema.get("paths", {}).items():
        for method, op in ops.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            if not (path.startswith("/api/") or is_gated(path)):
                _declare_outside_api(op)
                continue
            if is_gated(path):
                # Either credential will do; with sign-in off the implicit local admin needs none.
                op["security"] = [{BEARER: []}, {COOKIE: []}] + ([{}] if anonymous_ok else [])
            else:
                op.pop("security", None)
            for code, spec in _refusals(path, method, op, creators, role_checked).items():
                op["responses"].setdefault(code, spec)
            if method == "post" and path in CREATES:
                _declare_idempotency(op)
            for code in ("429", "503"):
                if code in op["responses"]:
                    op["responses"][code].setdefault("headers", {})["Retry-After"] = RETRY_AFTER


IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Any string (a UUID is usual): sent again with the same key and body, within 24 hours, the"
                   " request gets the first answer (with `Idempotent-Replayed: true`) instead of being done a"
                   " second time. A key belongs to the signed-in user and to this endpoint; a new request needs"
                   " a new key.",
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY},
}
IDEMPOTENT_REPLAYED = {
    "description": "`true` when this is the stored answer to an earlier request with the same Idempotency-Key;"
                   " absent when the request was done now",
    "schema": {"type": "string", "enum": ["true"]},
}


def _declare_idempotency(op: dict[str, Any]) -> None:
    """The key a create takes, the header of a replayed answer, the 409 of a reused key (api/idempotency.py)."""
    params = op.setdefault("parameters", [])
    if not any(p.get("in") == "header" and p.get("name") == IDEMPOTENCY_KEY["name"] for p in params):
        params.append(dict(IDEMPOTENCY_KEY))
    for code, answer in op["responses"].items():
        if code.startswith("2"):
            answer.setdefault("headers", {})["Idempotent-Replayed"] = IDEMPOTENT_REPLAYED
    conflict = op["responses"].setdefault("409", _ref(""))
    conflict["description"] = "; or ".join(filter(None, [
        conflict["description"], "This Idempotency-Key was used with another body, or its first request is still"
        " being answered (then Retry-After says when to send it again)"]))
    conflict.setdefault("headers", {})["Retry-After"] = {
        "description": "while the first request with this key is being answered: seconds to wait before sending"
                       " it again", "schema": {"type": "integer", "minimum": 0}}
    bad = op["responses"].setdefault("400", _ref(""))
    bad["description"] = "; or ".join(filter(None, [bad["description"], f"the Idempotency-Key header is not 1 to"
                                                                       f" {MAX_KEY} characters"]))


def _declare_outside_api(op: dict[str, Any]) -> None:
    """/healthz, the dashboard's files: only the guards that answer before everything."""
    # NulGuard refuses U+0000 in any path, query or body, /healthz included.
    op["responses"].setdefault("422", _ref("The request contains a NUL character"))
    op["responses"].setdefault("400", _ref(_HOST_REFUSED))
    # SizeLimits refuses a large body on any path, whether the operation reads one or not.
    op["responses"].setdefault("413", _ref("Request body too large"))


def _refusals(path: str, method: str, op: dict[str, Any], creators: set[tuple[str, str]],
              role_checked: set[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """What may answer an API operation before (or instead of) its route, by status code."""
    # NulGuard refuses U+0000 in any path, query or body.
    extra: dict[str, dict[str, Any]] = {"422": _ref("The request contains a NUL character")}
    if "requestBody" in op:
        # Bytes that are not UTF-8 cannot be parsed at all (FastAPI's 400); well-formed
        # text that is not JSON is a 422 (json_invalid), declared below.
        extra["400"] = _ref("The body could not be read: it is not UTF-8 text (or the Host header "
                            "names a host this server does not answer to)")
        extra["413"] = _ref("Request body too large")
    if any(p.get("in") == "path" for p in op.get("parameters", [])):
        extra["404"] = _ref("What the path names does not exist")
    # HostGuard refuses a Host name the server does not answer to.
    extra.setdefault("400", _ref(_HOST_REFUSED))
    # SizeLimits refuses a large body on any path, whether the operation reads one or not.
    extra.setdefault("413", _ref("Request body too large"))
    if is_gated(path):
        extra["401"] = _ref("Not signed in, or the credentials are not valid")
        if method not in ("get", "head", "options") or (path, method) in role_checked:
            extra["403"] = _ref("Signed in, but not allowed to do this (role, owner, or a foreign Origin)")
    if path == SIGN_IN_PATH:
        extra["401"] = _ref("The token is not valid")
        extra["403"] = _ref("Signing in from this Origin is not allowed")
    if path == SIGN_IN_PATH or (path, method) in creators:
        extra["429"] = _ref("Over a rate limit or the queued-trainings cap")
    if op.get("operationId") in ESTIMATING_OPERATIONS:
        extra["429"] = _ref("Over the memory-estimate rate, or too many estimates waiting")
    if is_gated(path):
        # Admission (api/loadshed.py) answers any gated request past capacity at once.
        extra.setdefault("429", _ref("The server is serving as many requests as it takes; "
                                     "retry after Retry-After seconds"))
    if path.startswith("/api/"):
        # DatabaseOutage (api/loadshed.py): the database is unreachable, nothing was done.
        extra.setdefault("503", _ref("The database is unavailable now; nothing was done; "
                                     "retry after Retry-After seconds"))
    return extra
