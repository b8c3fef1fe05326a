"""What the router knows of a version's room: its share of the supervisors' admission bound."""

import pytest

from app.core.version_load import VersionLoad

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
