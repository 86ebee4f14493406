"""Logging for gpufleet's processes: our lines, and only the library lines worth reading.

Quieted here, because each says nothing the operator can act on:
alembic's plugin set-up lines and its "Context impl" / "Will assume" notes
(the "Running upgrade" lines stay), kombu's "No hostname was supplied" (the
embedded broker is a folder; it has no host), and Celery's multi-line
superuser warning, which gpufleet replaces with one line of its own
(:func:`note_root`).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_ALEMBIC_CHATTER = ("Context impl ", "Will assume ")


class _DropPrefixes(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


def configure_logging(level: int = logging.INFO) -> None:
    logging.basicConfig(level=level, format=FORMAT)
    quiet()


def quiet() -> None:
    """Silence the library noise listed above (idempotent).

    Celery's warning is filtered only in a process that has loaded Celery (the
    worker calls this once it has), so a CLI command does not import Celery."""
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    migration = logging.getLogger("alembic.runtime.migration")
    if not any(isinstance(f, _DropPrefixes) for f in migration.filters):
        migration.addFilter(_DropPrefixes(_ALEMBIC_CHATTER))
    if "celery" not in sys.modules:
        return
    try:
        from celery.exceptions import SecurityWarning
    except ImportError:
        return
    warnings.filterwarnings("ignore", category=SecurityWarning)


def note_root(log: logging.Logger) -> None:
    """Say once, plainly, what Celery's superuser warning is about (a worker runs as root on purpose: the shipped
    unit does, so that it can start each member's ranks as that member, gpufleet.users.runas)."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        log.info("running as root, as a worker must to start each member's training as that member's own Unix "
                 "account (or the run account); only an admin's own trainings run as root")
