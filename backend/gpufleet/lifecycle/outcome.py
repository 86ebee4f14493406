"""What a launcher's exit means for the training (the seed's error table).

| exit | handling |
|---|---|
| 0 | succeeded |
| out of memory | resumed once on a smaller micro-batch (below) if the training allows it; else failed, no retry |
| bad data / config | failed, no retry (a retry would fail the same way) |
| the code cannot run (environment, import, syntax, missing file) | failed, no retry, that error as the reason |
| collective timeout | retried with twice the timeout, up to max restarts |
| interrupted (SIGTERM, not a cancel) | requeued to resume; not counted as a restart |
| anything else | retried from the newest checkpoint with backoff up to max restarts, then failed |

The out-of-memory resume halves the per-rank micro-batch and doubles the gradient accumulation: the same
global batch, the same results.

Pure: no database, no processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpufleet.engine import exitcodes as ec

BACKOFF_BASE_S = 1.0
BACKOFF_MAX_S = 60.0


@dataclass(frozen=True)
class Attempt:
    exit_code: int  # negative: killed by that signal
    cancel_requested: bool
    restarts: int
    max_restarts: int
    allow_rebalance: bool
    already_rebalanced: bool
    config: dict[str, Any]
    world_size: int
    error: dict[str, Any] | None = None
    # Why this kind of work never retries an out-of-memory end with a smaller micro-batch (gpufleet.jobs.kinds).
    oom_refusal: str | None = None
    # How a cancel ends the training: "cancelled", or "pruned" when a sweep stopped its trial at a rung.
    cancel_as: str = "cancelled"


@dataclass(frozen=True)
class Decision:
    status: str  # succeeded | failed | cancelled | pruned | reclaimed | preempted | queued (= retry)
    reason: str
    retry_kind: str | None = None  # oom_rebalance | timeout | failure | interrupted
    counts_restart: bool = False
    config: dict[str, Any] | None = None
    backoff_s: float = 0.0
    row: dict[str, Any] | None = None  # other fields of the row a retry changes (the share watchdog's estimate)


def describe_error(code: int, error: dict[str, Any] | None) -> str:
    if code < 0:
        base = f"the launcher was killed by signal {-code}"
    else:
        base = ec.describe(code)
    if error:
        rank = error.get("rank")
        who = f"rank {rank}" if rank is not None else ("environment" if error.get("kind") == "environment"
                                                       else "launcher")
        msg = str(error.get("message") or error.get("kind") or "").strip()
        if msg.startswith(f"{who}:"):  # the launcher already named the rank
            msg = msg[len(who) + 1:].strip()
        return f"{base}: {who}: {msg}" if msg else f"{base} ({who})"
    return base


def halve_micro_batch(config: dict[str, Any], world_size: int) -> dict[str, Any] | None:
    """The config with half the micro-batch and twice the accumulation, or None if it cannot halve."""
    global_bs = int(config["global_batch_size"])
    accum = int(config.get("grad_accum_steps") or 1)
    micro = config.get("micro_batch_size")
    if micro is None:
        micro = global_bs // (world_size * accum)
    micro = int(micro)
    if micro < 2 or micro % 2:
        return None
    return dict(config, micro_batch_size=micro // 2, grad_accum_steps=accum * 2)


def decide(a: Attempt) -> Decision:
    code = a.exit_code
    detail = describe_error(code, a.error)
    if a.cancel_requested and a.cancel_as == "pruned":
        return Decision("pruned", "pruned: its sweep stopped it at a rung (early stopping); every rank stopped")
    if a.cancel_requested:
        return Decision("cancelled", "cancelled; every rank stopped")
    if code == ec.SUCCEEDED:
        return Decision("succeeded", "finished")
    if code == ec.OUT_OF_MEMORY:
        if a.oom_refusal:
            return Decision("failed", f"{detail}; {a.oom_refusal}")
        if not a.allow_rebalance:
            return Decision("failed", f"{detail}; not retried: the training does not allow rebalancing")
        if a.already_rebalanced:
            return Decision("failed", f"{detail}; already rebalanced once, not retried again")
        new = halve_micro_batch(a.config, a.world_size)
        if new is None:
            return Decision("failed", f"{detail}; the micro-batch cannot be halved further")
        return Decision(
            "queued",
            f"{detail}; resuming with micro_batch_size {new['micro_batch_size']} and "
            f"grad_accum_steps {new['grad_accum_steps']} (same global batch)",
            retry_kind="oom_rebalance",
            config=new,
        )
    if code == ec.BAD_DATA:
        return Decision("failed", f"{detail}; not retried (fix the data or config)")
    if code == ec.CANNOT_RUN:
        return Decision("failed", f"{detail}; not retried (it fails the same way every time: fix the code or its "
                                  "requirements)")
    if code == ec.INTERRUPTED:
        return Decision("queued", f"{detail}; requeued to resume", retry_kind="interrupted")
    if a.restarts >= a.max_restarts:
        return Decision("failed", f"{detail}; gave up after {a.restarts} restart(s)")
    backoff = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** a.restarts)
    kind = "timeout" if code == ec.COLLECTIVE_TIMEOUT else "failure"
    extra = "with a longer collective timeout" if kind == "timeout" else "from the newest checkpoint"
    return Decision(
        "queued",
        f"{detail}; restart {a.restarts + 1} of {a.max_restarts} {extra} in {backoff:.0f}s",
        retry_kind=kind,
        counts_restart=True,
        backoff_s=backoff,
    )
