"""A burst of training creations against a real `gpufleet serve` on PostgreSQL, sign-in on.

    python bench/create_burst.py --n 500 --reads 100

N clients POST /api/v1/trainings at once (and R clients list trainings at the
same time), each with its own name, each on its own keep-alive connection
(bench/_rawhttp.py: a client light enough not to be the bottleneck itself). A client that gets 429 waits its
``Retry-After`` and tries again, as the CLI and the dashboard do. Printed per
run: the responses by class (201 / 429 / 5xx / other), p50 / p99 / max latency
of every response, of each create until its 201 (retries included), how many creates went through and how
many of those only after retrying, trainings created more than once, and GPUs held by two
exclusive trainings (must be 0).

Two runs, same N, same server code. By default (``--compare processes``) one
API process (``gpufleet serve``), then four (``serve --workers 4``): printed is
the time until every create was created and the ratio of the two. With
``--compare admission``, the baseline has admission off
(``GPUFLEET_MAX_CONCURRENT_REQUESTS`` as large as N, so every request waits for
a database connection), then the default (a fast 429 beyond capacity).
Needs GPUFLEET_TEST_DATABASE_URL and GPUFLEET_TEST_REDIS_URL (``.ci/services.sh``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import resource
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import func, select, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _rawhttp import Connection
from _scratch_db import scratch_settings

from gpufleet.db.models import Training
from gpufleet.db.session import session_scope

SECRET = secrets.token_urlsafe(48)
CONNECTION_ERROR = -1
CONFIG = {"max_steps": 10, "global_batch_size": 16}


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    by_code: dict[str, list[float]] = field(default_factory=dict)
    codes: dict[str, int] = field(default_factory=dict)
    created: int = 0
    created_after_retry: int = 0
    gave_up: int = 0
    # A create's whole wait, from its first try to its 201, retries included.
    until_created: list[float] = field(default_factory=list)

    def note(self, status: int, seconds: float) -> None:
        self.latencies.append(seconds)
        key = "201" if status == 201 else "200" if status == 200 else "429" if status == 429 else (
            "conn" if status == CONNECTION_ERROR else "5xx" if status >= 500 else "other")
        self.codes[key] = self.codes.get(key, 0) + 1
        self.by_code.setdefault(key, []).append(seconds)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _create(conn: Connection, name: str, tally: Tally, deadline: float) -> None:
    tries = 0
    first = time.perf_counter()
    body = {"name": name, "recipe": "sae", "config": CONFIG}
    while time.monotonic() < deadline:
        tries += 1
        t0 = time.perf_counter()
        try:
            status, headers, payload = await asyncio.wait_for(
                conn.request("POST", "/api/v1/trainings", body), max(1.0, deadline - time.monotonic()))
        except (ConnectionError, TimeoutError):
            await conn.close()
            tally.note(CONNECTION_ERROR, time.perf_counter() - t0)
            await asyncio.sleep(1)
            continue
        tally.note(status, time.perf_counter() - t0)
        if status == 201:
            tally.created += 1
            tally.created_after_retry += tries > 1
            tally.until_created.append(time.perf_counter() - first)
            return
        if status == 429:
            wait = float(headers.get("retry-after", "1"))
            await asyncio.sleep(wait + random.uniform(0, wait))  # spread the retries
            continue
        if status >= 500:
            # A 5xx may or may not have created it; retrying could create it twice.
            tally.gave_up += 1
            return
        raise SystemExit(f"unexpected {status}: {payload!r}")
    tally.gave_up += 1


async def _read(conn: Connection, tally: Tally, deadline: float) -> None:
    while time.monotonic() < deadline:
        t0 = time.perf_counter()
        try:
            status, headers, _ = await asyncio.wait_for(
                conn.request("GET", "/api/v1/trainings?limit=20"), max(1.0, deadline - time.monotonic()))
        except (ConnectionError, TimeoutError):
            await conn.close()
            tally.note(CONNECTION_ERROR, time.perf_counter() - t0)
            return
        tally.note(status, time.perf_counter() - t0)
        if status != 429:
            return
        wait = float(headers.get("retry-after", "1"))
        await asyncio.sleep(wait + random.uniform(0, wait))


async def _warm(base: str, token: str, n: int) -> None:
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=180,
                                 limits=httpx.Limits(max_keepalive_connections=0)) as client:
        for r in await asyncio.gather(*(client.post("/api/v1/trainings", json={
                "name": f"warm-{i}", "recipe": "sae", "config": CONFIG}) for i in range(n))):
            r.raise_for_status()


async def _burst(port: int, token: str, n: int, reads: int, prefix: str,
                 limit_s: float) -> tuple[Tally, Tally, float]:
    creates, gets = Tally(), Tally()
    conns = [Connection("127.0.0.1", port, {"Authorization": f"Bearer {token}"}) for _ in range(n + reads)]
    t0 = time.monotonic()
    deadline = t0 + limit_s
    jobs = [_create(conns[i], f"{prefix}-{i}", creates, deadline) for i in range(n)]
    jobs += [_read(conns[n + i], gets, deadline) for i in range(reads)]
    try:
        await asyncio.gather(*jobs)
        return creates, gets, time.monotonic() - t0
    finally:
        for c in conns:
            await c.close()


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process and its descendants alive now have used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(_cpu_s(int(c)) for c in children)


def _own_cpu_s() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def run(server_url: str, redis_url: str, n: int, reads: int, capacity: int | None, limit_s: float,
        workers: int = 1) -> dict:
    with scratch_settings(server_url) as settings, tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
        env.update(
            GPUFLEET_DATABASE_URL=settings.effective_database_url, GPUFLEET_REDIS_URL=redis_url,
            GPUFLEET_AUTH="on", GPUFLEET_SECRET_KEY=SECRET, GPUFLEET_DATA_DIR=tmp,
            GPUFLEET_SIMULATE="8xH100-80GB", GPUFLEET_HOST_NAME="burst-host",
            GPUFLEET_CREATE_RATE_PER_MINUTE="10000", GPUFLEET_MAX_QUEUED_PER_USER="100000",
            GPUFLEET_SESSIONS_PORT="0",  # no notebooks' listener on the port after the API's, which may be taken
        )
        env["GPUFLEET_MAX_CONCURRENT_REQUESTS"] = str(capacity or 0)
        gpufleet = [sys.executable, "-m", "gpufleet.cli"]
        token = subprocess.run([*gpufleet, "users", "add", "bench", "--role", "member", "--token"], env=env,
                               check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        port = _free_port()
        log = open(Path(tmp) / "serve.log", "wb")  # noqa: SIM115
        # No worker: the trainings are scheduled onto the simulated GPUs and wait there.
        proc = subprocess.Popen([*gpufleet, "serve", "--port", str(port), "--no-worker", "--workers", str(workers)],
                                env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit((Path(tmp) / "serve.log").read_text())
                time.sleep(0.3)
            # A few creates first, so torch (the memory estimate) is loaded in every process before the burst.
            asyncio.run(_warm(base, token, 3 * workers))
            server_cpu0, client_cpu0 = _cpu_s(proc.pid), _own_cpu_s()
            creates, gets, wall = asyncio.run(_burst(port, token, n, reads, "burst", limit_s))
            server_cpu, client_cpu = _cpu_s(proc.pid) - server_cpu0, _own_cpu_s() - client_cpu0
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            log.close()
            kept = Path(tempfile.gettempdir()) / "gpufleet-create-burst-serve.log"
            kept.write_bytes((Path(tmp) / "serve.log").read_bytes())
        with session_scope(settings) as sess:
            names = sess.execute(select(Training.name, func.count()).where(Training.name.like("burst-%"))
                                 .group_by(Training.name)).all()
            double = sess.execute(text(
                "SELECT count(*) FROM (SELECT gpu_id FROM gpu_allocations WHERE released_at IS NULL AND exclusive "
                "GROUP BY gpu_id HAVING count(*) > 1) AS x")).scalar_one()
    every = creates.latencies + gets.latencies
    return {
        "creates": creates, "reads": gets, "wall_s": wall, "server_cpu_s": server_cpu, "client_cpu_s": client_cpu,
        "p50": _pct(every, 0.50), "p99": _pct(every, 0.99), "max": max(every),
        "rows": len(names), "duplicates": sum(1 for _, c in names if c > 1), "double_held_gpus": double,
    }


def show(label: str, r: dict) -> None:
    c, g = r["creates"], r["reads"]
    codes = {k: c.codes.get(k, 0) + g.codes.get(k, 0) for k in ("201", "200", "429", "5xx", "conn", "other")}
    print(f"{label:>9}: 201 {codes['201']:>4}  200 {codes['200']:>4}  429 {codes['429']:>5}  5xx {codes['5xx']:>4}"
          f"  connection errors {codes['conn']:>3}  other {codes['other']:>3}"
          f" | p50 {r['p50']:.3f}s  p99 {r['p99']:.3f}s  max {r['max']:.3f}s"
          f" | created {c.created} ({c.created_after_retry} after retrying), gave up {c.gave_up},"
          f" rows {r['rows']}, duplicates {r['duplicates']}, GPUs held twice {r['double_held_gpus']}"
          f" | {r['wall_s']:.1f}s")
    # Client and server share the machine's cores: what each used tells whether the client is the bottleneck.
    print(f"{'':>11}CPU: server {r['server_cpu_s']:.1f}s, client {r['client_cpu_s']:.1f}s"
          f" over {r['wall_s']:.1f}s; creates/s {c.created / r['wall_s']:.1f}; load {os.getloadavg()[0]:.1f}")
    if c.until_created:
        print(f"{'':>11}until created (retries included): p50 {_pct(c.until_created, 0.5):.3f}s"
              f"  p99 {_pct(c.until_created, 0.99):.3f}s")
    for key in ("201", "200", "429"):
        xs = c.by_code.get(key, []) + g.by_code.get(key, [])
        if xs:
            print(f"{'':>11}{key}: p50 {_pct(xs, 0.5):.3f}s  p99 {_pct(xs, 0.99):.3f}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500, help="concurrent creates")
    ap.add_argument("--reads", type=int, default=100, help="concurrent reads beside them")
    ap.add_argument("--limit-s", type=float, default=180,
                    help="give up on what is not answered this long after the burst began (counted as gave up)")
    ap.add_argument("--compare", choices=("processes", "admission"), default="processes",
                    help="processes: 1 API process, then --workers; admission: admission off, then on")
    ap.add_argument("--workers", type=int, default=4, help="API processes of the second run (--compare processes)")
    ap.add_argument("--no-baseline", action="store_true", help="skip the first run")
    args = ap.parse_args()
    server = os.environ.get("GPUFLEET_TEST_DATABASE_URL")
    redis = os.environ.get("GPUFLEET_TEST_REDIS_URL")
    if not server or not redis:
        raise SystemExit("set GPUFLEET_TEST_DATABASE_URL and GPUFLEET_TEST_REDIS_URL "
                         "(eval \"$(.ci/services.sh start)\")")
    print(f"{args.n} concurrent creates + {args.reads} concurrent reads, PostgreSQL, sign-in on")
    if args.compare == "processes":
        compare_processes(server, redis, args)
        return
    base = None if args.no_baseline else run(server, redis, args.n, args.reads, capacity=args.n + args.reads,
                                             limit_s=args.limit_s)
    new = run(server, redis, args.n, args.reads, capacity=None, limit_s=args.limit_s)
    if base:
        show("baseline", base)
    show("admission", new)
    if base:
        print(f"p99 baseline / admission: {base['p99'] / new['p99']:.1f}x; "
              f"5xx {base['creates'].codes.get('5xx', 0) + base['reads'].codes.get('5xx', 0)} -> "
              f"{new['creates'].codes.get('5xx', 0) + new['reads'].codes.get('5xx', 0)}")


def compare_processes(server: str, redis: str, args: argparse.Namespace) -> None:
    runs = {} if args.no_baseline else {1: run(server, redis, args.n, args.reads, None, args.limit_s, workers=1)}
    runs[args.workers] = run(server, redis, args.n, args.reads, None, args.limit_s, workers=args.workers)
    for workers, r in runs.items():
        show(f"{workers} proc", r)
    alls = {w: max(r["creates"].until_created, default=float("nan")) for w, r in runs.items()}
    print(f"cores: {os.cpu_count()}; until all {args.n} created: "
          + ", ".join(f"{w} process{'es' if w > 1 else ''} {t:.1f}s" for w, t in alls.items()))
    if len(alls) == 2:
        print(f"ratio (1 process / {args.workers} processes): {alls[1] / alls[args.workers]:.2f}x")


if __name__ == "__main__":
    main()
