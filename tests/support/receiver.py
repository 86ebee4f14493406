"""A webhook receiver for tests: a real HTTP server on loopback that records what it is sent."""

from __future__ import annotations

import hashlib
import hmac
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def signed(secret: str, headers: dict[str, str], raw: bytes) -> bool:
    """Whether ``X-Gpufleet-Signature`` is the HMAC-SHA256 of ``<timestamp>.<body>`` (computed here, not by
    gpufleet)."""
    ts = headers["x-gpufleet-timestamp"]
    mac = hmac.new(secret.encode(), f"{ts}.".encode() + raw, hashlib.sha256).hexdigest()
    return headers["x-gpufleet-signature"] == f"sha256={mac}"


class Receiver:
    """An HTTP server that records each request, and answers 500 to the first ``fail`` ones."""

    def __init__(self, fail: int = 0) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.fail = fail
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                owner.got.append(({k.lower(): v for k, v in self.headers.items()}, raw))
                code = 500 if len(owner.got) <= owner.fail else 204
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[str]:
        return [h["x-gpufleet-event"] for h, _ in self.got]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
