"""Pydantic request/response schemas, one module per resource."""
