"""Places to run: the team's hosts, or a pool another scheduler owns (a Slurm partition), beside them.

``placement`` decides once where a training or a sweep's trial runs; a pool's
kind is one :class:`~gpufleet.pools.place.PlaceKind` (``place``), found by name
in ``kinds`` (Slurm's: ``slurm_place``, over the commands in ``slurm``).
``service`` adds and reads pools and sends a training to one; ``attempt`` and
``submit`` make each attempt one job of the pool's scheduler, as its owner;
``node`` runs on the pool's node. In the API process,
:mod:`gpufleet.jobs.pool_loop` drives submit and :mod:`gpufleet.jobs.pool_watch`,
which carries the job's state, output and the ranks' progress back (through the
worker's metrics sink, so it lives with the loops in ``jobs``). Below sweeps,
which send their trials here. See docs/slurm.md and docs/architecture.md.
"""
