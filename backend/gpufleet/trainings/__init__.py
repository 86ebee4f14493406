"""The trainings domain: how a training is asked for, created, cancelled and read.

- :mod:`.request` is a training request as the API and the CLI send it, checked
  once by pydantic;
- :mod:`.admission` checks a request against the fleet (hosts, GPUs, world
  size, gangs, the memory estimate) before anything is written;
- :mod:`.service` creates (one or a batch), cancels and reads trainings: what
  the REST routes and the CLI call;
- :mod:`.progress` reads the launcher's progress file and spots stragglers;
- :mod:`.environment` is the allow-listed environment a training process gets;
- :mod:`.archive`, :mod:`.code`, :mod:`.script` and :mod:`.script_launch` run a
  user's own code (kind ``script``); :mod:`.permissions` says who may.

A training's row, its status changes and the meaning of an exit live one layer
down, in :mod:`gpufleet.lifecycle`, which :mod:`gpufleet.scheduling` uses too.
This package sits above scheduling and reads it only through :mod:`.admission`.
Nothing here imports torch, Celery or the web app.
"""
