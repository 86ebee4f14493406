"""Serve the built dashboard at ``/``.

``scripts/build-frontend.sh`` builds ``frontend/`` into ``gpufleet/static/``.
When that folder holds an ``index.html`` the files are served at ``/`` and
every other GET that no API route answers gets ``index.html`` so that the
dashboard's client-side routes (``/trainings/<id>``) survive a reload. The
fallback never answers for the server's own prefixes (``/api``, ``/metrics``,
``/healthz``, ``/docs``, ...): an unknown API path stays a JSON 404.

When the dashboard is not built, ``/`` answers a short page that says how to
build it, so a fresh clone never shows a bare 404.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import FileResponse, HTMLResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.staticfiles import StaticFiles

from gpufleet.config import Settings

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

# Paths the fallback must never shadow: the API, its docs, probes, metrics.
RESERVED_PREFIXES = ("/api", "/metrics", "/healthz", "/docs", "/redoc", "/openapi.json")

NOT_BUILT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpufleet</title>
<style>body{background:#0f1419;color:#d8dee9;font:16px/1.5 system-ui,sans-serif;
max-width:44rem;margin:4rem auto;padding:0 1rem}code,pre{background:#1b2129;
padding:.1rem .3rem;border-radius:4px}a{color:#7cc4ff}</style></head>
<body><h1>gpufleet is running</h1>
<p>The API is up, but this install has no dashboard: a checkout where it is not
built yet, or a package built with <code>GPUFLEET_BUILD_DASHBOARD=0</code>.</p>
<p>In a checkout, build it once (needs Node.js 20+ and npm), then reload this page:</p>
<pre>scripts/build-frontend.sh</pre>
<p>Or install a gpufleet package built with the dashboard (<code>pip install .</code>
builds it when Node.js is there).</p>
<p>Meanwhile the API is documented at <a href="/docs">/docs</a>.</p>
</body></html>
"""


def _reserved(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in RESERVED_PREFIXES)


def install_static(app: FastAPI, settings: Settings, static_dir: Path | None = None) -> None:
    """Mount the dashboard (or the how-to-build page) at ``/``; call after the API routers."""
    root = (static_dir or STATIC_DIR).resolve()
    index = root / "index.html"

    if not index.is_file():

        @app.get("/", include_in_schema=False)
        def dashboard_not_built() -> HTMLResponse:
            return HTMLResponse(NOT_BUILT_PAGE)

        return

    assets = root / "assets"
    if assets.is_dir():
        # Vite names assets by content hash, so they can be cached for good.
        app.mount("/assets", _ImmutableStatic(directory=assets), name="dashboard-assets")

    async def spa_fallback(request: Request, exc: Exception) -> Response:
        path = request.url.path
        # A missing hashed asset stays a 404: HTML in place of a script
        # only hides the real error (a stale tab after a rebuild).
        if request.method in ("GET", "HEAD") and not _reserved(path) and not path.startswith("/assets/"):
            rel = path.lstrip("/")
            if rel:
                candidate = (root / rel).resolve()
                # Only files inside the build folder (no ../ escapes).
                if candidate.is_file() and candidate.is_relative_to(root):
                    return FileResponse(candidate)
            # index.html changes with every build; never let a browser keep it.
            return FileResponse(index, headers={"Cache-Control": "no-cache"})
        # Everything else is an ordinary 404, answered by whichever handler
        # the app uses for HTTP errors (JSON {"detail": ...} by default).
        handler = app.exception_handlers.get(StarletteHTTPException, http_exception_handler)
        if not isinstance(exc, StarletteHTTPException):
            exc = StarletteHTTPException(status_code=404)
        return await handler(request, exc)

    # A handler for the 404 status rather than a catch-all route: routing
    # stays FastAPI's own, so a GET on a POST-only API path is still a 405
    # and an unknown API path is still a JSON 404.
    app.add_exception_handler(404, spa_fallback)


class _ImmutableStatic(StaticFiles):
    async def get_response(self, path: str, scope):
        response = await super().get_response(path, scope)
        if response.status_code == 200:
            response.headers["Cache-Control"] = "public, max-age=31536000, immutable"
        return response
