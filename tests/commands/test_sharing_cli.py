"""`gpufleet groups …`, `gpufleet users set-quota` and `gpufleet usage`, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone

from sqlalchemy import func, select
from typer.testing import CliRunner

from gpufleet.cli import app
from gpufleet.config import get_settings
from gpufleet.db.models import Group, GroupMember, Quota
from gpufleet.db.session import session_scope
from gpufleet.users.groups import Limits, user_limits
from support.servers import serve_inprocess
from support.sharing import held_training, make_host

runner = CliRunner()
DAY = date(2026, 5, 6)


def run(*args: str):
    return runner.invoke(app, list(args))


def _rows() -> tuple[int, ...]:
    with session_scope(get_settings()) as sess:
        return tuple(sess.scalar(select(func.count()).select_from(m)) for m in (Group, GroupMember, Quota))


def test_groups_and_quotas_from_the_command_line(cli_db: str) -> None:
    alice, bob, group = cli_db + "a", cli_db + "b", cli_db + "g"
    assert run("users", "add", alice).exit_code == 0
    assert run("users", "add", bob).exit_code == 0
    assert run("groups", "create", group).exit_code == 0
    r = run("groups", "add", group, alice, bob)
    assert r.exit_code == 0, r.output
    r = run("groups", "set-quota", group, "--max-gpus", "8", "--gpu-hours-week", "500")
    assert r.exit_code == 0 and "at most 8 GPUs at once, 500 GPU-hours a week" in r.output
    rows = [line.split("\t") for line in run("groups", "list").stdout.splitlines()]
    assert [group, f"{alice},{bob}", "8", "500", "-", "-"] in rows
    assert run("users", "set-quota", alice, "--max-gpus", "4", "--share", "2").exit_code == 0
    assert run("users", "set-quota", alice, "--gpu-hours-week", "10").exit_code == 0  # keeps the rest
    with session_scope(get_settings()) as sess:
        assert user_limits(sess, alice) == Limits(4, 10.0, 2.0)
    assert run("users", "set-quota", alice, "--max-gpus", "none").exit_code == 0
    with session_scope(get_settings()) as sess:
        assert user_limits(sess, alice).max_gpus is None
    assert run("groups", "remove", group, bob).exit_code == 0
    assert run("groups", "delete", group).exit_code == 0
    assert group not in run("groups", "list").stdout


def test_bad_input_is_an_error_and_nothing_is_written(cli_db: str) -> None:
    alice, group = cli_db + "a", cli_db + "g"
    assert run("users", "add", alice).exit_code == 0
    assert run("groups", "create", group).exit_code == 0
    assert run("groups", "add", group, alice).exit_code == 0
    before = _rows()
    for args, why in [
        (("groups", "create", group), "already exists"),
        (("groups", "add", group, alice), "already in group"),
        (("groups", "add", group, "nosuch" + alice), "no user named"),
        (("groups", "add", "nosuch" + group, alice), "no group named"),
        (("users", "set-quota", alice, "--max-gpus", "-1"), "max GPUs must be between 0"),
        (("users", "set-quota", alice, "--gpu-hours-week", "-2"), "GPU-hours per week must be"),
        (("users", "set-quota", alice, "--max-gpus", "four"), "is not a whole number"),
        (("groups", "set-quota", "nosuch" + group, "--max-gpus", "2"), "no group named"),
        (("users", "set-quota", alice, "--max-priority", "1001"), "max priority must be between 0 and 1000"),
        (("groups", "set-quota", group, "--max-priority", "-1"), "max priority must be between 0 and 1000"),
        (("users", "set-quota", alice, "--max-priority", "high"), "is not a whole number"),
        (("users", "set-quota", alice, "--book-max-gpus", "-1"), "booked GPUs at once must be between 0"),
        (("groups", "set-quota", group, "--book-ahead-days", "400"), "furthest ahead a booking starts (days)"),
        (("groups", "set-quota", group, "--book-max-hours", "long"), "--book-max-hours 'long' is not a number"),
    ]:
        r = run(*args)
        assert r.exit_code == 2 and why in r.output, (args, r.output)
    assert _rows() == before


def test_booking_limits_from_the_command_line_keep_what_is_not_given(cli_db: str) -> None:
    from gpufleet.users.groups import BookingLimits

    alice, group = cli_db + "a", cli_db + "g"
    assert run("users", "add", alice).exit_code == 0
    assert run("groups", "create", group).exit_code == 0
    assert run("groups", "add", group, alice).exit_code == 0
    r = run("groups", "set-quota", group, "--book-max-gpus", "6", "--book-hours-week", "40")
    assert r.exit_code == 0 and "bookings: 6 GPUs at once, 40 GPU-hours a week" in r.output, r.output
    assert run("groups", "set-quota", group, "--max-gpus", "8").exit_code == 0  # keeps the booking limits
    rows = [line.split("\t") for line in run("groups", "list").stdout.splitlines()]
    assert [group, alice, "8", "-", "-", "6 GPUs at once, 40 GPU-hours a week"] in rows
    r = run("users", "set-quota", alice, "--book-max-hours", "120", "--book-ahead-days", "60")
    assert r.exit_code == 0 and "bookings: 120 h longest, 60 days ahead" in r.output, r.output
    assert run("users", "set-quota", alice, "--book-ahead-days", "none", "--share", "3").exit_code == 0
    with session_scope(get_settings()) as sess:
        assert user_limits(sess, alice).bookings == BookingLimits(max_hours=120.0)
        assert user_limits(sess, alice).share == 3.0


def test_priority_caps_from_the_command_line_record_who_set_them(cli_db: str) -> None:
    import getpass

    from gpufleet.users.groups import priority_cap

    alice, group = cli_db + "a", cli_db + "g"
    assert run("users", "add", alice).exit_code == 0
    assert run("groups", "create", group).exit_code == 0
    assert run("groups", "add", group, alice).exit_code == 0
    r = run("groups", "set-quota", group, "--max-priority", "20")
    assert r.exit_code == 0 and "priority at most 20" in r.output
    listed = [line.split("\t") for line in run("groups", "list").stdout.splitlines()]
    assert [group, alice, "-", "-", "20", "-"] in listed
    with session_scope(get_settings()) as sess:
        cap = priority_cap(sess, alice, 0)
        assert (cap.value, cap.set_by) == (20, f"{getpass.getuser()} (command line)")
    assert run("users", "set-quota", alice, "--max-priority", "5").exit_code == 0
    assert run("users", "set-quota", alice, "--max-gpus", "2").exit_code == 0  # keeps the cap
    with session_scope(get_settings()) as sess:
        assert priority_cap(sess, alice, 0).value == 5  # a user's own cap wins over the group's
    assert run("users", "set-quota", alice, "--max-priority", "none").exit_code == 0
    with session_scope(get_settings()) as sess:
        assert priority_cap(sess, alice, 0).value == 20
    r = run("users", "grant", alice, "non_preemptible")
    assert r.exit_code == 0 and "may now ask for trainings" in r.output


def _seed(owner: str) -> None:
    def at(hh: int, mm: int = 0) -> datetime:
        return datetime(DAY.year, DAY.month, DAY.day, hh, mm, tzinfo=timezone.utc)

    settings = get_settings()
    host = make_host(settings)
    held_training(settings, host, owner, [(0, at(1), at(2)), (1, at(1), at(1, 30))])  # 1.5 GPU-hours
    held_training(settings, host, owner, [(2, at(22), at(23, 15))])  # 1.25 GPU-hours


def test_usage_here_and_from_a_server(cli_db: str) -> None:
    from gpufleet.api.app import create_app

    owner = cli_db + "u"
    assert run("users", "add", owner).exit_code == 0
    _seed(owner)
    local = run("usage", "--local", "--from", str(DAY), "--to", str(DAY))
    assert local.exit_code == 0, local.output
    assert [str(DAY), owner, "2.75", "0.00", "2"] in [line.split("\t") for line in local.stdout.splitlines()]
    token = run("tokens", "create", owner).stdout.strip()
    with serve_inprocess(create_app(get_settings())) as served:
        # PostgreSQL means a fleet, where sign-in is on: the command sends the user's token.
        remote = runner.invoke(app, ["usage", "--server", served.url, "--from", str(DAY), "--to", str(DAY), "--json"],
                               env={"GPUFLEET_TOKEN": token})
        assert remote.exit_code == 0, remote.output
        row = next(r for r in json.loads(remote.stdout)["data"] if r["name"] == owner)
        assert row["gpu_seconds_held"] == 2.75 * 3600
        bad = runner.invoke(app, ["usage", "--server", served.url, "--from", "2026-13-01"],
                            env={"GPUFLEET_TOKEN": token})
        assert bad.exit_code == 2 and "is not a day; use YYYY-MM-DD" in bad.output
    bad = run("usage", "--local", "--from", str(DAY), "--to", "2026-05-01")
    assert bad.exit_code == 2 and "before from" in bad.output
    assert run("usage", "--by", "team", "--local").exit_code == 2
