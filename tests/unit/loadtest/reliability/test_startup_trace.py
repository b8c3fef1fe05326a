"""A killed replica's way back, split at the lines Ray's and Serve's logs hold for it: read
from a session folder laid out as Ray lays it out, with lines in Ray 2.60's formats."""

from datetime import datetime
from pathlib import Path

import pytest

from loadtest.reliability import startup_trace as trace
from loadtest.reliability.report import startup_rows

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

APP = "galaxy-raiders-2026-11"
KILLED = datetime(2026, 11, 29, 8, 43, 32, 124000)


def write_session(root: Path, *, core_log: bool = True) -> Path:
    """One replacement (mdpo3dwx, pid 16481) after the kill, and one start before it that
    must not count."""
    logs = root / "session_x" / "logs"
    (logs / "serve").mkdir(parents=True)
    who = "deployment='supervisor', app='galaxy-raiders-2026-11'"
    (logs / "serve" / "controller_15331.log").write_text(
        f"INFO 2026-11-29 08:41:29,100 controller 15331 -- Starting Replica(id='old1', {who}).\n"
        f"INFO 2026-11-29 08:41:33,000 controller 15331 -- Replica(id='old1', {who}) started "
        "successfully on node 'n' after 3.9s (PID: 15711).\n"
        f"WARNING 2026-11-29 08:30:00,000 controller 15331 -- Actor for Replica(id='old0', "
        f"{who}) crashed, marking it unhealthy immediately.\n"
        f"WARNING 2026-11-29 08:43:33,053 controller 15331 -- Actor for Replica(id='old1', "
        f"{who}) crashed, marking it unhealthy immediately.\n"
        f"INFO 2026-11-29 08:43:33,063 controller 15331 -- Starting Replica(id='mdpo3dwx', "
        f"{who}).\n"
        f"INFO 2026-11-29 08:43:36,658 controller 15331 -- Replica(id='mdpo3dwx', {who}) "
        "started successfully on node 'n' after 3.6s (PID: 16481). Replica constructor...\n"
    )
    # The build's own controller log holds no replica: it must not be read as the controller's.
    (logs / "serve" / "controller_build_galaxy-raiders-2026-11_15448.log").write_text(
        f"INFO 2026-11-29 08:43:40,000 controller 15448 -- Starting Replica(id='nope', {who}).\n"
    )
    # The second node's raylet in a shared session folder writes raylet.1.out; pid 16481 was
    # a worker once before (its own id), and that one must not be read.
    (logs / "raylet.out").write_text(
        "[2026-11-29 08:20:00,000 I 15047 15047] (raylet) worker_pool.cc:564: Started worker "
        "process with pid 16481 worker_id=0ld\n"
        "[2026-11-29 08:41:29,500 I 15047 15047] (raylet) worker_pool.cc:564: Started worker "
        "process with pid 15711 worker_id=aa\n"
    )
    (logs / "raylet.1.out").write_text(
        "[2026-11-29 08:43:33,089 I 15048 15048] (raylet) worker_pool.cc:564: Started worker "
        "process with pid 16481 worker_id=7e\n"
    )
    (logs / "python-core-worker-0ld_16481.log").write_text(
        "[2026-11-29 08:20:01,000 I 16481 16481] core_worker_process.cc:872: Constructing "
        "CoreWorkerProcess. pid: 16481\n"
    )
    if core_log:
        (logs / "python-core-worker-7e_16481.log").write_text(
            "[2026-11-29 08:43:34,392 I 16481 16481] core_worker_process.cc:872: Constructing "
            "CoreWorkerProcess. pid: 16481\n"
        )
    (logs / "serve" / f"replica_{APP}_supervisor_mdpo3dwx.log").write_text(
        f"INFO 2026-11-29 08:43:35,749 {APP}_supervisor mdpo3dwx -- Started initializing "
        "replica.\n"
        f"INFO 2026-11-29 08:43:35,753 {APP}_supervisor mdpo3dwx -- 0 threads raised\n"
        f"INFO 2026-11-29 08:43:36,429 {APP}_supervisor mdpo3dwx -- supervisor ready in 684 "
        "ms (runtime onnx): process set-up 4 ms\n"
    )
    return root / "session_x"


def test_each_step_ends_at_its_own_log_line(tmp_path):
    session = write_session(tmp_path)

    (start,) = trace.replica_starts([session], APP, "supervisor", KILLED)

    assert (start.replica, start.pid) == ("mdpo3dwx", 16481)
    assert start.steps_s == {
        "noticed": 0.93,
        "scheduled": 0.01,
        "worker process": 0.03,
        "interpreter and Ray": 1.3,
        "Serve and app": 1.36,
        "constructor": 0.68,
        "marked running": 0.23,
    }
    assert start.running_after_s == 4.53
    assert trace.traced([start], listed_after_s=5.2)[0]["haproxy_s"] == 0.67


def test_a_missing_line_leaves_out_the_steps_it_bounds_and_keeps_the_total(tmp_path):
    session = write_session(tmp_path, core_log=False)

    (start,) = trace.replica_starts([session], APP, "supervisor", KILLED)

    assert "interpreter and Ray" not in start.steps_s
    assert "Serve and app" not in start.steps_s
    assert start.steps_s["constructor"] == 0.68
    assert start.running_after_s == 4.53


def test_starts_before_the_kill_and_of_other_apps_are_not_counted(tmp_path):
    session = write_session(tmp_path)

    assert trace.replica_starts([session], APP, "supervisor", datetime(2026, 11, 29, 8, 44)) == []
    assert trace.replica_starts([session], "galaxy-raiders-2026-10", "supervisor", KILLED) == []


def test_a_kill_s_window_ends_at_the_next_kill(tmp_path):
    session = write_session(tmp_path)
    next_kill = datetime(2026, 11, 29, 8, 43, 33)  # before the replacement's start line

    assert trace.replica_starts([session], APP, "supervisor", KILLED, next_kill) == []
    assert len(trace.replica_starts([session], APP, "supervisor", KILLED, None)) == 1


def test_each_replacement_is_timed_from_its_own_death_noticed(tmp_path):
    """Every supervisor killed: the controller notices each death on its own health check,
    and starts one replacement per death, in that order."""
    session = write_session(tmp_path)
    who = "deployment='supervisor', app='galaxy-raiders-2026-11'"
    with (session / "logs" / "serve" / "controller_15331.log").open("a") as log:
        log.write(
            f"WARNING 2026-11-29 08:43:34,500 controller 15331 -- Actor for Replica(id='old2', "
            f"{who}) crashed, marking it unhealthy immediately.\n"
            f"INFO 2026-11-29 08:43:34,510 controller 15331 -- Starting Replica(id='second', "
            f"{who}).\n"
        )

    first, second = trace.replica_starts([session], APP, "supervisor", KILLED)

    assert (first.steps_s["noticed"], first.steps_s["scheduled"]) == (0.93, 0.01)
    assert (second.steps_s["noticed"], second.steps_s["scheduled"]) == (2.38, 0.01)
    # Never marked running: only the steps its log lines bound.
    assert second.running_after_s is None
    assert set(second.steps_s) == {"noticed", "scheduled"}


def test_haproxy_is_timed_from_the_last_replacement_running():
    def start(running):
        return trace.ReplicaStart(replica="r", pid=1, steps_s={}, running_after_s=running)

    rows = trace.traced([start(4.0), start(5.5), start(None)], listed_after_s=6.25)

    assert [r["haproxy_s"] for r in rows] == [0.75, 0.75, 0.75]
    assert trace.traced([start(4.0)], listed_after_s=None)[0]["haproxy_s"] is None


def test_sessions_are_read_from_the_raylets_command_lines():
    raylet = "/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet"
    cmdlines = [
        [raylet, "--raylet_socket_name=/tmp/r/s1/sockets/raylet", "--session_dir=/tmp/r/s1"],
        [raylet, "--session_dir=/tmp/r/s2"],
        ["python", "-m", "x", "--session_dir=/tmp/r/not-a-raylet"],
        [],
    ]

    assert trace.session_dirs(cmdlines) == [Path("/tmp/r/s1"), Path("/tmp/r/s2")]


def test_the_report_gives_each_kill_the_median_of_each_step():
    def start(noticed, haproxy):
        steps = dict.fromkeys(trace.STEPS, 1.0) | {"noticed": noticed}
        return {"replica": "r", "pid": 1, "steps_s": steps, "running_after_s": 7.0,
                "haproxy_s": haproxy}  # fmt: skip

    starts = [start(0.2, 0.7), start(1.8, None), start(0.4, 0.5)]
    report = {
        "scenarios": {
            "restart_time": {"one_replaced_after_s": 4.8, "one_replaced_steps": starts},
            "steady": {"sent": 10},
        }
    }

    assert trace.median_steps(starts)["noticed"] == 0.4
    assert trace.median_steps(starts)["haproxy_s"] == 0.6
    rows = startup_rows(report).splitlines()
    assert len(rows) == 3
    assert rows[2].startswith("| restart_time: one replaced | 3 | 0.40 | 1.00 |")
    assert rows[2].endswith("| 0.60 | 4.8 |")
    assert startup_rows({"scenarios": {"steady": {"sent": 10}}}) == ""
