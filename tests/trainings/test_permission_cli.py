"""`gpufleet users grant|revoke NAME run_code` on the embedded database and on PostgreSQL."""

from __future__ import annotations

from sqlalchemy import select
from typer.testing import CliRunner

from gpufleet.cli import app
from gpufleet.config import get_settings
from gpufleet.db.models import User
from gpufleet.db.session import session_scope

runner = CliRunner()


def _granted(name: str) -> bool:
    with session_scope(get_settings()) as sess:
        return bool(sess.scalar(select(User.run_code).where(User.name == name)))


def test_grant_and_revoke_run_code(cli_db: str) -> None:
    assert runner.invoke(app, ["users", "add", cli_db]).exit_code == 0
    assert not _granted(cli_db)  # off by default for members
    r = runner.invoke(app, ["users", "grant", cli_db, "run_code"])
    assert r.exit_code == 0, r.output
    assert _granted(cli_db)
    assert runner.invoke(app, ["users", "grant", cli_db, "non_preemptible"]).exit_code == 0
    listed = [line.split("\t") for line in runner.invoke(app, ["users", "list"]).stdout.splitlines()]
    assert listed[0][-1] == "permissions"
    assert next(row for row in listed if row[0] == cli_db)[-1] == "run_code,non_preemptible"
    r = runner.invoke(app, ["users", "revoke", cli_db, "run_code"])
    assert r.exit_code == 0 and not _granted(cli_db)
    bad = runner.invoke(app, ["users", "grant", cli_db, "fly"])
    assert bad.exit_code == 2 and "unknown permission 'fly'" in bad.output
    nobody = runner.invoke(app, ["users", "grant", "no-such-user-x", "run_code"])
    assert nobody.exit_code == 2 and "no user named" in nobody.output
    assert "made on their first call" in " ".join(nobody.output.split()), nobody.output
