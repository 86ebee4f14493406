"""Alembic environment: gpufleet's models are the target metadata."""

from __future__ import annotations

from alembic import context

from gpufleet.db.models import Base
from gpufleet.db.session import make_engine

config = context.config
target_metadata = Base.metadata


def include_object(obj, name, type_, reflected, compare_to):
    # Daily partitions of gpu_metrics_history are created at run time by the
    # telemetry storage, not by migrations.
    if type_ == "table" and reflected and compare_to is None and name and name.startswith("gpu_metrics_history_"):
        return False
    return True


def _url() -> str:
    url = config.attributes.get("gpufleet_url")
    if url:
        return url
    from gpufleet.config import get_settings

    return get_settings().effective_database_url


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=_url().startswith("sqlite"),
        include_object=include_object,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(_url())
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        include_object=include_object,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
