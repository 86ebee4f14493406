"""What the tests share, whatever package they test.

- :mod:`.servers`: a real ``gpufleet serve`` (``serve_process``), an app under
  uvicorn in a thread (``serve_inprocess``), ``free_port``, the CLI on a data dir;
- :mod:`.fleet`: a fleet in the database and real workers: ``make_settings``,
  ``register``, ``wait_for``, ``wait_status``, and the fixtures ``backend``,
  ``fleet_settings``, ``client_for``, ``workers``, ``scheduler``, ``live_api``,
  ``product_api`` (a pytest plugin, loaded by ``tests/conftest.py``);
- :mod:`.people`: users with roles and tokens (``make_people``, ``SECRET``,
  ``bearer``) and a small app behind the real auth (``build_app``);
- :mod:`.sharing`: trainings that held GPUs for known times (quota, fair-share
  and usage tests);
- :mod:`.unix` and :mod:`.accounts`: real Unix accounts (``useradd``, removed
  with ``userdel -r``), and the ``gpufleet`` CLI run as one (``run_as``);
- :mod:`.terminal`: a ``gpufleet`` command on a pseudo-terminal of a given size;
- :mod:`.wheels`: small wheels built on the spot for the environment tests;
- :mod:`.scripts`: training scripts a user would write (DDP, resumable,
  stop-aware), written into a test's directory, and code tarballs;
- :mod:`.postgres`: the test PostgreSQL server stopped and started again;
- :mod:`.ranks`: how a spawned gloo rank ends (`leave`), as the launcher ends one.
"""
