"""The target rows of a reliability run: each scenario held to the issue's targets, a miss
named, and the floor a refusal is held to taken from its own burst."""

import pytest

from loadtest.reliability.report import floor_for, target_rows, unanswered

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

FLOORS = {"burst_200": 100.0, "burst_500": 250.0, "burst_1000": 450.0}


def row(**changes):
    base = {
        "no_answer": 0,
        "http_5xx_non503": 0,
        "over_budget_plus_100ms": 0,
        "refusal_p99_ms": None,
    }
    return {**base, **changes}


def test_a_burst_is_held_to_its_own_floor_and_the_rest_to_the_smallest():
    assert floor_for("burst_1000", FLOORS) == 450.0
    assert floor_for("burst_200_game", FLOORS) == 100.0
    assert floor_for("slow_host_3x_burst_1000", FLOORS) == 450.0
    assert floor_for("hot_player_100", FLOORS) == 100.0


def test_each_miss_is_named_and_a_clean_row_is_met():
    report = {
        "client_floor_p99_ms": FLOORS,
        "scenarios": {
            "burst_1000": row(refusal_p99_ms=499.0),
            "slow_host_3x_burst_1000": row(refusal_p99_ms=501.0, cpu_neighbours=4),
            "steady": row(no_answer=1, over_budget_plus_100ms=3),
            "version_down_direct": row(replaced_after_s=3.1, recovered_after_s=6.2),
            "restart_time": row(
                one_replaced_after_s=2.0,
                all_replaced_after_s=4.0,
                all_personalized_again_after_s=4.5,
            ),
            "tier_outage_fresh": row(tier_share_after_fault={"precomputed": 0.94}),
            "slow_host_2x_burst_1000": row(refusal_p99_ms=600.0),
        },
        # The floor with the slow host's neighbours running: its client is slower too.
        "client_floor_p99_ms_slow_host": {"slow_host_2x": {**FLOORS, "burst_1000": 560.0}},
    }
    lines = {line.split(" | ")[0][2:]: line for line in target_rows(report).splitlines()[2:]}
    assert lines["burst_1000"].endswith("| yes |")
    assert lines["slow_host_2x_burst_1000"].endswith("| yes |")  # 600 against 560 + 50
    assert lines["slow_host_3x_burst_1000"].endswith("| no: refusal p99 |")
    assert "4 CPU-bound neighbours" in lines["slow_host_3x_burst_1000"]
    assert lines["steady"].endswith("| no: unanswered, over budget |")
    assert lines["version_down_direct"].endswith("| no: personalized again |")
    assert lines["restart_time"].endswith("| yes |")
    assert lines["tier_outage_fresh"].endswith("| no: precomputed share |")


def test_a_closed_login_stays_unanswered_and_shows_what_its_resend_got():
    resent = {"resent": 2, "status_counts": {"503": 1, "no_answer": 1}, "max_ms": 14.2}
    report = {
        "client_floor_p99_ms": FLOORS,
        "scenarios": {"version_down_direct": row(no_answer=2, resent_after_close=resent)},
    }

    (line,) = target_rows(report).splitlines()[2:]

    assert "| 2 (closed, resent once: 503: 1, no_answer: 1; ≤ 14.2 ms) |" in line
    assert "no: unanswered" in line
    assert unanswered(row(no_answer=0, resent_after_close={"resent": 0})) == "0"
    assert unanswered(row(no_answer=1)) == "1"  # a report from before the resend


def test_a_client_that_sent_late_is_named_and_its_miss_still_counts():
    report = {
        "client_floor_p99_ms": FLOORS,
        "scenarios": {
            "burst_1000": row(refusal_p99_ms=800.0, client_late_max_ms=344.0),
            "burst_500": row(refusal_p99_ms=260.0, client_late_max_ms=12.0),
        },
    }
    lines = {line.split(" | ")[0][2:]: line for line in target_rows(report).splitlines()[2:]}
    assert "client sent up to 344 ms late" in lines["burst_1000"]
    assert lines["burst_1000"].endswith("| no: refusal p99 |")
    assert "late" not in lines["burst_500"]  # within the margin: nothing to say
