"""The error table (gpufleet.lifecycle.outcome): what a launcher's exit means for the training. Pure."""

from __future__ import annotations

from gpufleet.lifecycle import outcome
from gpufleet.engine import exitcodes as ec

CFG = {"global_batch_size": 16, "micro_batch_size": None, "grad_accum_steps": 1}


def _attempt(code, **kw):
    base = dict(exit_code=code, cancel_requested=False, restarts=0, max_restarts=2, allow_rebalance=False,
                already_rebalanced=False, config=CFG, world_size=2, error=None)
    base.update(kw)
    return outcome.Attempt(**base)


def test_error_table():
    assert outcome.decide(_attempt(0)).status == "succeeded"
    assert outcome.decide(_attempt(ec.RANK_FAILED, cancel_requested=True)).status == "cancelled"
    # A sweep's early stop is its own end, not a person's cancel.
    d = outcome.decide(_attempt(-9, cancel_requested=True, cancel_as="pruned"))
    assert d.status == "pruned" and "its sweep stopped it at a rung" in d.reason
    d = outcome.decide(_attempt(ec.RANK_FAILED, error={"rank": 1, "kind": "error", "message": "boom"}))
    assert d.status == "queued" and d.counts_restart and d.retry_kind == "failure" and d.backoff_s == 1
    assert "rank 1: boom" in d.reason
    d = outcome.decide(_attempt(ec.RANK_FAILED, restarts=2, error={"rank": 0, "message": "boom"}))
    assert d.status == "failed" and "gave up after 2 restart(s)" in d.reason and "rank 0" in d.reason
    d = outcome.decide(_attempt(ec.COLLECTIVE_TIMEOUT, restarts=1))
    assert d.retry_kind == "timeout" and "longer collective timeout" in d.reason and d.backoff_s == 2
    assert outcome.decide(_attempt(ec.BAD_DATA)).status == "failed"
    d = outcome.decide(_attempt(ec.INTERRUPTED, restarts=2))
    assert d.status == "queued" and not d.counts_restart
    assert outcome.decide(_attempt(-9)).reason.startswith("the launcher was killed by signal 9")


def test_oom_rebalance_keeps_the_global_batch():
    assert outcome.decide(_attempt(ec.OUT_OF_MEMORY)).status == "failed"
    d = outcome.decide(_attempt(ec.OUT_OF_MEMORY, allow_rebalance=True))
    assert d.status == "queued" and d.retry_kind == "oom_rebalance" and not d.counts_restart
    assert d.config["micro_batch_size"] == 4 and d.config["grad_accum_steps"] == 2
    assert 2 * d.config["micro_batch_size"] * d.config["grad_accum_steps"] == 16
    assert outcome.decide(_attempt(ec.OUT_OF_MEMORY, allow_rebalance=True, already_rebalanced=True)).status == "failed"
    odd = dict(CFG, global_batch_size=6)  # 3 per rank: cannot halve
    assert outcome.decide(_attempt(ec.OUT_OF_MEMORY, allow_rebalance=True, config=odd)).status == "failed"
