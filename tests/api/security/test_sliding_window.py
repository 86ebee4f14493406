"""The creation rate is a sliding window: never more than the limit in any window's span.

A fixed per-minute window let twice the limit through across a minute's
edge (five creates in 13.5 s at 3/minute). Both limiters take a clock, so
these tests move time by hand instead of waiting for it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from support.people import People, bearer, build_app
from gpufleet.api.security.ratelimits import Limiter, MemoryLimiter, RedisLimiter
from gpufleet.config import Settings

# A minute's edge 10 s after the start: a fixed window would restart its count there.
START = 60 * 29_000_000 - 10.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def make_limiter(request: pytest.FixtureRequest) -> Callable[[Clock], Limiter]:
    if request.param == "memory":
        return lambda clock: MemoryLimiter(clock=clock)
    url = request.getfixturevalue("redis_url")
    return lambda clock: RedisLimiter(url, clock=clock)


def test_no_window_of_a_minute_holds_more_than_the_limit(make_limiter: Callable[[Clock], Limiter]) -> None:
    clock = Clock()
    limiter = make_limiter(clock)
    key = f"create:{uuid.uuid4().hex}"
    accepted = []
    for offset in (0.0, 3.0, 6.0, 10.5, 13.5):  # across the minute's edge at 10 s
        clock.now = START + offset
        accepted.append(limiter.hit(key, 3, 60.0) is None)
    assert accepted == [True, True, True, False, False]
    # The wait is until the oldest of the three leaves the window.
    clock.now = START + 20.0
    assert limiter.hit(key, 3, 60.0) == pytest.approx(40.0)
    clock.now = START + 60.0
    assert limiter.hit(key, 3, 60.0) is None
    assert limiter.hit(key, 3, 60.0) is not None


@pytest.mark.parametrize("backend", ["memory", pytest.param("redis", marks=pytest.mark.redis)])
def test_five_creates_in_a_quarter_minute_at_three_a_minute(
        on_settings: Settings, people: People, request: pytest.FixtureRequest, backend: str) -> None:
    update = {"create_rate_per_minute": 3}
    if backend == "redis":
        update["redis_url"] = request.getfixturevalue("redis_url")
    settings = on_settings.model_copy(update=update)
    clock = Clock()
    app = build_app(settings)
    # The app's limiter, made before the first request, on the test's clock.
    app.state.gpufleet_limiter = (RedisLimiter(settings.redis_url, clock=clock) if settings.redis_url
                                  else MemoryLimiter(clock=clock))
    with TestClient(app) as client:
        codes = []
        for offset in (0.0, 3.0, 6.0, 10.5, 13.5):
            clock.now = START + offset
            codes.append(client.post("/api/v1/things", headers=bearer(people.alice)).status_code)
        assert codes == [200, 200, 200, 429, 429]
        assert app.state.created == [people.names["alice"]] * 3
