"""Jobs: what runs trainings, in two kinds of process.

In the API process (``gpufleet serve``), never in a worker:

- :mod:`.scheduler_loop`: the scheduling and recovery loop, woken by the routes;
- :mod:`.notify_loop`: the thread that sends webhooks;
- :mod:`.pool_loop` and :mod:`.pool_watch`: Slurm pools' jobs submitted and
  followed (gpufleet.pools holds what is sent);
- :mod:`.embedded`: the embedded default's worker, a child process of ``serve``
  that then runs the worker's side below.

In a worker (``gpufleet worker``, one per GPU host): :mod:`.worker` and
:mod:`.celery_app` (the task), :mod:`.supervisor` (one attempt), :mod:`.kinds`
(what differs per kind of work), :mod:`.watch`, :mod:`.stops`, :mod:`.launcher`,
:mod:`.isolation`, :mod:`.sandbox`, :mod:`.warmpool`, :mod:`.rendezvous`,
:mod:`.metrics_sink`, :mod:`.logs`, :mod:`.log_shipper` and the rest.

The worker's side never imports the API process's modules
(tests/test_layers.py checks it), so a worker loads no scheduler and no
webhook sender.
"""

# The modules that run only in the API process; every other module of jobs runs in a worker.
API_PROCESS = frozenset({"scheduler_loop", "notify_loop", "embedded", "pool_loop", "pool_watch"})
