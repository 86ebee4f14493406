"""The database itself refuses two bookings of one GPU over overlapping windows, on PostgreSQL and SQLite."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from gpufleet.bookings import service
from gpufleet.bookings.service import Actor, Conflict, Wanted
from gpufleet.db.bookings import Booking, BookingGPU
from gpufleet.db.models import GPU
from gpufleet.db.session import session_scope, write_session

from tests.bookings.conftest import NOW, at


def _book(settings, who: str, start: float, end: float, host: str = "h1", indices=(0,)) -> Booking:
    with write_session(settings) as sess:
        return service.create(sess, Actor(who, admin=True),
                              Wanted(at(start), at(end), len(indices), host=host, gpu_indices=tuple(indices)),
                              settings, NOW)


def test_two_concurrent_bookings_of_one_gpu_exactly_one_wins(db_settings, add_host) -> None:
    add_host("h1")
    go = threading.Barrier(2)
    results: dict[str, object] = {}

    def member(who: str, start: float, end: float) -> None:
        go.wait()
        try:
            results[who] = _book(db_settings, who, start, end)
        except Conflict as exc:
            results[who] = exc

    threads = [threading.Thread(target=member, args=("ana", 1, 3)), threading.Thread(target=member, args=("bo", 2, 4))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    won = [w for w, r in results.items() if isinstance(r, Booking)]
    lost = [r for r in results.values() if isinstance(r, Conflict)]
    assert len(won) == 1 and len(lost) == 1, results
    assert lost[0].in_the_way is not None and lost[0].in_the_way.owner == won[0]
    with session_scope(db_settings) as sess:
        assert sess.scalar(select(func.count()).select_from(BookingGPU)) == 1


def test_the_constraint_itself_refuses_an_overlap_and_allows_touching_windows(db_settings, add_host) -> None:
    """Past every check of the service: rows written straight into the table."""
    add_host("h1")
    first = _book(db_settings, "ana", 1, 3)
    with session_scope(db_settings) as sess:
        gpu = sess.scalar(select(GPU).where(GPU.index == 0))
        sess.add(BookingGPU(booking_id=first.id, gpu_id=gpu.id, host_id=gpu.host_id, gpu_index=0,
                            start_at=at(3), end_at=at(5)))  # touches the end: no overlap
    with pytest.raises(IntegrityError, match="booking_gpus_no_overlap"):
        with session_scope(db_settings) as sess:
            sess.add(BookingGPU(booking_id=first.id, gpu_id=gpu.id, host_id=gpu.host_id, gpu_index=0,
                                start_at=at(2), end_at=at(2.5)))


def test_a_conflict_names_the_booking_and_the_next_free_window_and_a_cancel_frees_it(db_settings, add_host) -> None:
    add_host("h1")
    first = _book(db_settings, "ana", 1, 3)
    with pytest.raises(Conflict) as caught:
        _book(db_settings, "bo", 2, 4)
    assert caught.value.in_the_way.id == first.id
    assert caught.value.free == (at(3), at(5))
    assert str(first.id) in str(caught.value)
    _book(db_settings, "bo", 0, 1, indices=(1, 2))  # other GPUs, and the window before: both free
    with write_session(db_settings) as sess:
        service.cancel(sess, Actor("ana", admin=False), first.id, NOW)
    assert _book(db_settings, "bo", 2, 4).owner == "bo"
