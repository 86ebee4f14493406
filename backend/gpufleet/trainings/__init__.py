"""The trainings domain: what a training is, how it is asked for, and how it moves.

- :mod:`.models` names the domain's tables (defined in ``gpufleet.db.models``);
- :mod:`.request` is a training request as the API and the CLI send it, checked
  once by pydantic;
- :mod:`.service` creates (one or a batch), cancels and reads trainings: what
  the REST routes and the CLI call; :mod:`.checks` holds its checks of a
  request against the fleet;
- :mod:`.lifecycle` is the compare-and-set status change and its events;
- :mod:`.outcome` is the error table: what a launcher's exit means;
- :mod:`.progress` reads the launcher's progress file and spots stragglers;
- :mod:`.environment` is the allow-listed environment a training process gets;
- :mod:`.archive`, :mod:`.code`, :mod:`.script` and :mod:`.script_launch` run a
  user's own code (kind ``script``); :mod:`.permissions` says who may.

``models``, ``lifecycle`` and ``outcome`` sit below ``scheduling`` (the
reservation writes through ``lifecycle``); ``service`` and ``checks`` sit above it. Nothing
here imports torch, Celery or the web app.
"""
