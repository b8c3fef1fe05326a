"""Recovery after a fault: measured from the client's logins, not from the service's state."""

from datetime import datetime

import pytest

from loadtest.harness.open_loop import Shot
from loadtest.reliability.scenarios import (
    answered_by,
    back_on_version_after_s,
    build_scenarios,
    recovered_after_s,
    timed_from_kills,
    trace_restarts,
)
from loadtest.reliability.targets import Target

pytestmark = pytest.mark.unit


def local_target() -> Target:
    return Target(
        port=8000,
        game="galaxy-raiders",
        routes={"version": "/galaxy-raiders/2026-11", "game": "/galaxy-raiders"},
        version_app="galaxy-raiders-2026-11",
        version="2026-11",
        canary_players=["p0000001"],
    )


def shot(t, ms, status, personalized=True, reason=None, retry_after=None):
    return Shot(t, ms, status, personalized, reason, retry_after)


def test_recovery_is_the_last_degraded_login_after_the_fault():
    before = [shot(t, 50, 200) for t in (1.0, 2.0)]
    during = [shot(5.5, 1000, 200, False, "no_members_answered"), shot(6.0, 20, 503)]
    after = [shot(t, 50, 200) for t in (7.0, 8.0)]
    unknown = [shot(7.5, 50, 200, False, "unknown_player")]  # no fault causes these
    assert recovered_after_s(before + during + after + unknown, 5.0) == 1.0
    assert recovered_after_s(before + after, 5.0) == 0.0
    assert recovered_after_s(before + during, 5.0) is None  # degraded until the end


def test_restart_figures_are_timed_from_each_kill_not_from_the_fault_instant():
    """The fault fires at FAULT_AT_S (8 s) and then looks up the replicas: the kill came
    0.12 s later, and the second one 4.5 s after that (time.monotonic(), origin 100.0)."""
    shots = [shot(t, 50, 200) for t in (7.0, 8.0, 8.1)]
    shots += [shot(t, 5, 503) for t in (8.2, 9.5, 12.7, 13.0)]
    shots += [shot(t, 50, 200) for t in (13.2, 14.0)]
    restarts = {"_kills": [108.12, 112.62], "one_replaced_after_s": 4.1}

    figures = timed_from_kills(restarts, 100.0, shots)

    assert figures["fault_at_s"] == 8.12
    assert figures["recovered_after_s"] == 4.88  # the last refusal, 13.0 s, after 8.12
    assert (figures["all_killed_at_s"], figures["all_personalized_again_after_s"]) == (12.62, 0.38)
    assert figures["one_replaced_after_s"] == 4.1
    assert "_kills" not in figures
    # With no kill recorded (the fault not applied), the notes pass through as they are.
    assert timed_from_kills({"replaced_after_s": None}, 100.0, shots) == {"replaced_after_s": None}


def test_the_way_back_is_traced_after_the_load_each_kill_up_to_the_next(tmp_path, monkeypatch):
    import loadtest.reliability.scenarios as scenarios
    from tests.unit.loadtest.reliability.test_startup_trace import KILLED, write_session

    session = write_session(tmp_path)
    monkeypatch.setattr(scenarios, "ray_sessions", lambda cluster: [session])
    second = datetime(2026, 11, 29, 8, 43, 40)
    restarts = {
        "one_replaced_after_s": 5.2,
        "all_replaced_after_s": 9.0,
        "_traces": [("one_replaced_after_s", KILLED), ("all_replaced_after_s", second)],
    }

    steps = trace_restarts(restarts, local_target())

    (one,) = steps["one_replaced_steps"]
    assert (one["replica"], one["haproxy_s"]) == ("mdpo3dwx", 0.67)
    assert steps["all_replaced_steps"] == []


def test_a_trace_that_fails_is_left_empty_and_the_scenario_goes_on(monkeypatch):
    import loadtest.reliability.scenarios as scenarios

    def broken(cluster):
        raise PermissionError("no /proc here")

    monkeypatch.setattr(scenarios, "ray_sessions", broken)
    restarts = {"replaced_after_s": 6.0, "_traces": [("replaced_after_s", datetime(2026, 1, 1))]}

    assert trace_restarts(restarts, local_target()) == {"replaced_steps": []}


def routed(t, version, reason=None):
    return Shot(t, 20, 200, True, None, None, version=version, rerouted_reason=reason)


def test_back_on_version_is_the_last_rerouted_login_after_the_fault():
    before = [routed(t, "2026-11") for t in (1.0, 2.0)]
    away = [routed(9.0, "2026-10", "unavailable"), Shot(10.0, 30, 503, retry_after="1")]
    back = [routed(t, "2026-11") for t in (12.0, 13.0)]
    assert back_on_version_after_s(before + away + back, 8.0, "2026-11") == 2.0
    assert back_on_version_after_s(before + back, 8.0, "2026-11") == 0.0
    assert back_on_version_after_s(before + away, 8.0, "2026-11") is None
    assert answered_by(before + away + back) == {
        "2026-10 (unavailable)": 1,
        "2026-11 (own)": 4,
    }


def test_local_target_runs_every_scenario_it_can_inject_on_both_routes():
    import argparse

    target = local_target()
    args = argparse.Namespace(players=100, rate=10.0, seconds=5.0, held_rate=213.0)
    scenarios = {s.name: s for s in build_scenarios(args, target)}
    assert scenarios["overload_2x"].notes["offered_per_s"] == 426.0  # 2x the bench's held rate
    for name in ("burst_1000", "hot_player_100", "steady", "overload_2x"):
        assert scenarios[name].route == "version"
        assert scenarios[f"{name}_game"].route == "game"
    assert scenarios["version_down"].route == "game" and scenarios["version_down"].fault
    # The new ones run locally too: the version's own route, and the host's faults.
    assert scenarios["version_down_direct"].route == "version"
    assert scenarios["restart_time"].fault and scenarios["tier_outage_fresh"].fault
    assert scenarios["slow_host_3x_burst_1000"].neighbours > scenarios["slow_host_2x"].neighbours
    # The delay proxy, dynalite's supervision and a second node are the cluster's only.
    assert not {"dynamodb_slow", "dynalite_crash", "worker_node_lost"} & scenarios.keys()


def test_version_health_is_the_first_200_of_its_route_after_the_fault():
    """A real HTTP server standing in for the ingress: 503 until the version is back, then
    200. The watch records a moment after it came back, and nothing before it."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from loadtest.reliability.scenarios import watch_version_health

    back = threading.Event()
    paths: list[str] = []

    class Ingress(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            paths.append(self.path)
            self.send_response(200 if back.is_set() else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Ingress)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = Target(
            port=server.server_address[1],
            game="galaxy-raiders",
            routes={"version": "/galaxy-raiders/2026-11", "game": "/galaxy-raiders"},
            version_app="galaxy-raiders-2026-11",
            version="2026-11",
            canary_players=[],
        )
        seen: dict = {}
        started = time.monotonic()
        watch_version_health(target, seen)
        while len(paths) < 3:  # refused a few times first
            time.sleep(0.05)
        assert seen["after_s"] is None
        back.set()
        came_back_s = time.monotonic() - started
        deadline = time.monotonic() + 30
        while seen["after_s"] is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen["after_s"] is not None and seen["after_s"] >= came_back_s
        assert set(paths) == {"/galaxy-raiders/2026-11/healthz"}
    finally:
        server.shutdown()


def test_a_kill_with_no_replica_to_act_on_is_reported_as_not_applied(monkeypatch):
    """Every member inline (the shipped layout): member_killed has no replica to kill. That is
    plain steady load, and the report must not show it as a fault survived."""
    import argparse

    from loadtest.reliability import scenarios as module
    from loadtest.reliability.report import table
    from loadtest.reliability.scenarios import FaultNotApplied

    target = local_target()
    monkeypatch.setattr(module, "replica_pids", lambda app, deployment, cluster: [])
    args = argparse.Namespace(players=100, rate=10.0, seconds=5.0, held_rate=213.0)
    member_killed = {s.name: s for s in build_scenarios(args, target)}["member_killed"]
    with pytest.raises(FaultNotApplied, match="no member- replica"):
        member_killed.fault()

    row = {
        "sent": 10,
        "status_counts": {"200": 10},
        "http_5xx_non503": 0,
        "no_answer": 0,
        "client_p50_ms": 1.0,
        "client_p99_ms": 2.0,
        "client_max_ms": 3.0,
        "refusal_p99_ms": None,
        "over_budget_plus_100ms": 0,
        "fallback_share_by_reason": {},
    }
    shown = table(
        {
            "scenarios": {
                "member_killed": {**row, "fault_applied": False},
                "supervisor_killed": {**row, "fault_applied": True},
            }
        }
    )
    assert "| member_killed (fault not applied) |" in shown
    assert "| supervisor_killed |" in shown


def test_the_restart_scenarios_find_haproxys_admin_socket_once(monkeypatch):
    """Finding the socket reads every process's file descriptors (psutil.net_connections), in
    the process that sends the load: done on every poll while replacements were awaited, it
    stalled the load's event loop. Both kills of `restart_time`, and every poll between, use
    the admin found the first time."""
    import argparse
    import subprocess

    from loadtest.reliability import host_faults
    from loadtest.reliability import scenarios as module

    victims = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    pids = [[victims[0].pid, victims[1].pid], [victims[1].pid, victims[2].pid]]
    found: list[object] = []
    polls: list[object] = []
    # HAProxy's view: the replicas up before each kill, then the replacements after 3 polls.
    views = iter([{"r1", "r2"}, {"r1", "r2"}, {"r1", "r2"}, {"r1", "r3"}])
    views_after = iter([{"r1", "r3"}, {"r1", "r3"}, {"r1", "r3"}, {"r4", "r5"}])

    def listening_on(port: int) -> object:
        found.append(port)
        return object()

    def running(admin: object, backend: str) -> set[str]:
        polls.append(admin)
        return next(views, None) or next(views_after)

    monkeypatch.setattr(module.HAProxyAdmin, "listening_on", staticmethod(listening_on))
    monkeypatch.setattr(module, "replica_pids", lambda app, deployment, cluster: pids.pop(0))
    monkeypatch.setattr(module, "running_replicas", running)
    monkeypatch.setattr(host_faults, "running_replicas", running)
    try:
        args = argparse.Namespace(players=100, rate=10.0, seconds=5.0, held_rate=213.0)
        restart = {s.name: s for s in build_scenarios(args, local_target())}["restart_time"]
        assert restart.fault().startswith("SIGKILL 1 of 2")
        assert [v.wait(10) for v in victims] == [-9, -9, -9]  # each killed once, all of them
        assert len(polls) >= 6 and len({id(a) for a in polls}) == 1
        assert found == [8000]
    finally:
        for v in victims:
            v.kill()
            v.wait()
