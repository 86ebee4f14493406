"""A refused notebook WebSocket is not an ERROR line: anyone may knock, and the log must not fill with it.

The server runs with the protocols `gpufleet serve` gives uvicorn; each
refusal (not signed in, a queued session, no such session) is an HTTP
answer to the handshake, logged below ERROR.
"""

from __future__ import annotations

import logging

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from gpufleet.api.proxy.origin import NotebookOrigin
from gpufleet.api.unixsocket import peer_protocols
from support.servers import serve_inprocess

from .conftest import ECHO, QUEUED


def test_refused_notebook_websockets_log_below_error(proxy_settings, notebooks,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    # The notebooks' own origin (serve's second listener), where a notebook's WebSockets knock.
    app = NotebookOrigin(proxy_settings, lambda _settings, session_id: notebooks.get(session_id))
    caplog.set_level(logging.INFO)
    with serve_inprocess(app, **peer_protocols()) as served:
        app.settings = proxy_settings.model_copy(update={"sessions_origin": served.url})  # its port, known now
        ws = "ws" + served.url[len("http"):]
        for url, status in ((f"{ws}/sessions/{ECHO}/ws", 403), (f"{ws}/sessions/{QUEUED}/ws", 403),
                            (f"{ws}/sessions/not-a-session/ws", 404)):
            for _ in range(5):
                with pytest.raises(InvalidStatus) as refused:
                    connect(url, origin=served.url, open_timeout=60)
                assert refused.value.response.status_code == status, url
    loud = [f"{r.name} {r.levelname}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert loud == []
