"""A minimal HTTP/1.1 client on asyncio streams, for benches that open hundreds of connections.

httpx spent more CPU than the server it measured (bench/create_burst.py: 27.7 s
of client CPU against 12.3 s of server CPU for one burst of 500 creates on 2
cores), so the latencies it reported were mostly the client's own queueing.
This client does one request at a time per connection, keeps the connection
alive, and reads a ``Content-Length`` body: what a uvicorn JSON answer is.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any


class Connection:
    def __init__(self, host: str, port: int, headers: dict[str, str]):
        self.host, self.port = host, port
        self.head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": f"{host}:{port}", **headers}.items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, dict[str, str], bytes]:
        """Status, lower-cased headers and body; ``ConnectionError`` when the connection fails."""
        data = b"" if body is None else json.dumps(body).encode()
        extra = f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n" if body is not None else ""
        try:
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            assert self.reader is not None
            self.writer.write(f"{method} {path} HTTP/1.1\r\n{self.head}{extra}\r\n".encode() + data)
            raw = await self.reader.readuntil(b"\r\n\r\n")
            lines = raw.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            headers = {}
            for line in lines[1:]:
                if line:
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
            if "content-length" not in headers:
                raise ConnectionError(f"answer without Content-Length: {headers}")
            payload = await self.reader.readexactly(int(headers["content-length"]))
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            await self.close()
            raise ConnectionError(str(exc)) from exc
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return status, headers, payload

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
            self.reader = None
