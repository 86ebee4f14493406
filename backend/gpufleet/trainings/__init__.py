"""The trainings domain beyond recipes: a user's own code (kind ``script``).

- :mod:`.archive` checks and unpacks an uploaded code archive, and packs a
  directory the way ``gpufleet run`` uploads it;
- :mod:`.code` stores archives once per content hash;
- :mod:`.script` validates a script request (argv, env, memory) and builds the
  environment its processes get;
- :mod:`.script_launch` is the launcher process that starts one process per GPU.

Nothing here imports torch or the web app.
"""
