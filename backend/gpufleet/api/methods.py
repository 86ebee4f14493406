"""405 answers that list every method the path supports.

Starlette answers a known path with an unsupported method from the first
route whose path matches, so `Allow` named only that route's methods: `PUT
/api/v1/trainings` said `Allow: POST` although `GET` is served there too.
RFC 9110 wants the whole set, and clients and fuzzers check it.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.routing import Match

_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this request's path.

    Asks each mounted route, through the public `matches`, whether it would
    take the request under each method: included routers answer for their
    own routes, so nothing of the router's internals is read.
    """
    routes = request.app.router.routes
    return [m for m in _METHODS
            if any(route.matches({**request.scope, "method": m})[0] is Match.FULL for route in routes)]


async def method_not_allowed(request: Request, exc: Exception) -> JSONResponse:
    """The handler `create_app` registers for 405."""
    return JSONResponse({"detail": "Method Not Allowed"}, status_code=405,
                        headers={"Allow": ", ".join(allowed_methods(request))})
