"""Exit codes of ``python -m gpufleet.engine.launch``.

The jobs supervisor maps these to a training's final status, so each names one
outcome a person acts on differently (retry, shrink the batch, fix the data).
"""

from __future__ import annotations

SUCCEEDED = 0
LAUNCHER_ERROR = 1
OUT_OF_MEMORY = 10
BAD_DATA = 11
RANK_FAILED = 12
COLLECTIVE_TIMEOUT = 13
INTERRUPTED = 14
# A user's code that can never run as given: its environment cannot be built, an import or
# syntax error, a file named on the command line that does not exist. Retrying cannot help.
CANNOT_RUN = 15

DESCRIPTIONS: dict[int, str] = {
    SUCCEEDED: "succeeded",
    LAUNCHER_ERROR: "launcher error",
    OUT_OF_MEMORY: "out of memory",
    BAD_DATA: "bad data or config",
    RANK_FAILED: "a rank failed",
    COLLECTIVE_TIMEOUT: "collective timeout",
    INTERRUPTED: "interrupted (checkpointed on SIGTERM)",
    CANNOT_RUN: "the code cannot run",
}

# Error kinds that ranks report, and the exit code each one leads to.
KIND_TO_CODE: dict[str, int] = {
    "oom": OUT_OF_MEMORY,
    "bad_data": BAD_DATA,
    "config": BAD_DATA,
    "timeout": COLLECTIVE_TIMEOUT,
    "error": RANK_FAILED,
    "peer_lost": RANK_FAILED,
    "interrupted": INTERRUPTED,
    "environment": CANNOT_RUN,
    "import": CANNOT_RUN,
    "syntax": CANNOT_RUN,
    "missing_file": CANNOT_RUN,
}


def describe(code: int) -> str:
    return DESCRIPTIONS.get(code, f"unknown exit code {code}")


def ended(code: int) -> str:
    """The line a training's log ends with: what the exit means, in words (a signal's name when one killed it)."""
    if code < 0:
        import signal

        try:
            return f"ended: killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"ended: killed by signal {-code}"
    return f"ended: {describe(code)}"
