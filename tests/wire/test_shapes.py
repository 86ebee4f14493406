"""The other request shapes of wire/ (sessions, webhooks, users, a sweep's ranges) and the package's map
of where each shape lives: bounds at both ends, refusals that say what to fix, round trips."""

from __future__ import annotations

import importlib
import inspect

import pytest
from pydantic import BaseModel, ValidationError

from gpufleet import wire
from gpufleet.notify.events import EVENTS
from gpufleet.wire.sessions import SessionCreate, SessionExtend, SessionLimitSet
from gpufleet.wire.sweep_requests import SpaceRange
from gpufleet.wire.users import TokenCreate, UserCreate, UserUpdate
from gpufleet.wire.webhooks import WebhookCreate, WebhookUpdate


def _refused(model: type[BaseModel], body: dict) -> str:
    with pytest.raises(ValidationError) as err:
        model.model_validate(body)
    return str(err.value)


def test_every_shape_of_a_wire_module_is_a_name_of_the_package_and_loads_from_its_home() -> None:
    for module, names in wire.HOMES.items():
        mod = importlib.import_module(module)
        defined = {n for n, v in vars(mod).items() if inspect.isclass(v) and issubclass(v, BaseModel)
                   and v.__module__ == module and not n.startswith("_")}
        assert defined == set(names), module  # a shape missing from HOMES is no name of wire
        assert all(getattr(wire, n) is getattr(mod, n) for n in names)
    with pytest.raises(AttributeError, match="has no attribute 'TrainingPrivate'"):
        wire.TrainingPrivate  # noqa: B018


@pytest.mark.parametrize(("body", "field"), [({"gpus": 0}, "gpus"), ({"gpus": 65}, "gpus"), ({"hours": 0}, "hours"),
                                             ({"hours": 24 * 365 + 1}, "hours"), ({"priority": 1001}, "priority"),
                                             ({"name": ""}, "name"), ({"memory_mb": 2**31 + 1}, "memory_mb"),
                                             ({"shell": True}, "shell")])
def test_a_session_request_outside_its_bounds_is_refused_by_field(body: dict, field: str) -> None:
    assert field in _refused(SessionCreate, body)


def test_a_session_request_at_its_bounds_is_taken_and_round_trips() -> None:
    s = SessionCreate(gpus=64, hours=24 * 365, priority=-1000, memory_mb=2**31, name="nb", jupyter=True)
    assert SessionCreate.model_validate_json(s.model_dump_json()) == s
    assert SessionCreate().gpus == 1 and SessionCreate().hours is None
    assert "hours" in _refused(SessionExtend, {"hours": -1})
    assert "max_hours" in _refused(SessionLimitSet, {"max_hours": 0})


def test_a_webhook_body_names_known_events_and_a_url_it_may_send_to() -> None:
    hook = WebhookCreate(url="https://hooks.example.com/x", events=["training_failed"])
    assert (hook.format, hook.events) == ("json", ["training_failed"])
    assert "events" in _refused(WebhookCreate, {"url": "https://hooks.example.com/x", "events": ["done"]})
    assert "events" in _refused(WebhookCreate, {"url": "https://hooks.example.com/x", "events": []})
    assert "format" in _refused(WebhookCreate, {"url": "https://hooks.example.com/x", "format": "xml"})
    # The server's URL rules, said in the body's refusal.
    assert "may not carry a user name or password" in _refused(WebhookCreate, {"url": "https://u:p@h.example/x"})
    assert "starts with http:// or https://" in _refused(WebhookUpdate, {"url": "file:///etc/passwd"})
    assert WebhookUpdate().url is None and WebhookUpdate(enabled=False).enabled is False
    assert "events" in _refused(WebhookCreate, {"url": "https://hooks.example.com/x",
                                                "events": [*EVENTS, EVENTS[0]]})


@pytest.mark.parametrize("name", ["Alice", "-alice", "al ice", "a" * 65, ""])
def test_a_user_name_is_lower_case_letters_digits_and_dot_dash_underscore(name: str) -> None:
    assert "name" in _refused(UserCreate, {"name": name})
    assert "user" in _refused(TokenCreate, {"user": name})


def test_users_and_tokens_keep_their_roles_and_days_to_their_bounds() -> None:
    assert UserCreate(name="alice.b_1-x").role == "member"
    assert "role" in _refused(UserCreate, {"name": "alice", "role": "owner"})
    assert "role" in _refused(UserUpdate, {"role": "root"})
    assert TokenCreate(user="alice", expires_days=3650).expires_days == 3650
    assert "expires_days" in _refused(TokenCreate, {"user": "alice", "expires_days": 0})
    assert "expires_days" in _refused(TokenCreate, {"user": "alice", "expires_days": 3651})


@pytest.mark.parametrize(("body", "says"), [
    ({"low": 1, "high": 1}, "low (1) must be below high (1)"),
    ({"low": 0, "high": 1, "log": True}, "a log range needs low above 0"),
    ({"low": 0, "high": 1, "step": 0.1, "count": 5}, "give step or count, not both"),
    ({"low": 1, "high": 10, "log": True, "step": 1}, "a log range is gridded by count, not step"),
    ({"low": 0, "high": 1000, "step": 1}, "step 1 makes more than 1000 points from 0 to 1000"),
])
def test_a_sweep_range_that_makes_no_sense_says_why(body: dict, says: str) -> None:
    assert says in _refused(SpaceRange, body)


def test_a_sweep_range_grids_by_step_or_count() -> None:
    assert SpaceRange(low=0, high=10, step=5).grid() == [0, 5, 10]
    assert SpaceRange(low=0, high=999, step=1).grid()[-1] == 999
    assert SpaceRange(low=0, high=1).grid() is None
    assert SpaceRange(low=2, high=8, step=2).integer and not SpaceRange(low=0.5, high=1).integer
