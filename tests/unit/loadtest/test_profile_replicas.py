"""py-spy stacks attributed to the layer of their innermost known frame."""

import pytest

from loadtest.profile_replicas import RATE_HZ, layer_of, summarise

pytestmark = pytest.mark.unit

SERVE = "handle_request (ray/serve/_private/replica.py:100)"
APP = "score (/work/app/serving/member_group.py:50)"
XGB = "inplace_predict (xgboost/core.py:2500)"
LOOP = "_run_once (asyncio/base_events.py:1900)"


def test_innermost_known_frame_decides():
    assert layer_of(f"{LOOP};{SERVE};{APP};{XGB}") == "model compute"
    assert layer_of(f"{LOOP};{SERVE};{APP}") == "application code"
    assert layer_of(f"{LOOP};{SERVE};<lambda> (somewhere.py:1)") == "Serve"
    assert layer_of("<module> (x.py:1)") == "other"


def test_summary_shares_and_cores():
    raw = "\n".join(
        [f"{LOOP};{SERVE};{APP};{XGB} 150", f"{LOOP};{SERVE} 50", "not a stack line", ""]
    )
    summary = summarise(raw, seconds=2.0)
    assert summary["samples"] == 200
    assert summary["cores"] == pytest.approx(200 / (2.0 * RATE_HZ))
    assert summary["by_layer"] == {"model compute": 0.75, "Serve": 0.25}
    assert summary["top_frames"][0] == [XGB, 0.75]
