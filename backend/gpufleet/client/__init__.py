"""A Python client for a gpufleet server: ``from gpufleet.client import Client``."""

from gpufleet.client.client import DEFAULT_SERVER, FINAL_STATUSES, Client
from gpufleet.client.errors import (
    AmbiguousTraining,
    APIError,
    BadRequest,
    Conflict,
    Forbidden,
    GpufleetError,
    InvalidRequest,
    MethodNotAllowed,
    NoAnswer,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    ServerUnreachable,
    Unauthorized,
    UnknownTraining,
    ValidationFailed,
)

__all__ = [
    "AmbiguousTraining", "InvalidRequest", "UnknownTraining",
    "APIError", "BadRequest", "Client", "Conflict", "DEFAULT_SERVER", "FINAL_STATUSES", "Forbidden",
    "GpufleetError", "MethodNotAllowed", "NoAnswer", "NotFound", "PayloadTooLarge", "RateLimited", "ServerError",
    "ServerUnreachable", "Unauthorized", "ValidationFailed",
]
