"""The training lifecycle: what a training row is, how its status moves, what an exit means.

- :mod:`.models` names the tables a training lives in (defined in
  :mod:`gpufleet.db.models`);
- :mod:`.transitions` is the state machine on the row: the compare-and-set
  status change (``queued -> scheduled -> running -> succeeded | failed |
  cancelled | reclaimed``, ``running -> preempted -> queued``) and the
  ``training_events`` it writes;
- :mod:`.outcome` is the error table: what a launcher's exit means (retry,
  resume, fail), pure.

It sits below :mod:`gpufleet.scheduling` (the reservation, gang placement,
preemption and idle reclaim write through it) and below
:mod:`gpufleet.trainings` and :mod:`gpufleet.jobs`, which use the same
transitions. It imports only the base layer and :mod:`gpufleet.engine`'s
exit codes.
"""
