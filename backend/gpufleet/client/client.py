"""``gpufleet.client.Client``: submit and watch trainings, and read the fleet, from Python.

One synchronous ``httpx.Client`` per ``Client``; requests and answers are the
API's own pydantic schemas (``gpufleet.wire`` and the routes' models),
so a field the server adds is a field the client has. The command line uses
this client for every server command.

    from gpufleet.client import Client

    with Client() as gf:                      # $GPUFLEET_SERVER, $GPUFLEET_TOKEN
        t = gf.create_training(recipe="mlp", config={"max_steps": 100})
        t = gf.wait(t.id)
        print(t.status, t.last_loss)
"""

from __future__ import annotations

import os
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar
from urllib.parse import quote

import httpx

from gpufleet import wire
from gpufleet.client.credentials import TOKEN_ENV, client_headers
from gpufleet.client.localsocket import check_personal, probe
from gpufleet.client.localsocket import transport as socket_transport
from gpufleet.datadir import socket_candidates

if TYPE_CHECKING:
    from pydantic import BaseModel

    from gpufleet.wire.training_requests import TrainingBatchCreate, TrainingCreate
    from gpufleet.wire.trainings import (
        TrainingBatchPublic,
        TrainingEventPublic,
        TrainingFilesPublic,
        TrainingMetricPublic,
        TrainingMetricsPublic,
        TrainingPublic,
        TrainingsPublic,
    )
from gpufleet.client.fleet import FleetCalls
from gpufleet.client.errors import (
    AmbiguousTraining,
    NoAnswer,
    ServerUnreachable,
    UnknownTraining,
    error_for,
    parse_retry_after,
)
from gpufleet.client.creates import CreateCalls
from gpufleet.client.logs import FINAL_STATUSES, LogCalls
from gpufleet.client.sessions import SessionCalls
from gpufleet.client.sweeps import SweepCalls, checked
from gpufleet.client.pools import PoolCalls
from gpufleet.client.webhooks import WebhookCalls
from gpufleet.client.bookings import BookingCalls

if TYPE_CHECKING:
    from gpufleet.wire.auth import WhoAmI

    TrainingRef = uuid.UUID | str | TrainingPublic

SERVER_ENV = "GPUFLEET_SERVER"
DEFAULT_SERVER = "http://127.0.0.1:8000"
# The address requests on the Unix socket carry (the server answers to loopback names).
SOCKET_BASE = "http://localhost"
API = "/api/v1"

M = TypeVar("M", bound="BaseModel")  # pydantic: loaded by the calls that build shapes (client/sharing.py)
SHOWN_MATCHES = 10  # how many matches an ambiguous reference lists


def _detail(r: httpx.Response) -> Any:
    try:
        return r.json().get("detail", r.text)
    except (ValueError, AttributeError):
        return r.text or r.reason_phrase


def local_socket(server: str | None = None) -> Path | None:
    """The socket of a server on this machine, unless a server address was given (argument or
    ``$GPUFLEET_SERVER``): ``$GPUFLEET_UNIX_SOCKET``, else the machine's, else this account's own server's.

    :class:`~gpufleet.client.localsocket.UntrustedServer` when the socket found is not one to trust."""
    if server or os.environ.get(SERVER_ENV):
        return None
    for path, personal in socket_candidates():
        if personal:
            if not check_personal(path):
                continue
        else:
            try:
                if not stat.S_ISSOCK(path.stat().st_mode):
                    continue
            except OSError:
                continue
        probe(path)
        return path
    return None


class Client(CreateCalls, LogCalls, SweepCalls, WebhookCalls, SessionCalls, PoolCalls, FleetCalls, BookingCalls):
    """A gpufleet server's REST API.

    ``server`` defaults to ``$GPUFLEET_SERVER`` (else http://127.0.0.1:8000) and
    ``token`` to ``$GPUFLEET_TOKEN`` (a server on loopback without sign-in needs
    none). A refusal raises the :mod:`gpufleet.client.errors` exception for its
    status, carrying the server's message. A 429 (over a limit) or 503 (the
    server's database is unavailable) with ``Retry-After`` is waited out and
    retried up to ``rate_limit_retries`` times (each wait at most
    ``max_retry_wait_s``) before :class:`RateLimited` or :class:`ServerError`
    is raised; the server did nothing for either, so the retry is safe.

    A training is named by its ID, a unique start of it (the 8 characters
    ``gpufleet trainings ls`` shows) or its name, wherever one is taken.
    """

    def __init__(
        self,
        server: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        rate_limit_retries: int = 3,
        max_retry_wait_s: float = 120.0,
        transport: httpx.BaseTransport | None = None,
        create_retries: int = 3,
    ):
        headers = client_headers(token)
        sock = None if transport is not None or headers else local_socket(server)
        if sock is not None:
            # This machine's server, through its socket: the server knows this account without a token.
            transport = socket_transport(sock)  # the listener is checked at every connection
        base = (server or os.environ.get(SERVER_ENV) or DEFAULT_SERVER).strip().rstrip("/")
        if sock is not None:
            base = SOCKET_BASE
        elif not base.startswith(("http://", "https://")):
            raise ValueError(f"the server must be an http:// or https:// URL, got {base!r}")
        elif base.startswith("http://") and transport is None:
            # Plain HTTP needs no TLS: without this httpx loads the system's CA bundle (about 25 ms of every CLI
            # command) for a context it never uses. No redirect is followed (httpx's default, kept here), so
            # nothing this client sends reaches an https:// address through this transport.
            transport = httpx.HTTPTransport(verify=False)
        self.server = base if sock is None else f"{sock} (this machine's socket)"
        self.rate_limit_retries = rate_limit_retries
        self.max_retry_wait_s = max_retry_wait_s
        self.create_retries = create_retries
        self._http = httpx.Client(base_url=base, headers=headers, timeout=timeout, transport=transport)
        self.via_socket = sock

    # -- plumbing ---------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def _send(self, method: str, path: str, *, unanswered_retries: int = 0, **kw: Any) -> httpx.Response:
        """One request; ``unanswered_retries``: how often to send it again when no answer came (only for a
        request the server recognises as the same one: an ``Idempotency-Key``)."""
        attempt = unanswered = 0
        while True:
            try:
                r = self._http.request(method, path, **kw)
            except httpx.HTTPError as exc:
                if unanswered < unanswered_retries and isinstance(exc, httpx.TransportError):
                    unanswered += 1
                    self._sleep(min(2.0 ** unanswered, 10.0))
                    continue
                raise self._unanswered(exc, method, path) from None
            # The first try of this create is still being answered: its answer comes to this one.
            if r.status_code == 409 and "retry-after" in r.headers and unanswered < unanswered_retries:
                unanswered += 1
                self._sleep(parse_retry_after(r.headers.get("retry-after")) or 2.0)
                continue
            # 429: over a limit; 503: the database is away. Neither did anything, so a retry is safe.
            if r.status_code in (429, 503) and attempt < self.rate_limit_retries:
                wait = parse_retry_after(r.headers.get("retry-after"))
                if wait is not None and wait <= self.max_retry_wait_s:
                    attempt += 1
                    self._sleep(wait)
                    continue
            if r.status_code >= 400:
                raise error_for(r.status_code, _detail(r), method=method, path=path, headers=dict(r.headers))
            return r

    def _unanswered(self, exc: httpx.HTTPError, method: str, path: str) -> ServerUnreachable:
        """What a request that got no answer ends in: :class:`NoAnswer` once it may have reached the server."""
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol,
                            httpx.ProxyError)) or not isinstance(exc, httpx.TransportError):
            return ServerUnreachable(self.server, reason)  # nothing was sent
        if isinstance(exc, httpx.ReadTimeout) and self._http.timeout.read:
            reason = f"no answer within {self._http.timeout.read:g} s"
        return NoAnswer(self.server, reason, method, path)

    def request(self, method: str, path: str, **kw: Any) -> Any:
        """Any API call (``path`` under the server root); the JSON answer. Errors as for every method."""
        return self._send(method, path, **kw).json()

    def _get(self, model: type[M], path: str, **params: Any) -> M:
        clean = {k: v for k, v in params.items() if v is not None}
        return model.model_validate(self._send("GET", path, params=clean).json())

    def _post(self, model: type[M], path: str, body: BaseModel | dict[str, Any] | None = None) -> M:
        payload = body if body is None or isinstance(body, dict) else body.model_dump(mode="json", exclude_unset=True)
        kw: dict[str, Any] = {"json": payload} if payload is not None else {}
        return model.model_validate(self._send("POST", path, **kw).json())

    # -- who am I ---------------------------------------------------------

    def whoami(self) -> WhoAmI:
        from gpufleet.wire.auth import WhoAmI

        return self._get(WhoAmI, f"{API}/auth/whoami")

    # -- trainings --------------------------------------------------------

    def create_training(self, body: TrainingCreate | None = None, **fields: Any) -> TrainingPublic:
        """Submit one training: a ``TrainingCreate`` or its fields (``recipe=``, ``config=``, ``gpu_ids=`` …).

        ``name`` defaults to the recipe and the time. The fields are checked
        here by the API's own schema, so a typo fails before any request.
        """
        if body is None:
            fields.setdefault("name", f"{fields.get('recipe', 'training')}-{time.strftime('%Y%m%d-%H%M%S')}")
            body = checked(wire.TrainingCreate, "create_training", **fields)
        return self._create(wire.TrainingPublic, f"{API}/trainings", body)

    def create_batch(self, body: TrainingBatchCreate | dict[str, Any]) -> TrainingBatchPublic:
        if isinstance(body, dict):
            body = checked(wire.TrainingBatchCreate, "create_batch", **body)
        return self._create(wire.TrainingBatchPublic, f"{API}/trainings/batch", body)

    def list_trainings(self, *, status: str | list[str] | None = None, owner: str | None = None,
                       limit: int = 50, offset: int = 0, ref: str | None = None) -> TrainingsPublic:
        """Newest first; ``data`` holds one page, ``count`` how many match (only those ``ref`` names, if given)."""
        return self._get(wire.TrainingsPublic, f"{API}/trainings",
                         status=[status] if isinstance(status, str) else status,
                         owner=owner, limit=limit, offset=offset, ref=ref)

    def training_id(self, training: TrainingRef) -> str:
        """The full ID of a training given as a ``TrainingPublic``, an ID, a unique start of one, or a name.

        Anything but a full ID is looked up with one ``GET /trainings?ref=``;
        :class:`UnknownTraining` when nothing matches, :class:`AmbiguousTraining`
        (listing the matches) when several do.
        """
        if isinstance(training, wire.TrainingPublic):
            return str(training.id)
        if isinstance(training, uuid.UUID):
            return str(training)
        try:
            return str(uuid.UUID(training))
        except ValueError:
            pass
        page = self.list_trainings(ref=training, limit=SHOWN_MATCHES)
        if page.count == 0:
            raise UnknownTraining(training)
        if page.count > 1:
            raise AmbiguousTraining(training, [(str(t.id)[:8], t.name, t.status) for t in page.data], page.count)
        return str(page.data[0].id)

    def get_training(self, training: TrainingRef) -> TrainingPublic:
        return self._get(wire.TrainingPublic, f"{API}/trainings/{self.training_id(training)}")

    def cancel(self, training: TrainingRef) -> TrainingPublic:
        """Ask to stop it (idempotent): a queued one leaves the queue, a running one is stopped with every rank."""
        return self._post(wire.TrainingPublic, f"{API}/trainings/{self.training_id(training)}/cancel")

    def resume(self, training: TrainingRef, config: dict[str, Any] | None = None) -> TrainingPublic:
        """Continue an ended training from its newest checkpoint; ``config``: a recipe's fields to change."""
        return self._post(wire.TrainingPublic, f"{API}/trainings/{self.training_id(training)}/resume",
                          {"config": config or {}})

    def files(self, training: TrainingRef) -> TrainingFilesPublic:
        """Its checkpoints (``checkpoints/…``) and outputs (``outputs/…``): path, size, modified."""
        return self._get(wire.TrainingFilesPublic, f"{API}/trainings/{self.training_id(training)}/files")

    def download(self, training: TrainingRef, path: str, dest: str | os.PathLike[str] | None = None, *,
                 start: int | None = None, end: int | None = None) -> Path:
        """Stream one of its files to ``dest`` (default: the file's name here); ``start``/``end`` (inclusive)
        ask for those bytes only (an HTTP ``Range``). Returns where it was written."""
        target = Path(dest) if dest is not None else Path(path.rsplit("/", 1)[-1])
        headers = {"Range": f"bytes={start or 0}-{'' if end is None else end}"} if start or end is not None else {}
        url = f"{API}/trainings/{self.training_id(training)}/files/{quote(path)}"
        try:
            with self._http.stream("GET", url, headers=headers) as r:
                if r.status_code >= 400:
                    r.read()
                    raise error_for(r.status_code, _detail(r), method="GET", path=url, headers=dict(r.headers))
                tmp = target.with_name(f".{target.name}.part")
                with open(tmp, "wb") as fh:
                    for chunk in r.iter_bytes(1 << 20):
                        fh.write(chunk)
                os.replace(tmp, target)
        except httpx.HTTPError as exc:
            raise ServerUnreachable(self.server, str(exc) or type(exc).__name__) from None
        return target

    def wait(self, training: TrainingRef, *, timeout: float | None = None, poll_s: float = 1.0) -> TrainingPublic:
        """Poll until the training is succeeded, failed or cancelled; its final state.

        ``timeout`` (seconds) raises ``TimeoutError`` with the last status seen.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        training = self.training_id(training)
        while True:
            t = self.get_training(training)
            if t.status in FINAL_STATUSES:
                return t
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"training {t.id} is still {t.status} after {timeout} s")
            self._sleep(poll_s)

    def metrics(self, training: TrainingRef, *, max_points: int = 500, after_step: int = -1) -> TrainingMetricsPublic:
        """Recorded steps (downsampled to ``max_points``) after ``after_step``."""
        return self._get(wire.TrainingMetricsPublic, f"{API}/trainings/{self.training_id(training)}/metrics",
                         max_points=max_points, after_step=after_step)

    def follow_metrics(self, training: TrainingRef, *, poll_s: float = 1.0) -> Iterator[TrainingMetricPublic]:
        """Every metrics row as it is recorded, until the training ends."""
        tid, after = self.training_id(training), -1
        while True:
            done = self.get_training(tid).status in FINAL_STATUSES
            page = self.metrics(tid, max_points=10000, after_step=after)
            yield from page.data
            if page.data:
                after = page.data[-1].step
            if done and page.count >= page.total:
                return
            if not page.data:
                self._sleep(poll_s)

    def events(self, training: TrainingRef, *, after_seq: int = 0, follow: bool = False,
               poll_s: float = 1.0) -> Iterator[TrainingEventPublic]:
        """Status changes, reasons, errors and restarts in order; with ``follow``, until the training ends."""
        tid = self.training_id(training)
        while True:
            done = follow and self.get_training(tid).status in FINAL_STATUSES
            page = self._get(wire.TrainingEventsPublic, f"{API}/trainings/{tid}/events", after_seq=after_seq)
            yield from page.data
            if page.data:
                after_seq = page.data[-1].seq
            if not follow or (done and not page.data):
                return
            if not page.data:
                self._sleep(poll_s)


__all__ = ["Client", "DEFAULT_SERVER", "FINAL_STATUSES", "SERVER_ENV", "TOKEN_ENV"]
