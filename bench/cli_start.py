"""What the command line costs to start, over the floor of Python with typer and rich.

Every `gpufleet` command is a fresh process, so its start-up is part of what a
person waits for. Times, best of N fresh processes each, interleaved so that a
busy machine slows all of them alike:

- baseline: ``python -c "import typer, rich.console"`` (what any typer CLI loads);
- ``gpufleet --help`` (every command group imported, none of their bodies);
- ``gpufleet run --help``;
- ``gpufleet secret`` (a command that runs).

Prints each best time and its ratio to the baseline.

    .venv/bin/python bench/cli_start.py [--runs 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

CASES = {
    "baseline (typer + rich)": ["-c", "import typer, rich.console"],
    "gpufleet --help": ["-c", "from gpufleet.cli import main; main()", "--help"],
    "gpufleet run --help": ["-c", "from gpufleet.cli import main; main()", "run", "--help"],
    "gpufleet secret": ["-c", "from gpufleet.cli import main; main()", "secret"],
}


def _once(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    best = {name: float("inf") for name in CASES}
    for _ in range(runs):
        for name, args in CASES.items():
            best[name] = min(best[name], _once(args))
    base = best["baseline (typer + rich)"]
    print(f"best of {runs} fresh processes each")
    for name, seconds in best.items():
        print(f"{name:26s} {seconds * 1e3:7.0f} ms   {seconds / base:5.2f}x baseline")


if __name__ == "__main__":
    main()
