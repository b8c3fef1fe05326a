"""Serve's application states read from a real HTTP server that answers as the dashboard's
REST API does: the wait returns at RUNNING, stops at the first failed application with its
message, and asks with the project's token."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.local.ray_auth import auth_header
from loadtest.harness.serve_status import DeployFailed, statuses, wait_running

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


class Dashboard:
    """Answers GET /api/serve/applications/ with the states it is given, one per request
    (the last one repeated), and records the Authorization header of each request."""

    def __init__(self) -> None:
        self.states: list[dict[str, dict]] = [{}]
        self.auth: list[str | None] = []
        dashboard = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                assert self.path == "/api/serve/applications/"
                dashboard.auth.append(self.headers.get("Authorization"))
                apps = dashboard.states.pop(0) if len(dashboard.states) > 1 else dashboard.states[0]
                payload = json.dumps({"applications": apps}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def dashboard() -> Iterator[Dashboard]:
    board = Dashboard()
    thread = threading.Thread(target=board.server.serve_forever, daemon=True)
    thread.start()
    yield board
    board.server.shutdown()
    board.server.server_close()


def app(status: str, message: str = "") -> dict:
    return {"status": status, "message": message, "deployments": {}}


def test_waits_until_every_named_application_runs(dashboard):
    dashboard.states = [
        {"a": app("DEPLOYING")},
        {"a": app("RUNNING"), "b": app("DEPLOYING")},
        {"a": app("RUNNING"), "b": app("RUNNING")},
    ]
    wait_running(dashboard.url, ["a", "b"], timeout_s=30, poll_s=0.01)
    assert dashboard.states == [{"a": app("RUNNING"), "b": app("RUNNING")}]  # all read
    assert set(dashboard.auth) == {auth_header()["Authorization"]}


def test_a_failed_application_stops_the_wait_with_its_message(dashboard):
    dashboard.states = [{"a": app("DEPLOYING"), "b": app("DEPLOY_FAILED", "hash mismatch")}]
    with pytest.raises(DeployFailed, match="hash mismatch"):
        wait_running(dashboard.url, ["a", "b"], timeout_s=30, poll_s=0.01)
    assert statuses(dashboard.url)["b"] == ("DEPLOY_FAILED", "hash mismatch")


def test_an_application_that_never_appears_times_out_naming_it(dashboard):
    dashboard.states = [{"a": app("RUNNING")}]
    with pytest.raises(TimeoutError, match="'b': 'absent'"):
        wait_running(dashboard.url, ["a", "b"], timeout_s=0.05, poll_s=0.01)
