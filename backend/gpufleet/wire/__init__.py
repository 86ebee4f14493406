"""The shapes on the wire: every request and response model of the HTTP API and the live stream.

One module per resource. The API's routes, the Python client and the CLI
import them from here; nothing here imports FastAPI, so the client works
without the server's web stack. The live stream's frames (``live``) and the
training statuses (``gpufleet.db.statuses``) are also named enums and models
in the OpenAPI document (``components``), from which the dashboard's types
are generated (``frontend/scripts/gen-api.sh``).
"""
