"""Calibration from measured peaks, and speed weights from measured step times, on a real database."""

from __future__ import annotations

import uuid


from gpufleet.db.models import GPU, Host, Training, TrainingMetric
from gpufleet.db.session import session_scope
from gpufleet.scheduling.calibration import calibration_for, measured_allocator, record_peak_memory
from gpufleet.scheduling.inputs import measured_speed
from gpufleet.scheduling.plan import estimate_for, estimate_training
from gpufleet.scheduling.types import GPUAvailability
from gpufleet.scheduling.weights import speed_weights

CFG = {"d_in": 128, "n_latents": 2048, "global_batch_size": 256, "seed": 0}


def _run(sess, est, measured: int | None, **kw) -> Training:
    t = Training(id=uuid.uuid4(), name="r", owner="u", recipe="sae", config=dict(CFG), status="succeeded",
                 estimate=est.to_dict(), estimate_key=est.key, **kw)
    if measured is not None:
        record_peak_memory(t, [measured, int(measured * 0.98)])
    sess.add(t)
    return t


def test_estimates_are_corrected_by_measured_runs_of_the_same_key(db_settings) -> None:
    # The shared PostgreSQL database: a config of its own (seed does not change the key, lr does not either).
    cfg = {**CFG, "n_latents": 2048 + (uuid.uuid4().int % 64) * 8}
    with session_scope(db_settings) as sess:
        first = estimate_for(sess, "sae", cfg)
        assert first.calibrated_from == 0 and "calibrated" not in first.summary()
        base, context = first.allocator_bytes, first.context_bytes
        # Never measured: a margin on the allocator's part, in the breakdown.
        assert context > 0 and first.margin > 0 and first.total == base + context + first.margin
        # What NVML measured for the ranks' processes: the context plus the allocator's part.
        for ratio in (1.10, 1.20, 1.15):
            t = _run(sess, first, context + int(base * ratio))
            t.config = dict(cfg)
        _run(sess, first, 0)  # a CPU run measured nothing: not used
    with session_scope(db_settings) as sess:
        cal = calibration_for(sess, first.key)
        assert cal is not None and cal.runs == 3 and cal.allocator_bytes == int(base * 1.15)
        again = estimate_for(sess, "sae", {**cfg, "lr": 0.01})
    assert again.key == first.key
    assert again.summary().endswith("calibrated from 3 runs")
    # The margin is now the spread of the runs: the highest (1.20) above the median (1.15).
    assert abs(again.margin - base * (1.20 - 1.15)) <= 2
    assert again.total == int(base * 1.15) + context + again.margin


def test_calibration_converges_on_what_nvml_measured(db_settings) -> None:
    """Measured 1.6x the estimate (context + reserved, as NVML sees a rank): the
    next estimate of the shape is that figure, not further away from it."""
    cfg = {**CFG, "n_latents": 4096 + (uuid.uuid4().int % 64) * 8}
    with session_scope(db_settings) as sess:
        first = estimate_for(sess, "sae", cfg)
        measured = int(first.total * 1.6)
        _run(sess, first, measured).config = dict(cfg)
    with session_scope(db_settings) as sess:
        second = estimate_for(sess, "sae", cfg)
    assert abs(second.total - measured) / measured < 0.01
    assert second.context_bytes == first.context_bytes


def test_a_new_training_row_gets_its_estimate(db_settings) -> None:
    with session_scope(db_settings) as sess:
        t = Training(id=uuid.uuid4(), name="n", owner="u", recipe="mlp", config={"global_batch_size": 64},
                     world_size=2)
        est = estimate_training(sess, t)
        assert t.memory_estimate == est.total and t.estimate_key == est.key
        assert t.estimate["ddp_buckets"] > 0 and t.estimate["summary"].startswith("estimated")


def test_odd_runs_are_ignored() -> None:
    est = {"total": 100, "context_bytes": 40, "allocator_bytes": 60}
    assert measured_allocator(100, est) == 60
    assert measured_allocator(130, est) == 90
    for measured in (0, None, 1, 30, 900):  # nothing, a crash at start, less than the context, someone else's
        assert measured_allocator(measured, est) is None
    # Estimates stored before the context was counted measured another quantity.
    assert measured_allocator(100, {"total": 100, "allocator_bytes": 60}) is None


def test_measured_step_times_set_the_speed_weights(db_settings) -> None:
    key = f"test-key-{uuid.uuid4().hex[:6]}"
    with session_scope(db_settings) as sess:
        host = Host(name=f"mixed-{uuid.uuid4().hex[:6]}")
        sess.add(host)
        sess.flush()
        sess.add_all([GPU(host_id=host.id, index=0, vendor="nvidia", backend="cuda", name="NVIDIA A100"),
                      GPU(host_id=host.id, index=1, vendor="nvidia", backend="cuda", name="NVIDIA RTX 3090")])
        t = Training(id=uuid.uuid4(), name="m", owner="u", recipe="sae", config={"micro_batch_size": 100},
                     estimate_key=key, gpu_ids=[0, 1], host_id=host.id, world_size=2, status="succeeded")
        sess.add(t)
        sess.flush()
        for step in range(1, 6):
            # Rank 0 (A100) takes 0.1 s per step, rank 1 (3090) 0.3 s.
            sess.add(TrainingMetric(training_id=t.id, step=step, rank_step_times=[0.1, 0.3]))
    with session_scope(db_settings) as sess:
        speed = measured_speed(sess, key)
    assert speed == {"NVIDIA A100": 1000.0, "NVIDIA RTX 3090": 100 / 0.3}
    gpus = [GPUAvailability("h", 0, "free", "", name="NVIDIA A100"),
            GPUAvailability("h", 1, "free", "", name="NVIDIA RTX 3090")]
    measured = speed_weights(gpus, speed)
    assert [w.source for w in measured] == ["measured", "measured"]
    assert abs(measured[0].weight - 0.75) < 1e-9
    spec = speed_weights(gpus)
    # The data sheets: 312 vs 71 dense TFLOPS.
    assert [w.source for w in spec] == ["spec", "spec"] and abs(spec[0].weight - 312 / 383) < 1e-9


def test_a_better_estimate_of_a_shape_is_corrected_to_what_its_runs_measured_not_by_the_old_error(
        db_settings) -> None:
    """Runs recorded under an older estimate that was 20 % short: once gpufleet estimates the shape
    better (an upgrade), the next estimate is what the runs measured, not the new one 20 % higher."""
    cfg = {**CFG, "n_latents": 6144 + (uuid.uuid4().int % 64) * 8}
    with session_scope(db_settings) as sess:
        now = estimate_for(sess, "sae", cfg)
        older = {**now.to_dict(), "allocator_bytes": int(now.allocator_bytes / 1.2)}
        older["total"] = older["allocator_bytes"] + now.context_bytes
        measured = now.context_bytes + now.allocator_bytes  # the truth: what the newer estimate says
        for _ in range(2):
            t = Training(id=uuid.uuid4(), name="r", owner="u", recipe="sae", config=dict(cfg), status="succeeded",
                         estimate=older, estimate_key=now.key)
            record_peak_memory(t, [measured])
            sess.add(t)
    with session_scope(db_settings) as sess:
        again = estimate_for(sess, "sae", cfg)
    assert again.calibrated_from == 2
    assert again.total == measured  # runs that agree: no spread, no margin
