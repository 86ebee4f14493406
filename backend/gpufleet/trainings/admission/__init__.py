"""Admission: a training request checked against the fleet before anything is written.

- :mod:`.checks` holds :class:`~.checks.TrainingRequestError` and the checks of
  a request's fields, its host and GPUs, and the world size the fleet can hold;
- :mod:`.gang` checks a request across hosts (hosts × GPUs per host);
- :mod:`.estimate` stores a recipe training's memory estimate and refuses one
  that no GPU could ever hold.

This is the one part of :mod:`gpufleet.trainings` that reads
:mod:`gpufleet.scheduling` (``tests/test_layers.py`` checks it); scheduling
itself never imports trainings.
"""
