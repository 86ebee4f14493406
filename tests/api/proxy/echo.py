"""An upstream that answers what it received: method, path, headers, body; and echoes WebSocket frames."""

from __future__ import annotations

import hashlib
import json

from starlette.types import Receive, Scope, Send


async def echo_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "websocket":
        await _echo_websocket(scope, receive, send)
        return
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"].endswith("/redirect"):
        await send({"type": "http.response.start", "status": 302,
                    "headers": [(b"location", f"http://127.0.0.1:{scope['server'][1]}"
                                              f"{scope['path'].rsplit('/', 1)[0]}/tree".encode())]})
        await send({"type": "http.response.body", "body": b""})
        return
    answer = json.dumps({
        "method": scope["method"], "path": scope["path"], "query": scope["query_string"].decode(),
        "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]], "body_size": len(body),
        "body_head": body[:64].decode("latin-1"),
        # The proxy blanks the token out of answers, so the echo says it by its hash.
        "authorization_sha256": hashlib.sha256(dict(scope["headers"]).get(b"authorization", b"")).hexdigest(),
    }).encode()
    # A notebook that tries what a hostile one would: its own policy, a cookie in gpufleet's name, one for
    # every host name of the domain.
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"set-cookie", b"nb=1; Path=/"),
                            (b"content-security-policy", b"default-src *"),
                            (b"set-cookie", b"gpufleet_session=planted; Path=/"),
                            (b"set-cookie", b"__Host-gpufleet_nb_x=planted; Path=/; Secure"),
                            (b"set-cookie", b"username-127-0-0-1-8888=\"2|jupyter-login\"; Path=/"),
                            (b"set-cookie", b"wide=1; Domain=example.org; Path=/")]})
    # In pieces, so the proxy has to stream them.
    for start in range(0, len(answer), 100):
        await send({"type": "http.response.body", "body": answer[start:start + 100], "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _echo_websocket(scope: Scope, receive: Receive, send: Send) -> None:
    await receive()  # websocket.connect
    offered = scope.get("subprotocols") or []
    headers = {k.decode(): v.decode() for k, v in scope["headers"]}
    await send({"type": "websocket.accept", "subprotocol": offered[-1] if offered else None})
    await send({"type": "websocket.send", "text": json.dumps({"headers": headers, "subprotocols": offered})})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if (message.get("text") or "").startswith("close:"):
            await send({"type": "websocket.close", "code": int(message["text"][6:])})
            return
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": "echo:" + message["text"]})
        else:
            await send({"type": "websocket.send", "bytes": b"echo:" + message["bytes"]})
