"""What the router knows of a version's room: its share of the supervisors' admission bound."""

import asyncio

import pytest

from app.core.routing.version_load import VersionLoad

pytestmark = pytest.mark.unit

FULL = {"status": 503, "detail": "overloaded", "replica_full": True, "max_in_flight": 16}


def load(replicas=2, routers=1):
    return VersionLoad(lambda version: {"v": replicas}.get(version), lambda: routers)


def test_nothing_is_known_until_a_reply_and_the_status_say_it():
    assert load().capacity("v") is None
    unread = VersionLoad(lambda version: None)
    unread.learn("v", {"status": 200, "max_in_flight": 16})
    assert unread.capacity("v") is None and not unread.full("v")
    assert not unread.worth_retrying("v", FULL)


@pytest.mark.parametrize(
    ("replicas", "routers", "capacity"),
    [(2, 1, 32), (3, 1, 48), (2, 2, 16), (3, 2, 24), (1, 3, 6), (0, 1, None)],
)
def test_capacity_is_the_routers_share_of_the_running_supervisors_bounds(
    replicas, routers, capacity
):
    known = load(replicas, routers)
    known.learn("v", {"status": 200, "max_in_flight": 16})
    assert known.capacity("v") == capacity


@pytest.mark.parametrize("bound", [None, 0, -3, "16", 2.5, True])
def test_a_reply_without_a_usable_bound_teaches_nothing(bound):
    known = load()
    known.learn("v", {"status": 200, "max_in_flight": bound})
    assert known.capacity("v") is None


def test_full_once_the_router_holds_its_whole_share():
    known = load(replicas=1)
    known.learn("v", {"status": 200, "max_in_flight": 2})
    known.enter("v")
    assert not known.full("v")
    known.enter("v")
    assert known.full("v") and known.in_flight("v") == 2
    known.leave("v")
    assert not known.full("v") and known.in_flight("v") == 1


def test_a_full_replica_is_worth_another_try_only_while_the_version_has_room():
    known = load(replicas=2)
    known.learn("v", FULL)  # capacity 32
    for _ in range(31):
        known.enter("v")
    assert known.worth_retrying("v", FULL)
    known.enter("v")
    assert not known.worth_retrying("v", FULL)


@pytest.mark.parametrize(
    "reply",
    [
        {"status": 503, "detail": "budget spent", "max_in_flight": 16},
        {"status": 503, "detail": "version overloaded"},
        {"status": 200, "body": {}, "max_in_flight": 16},
        {"status": 503, "replica_full": "yes", "max_in_flight": 16},
    ],
    ids=["budget-refusal", "backpressure", "answer", "not-a-flag"],
)
def test_only_a_full_replica_refusal_is_retried(reply):
    known = load()
    known.learn("v", {"status": 200, "max_in_flight": 16})
    assert not known.worth_retrying("v", reply)


def one_slot():
    known = load(replicas=1)
    known.learn("v", {"status": 200, "max_in_flight": 1})
    return known


def test_a_slot_is_taken_at_once_while_the_version_has_room():
    known = one_slot()
    assert asyncio.run(known.acquire("v", 0.0)) is True
    assert known.in_flight("v") == 1 and known.full("v")
    # Full, and told not to wait: refused at once, holding nothing.
    assert asyncio.run(known.acquire("v", 0.0)) is False
    assert known.in_flight("v") == 1 and known.waiting("v") == 0


def test_waiting_logins_get_the_freed_slots_first_come_first_served():
    known = one_slot()

    async def scenario():
        assert await known.acquire("v", 0.0)
        order = []

        async def login(name):
            assert await known.acquire("v", 30.0)
            order.append(name)

        first = asyncio.create_task(login("first"))
        await asyncio.sleep(0)
        second = asyncio.create_task(login("second"))
        await asyncio.sleep(0)
        assert known.waiting("v") == 2 and order == []
        known.leave("v")
        # The slot is taken for the oldest waiter as it frees: a login arriving now, before
        # it resumes, finds the version full and would wait behind the second.
        assert known.in_flight("v") == 1 and known.waiting("v") == 1
        assert not await known.acquire("v", 0.0)
        await first
        assert order == ["first"]
        known.leave("v")
        await second
        assert order == ["first", "second"] and known.in_flight("v") == 1
        known.leave("v")

    asyncio.run(scenario())
    assert known.in_flight("v") == 0 and known.waiting("v") == 0


def test_a_login_whose_wait_runs_out_holds_nothing_and_is_skipped_later():
    known = one_slot()

    async def scenario():
        assert await known.acquire("v", 0.0)
        assert await known.acquire("v", 0.01) is False  # nobody leaves in time
        assert known.waiting("v") == 0
        known.leave("v")

    asyncio.run(scenario())
    assert known.in_flight("v") == 0


def test_a_login_abandoned_while_waiting_gives_back_what_it_was_handed():
    known = one_slot()

    async def scenario():
        assert await known.acquire("v", 0.0)
        # Abandoned while waiting: it leaves the queue.
        waiter = asyncio.create_task(known.acquire("v", 30.0))
        await asyncio.sleep(0)
        assert known.waiting("v") == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert known.waiting("v") == 0 and known.in_flight("v") == 1
        # Abandoned after a slot was taken for it but before it resumed: the slot goes back.
        handed = asyncio.create_task(known.acquire("v", 30.0))
        await asyncio.sleep(0)
        known.leave("v")
        assert known.in_flight("v") == 1  # taken for the waiter
        handed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await handed
        assert known.in_flight("v") == 0 and known.waiting("v") == 0

    asyncio.run(scenario())


def test_waiters_go_ahead_once_the_room_is_no_longer_known():
    # The status read says no supervisor runs (capacity unknown): nothing is held back here,
    # the call itself finds out (the router skips a version with no running replica).
    replicas = {"v": 1}
    known = VersionLoad(lambda version: replicas.get(version))
    known.learn("v", {"status": 200, "max_in_flight": 1})

    async def scenario():
        assert await known.acquire("v", 0.0)
        waiters = [asyncio.create_task(known.acquire("v", 30.0)) for _ in range(2)]
        await asyncio.sleep(0)
        replicas["v"] = 0
        known.leave("v")
        return await asyncio.gather(*waiters)

    assert asyncio.run(scenario()) == [True, True]
    assert known.in_flight("v") == 2


def test_a_supervisor_that_starts_running_takes_waiting_logins_without_a_login_ending():
    """A scale-up adds slots that no login's end hands over: the status read that sees the
    new supervisor (refresh) hands them to the logins waiting, oldest first, and no more."""
    replicas = {"v": 1}
    known = VersionLoad(lambda version: replicas.get(version))
    known.learn("v", {"status": 200, "max_in_flight": 2})

    async def scenario():
        assert await known.acquire("v", 0.0) and await known.acquire("v", 0.0)
        waiters = [asyncio.create_task(known.acquire("v", 30.0)) for _ in range(3)]
        await asyncio.sleep(0)
        known.refresh()  # the same supervisors: nothing to hand over
        assert known.waiting("v") == 3 and known.in_flight("v") == 2
        replicas["v"] = 2
        known.refresh()
        assert known.in_flight("v") == 4 and known.waiting("v") == 1
        done, pending = await asyncio.wait(waiters, timeout=1.0)
        assert [w for w in waiters if w in done] == waiters[:2]
        assert all(w.result() for w in done) and pending == {waiters[2]}
        waiters[2].cancel()

    asyncio.run(scenario())
