"""The data dir is private to the user gpufleet runs as."""

from __future__ import annotations

import os

from gpufleet.config import Settings

PRIVATE_UMASK = 0o077


def secure_data_dir(settings: Settings) -> None:
    """Keep the data dir to this user: the dir 0700, what gpufleet writes 0600/0700.

    The data dir holds the database (users, token hashes), trainings' configs,
    logs and checkpoints. The umask is inherited by the worker, the launcher
    and the ranks, so their files are private too. An older install's
    top-level entries are tightened; the dir's own mode already hides what
    lies deeper.
    """
    os.umask(PRIVATE_UMASK)
    d = settings.data_dir
    d.mkdir(parents=True, exist_ok=True)
    try:
        d.chmod(0o700)
        for entry in d.iterdir():
            mode = entry.stat().st_mode & 0o777
            if mode & 0o077 and not entry.is_symlink():
                entry.chmod(0o700 if entry.is_dir() else 0o600)
    except OSError:
        # Not ours (a shared volume owned by another user): leave it as the operator set it.
        pass
