"""What a worker says about memory and about running as root: figures that read as what they are, no false claim."""

from __future__ import annotations

import logging

from gpufleet.scheduling.types import GiB, MiB, fmt_bytes_apart


def test_an_overrun_reads_as_one_figure_over_another():
    reserved = GiB
    held, given = fmt_bytes_apart(reserved + 30 * MiB, reserved)  # 1.03 GiB: "1.0 GiB over 1.0 GiB" before
    assert held != given and (held, given) == ("1.03 GiB", "1.00 GiB")
    assert fmt_bytes_apart(3 * GiB, GiB) == ("3.0 GiB", "1.0 GiB")
    assert fmt_bytes_apart(600 * MiB, 512 * MiB) == ("600.0 MiB", "512.0 MiB")
    a, b = fmt_bytes_apart(GiB + 4096, GiB)  # nearly equal: still said apart
    assert a != b


def test_a_root_worker_does_not_claim_every_training_runs_as_root(monkeypatch, caplog):
    from gpufleet import logsetup

    monkeypatch.setattr(logsetup.os, "geteuid", lambda: 0)
    with caplog.at_level(logging.INFO):
        logsetup.note_root(logging.getLogger("gpufleet.test"))
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "run as root too" not in said and "own Unix account" in said
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # the shipped unit runs as root on purpose
