"""HTTP API: FastAPI app, routes per resource, WebSocket streams."""
