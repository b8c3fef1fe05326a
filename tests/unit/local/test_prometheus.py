"""The Prometheus harness against the real binary: it scrapes a target whose counter this test
controls, answers PromQL about it, and leaves no process or folder behind."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
import pytest

from app.local.prometheus import (
    Prometheus,
    PrometheusError,
    PrometheusQueryError,
    prometheus_binary,
    scrape_config,
    values,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


class Exposition:
    """A /metrics endpoint in a thread, serving one counter at the value the test sets."""

    def __init__(self) -> None:
        self.value = 0.0
        exposition = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = (
                    "# HELP test_logins_total Logins seen by the test.\n"
                    "# TYPE test_logins_total counter\n"
                    f'test_logins_total{{outcome="personalized"}} {exposition.value}\n'
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # one line per scrape is noise in the test output

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def exposition() -> Iterator[Exposition]:
    served = Exposition()
    served.thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()


def test_scrape_config_has_one_ray_job_every_second():
    config = scrape_config(["127.0.0.1:1", "127.0.0.1:2"])
    assert config["global"] == {"scrape_interval": "1s", "evaluation_interval": "1s"}
    assert config["scrape_configs"] == [
        {"job_name": "ray", "static_configs": [{"targets": ["127.0.0.1:1", "127.0.0.1:2"]}]}
    ]
    assert scrape_config([], interval_s=0.5)["global"]["scrape_interval"] == "500ms"


def test_binary_from_env_must_be_executable(monkeypatch, tmp_path):
    monkeypatch.setenv("PROMETHEUS_BIN", str(tmp_path / "missing"))
    with pytest.raises(PrometheusError, match="PROMETHEUS_BIN"):
        prometheus_binary()


def test_queries_a_scraped_counter_and_its_rate(exposition):
    exposition.value = 5.0
    with Prometheus([exposition.target]) as prom:
        workdir = prom._workdir
        pid = prom.pid
        assert pid is not None and workdir is not None and workdir.is_dir()

        result = prom.wait_for("test_logins_total", lambda r: values(r) == [5.0], timeout_s=10)
        assert result[0]["metric"]["outcome"] == "personalized"
        assert result[0]["metric"]["job"] == "ray"
        assert prom.targets_up() == {exposition.target: True}

        exposition.value = 8.0
        prom.wait_for("test_logins_total", lambda r: values(r) == [8.0], timeout_s=10)
        assert values(prom.query("increase(test_logins_total[1m])"))[0] > 0
        assert values(prom.query("sum(rate(test_logins_total[1m]))"))[0] > 0

        with pytest.raises(PrometheusQueryError, match="parse error"):
            prom.query("sum(rate(test_logins_total[1m])")
        with pytest.raises(PrometheusError, match="not satisfied"):
            prom.wait_for("test_logins_total", lambda r: False, timeout_s=0.5)

    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not workdir.exists()


def test_a_start_that_fails_stops_and_cleans_up():
    # Prometheus exits at once when its port is taken; the error quotes its log.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        prom = Prometheus([], port=taken.getsockname()[1])
        with pytest.raises(PrometheusError, match="exited with code"):
            prom.start(timeout_s=10)
    assert prom.pid is None and prom._workdir is None
