"""Container health checks for docker-compose.yml (and anything else that wants one).

    python deploy/healthcheck.py api      # the API answers /healthz with 200
    python deploy/healthcheck.py worker   # this host's heartbeat in the database is fresh

Exit status 0 means healthy; otherwise one line on stderr says why.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone


def check_api(url: str, timeout: float) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # fixed local URL
            if resp.status != 200:
                return f"{url} answered {resp.status}"
    except urllib.error.HTTPError as exc:
        return f"{url} answered {exc.code}"
    except OSError as exc:
        return f"{url} is not reachable: {exc}"
    return None


def check_worker(max_age_s: float) -> str | None:
    # The agent inside `gpufleet worker` refreshes hosts.last_heartbeat; a stale
    # heartbeat means the worker (or its database connection) is stuck.
    from sqlalchemy import select

    from gpufleet.config import load_settings
    from gpufleet.db.models import Host
    from gpufleet.db.session import session_scope

    settings = load_settings()
    with session_scope(settings) as sess:
        beat = sess.scalar(select(Host.last_heartbeat).where(Host.name == settings.host_name))
    if beat is None:
        return f"host {settings.host_name!r} has not registered a heartbeat yet"
    age = datetime.now(timezone.utc) - beat
    if age > timedelta(seconds=max_age_s):
        return f"host {settings.host_name!r}: last heartbeat {age.total_seconds():.0f} s ago (limit {max_age_s:.0f} s)"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["api", "worker"])
    parser.add_argument("--url", default=f"http://127.0.0.1:{os.environ.get('GPUFLEET_PORT', '8000')}/healthz")
    parser.add_argument("--timeout", type=float, default=4.0)
    parser.add_argument("--max-age", type=float, default=90.0, help="worker: seconds a heartbeat stays fresh")
    args = parser.parse_args(argv)
    problem = check_api(args.url, args.timeout) if args.what == "api" else check_worker(args.max_age)
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
