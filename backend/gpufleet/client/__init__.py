"""A Python client for a gpufleet server: ``from gpufleet.client import Client``."""

from gpufleet.client.client import DEFAULT_SERVER, FINAL_STATUSES, Client
from gpufleet.client.errors import (
    APIError,
    BadRequest,
    Conflict,
    Forbidden,
    GpufleetError,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    ServerUnreachable,
    Unauthorized,
    ValidationFailed,
)

__all__ = [
    "APIError", "BadRequest", "Client", "Conflict", "DEFAULT_SERVER", "FINAL_STATUSES", "Forbidden",
    "GpufleetError", "MethodNotAllowed", "NotFound", "PayloadTooLarge", "RateLimited", "ServerError",
    "ServerUnreachable", "Unauthorized", "ValidationFailed",
]
