"""The live stream's frames (``/api/v1/ws``, :mod:`gpufleet.api.ws`), as models.

A WebSocket is not an OpenAPI operation, so these are added to the
document's components (:mod:`gpufleet.wire.openapi`); the dashboard's
``src/api/live.ts`` takes its types from there. The hub writes the frames as JSON text itself (it sends thousands a
second), and ``tests/telemetry`` checks that what it writes validates against
these models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class LiveSubscribe(BaseModel):
    """Subscribe to ``channel`` (or ``channels``); ``since`` and ``epoch`` resume after a reconnect."""

    op: Literal["subscribe"]
    channel: str | None = None
    channels: list[str] | None = None
    since: int | None = Field(default=None, ge=0, description="the last seq received on the channel")
    epoch: str | None = Field(default=None, description="the hub's epoch that seq belongs to")


class LiveUnsubscribe(BaseModel):
    op: Literal["unsubscribe"]
    channel: str | None = None
    channels: list[str] | None = None


class LivePing(BaseModel):
    op: Literal["ping"]


# What a client sends.
LiveRequest = Annotated[LiveSubscribe | LiveUnsubscribe | LivePing, Field(discriminator="op")]


class LiveHello(BaseModel):
    type: Literal["hello"]
    epoch: str
    channels: str = Field(description="the channel names this server offers")


class LiveSnapshot(BaseModel):
    """A channel's whole state; ``skipped`` when updates were dropped for a slow reader."""

    type: Literal["snapshot"]
    channel: str
    seq: int
    epoch: str
    sent: float = Field(description="Unix time the hub wrote it")
    data: Any
    skipped: bool | None = None


class LiveUpdate(BaseModel):
    type: Literal["update"]
    channel: str
    seq: int = Field(description="the previous seq on this channel + 1")
    epoch: str
    sent: float
    data: Any


class LiveResumed(BaseModel):
    """Sent after the updates a resuming client missed (from ``from`` to ``seq``)."""

    model_config = ConfigDict(populate_by_name=True)

    type: Literal["resumed"]
    channel: str
    from_: int = Field(alias="from")
    seq: int
    epoch: str


class LiveUnsubscribed(BaseModel):
    type: Literal["unsubscribed"]
    channel: str


class LiveError(BaseModel):
    """What to fix; ``channel`` and ``status`` (403: not allowed to watch it) where one channel was refused."""

    type: Literal["error"]
    message: str
    channel: str | None = None
    status: int | None = None


class LivePong(BaseModel):
    type: Literal["pong"]


# One message from the server; several sent at once come as a LiveBatch.
LiveOne = Annotated[LiveHello | LiveSnapshot | LiveUpdate | LiveResumed | LiveUnsubscribed | LiveError | LivePong,
                    Field(discriminator="type")]


class LiveBatch(BaseModel):
    type: Literal["batch"]
    messages: list[LiveOne]


# Any frame the server sends.
LiveMessage = Annotated[LiveHello | LiveSnapshot | LiveUpdate | LiveResumed | LiveUnsubscribed | LiveError
                        | LivePong | LiveBatch, Field(discriminator="type")]
