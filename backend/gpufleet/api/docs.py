"""``/docs`` (Swagger UI) and ``/redoc`` from assets installed with the package, never a CDN.

A GPU box is often air-gapped; FastAPI's own pages load their JavaScript from
jsDelivr and show a blank page there. The assets come from the
``fastapi-offline`` distribution (Swagger UI and ReDoc bundles, kept current
on PyPI) and are served under ``/docs/assets``. The pages are FastAPI's own
HTML with those URLs, so "Authorize" (the bearer scheme declared in
``security/openapi.py``) and "Try it out" work as usual.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/docs/assets"
# The pages may load only from this server: ReDoc's footer logo (and anything a
# future bundle reaches for) would otherwise be fetched from a CDN.
CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; worker-src 'self' blob:; font-src 'self' data:; connect-src 'self'")


def assets_dir() -> Path:
    """The directory holding ``swagger-ui-bundle.js``, ``swagger-ui.css``, ``redoc.standalone.js``."""
    import fastapi_offline

    return Path(fastapi_offline.__file__).parent / "static"


def install_docs(app: FastAPI, docs_url: str = "/docs", redoc_url: str = "/redoc") -> None:
    """Serve the two documentation pages and their assets; build the app with ``docs_url=None``."""
    directory = assets_dir()
    if not (directory / "swagger-ui-bundle.js").is_file():
        raise RuntimeError(f"Swagger UI assets are missing from {directory}: reinstall gpufleet's dependencies")
    app.mount(ASSETS_URL, StaticFiles(directory=directory), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    title = f"{app.title} — API"

    @app.get(docs_url, include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return _offline(get_swagger_ui_html(
            openapi_url=openapi_url,
            title=title,
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
            # The token stays in the page's memory only: a reload asks for it again.
            swagger_ui_parameters={"persistAuthorization": False, "displayOperationId": True},
        ))

    @app.get(redoc_url, include_in_schema=False)
    def redoc() -> HTMLResponse:
        return _offline(get_redoc_html(
            openapi_url=openapi_url,
            title=title,
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        ))


def _offline(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = CSP
    return page
