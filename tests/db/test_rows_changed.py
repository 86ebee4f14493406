"""rows_changed (db/session.py): the rows an UPDATE or DELETE changed, from the result Session.execute gives."""

from __future__ import annotations

import pytest
from sqlalchemy import Integer, create_engine, delete, select, update
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from gpufleet.db.session import rows_changed


class _Base(DeclarativeBase):
    pass


class _Row(_Base):
    __tablename__ = "rows_changed_row"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    value: Mapped[int] = mapped_column(Integer)


def test_counts_what_an_update_and_a_delete_changed() -> None:
    engine = create_engine("sqlite://")
    _Base.metadata.create_all(engine)
    with Session(engine) as sess:
        sess.add_all([_Row(id=1, value=0), _Row(id=2, value=0), _Row(id=3, value=1)])
        sess.flush()
        stmt = update(_Row).where(_Row.value == 0).values(value=2).execution_options(synchronize_session=False)
        assert rows_changed(sess.execute(stmt)) == 2
        assert rows_changed(sess.execute(delete(_Row).where(_Row.id == 9))) == 0


def test_a_result_that_counts_nothing_is_refused() -> None:
    engine = create_engine("sqlite://")
    _Base.metadata.create_all(engine)
    with Session(engine) as sess:
        frozen = sess.execute(select(_Row)).freeze()()
        with pytest.raises(TypeError, match="counts no changed rows"):
            rows_changed(frozen)
