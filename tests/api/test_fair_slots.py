"""The fair part of admission's slots, without HTTP."""

from __future__ import annotations

import asyncio

import pytest
from gpufleet.api.fairslots import FairSlots, caller_key
from gpufleet.api.unixsocket import PEER_KEY, Peer


def test_a_caller_alone_may_take_every_slot_and_no_more() -> None:
    async def go() -> None:
        slots = FairSlots(4, wait_s=0.05)
        assert [await slots.acquire("a") for _ in range(4)] == [True] * 4
        assert await slots.acquire("a") is False  # at its fair part: refused at once, no wait
        assert slots.held == {"a": 4}

    asyncio.run(go())


def test_a_newcomer_waits_for_the_next_free_slot_and_the_flood_is_refused() -> None:
    async def go() -> None:
        slots = FairSlots(4, wait_s=5)
        for _ in range(4):
            assert await slots.acquire("flood")
        admin = asyncio.create_task(slots.acquire("admin"))
        await asyncio.sleep(0)
        assert not admin.done() and "admin" in slots.waiting
        # The flood is over its fair part (4 slots, 2 callers): refused while the admin waits.
        assert await slots.acquire("flood") is False
        slots.release("flood")
        assert await admin is True
        assert slots.held == {"flood": 3, "admin": 1} and slots.in_flight == 4
        assert await slots.acquire("flood") is False

    asyncio.run(go())


def test_a_wait_that_finds_no_slot_ends_refused_and_leaves_nothing_behind() -> None:
    async def go() -> None:
        slots = FairSlots(2, wait_s=0.05)
        assert await slots.acquire("a") and await slots.acquire("a")
        assert await slots.acquire("b") is False
        assert slots.waiting == {} and slots.held == {"a": 2}

    asyncio.run(go())


def test_a_waiter_that_goes_away_gives_up_its_place() -> None:
    async def go() -> None:
        slots = FairSlots(1, wait_s=5)
        assert await slots.acquire("a")
        gone = asyncio.create_task(slots.acquire("b"))
        await asyncio.sleep(0)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert slots.waiting == {}
        slots.release("a")
        assert slots.in_flight == 0 and slots.held == {}

    asyncio.run(go())


def test_freed_slots_go_to_the_waiting_caller_holding_fewest() -> None:
    async def go() -> None:
        slots = FairSlots(6, wait_s=5)
        for _ in range(5):
            assert await slots.acquire("a")
        assert await slots.acquire("b")
        b2 = asyncio.create_task(slots.acquire("b"))
        c1 = asyncio.create_task(slots.acquire("c"))
        await asyncio.sleep(0)
        slots.release("a")
        await asyncio.sleep(0)
        assert c1.done() and not b2.done()  # c holds none, b one
        slots.release("a")
        assert await b2 and await c1

    asyncio.run(go())


def _scope(headers: list[tuple[bytes, bytes]] = (), client: tuple[str, int] = ("10.0.0.1", 5000),
           peer: Peer | None = None) -> dict:
    return {"headers": list(headers), "client": client, "extensions": {PEER_KEY: peer} if peer else {}}


def test_callers_are_told_apart_by_credential_then_account_then_address() -> None:
    t1 = caller_key(_scope([(b"authorization", b"Bearer gf_one")]))
    t2 = caller_key(_scope([(b"authorization", b"Bearer gf_two")]))
    assert t1 != t2 and t1 == caller_key(_scope([(b"authorization", b"Bearer gf_one")], client=("10.0.0.2", 1)))
    assert "gf_one" not in t1
    c = caller_key(_scope([(b"cookie", b"theme=dark; gpufleet_session=abc.def; x=1")]))
    assert c.startswith("session:") and c != caller_key(_scope([(b"cookie", b"gpufleet_session=other")]))
    assert caller_key(_scope(peer=Peer(pid=1, uid=1001, gid=1001))) == "uid:1001"
    assert caller_key(_scope()) == "addr:10.0.0.1"
