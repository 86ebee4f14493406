"""`gpufleet book` and `gpufleet bookings ls | show | cancel | free | feed`, run by two real Unix accounts against one
server through its socket: each books as themselves, a conflict names the booking in the way and the next free
window, a bad time names its option, and neither may cancel the other's booking."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx
import pytest

from support.accounts import run_as, unix_accounts
from support.servers import cli, serve_process, socket_path

pytestmark = pytest.mark.slow


def _ok(result) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_two_accounts_book_the_same_gpus_from_the_command_line(tmp_path) -> None:
    start = (datetime.now(timezone.utc) + timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
    when = start.strftime("%Y-%m-%dT%H:%M")
    with unix_accounts(2) as (ana, bo), serve_process(tmp_path / "data", GPUFLEET_AUTH=None) as srv:
        env = {"GPUFLEET_UNIX_SOCKET": str(socket_path(tmp_path / "data")), "TZ": "UTC"}
        booked = _ok(run_as(ana, "book", "--gpus", "2", "--start", when, "--hours", "2", "--reason", "demo",
                            "--host", "sim-host", env=env))
        assert booked.startswith("booked ") and ana.name in booked and "sim-host:0, sim-host:1" in booked
        booking_id = booked.split()[1]
        # Her calendar app polls the feed address `bookings feed` gave her, with no credential but its token.
        url = _ok(run_as(ana, "bookings", "feed", env=env)).split()[0]
        polled = httpx.get(srv.url + url[url.index("/api/v1/"):], timeout=30)
        assert polled.status_code == 200 and f"UID:{booking_id}@" in polled.text, polled.text

        later = (start + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
        clash = run_as(bo, "book", "--gpus", "1", "--start", later, "--hours", "1", env=env)
        assert clash.returncode == 2, clash.stdout + clash.stderr
        said = " ".join(clash.stderr.split())
        assert booking_id in said and ana.name in said and "next free window" in said, said
        assert (start + timedelta(hours=2)).strftime("%Y-%m-%d %H:%M") in said, said

        bad = run_as(bo, "book", "--gpus", "1", "--start", later, "--end", when, env=env)
        assert bad.returncode == 2 and "--end" in bad.stderr and "not after the start" in bad.stderr, bad.stderr

        # In Berlin's time, the same booking reads an hour (or two, in summer) later.
        listed = _ok(run_as(bo, "bookings", "ls", "--tz", "Europe/Berlin", env=env))
        assert booking_id in listed and ("+01:00" in listed or "+02:00" in listed), listed
        free = _ok(run_as(bo, "bookings", "free", "--gpus", "2", "--hours", "1", env=env))
        assert free.startswith("free ")
        refused = run_as(bo, "bookings", "cancel", booking_id, env=env)
        assert refused.returncode == 2 and "own bookings" in refused.stderr, refused.stderr
        _ok(run_as(ana, "bookings", "cancel", booking_id, env=env))
        assert "released" in _ok(run_as(bo, "bookings", "show", booking_id, env=env))
        _ok(run_as(bo, "book", "--gpus", "1", "--start", later, "--hours", "1", env=env))

        # The admin puts both in a group whose bookings hold 2 GPUs at once: with bo's one over that hour,
        # ana may book one more, not two, and is told whose limit it is.
        group = f"lab{ana.name[-4:]}"
        cli(tmp_path / "data", "groups", "create", group)
        cli(tmp_path / "data", "groups", "add", group, ana.name, bo.name)
        cli(tmp_path / "data", "groups", "set-quota", group, "--book-max-gpus", "2")
        over = run_as(ana, "book", "--gpus", "2", "--start", later, "--hours", "1", env=env)
        said = " ".join(over.stderr.split())
        assert over.returncode == 2 and "--gpus" in said, over.stdout + over.stderr
        assert f"group {group}'s bookings would hold 3 GPUs at once; its limit is 2" in said, said
        _ok(run_as(ana, "book", "--gpus", "1", "--start", later, "--hours", "1", env=env))
