"""Pools: places an existing scheduler owns (a Slurm partition), where trainings run beside the team's hosts.

``service`` adds and reads pools and sends a training to one; ``submit`` makes
each attempt one Slurm job as its owner; ``node`` runs on the cluster's node.
In the API process, :mod:`gpufleet.jobs.pool_loop` drives submit and
:mod:`gpufleet.jobs.pool_watch`, which carries Slurm's state, output and the
ranks' progress back (through the worker's metrics sink, so it lives with the
loops in ``jobs``). Below sweeps, which send their trials here. See
docs/slurm.md.
"""
