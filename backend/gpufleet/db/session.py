"""Engines and sessions; schema upgrades through Alembic."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from sqlalchemy import CursorResult, Engine, Result, create_engine, event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from gpufleet.config import ConfigError, StoreSettings

# The migrations live in the checkout's top-level alembic/ (alembic.ini points there); the build
# maps that folder into the package as gpufleet/db/migrations (setup.py), so an installed wheel
# finds the same files inside itself.
_PACKAGED = Path(__file__).resolve().parent / "migrations"
ALEMBIC_DIR = _PACKAGED if (_PACKAGED / "env.py").is_file() else Path(__file__).resolve().parents[3] / "alembic"


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets the API read while the worker and the agent write.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _private_file(path: Path) -> None:
    """Make the SQLite file (and its folder, when missing) private before SQLite opens it.

    It holds the users and their token hashes. SQLite gives its ``-wal`` and
    ``-shm`` files the database file's own mode, so they are private too.
    """
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        pass


def make_engine(url: str, **kw) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            _private_file(Path(path))
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            **kw,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        # Let "BEGIN IMMEDIATE" be issued explicitly by the scheduler: pysqlite's
        # own transaction handling is turned off and SQLAlchemy emits BEGIN.
        @event.listens_for(engine, "connect")
        def _no_autobegin(dbapi_conn, _record) -> None:
            dbapi_conn.isolation_level = None

        @event.listens_for(engine, "begin")
        def _begin(conn) -> None:
            # A write asks for BEGIN IMMEDIATE through the connection's info or its execution options.
            mode = conn.info.pop("sqlite_begin", None) or conn.get_execution_options().get("sqlite_begin", "BEGIN")
            conn.exec_driver_sql(mode)

        return engine
    kw.setdefault("pool_size", 10)
    kw.setdefault("max_overflow", 20)
    return create_engine(url, pool_pre_ping=True, **kw)


_made: list[Engine] = []  # what get_engine made, for forget_engines


@lru_cache(maxsize=8)
def get_engine(url: str, pool_size: int = 10, max_overflow: int = 20, pool_timeout: float = 30.0) -> Engine:
    if url.startswith("sqlite"):
        engine = make_engine(url)
    else:
        engine = make_engine(url, pool_size=pool_size, max_overflow=max_overflow, pool_timeout=pool_timeout)
    _made.append(engine)
    return engine


def forget_engines() -> None:
    """Close every engine ``get_engine`` made and forget them.

    Their pooled connections close now rather than when the collector finds the engine; a process
    that goes through many databases (the test suite: one per test) otherwise holds a socket for
    each, past the 1024 that ``select()`` can watch.
    """
    get_engine.cache_clear()
    while _made:
        _made.pop().dispose()


def engine_for(settings: StoreSettings) -> Engine:
    """The process's engine for ``settings``, its pool sized by ``GPUFLEET_DB_POOL_*``."""
    return get_engine(settings.effective_database_url, settings.db_pool_size, settings.db_max_overflow,
                      settings.db_pool_timeout_s)


def missing_sqlite_file(settings: StoreSettings) -> Path | None:
    """The embedded SQLite file when it does not exist yet, else ``None``.

    Opening SQLite creates the file; a command that only reads checks this
    first so that a failed read leaves no empty database behind.
    """
    if not settings.is_sqlite:
        return None
    path = settings.effective_database_url.split("///", 1)[-1]
    if not path or path == ":memory:" or Path(path).is_file():
        return None
    return Path(path)


def session_factory(settings: StoreSettings) -> sessionmaker[Session]:
    return sessionmaker(engine_for(settings), expire_on_commit=False)


@contextmanager
def _committing(sess: Session) -> Iterator[Session]:
    try:
        yield sess
        sess.commit()
    except BaseException:
        sess.rollback()
        raise
    finally:
        sess.close()


@contextmanager
def session_scope(settings: StoreSettings) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    with _committing(session_factory(settings)()) as sess:
        yield sess


def rows_changed(result: Result) -> int:
    """How many rows the UPDATE or DELETE that gave ``result`` changed.

    ``Session.execute`` types every result as a plain ``Result``; a statement's that changes rows is a
    ``CursorResult``, which counts them.
    """
    if not isinstance(result, CursorResult):
        raise TypeError(f"a {type(result).__name__} counts no changed rows: an UPDATE's or a DELETE's result does")
    return result.rowcount


def is_locked(exc: BaseException) -> bool:
    """True for SQLite's "database is locked" (another writer held the lock past the busy timeout)."""
    return isinstance(exc, OperationalError) and "database is locked" in str(exc)


@contextmanager
def write_session(settings: StoreSettings, busy_timeout_s: float | None = None) -> Iterator[Session]:
    """A session whose transaction holds the write lock from its first statement.

    On SQLite a transaction that reads and then writes can fail at once with
    "database is locked" when another writer got in between (the busy timeout
    cannot help: waiting would deadlock). ``BEGIN IMMEDIATE`` takes the lock
    up front, so writers queue instead. On PostgreSQL this is a plain
    session; row locks do the work there. Commits on success.

    ``busy_timeout_s``: on SQLite, how long to wait for the write lock (the
    engine's 30 s otherwise); past it :func:`is_locked` errors are raised.
    """
    engine = engine_for(settings)
    with engine.connect() as conn:
        if settings.is_sqlite:
            if busy_timeout_s is not None:
                conn.exec_driver_sql(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
                conn.commit()  # the statement began a transaction; the session's must be its own
            # Read by the engine's "begin" hook (make_engine).
            conn.info["sqlite_begin"] = "BEGIN IMMEDIATE"
        try:
            with _committing(Session(bind=conn, expire_on_commit=False)) as sess:
                yield sess
        finally:
            if settings.is_sqlite and busy_timeout_s is not None and not conn.invalidated:
                conn.exec_driver_sql("PRAGMA busy_timeout=30000")


@contextmanager
def write_in(session: Session, settings: StoreSettings) -> Iterator[Session]:
    """Write through a request's own session: one session and one connection per request.

    On PostgreSQL the session goes on in its transaction and commits at the
    end. On SQLite the write needs ``BEGIN IMMEDIATE`` (see
    :func:`write_session`), so the session gives its read connection back and
    begins again, holding the write lock from its first statement.
    """
    if settings.is_sqlite:
        session.close()
        session.connection(execution_options={"sqlite_begin": "BEGIN IMMEDIATE"})
    with _committing(session) as sess:
        yield sess


def check_database(settings: StoreSettings) -> None:
    """Connect once; raise ConfigError with one clear line when that fails."""
    url = settings.effective_database_url
    try:
        with engine_for(settings).connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 - any driver error means "cannot reach"
        shown = url.split("@")[-1] if "@" in url else url
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"GPUFLEET_DATABASE_URL: cannot connect to {shown}: {first}") from None


def alembic_config(url: str):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(ALEMBIC_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["gpufleet_url"] = url
    return cfg


def upgrade_database(settings: StoreSettings, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(settings.effective_database_url), revision)


def downgrade_database(settings: StoreSettings, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(settings.effective_database_url), revision)


def current_revision(settings: StoreSettings) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine_for(settings).connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def prepare_database(settings: StoreSettings) -> None:
    """Reachable and at this version's schema, or one clear ConfigError line.

    The embedded SQLite file is created or upgraded here; a shared database is
    upgraded only on purpose (``gpufleet db upgrade``), never by whichever
    process of the fleet starts first.
    """
    check_database(settings)
    if settings.is_sqlite:
        upgrade_database(settings)
        return
    current, head = current_revision(settings), head_revision()
    if current != head:
        raise ConfigError(
            f"GPUFLEET_DATABASE_URL: the database schema is at {current or 'nothing'}, "
            f"this gpufleet needs {head}; run `gpufleet db upgrade` first"
        )
