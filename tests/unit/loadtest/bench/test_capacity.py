"""The benchmark's rule for a held level, and the step search built on it."""

import pytest

from loadtest.bench.capacity import judge, step_search
from loadtest.harness.locust_runner import LoadResult

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def result(*, p95=80.0, failures=0, total_rps=50.0, fallbacks=None):
    outcomes = {"personalized": 900, "fallback": fallbacks or {"unknown_player": 45}}
    return LoadResult(
        requests=1000,
        failures=failures,
        rps=total_rps * 0.98,
        p50_ms=20.0,
        p95_ms=p95,
        p99_ms=p95 * 1.5,
        outcomes=outcomes,
        total_rps=total_rps,
    )


def test_a_level_answered_in_time_and_in_full_is_held():
    verdict = judge(result(), offered_rps=50)
    assert verdict.held and verdict.reasons == ()


@pytest.mark.parametrize(
    ("load", "why"),
    [
        (result(p95=151.0), "p95 151 ms > 150"),
        (result(failures=1), "1 failed requests"),
        # 47 of 50 offered is 94%: the system fell behind the schedule.
        (result(total_rps=47.0), "achieved 47.0 of 50 rps offered"),
        # Shedding work as fallbacks is not serving it, however fast the answer.
        (result(fallbacks={"unknown_player": 40, "quorum": 3}), "3 degraded fallbacks"),
        (result(fallbacks={"no_members_answered": 1}), "1 degraded fallbacks"),
    ],
)
def test_each_rule_alone_fails_a_level(load, why):
    verdict = judge(load, offered_rps=50)
    assert not verdict.held
    assert verdict.reasons == (why,)


def test_unknown_players_are_not_degraded_answers():
    assert judge(result(fallbacks={"unknown_player": 500}), offered_rps=50).held


def search(capacity, levels, refine):
    """Levels run against a system that holds exactly `capacity` rps."""
    ran = []

    def run_level(offered):
        ran.append(offered)
        return offered <= capacity

    returned = step_search(run_level, levels, refine)
    assert returned == ran
    return ran


def test_search_refines_between_the_last_held_and_the_first_failed_level():
    # 33 fails; then 22 x 1.15 = 25, 29 held, 33 is not probed again.
    assert search(30, [10, 15, 22, 33, 50], 1.15) == [10, 15, 22, 33, 25, 29]


def test_search_stops_at_the_first_failed_refinement_and_never_retries():
    ran = search(24, [10, 15, 22, 33, 50], 1.15)
    assert ran == [10, 15, 22, 33, 25]
    assert len(ran) == len(set(ran))


def test_search_without_refinement_or_a_held_level():
    assert search(30, [10, 15, 22, 33, 50], 1.0) == [10, 15, 22, 33]
    assert search(5, [10, 15], 1.15) == [10]
    assert search(1000, [15, 10], 1.15) == [10, 15]
