"""Interactive sessions: a shell or a notebook on reserved GPUs, through the same queue as trainings.

A session is a ``trainings`` row of kind ``session`` (queue, priority, quotas,
fair share, backfill, waiting reasons, allocations and usage as for any
training) with its own side in ``training_sessions``
(:mod:`gpufleet.db.interactive`). This package creates, reads, stops and
extends them (``service``), presents them (``view``, ``wire``), watches their
idleness and time limit (``watch``), tells the proxy where a notebook is
(``notebook``), and holds the launcher the worker runs for one (``launch``).
"""
