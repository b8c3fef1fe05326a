"""The relay-cost study's run: both modes answer every login 200 through a real HAProxy on
the config the installed Serve renders, and give a latency and HAProxy's CPU per login.
Its figures are the study's to report (docs/runs/performance.md), not asserted here."""

from __future__ import annotations

import pytest

from loadtest.edge_relay_cost import measure

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("relay", [True, False], ids=["relay", "direct"])
def test_a_run_answers_every_login_and_measures_it(relay):
    figures = measure(relay, logins=30)
    assert figures["p50_ms"] > 0
    assert figures["haproxy_cpu_ms_per_login"] >= 0
