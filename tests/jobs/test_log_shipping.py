"""A host's training logs reach the database: pieces, host prefixes, offsets kept, nothing lost or sent twice."""

from __future__ import annotations

import threading
import uuid

import pytest
from gpufleet.db.models import Training
from gpufleet.db.session import session_scope
from gpufleet.jobs.log_shipper import LogShipper, ShippedLog, identify, split, start_shipper
from gpufleet.jobs.logs import BoundedLog, log_path
from gpufleet.trainings import log_store
from support.postgres import pg_ctl, start_server

from support.fleet import wait_for


def _training(settings) -> uuid.UUID:
    tid = uuid.uuid4()
    with session_scope(settings) as sess:
        sess.add(Training(id=tid, name=f"logs-{tid.hex[:6]}", owner="o", recipe="sae", config={}, status="running"))
    return tid


def _stream(settings, tid) -> str:
    out, offset = [], 0
    while True:
        with session_scope(settings) as sess:
            chunk = log_store.read(sess, tid, offset=offset, limit=1000)
        if chunk is None:
            return ""
        out.append(chunk.text)
        if chunk.next_offset >= chunk.size:
            return "".join(out)
        offset = chunk.next_offset


def test_pieces_are_cut_at_line_ends_and_each_line_of_another_host_is_prefixed():
    pieces = split(b"a\nbb\nccc\n", 10, 5, b"[host b] ")
    assert [(p.source_start, p.source_end, p.data) for p in pieces] == [
        (10, 15, b"[host b] a\n[host b] bb\n"), (15, 19, b"[host b] ccc\n")]
    tid = uuid.uuid4()
    assert identify(f"{tid}.log", "h") == (tid, f"h/{tid}.log", b"")
    assert identify(f"{tid}-b.log", "h")[2] == b"[host b] "
    assert identify("worker.log", "h") is None and identify(f"{tid}.log.shipped", "h") is None


def test_every_host_file_reaches_one_stream_once(db_settings):
    tid = _training(db_settings)
    shipper = LogShipper(db_settings)
    lead = ShippedLog(db_settings, tid)  # sent whole when closed
    lead.line("[gpufleet] attempt 1")
    member = BoundedLog(log_path(db_settings, f"{tid}-b"), db_settings.log_max_bytes)
    member.line("[rank 2] hello")
    member.write(b"[rank 3] half a li")  # not sent until the line ends
    lead.line("[rank 0] step 1")
    lead.close()
    shipper.ship_all()
    assert _stream(db_settings, tid) == "[gpufleet] attempt 1\n[rank 0] step 1\n[host b] [rank 2] hello\n"
    member.write(b"ne\n")
    member.close()
    shipper.ship_all()
    shipper.ship_all()  # nothing new: nothing sent twice
    assert _stream(db_settings, tid).endswith("[host b] [rank 3] half a line\n")
    # A host that sent a piece but lost the answer (its offset file is gone) sends only what follows.
    (log_path(db_settings, f"{tid}-b").with_name(f"{tid}-b.log.shipped")).unlink()
    with open(log_path(db_settings, f"{tid}-b"), "ab") as fh:
        fh.write(b"[rank 2] after\n")
    LogShipper(db_settings).ship_all()
    LogShipper(db_settings).ship_all()
    text = _stream(db_settings, tid)
    assert text.count("hello") == 1 and text.endswith("[host b] [rank 2] after\n"), text
    with session_scope(db_settings) as sess:
        assert log_store.read(sess, tid, tail=1).text == "[host b] [rank 2] after\n"


def test_what_the_file_dropped_before_it_was_sent_is_named(db_settings):
    tid = _training(db_settings)
    log = BoundedLog(log_path(db_settings, tid), max_bytes=4096)
    for i in range(1000):
        log.line(f"line {i:05d}")
    log.close()
    LogShipper(db_settings).ship_all()
    text = _stream(db_settings, tid)
    assert text.startswith("[gpufleet: ") and "were dropped before they could be sent]\n" in text
    assert text.endswith("line 00999\n") and "line 00998\nline 00999" in text
    # The lines the file still holds are all there, in order.
    kept = text.split("\n", 1)[1].splitlines()
    assert kept == [f"line {i:05d}" for i in range(int(kept[0].split()[1]), 1000)]


@pytest.mark.postgres
@pytest.mark.slow
def test_a_database_outage_loses_no_line(pg_migrated_url, pg_control, tmp_path):
    from gpufleet.config import load_settings

    s = load_settings(data_dir=tmp_path / "data", database_url=pg_migrated_url, log_ship_interval_s=0.2)
    tid = _training(s)
    stop = threading.Event()
    thread = start_shipper(s, stop)
    log = BoundedLog(log_path(s, tid), s.log_max_bytes)
    try:
        log.line("before")
        wait_for(lambda: _stream(s, tid) == "before\n", 60, "the first line to be sent")
        pg_ctl(pg_control, "stop", "-m", "fast", "-w")
        try:
            for i in range(500):
                log.line(f"during {i}")
        finally:
            start_server(pg_control)
        log.line("after")
        want = "before\n" + "".join(f"during {i}\n" for i in range(500)) + "after\n"
        wait_for(lambda: _stream(s, tid) == want, 120, "every line to be sent after the outage", 0.3)
    finally:
        log.close()
        stop.set()
        thread.join(30)
