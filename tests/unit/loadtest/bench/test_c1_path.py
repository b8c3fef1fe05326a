"""The c=1 study's bookkeeping: disjoint players per probe, replicas always put back into
rotation, and differences paired within each round."""

import pytest

from loadtest.bench.c1_path import differences, only_replica, player_blocks
from loadtest.harness.haproxy_admin import BackendServer

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def test_no_two_probes_share_a_player():
    blocks = player_blocks(rounds=3, paths=6, per_probe=330)
    flat = [block for round_ in blocks for block in round_]
    assert len(blocks) == 3 and all(len(round_) == 6 for round_ in blocks)
    players = [p for block in flat for p in block]
    assert len(players) == len(set(players)) == 3 * 6 * 330
    assert min(players) == 0 and max(players) == 3 * 6 * 330 - 1


class Admin:
    """Records state changes; fails the ones it is told to (HAProxy refusing a command)."""

    def __init__(self, fail_on: tuple[str, str] | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail_on = fail_on

    def set_state(self, backend: str, server: str, state: str) -> None:
        if (server, state) == self.fail_on:
            raise RuntimeError("refused")
        self.calls.append((server, state))


SERVERS = [BackendServer("b", "127.0.0.1", 2), BackendServer("c", "127.0.0.1", 3)]


def test_the_other_replicas_are_out_of_rotation_only_inside_the_block():
    admin = Admin()
    with only_replica(admin, "http-app", SERVERS):
        assert admin.calls == [("b", "maint"), ("c", "maint")]
    assert admin.calls[2:] == [("b", "ready"), ("c", "ready")]


def test_replicas_are_put_back_when_the_block_fails():
    admin = Admin()
    with pytest.raises(OSError), only_replica(admin, "http-app", SERVERS):
        raise OSError("probe failed")
    assert admin.calls[2:] == [("b", "ready"), ("c", "ready")]


def test_a_replica_that_never_left_is_not_touched_and_the_rest_are_put_back():
    admin = Admin(fail_on=("c", "maint"))
    with pytest.raises(RuntimeError), only_replica(admin, "http-app", SERVERS):
        pass
    assert admin.calls == [("b", "maint"), ("b", "ready")]


def test_differences_are_paired_within_rounds():
    runs = {"haproxy": [10.0, 20.0, 12.0], "legacy": [9.0, 18.0, 12.5]}
    paired = differences(runs)["as the bench sees it (haproxy against legacy)"]
    assert paired == {"median": 1.0, "min": -0.5, "max": 2.0, "n": 3}
    assert differences({})["haproxy's hop"] is None
