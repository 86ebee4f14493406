"""``gpufleet.report(step=..., loss=..., **scalars)``: metrics from a user's own training.

The implementation is ``gpufleet/rankpath/gpufleet_report.py``, a module with
no dependency beyond the standard library. The script launcher puts its
folder on every rank's ``PYTHONPATH``, so ``import gpufleet_report`` works in
any interpreter or virtual environment a training runs in, also one without
gpufleet installed; ``gpufleet.report`` is the same function.
"""

from __future__ import annotations

from gpufleet.rankpath.gpufleet_report import report

__all__ = ["report"]
