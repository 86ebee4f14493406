"""What the command line and the Python client cost to start, over the floor of ``import httpx, pydantic``.

Every `gpufleet` command is a fresh process, so its start-up is part of what a
person waits for; a client needs only its HTTP library and its wire shapes, so
that is the floor. Times, best of N fresh processes each, interleaved so that
a busy machine slows all of them alike:

- baseline: ``python -c "import httpx, pydantic"``;
- ``import gpufleet.client``;
- ``gpufleet --help`` (every command group imported, none of their bodies);
- ``gpufleet trainings ls`` against a running ``gpufleet serve`` (embedded
  SQLite, in a temporary data dir; started once, before the timings, with
  ``--trainings`` trainings in it), its output piped (tab-separated lines, as
  a script reads it) and at a terminal (``TTY_COMPATIBLE=1``: rich's table).

Prints each best time and its ratio to the baseline (the target: at most 1.5x).

    .venv/bin/python bench/cli_start.py [--runs 5] [--smoke]

``--smoke`` times one round without the server (CI runs it so the bench keeps working).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = ["-c", "from gpufleet.cli import main; main()"]
BASELINE = "baseline (httpx + pydantic)"
CASES = {
    BASELINE: ["-c", "import httpx, pydantic"],
    "import gpufleet.client": ["-c", "import gpufleet.client"],
    "gpufleet --help": [*CLI, "--help"],
}
TARGET = 1.5
# `trainings ls` once more as if at a terminal: rich draws its table there (tab-separated lines when piped).
AT_TERMINAL = "  the same at a terminal"
TERMINAL_ENV = {"TTY_COMPATIBLE": "1", "COLUMNS": "160"}


def _once(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(data_dir: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """A `gpufleet serve` on a free port with one member; its process and that member's token."""
    token = subprocess.run([sys.executable, *CLI, "users", "add", "bench", "--role", "member", "--token"], env=env,
                           check=True, capture_output=True, text=True).stdout.strip().split()[-1]
    port = _free_port()
    log = open(data_dir / "serve.log", "wb")  # noqa: SIM115 - the server's output, read if it fails to start
    proc = subprocess.Popen([sys.executable, *CLI, "serve", "--port", str(port), "--no-worker"], env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, token
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"gpufleet serve exited:\n{(data_dir / 'serve.log').read_text()}") from None
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"gpufleet serve did not listen on {url} within 120 s")


def _seed(url: str, token: str, n: int) -> None:
    """``n`` trainings with their memory declared (so no estimate runs), as one batch."""
    import httpx

    items = [{"name": f"bench-{i}", "recipe": "mlp", "config": {"max_steps": 100}, "memory_mb": 1024}
             for i in range(n)]
    r = httpx.post(f"{url}/api/v1/trainings/batch", json={"items": items},
                   headers={"Authorization": f"Bearer {token}"}, timeout=300)
    if r.status_code != 201:
        raise SystemExit(f"seeding {n} trainings: {r.status_code} {r.text}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--trainings", type=int, default=50, help="trainings on the server for `trainings ls`")
    parser.add_argument("--smoke", action="store_true", help="one round, no server: checks the bench still runs")
    args = parser.parse_args()
    runs = 1 if args.smoke else args.runs
    cases = dict(CASES)
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
        # No estimate warm-up: its processes would trace recipes on these cores while the commands are timed.
        # No notebooks' listener: it would take the port after the API's, which another process may hold.
        env.update(GPUFLEET_DATA_DIR=tmp, GPUFLEET_SIMULATE="2xH100-80GB", GPUFLEET_HOST_NAME="cli-bench",
                   GPUFLEET_ESTIMATE_WARM="false", GPUFLEET_SESSIONS_PORT="0")
        proc = None
        if not args.smoke:
            proc, token = _serve(Path(tmp), env)
            env["GPUFLEET_TOKEN"] = token
            port = proc.args[proc.args.index("--port") + 1]  # type: ignore[union-attr]
            _seed(f"http://127.0.0.1:{port}", token, args.trainings)
            ls = [*CLI, "trainings", "ls", "--server", f"http://127.0.0.1:{port}"]
            cases["gpufleet trainings ls"] = ls
            cases[AT_TERMINAL] = ls
        try:
            best = {name: float("inf") for name in cases}
            for _ in range(runs):
                for name, case in cases.items():
                    best[name] = min(best[name], _once(case, {**env, **TERMINAL_ENV} if name == AT_TERMINAL else env))
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=60)
    base = best[BASELINE]
    print(f"best of {runs} fresh processes each (target: at most {TARGET}x the baseline)")
    for name, seconds in best.items():
        print(f"{name:28s} {seconds * 1e3:7.0f} ms   {seconds / base:5.2f}x baseline")


if __name__ == "__main__":
    main()
