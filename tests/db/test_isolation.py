"""What one test commits is gone for the next: each test's database is its own (tests/conftest.py).

Both cases commit a user of the same name; on a database the session shared, the second found the
first's and was refused. Run together (as here) they hold the rule on both databases."""

from __future__ import annotations

import pytest

from gpufleet.config import Settings
from gpufleet.db.session import session_scope
from gpufleet.users.accounts import add_user, list_users


@pytest.mark.parametrize("turn", ["first", "second"])
def test_a_committed_row_does_not_reach_the_next_test(db_settings: Settings, turn: str) -> None:
    with session_scope(db_settings) as sess:
        assert [u.name for u in list_users(sess) if u.name == "isolation-probe"] == []
        add_user(sess, "isolation-probe")
    with session_scope(db_settings) as sess:
        assert [u.name for u in list_users(sess) if u.name == "isolation-probe"] == ["isolation-probe"]
