"""Pools: places an existing scheduler owns (a Slurm partition), where trainings run beside the team's hosts.

``service`` adds and reads pools and sends a training to one; ``submit`` makes
each attempt one Slurm job as its owner; ``watch`` carries Slurm's state,
output and the ranks' progress back; ``node`` runs on the cluster's node;
``loop`` drives submit and watch in the API process. See docs/slurm.md.
"""
