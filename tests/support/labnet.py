"""A lab's network in a test: a throwaway certificate authority, a package index served over HTTPS
with a certificate it signed, and an HTTP CONNECT proxy that records every tunnel it opened.

All three are real: ``openssl`` makes the keys and certificates, Python's ``http.server`` and
``ssl`` serve a PEP 503 simple index (one page per project, linking its wheels), and the proxy
relays raw bytes between the client and the address a ``CONNECT`` names, as a lab's proxy does.
Nothing here is mocked: a client that does not trust the authority, or that ignores the proxy,
fails or is not seen.
"""

from __future__ import annotations

import html
import http.server
import re
import selectors
import shutil
import socket
import socketserver
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path


@dataclass
class Authority:
    cert: Path  # the authority's certificate: what a client must be told to trust
    server_cert: Path  # localhost and 127.0.0.1, signed by the authority
    server_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_authority(folder: Path) -> Authority:
    """A new certificate authority, and a server certificate for localhost it signed (valid 2 days)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    srv, srv_key, csr, ext = folder / "server.pem", folder / "server.key", folder / "server.csr", folder / "ext.cnf"
    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *curve, "-subj", "/CN=gpufleet test authority", "-keyout", str(ca_key),
             "-out", str(ca), "-days", "2", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    _openssl("req", "-new", *curve, "-subj", "/CN=localhost", "-keyout", str(srv_key), "-out", str(csr))
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                   "extendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
             "-out", str(srv), "-days", "2", "-extfile", str(ext))
    return Authority(cert=ca, server_cert=srv, server_key=srv_key)


def _project(wheel: Path) -> str:
    """The PEP 503 normalised project name of a wheel file."""
    return re.sub(r"[-_.]+", "-", wheel.name.split("-", 1)[0]).lower()


def write_simple_index(root: Path, wheels: list[Path]) -> Path:
    """``root/simple/<project>/index.html`` linking each wheel (copied beside it), and the root page."""
    simple = root / "simple"
    projects: dict[str, list[Path]] = {}
    for w in wheels:
        projects.setdefault(_project(w), []).append(w)
    for name, files in projects.items():
        page = simple / name
        page.mkdir(parents=True, exist_ok=True)
        links = []
        for w in files:
            shutil.copy2(w, page / w.name)
            links.append(f'<a href="{html.escape(w.name)}">{html.escape(w.name)}</a><br>')
        (page / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    (simple / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "".join(
        f'<a href="{n}/">{n}</a><br>\n' for n in sorted(projects)) + "</body></html>\n")
    return simple


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        self.server.paths.append(self.path)  # type: ignore[attr-defined]


class _ThreadingHTTPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


@contextmanager
def https_index(root: Path, authority: Authority) -> Iterator[tuple[str, list[str]]]:
    """Serve ``root`` over HTTPS on 127.0.0.1; yields its ``https://localhost:PORT`` and the paths asked for."""
    server = _ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
    server.paths = []  # type: ignore[attr-defined]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(authority.server_cert, authority.server_key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://localhost:{server.server_address[1]}", server.paths  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Proxy:
    url: str
    tunnels: list[str] = field(default_factory=list)  # "host:port" of every CONNECT it served


class _ProxyHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        line = self.rfile.readline(8192).decode("latin-1")
        while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
            pass  # the request's headers
        parts = line.split()
        if len(parts) < 2 or parts[0] != "CONNECT":
            self.wfile.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
            return
        host, _, port = parts[1].rpartition(":")
        try:
            upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
        except (OSError, ValueError):
            self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            return
        self.server.tunnels.append(parts[1])  # type: ignore[attr-defined]
        self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self.wfile.flush()
        _relay(self.connection, upstream)


def _relay(a: socket.socket, b: socket.socket) -> None:
    # A selector, not select.select: a long test run holds over 1024 descriptors, and select()
    # refuses any above that (the tunnel then closed mid-handshake: "tls handshake eof").
    with b, selectors.DefaultSelector() as sel:
        peers = {a: b, b: a}
        for s in peers:
            sel.register(s, selectors.EVENT_READ)
        while True:
            ready = sel.select(30)
            if not ready:
                return
            for key, _ in ready:
                s = key.fileobj
                data = s.recv(65536)  # type: ignore[union-attr]
                if not data:
                    return
                peers[s].sendall(data)  # type: ignore[index]


class _ThreadingTCPServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


@contextmanager
def connect_proxy() -> Iterator[Proxy]:
    """An HTTP proxy on 127.0.0.1 that serves ``CONNECT`` tunnels only (what HTTPS through a proxy uses)."""
    server = _ThreadingTCPServer(("127.0.0.1", 0), _ProxyHandler)
    proxy = Proxy(url=f"http://127.0.0.1:{server.server_address[1]}")
    server.tunnels = proxy.tunnels  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
