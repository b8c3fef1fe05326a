"""py-spy stacks attributed to the layer of their innermost known frame."""

import pytest

from loadtest.profile_replicas import RATE_HZ, layer_of, summarise

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

SERVE = "handle_request (ray/serve/_private/replica.py:100)"
APP = "score (/work/app/serving/member_group.py:50)"
XGB = "inplace_predict (xgboost/core.py:2500)"
LOOP = "_run_once (asyncio/base_events.py:1900)"
POOL = "_worker (concurrent/futures/thread.py:81)"
ORT = "run (onnxruntime/capi/onnxruntime_inference_collection.py:406)"


def test_innermost_known_frame_decides():
    assert layer_of(f"{LOOP};{SERVE};{APP};{XGB}") == "model compute"
    assert layer_of(f"{LOOP};{SERVE};{APP}") == "application code"
    assert layer_of(f"{LOOP};{SERVE};<lambda> (somewhere.py:1)") == "Serve"
    assert layer_of("<module> (x.py:1)") == "other"
    # A compiled member's predict, run straight by the thread pool: model compute, not the
    # event loop's hand-off.
    assert layer_of(f"{POOL};{ORT}") == "model compute"
    assert layer_of(POOL) == "event loop"


def test_summary_shares_and_cores():
    raw = "\n".join(
        [f"{LOOP};{SERVE};{APP};{XGB} 150", f"{LOOP};{SERVE} 50", "not a stack line", ""]
    )
    summary = summarise(raw, seconds=2.0)
    assert summary["samples"] == 200
    assert summary["cores"] == pytest.approx(200 / (2.0 * RATE_HZ))
    assert summary["by_layer"] == {"model compute": 0.75, "Serve": 0.25}
    assert summary["top_frames"][0] == [XGB, 0.75]


def test_roles_cost_per_login_all_of_it_and_above_their_idle_rate():
    from loadtest.profile_replicas import _roles_table, _used

    # A replica's exited process drops out of the later reading: nothing, not negative.
    assert _used({"a": 5.0, "gone": 2.0}, {"a": 7.0, "new": 1.0}) == {"a": 2.0, "new": 1.0}
    table = _roles_table(
        idle={"controller": 0.4, "replica": 0.2},  # over 10 s
        idle_s=10.0,
        loaded={"controller": 0.8, "replica": 10.2},  # over 20 s
        loaded_s=20.0,
        logins_per_s=50.0,
    )
    assert list(table) == ["replica", "controller", "whole tree"]
    assert table["replica"]["cores"] == pytest.approx(0.51)
    assert table["replica"]["ms_per_login"] == pytest.approx(10.2)
    assert table["replica"]["ms_per_login_above_idle"] == pytest.approx(9.8)
    # Busy only with its fixed work: a cost per login that load does not add to.
    assert table["controller"]["ms_per_login"] == pytest.approx(0.8)
    assert table["controller"]["ms_per_login_above_idle"] == pytest.approx(0.0)
    assert table["whole tree"]["ms_per_login"] == pytest.approx(11.0)
