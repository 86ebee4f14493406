"""Live-stream fan-out: 1,000 WebSocket clients on loopback, each on `aggregate` and 8 GPU channels at 1 Hz.

    .venv/bin/python bench/ws_fanout.py [--clients 1000] [--seconds 15] [--client raw|websockets] [--procs 1]
                                        [--stuck 0]

The server is the product's WebSocket route under uvicorn in its own process,
with an agent-like publisher putting one 8-GPU batch per second on the
in-process bus (the embedded default). The clients run in this process (or
``--procs`` processes): by default minimal protocol clients that stamp each
frame when it arrives and parse it after the run, so the figure is the
server's delivery, not the measuring clients' Python (``--client websockets``
uses the websockets library instead). Latency is from the hub stamping an
update (``sent``) to its frame arriving. The baseline is the same measurement
with a single client in the same run. The server's CPU time while streaming
is printed too: on a shared machine it moves far less than latency does.
``--stuck N`` adds N clients that subscribe and then never read (their
socket fills): the readers' latency beside them is what
tests/telemetry/test_ws.py checks only for order and loss.
Goal: p99 under 250 ms with 1,000 clients on this 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time

CHANNELS = ["aggregate"] + [f"gpu:bench:{i}" for i in range(8)]

SERVER = r"""
import sys, threading, time, tempfile
from datetime import datetime, timezone
import uvicorn
from fastapi import FastAPI
from gpufleet.config import load_settings
from gpufleet.db.session import upgrade_database
from gpufleet.events import TELEMETRY_SAMPLES, get_bus
from gpufleet.telemetry.live import LOCAL
from gpufleet.telemetry.sample import GPUSample
from gpufleet.api import ws
s = load_settings(data_dir=tempfile.mkdtemp())
upgrade_database(s)
app = FastAPI()
app.state.settings = s
app.include_router(ws.router)
app.state.ws_authenticate = lambda _w, _s: "bench"   # auth has its own benchmark
def agent():
    k = 0
    while True:
        now = datetime.now(timezone.utc)
        samples = [GPUSample(host="bench", index=i, timestamp=now, uuid=f"GPU-{i}", name="NVIDIA H100 80GB HBM3",
                             vendor="nvidia", utilization=float((k + i) % 100), memory_used=k * 1000 + i,
                             memory_total=80 << 30, memory_free=(80 << 30) - k * 1000, temperature=60.0,
                             power_draw=400.0, power_limit=700.0, sm_clock=1980, mem_clock=2619)
                   for i in range(8)]
        LOCAL.put_host("bench", samples)
        get_bus(s).publish(TELEMETRY_SAMPLES, {"host": "bench", "samples": [x.to_dict() for x in samples]})
        k += 1
        time.sleep(1.0 - time.time() % 1.0)
threading.Thread(target=agent, daemon=True).start()
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", ws_ping_interval=None,
            backlog=4096, ws=sys.argv[2], ws_per_message_deflate=sys.argv[3] == "on")
"""


async def client(url: str, lat: list[float], ready: asyncio.Event, counter: list[int], stop: asyncio.Event,
                 record: asyncio.Event) -> None:
    from websockets.asyncio.client import connect

    async with connect(url, max_size=None, open_timeout=60, ping_interval=None) as ws:
        await ws.send(json.dumps({"op": "subscribe", "channels": CHANNELS}))
        counter[0] += 1
        if counter[0] == counter[1]:
            ready.set()
        frames: list[tuple[float, str]] = []
        while not stop.is_set():
            try:
                frame = await asyncio.wait_for(ws.recv(), 1.0)
            except TimeoutError:
                continue
            if record.is_set():
                # Parse after the run: the measuring clients share one process
                # and must not be what delays the next frame.
                frames.append((time.time(), frame))
    for now, frame in frames:
        m = json.loads(frame)
        for msg in m["messages"] if m.get("type") == "batch" else [m]:
            if msg.get("type") == "update":
                lat.append(now - msg["sent"])


class RawClient(asyncio.Protocol):
    """A minimal WebSocket client: stamps each frame when its last byte arrives, parses JSON later.

    The websockets library costs ~0.1 ms of Python per frame; a thousand of
    them in one process on this small machine would measure the measuring
    clients, not the server.
    """

    def __init__(self, host: str, record: asyncio.Event, frames: list[tuple[float, bytes]],
                 connected: asyncio.Future) -> None:
        self.host, self.record, self.frames, self.connected = host, record, frames, connected
        self.buf = b""
        self.open = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        import base64

        self.transport = transport
        key = base64.b64encode(os.urandom(16)).decode()
        transport.write((f"GET /api/v1/ws HTTP/1.1\r\nHost: {self.host}\r\nUpgrade: websocket\r\n"
                         f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                         f"Sec-WebSocket-Version: 13\r\n\r\n").encode())

    def send_text(self, text: str) -> None:
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        head = bytes([0x81, 0x80 | n]) if n < 126 else bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
        self.transport.write(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def data_received(self, data: bytes) -> None:
        now = time.time()
        self.buf += data
        if not self.open:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            self.open, self.buf = True, self.buf[end + 4:]
            self.send_text(json.dumps({"op": "subscribe", "channels": CHANNELS}))
            self.connected.set_result(True)
        while len(self.buf) >= 2:
            n, off = self.buf[1] & 0x7F, 2
            if n == 126:
                if len(self.buf) < 4:
                    return
                n, off = int.from_bytes(self.buf[2:4], "big"), 4
            elif n == 127:
                if len(self.buf) < 10:
                    return
                n, off = int.from_bytes(self.buf[2:10], "big"), 10
            if len(self.buf) < off + n:
                return
            if self.record.is_set():
                self.frames.append((now, self.buf[off:off + n]))
            self.buf = self.buf[off + n:]


class StuckClient(RawClient):
    """Subscribes, then never reads again: the server's sends to it back up."""

    def data_received(self, data: bytes) -> None:
        was_open = self.open
        super().data_received(data)
        if self.open and not was_open:
            self.transport.pause_reading()


def server_cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) the server process has used so far; 0 when unknown."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure_raw(url: str, n: int, seconds: float, cpu: list[float],
                      stuck: int = 0) -> tuple[list[float], float]:
    hostport = url.split("/")[2]
    host, port = hostport.split(":")
    loop = asyncio.get_running_loop()
    record = asyncio.Event()
    frames: list[tuple[float, bytes]] = []
    t0 = time.perf_counter()
    conns = []
    for i in range(n):
        fut = loop.create_future()
        tr, _ = await loop.create_connection(lambda fut=fut: RawClient(hostport, record, frames, fut), host, int(port))
        conns.append((tr, fut))
        if i % 50 == 49:
            await asyncio.sleep(0.05)
    for _ in range(stuck):
        fut = loop.create_future()
        tr, _ = await loop.create_connection(lambda fut=fut: StuckClient(hostport, record, [], fut), host, int(port))
        conns.append((tr, fut))
    await asyncio.wait_for(asyncio.gather(*(f for _, f in conns)), 120)
    connect_s = time.perf_counter() - t0
    await asyncio.sleep(2)  # let snapshots drain
    record.set()
    cpu0 = server_cpu_s(SERVER_PID)
    await asyncio.sleep(seconds)
    cpu.append((server_cpu_s(SERVER_PID) - cpu0) / seconds)
    for tr, _ in conns:
        tr.close()
    lat = []
    for now, payload in frames:
        m = json.loads(payload)
        for msg in m["messages"] if m.get("type") == "batch" else [m]:
            if msg.get("type") == "update":
                lat.append(now - msg["sent"])
    return lat, connect_s


async def measure(url: str, n: int, seconds: float, raw: bool = True,
                  cpu: list[float] | None = None, stuck: int = 0) -> tuple[list[float], float]:
    cpu = [] if cpu is None else cpu
    if raw:
        return await measure_raw(url, n, seconds, cpu, stuck)
    lat: list[float] = []
    ready, stop, record = asyncio.Event(), asyncio.Event(), asyncio.Event()
    counter = [0, n]
    t0 = time.perf_counter()
    tasks = []
    for i in range(n):
        tasks.append(asyncio.create_task(client(url, lat, ready, counter, stop, record)))
        if i % 50 == 49:
            await asyncio.sleep(0.05)  # do not flood the accept queue
    await asyncio.wait_for(ready.wait(), 120)
    connect_s = time.perf_counter() - t0
    await asyncio.sleep(2)  # let snapshots drain
    record.set()
    cpu0 = server_cpu_s(SERVER_PID)
    await asyncio.sleep(seconds)
    cpu.append((server_cpu_s(SERVER_PID) - cpu0) / seconds)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return lat, connect_s


# The server's process id, for its CPU time (in the measuring process only).
SERVER_PID: int | None = None


def _measure_sync(url: str, n: int, seconds: float, raw: bool = True) -> tuple[list[float], float]:
    return asyncio.run(measure(url, n, seconds, raw))


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--procs", type=int, default=1, help="client processes sharing the clients")
    ap.add_argument("--client", choices=["raw", "websockets"], default="raw",
                    help="raw: a minimal client stamping frames on arrival; websockets: the library's client")
    ap.add_argument("--ws", default="websockets-sansio", help="uvicorn's WebSocket implementation")
    ap.add_argument("--deflate", choices=["on", "off"], default="off",
                    help="permessage-deflate (uvicorn's default is on; it costs ~0.3 ms of CPU per frame)")
    ap.add_argument("--stuck", type=int, default=0, help="clients that subscribe and never read (raw clients only)")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.clients + 256)), hard))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port), args.ws, args.deflate])
    global SERVER_PID
    SERVER_PID = server.pid
    base_cpu: list[float] = []
    cpu: list[float] = []
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.2)
        url = f"ws://127.0.0.1:{port}/api/v1/ws"
        raw = args.client == "raw"
        base, _ = asyncio.run(measure(url, 1, min(args.seconds, 8), raw, base_cpu))
        if args.procs == 1:
            lat, connect_s = asyncio.run(measure(url, args.clients, args.seconds, raw, cpu, args.stuck))
        else:
            from concurrent.futures import ProcessPoolExecutor

            share = [args.clients // args.procs + (i < args.clients % args.procs) for i in range(args.procs)]
            with ProcessPoolExecutor(args.procs) as pool:
                parts = list(pool.map(_measure_sync, [url] * args.procs, share, [args.seconds] * args.procs,
                                      [raw] * args.procs))
            lat = [x for part, _ in parts for x in part]
            connect_s = max(c for _, c in parts)
    finally:
        server.terminate()
        server.wait(10)
    expected = args.clients * len(CHANNELS) * args.seconds
    print(f"load average:  {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; uvicorn ws={args.ws}, "
          f"permessage-deflate {args.deflate}; {args.client} clients in {args.procs} process(es)")
    if args.stuck:
        print(f"with {args.stuck} client(s) that never read beside the readers")
    print(f"baseline, 1 client:    p50 {pct(base, .5) * 1000:6.1f} ms   p99 {pct(base, .99) * 1000:6.1f} ms"
          f"   ({len(base)} updates)")
    print(f"{args.clients} clients:          p50 {pct(lat, .5) * 1000:6.1f} ms   p99 {pct(lat, .99) * 1000:6.1f} ms"
          f"   ({len(lat)} updates, ~{expected:.0f} expected; connected in {connect_s:.1f} s)")
    print(f"{args.clients} clients, spread: p90 {pct(lat, .9) * 1000:.1f} ms, p95 {pct(lat, .95) * 1000:.1f} ms, "
          f"max {max(lat) * 1000:.1f} ms")
    print(f"ratio p99 {args.clients} clients / 1 client: {pct(lat, .99) / max(pct(base, .99), 1e-6):.1f}x;"
          f" mean {statistics.mean(lat) * 1000:.1f} ms")
    if cpu:
        # Less at the mercy of other load on the machine than latency is.
        print(f"server CPU while streaming: {base_cpu[0] * 1000:.0f} ms/s with 1 client, "
              f"{cpu[0] * 1000:.0f} ms/s with {args.clients} ({cpu[0] * 1000 / args.clients:.3f} ms per client"
              f" per second)")
    print(f"goal p99 < 250 ms: {'met' if pct(lat, .99) < 0.25 else 'NOT met'}")


if __name__ == "__main__":
    main()
