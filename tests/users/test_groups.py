"""Groups and quotas in the users domain: every refusal leaves the database as it was."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import func, select

from gpufleet.config import Settings
from gpufleet.db.models import Group, GroupMember, Quota
from gpufleet.db.session import session_scope
from gpufleet.users.accounts import UserError, add_user
from gpufleet.users.groups import (
    Limits,
    add_member,
    create_group,
    delete_group,
    groups_of_users,
    list_groups,
    remove_member,
    set_group_quota,
    set_user_quota,
    user_limits,
    user_quotas,
)


def _name(prefix: str = "g") -> str:
    return prefix + uuid.uuid4().hex[:8]


def _counts(settings: Settings) -> tuple[int, int, int]:
    with session_scope(settings) as sess:
        return tuple(sess.scalar(select(func.count()).select_from(m)) for m in (Group, GroupMember, Quota))  # type: ignore[return-value]


def test_group_life_and_membership(db_settings: Settings) -> None:
    group, alice, bob = _name(), _name("a"), _name("b")
    with session_scope(db_settings) as sess:
        add_user(sess, alice)
        add_user(sess, bob)
        create_group(sess, group)
        add_member(sess, group, alice)
        add_member(sess, group, bob)
        set_group_quota(sess, group, Limits(max_gpus=6, gpu_hours_per_week=100))
    with session_scope(db_settings) as sess:
        view = next(v for v in list_groups(sess) if v.name == group)
        assert sorted(view.members) == sorted([alice, bob])
        assert view.limits == Limits(6, 100.0)
        assert groups_of_users(sess, [alice])[alice] == [group]
        remove_member(sess, group, bob)
    with session_scope(db_settings) as sess:
        assert next(v for v in list_groups(sess) if v.name == group).members == [alice]
        delete_group(sess, group)
    with session_scope(db_settings) as sess:
        assert group not in {v.name for v in list_groups(sess)}
        assert alice not in groups_of_users(sess, [alice])


def test_bad_input_is_refused_and_nothing_is_written(db_settings: Settings) -> None:
    group, alice = _name(), _name("a")
    with session_scope(db_settings) as sess:
        add_user(sess, alice)
        create_group(sess, group)
        add_member(sess, group, alice)
    before = _counts(db_settings)
    cases = [
        (lambda s: create_group(s, group), "already exists"),
        (lambda s: create_group(s, "Bad Name"), "not allowed"),
        (lambda s: add_member(s, group, alice), "already in group"),
        (lambda s: add_member(s, "nosuch" + group, alice), "no group named"),
        (lambda s: add_member(s, group, "nosuch" + alice), "no user named"),
        (lambda s: remove_member(s, group, "nosuch" + alice), "no user named"),
        (lambda s: delete_group(s, "nosuch" + group), "no group named"),
        (lambda s: set_user_quota(s, alice, Limits(max_gpus=-1)), "max GPUs must be between 0"),
        (lambda s: set_user_quota(s, alice, Limits(gpu_hours_per_week=-5)), "GPU-hours per week must be"),
        (lambda s: set_user_quota(s, alice, Limits(gpu_hours_per_week=float("nan"))), "GPU-hours per week"),
        (lambda s: set_user_quota(s, alice, Limits(share=0)), "share must be above 0"),
        (lambda s: set_group_quota(s, group, Limits(max_gpus=-2)), "max GPUs"),
        (lambda s: set_group_quota(s, "nosuch" + group, Limits(max_gpus=2)), "no group named"),
        (lambda s: set_user_quota(s, "nosuch" + alice, Limits(max_gpus=2)), "no user named"),
    ]
    for fn, why in cases:
        with pytest.raises(UserError, match=why), session_scope(db_settings) as sess:
            fn(sess)
    assert _counts(db_settings) == before


def test_user_quota_is_replaced_and_read_back(db_settings: Settings) -> None:
    alice = _name("a")
    with session_scope(db_settings) as sess:
        add_user(sess, alice)
        assert user_limits(sess, alice) == Limits()
        set_user_quota(sess, alice, Limits(max_gpus=4, share=2.0))
    with session_scope(db_settings) as sess:
        assert user_quotas(sess)[alice] == Limits(4, None, 2.0)
        set_user_quota(sess, alice, Limits(max_gpus=None, gpu_hours_per_week=10))
    with session_scope(db_settings) as sess:
        assert user_limits(sess, alice) == Limits(None, 10.0, 1.0)
