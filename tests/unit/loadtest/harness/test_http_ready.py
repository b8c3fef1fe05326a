"""answers / wait_answers against a real HTTP server on this host."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.local.processes import free_port
from loadtest.harness.http_ready import answers, wait_answers

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


class Status(BaseHTTPRequestHandler):
    """Answers GET /<status> with that status."""

    def do_GET(self) -> None:
        self.send_response(int(self.path.strip("/")))
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Status)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_a_200_answers_and_anything_else_does_not_unless_accepted(server):
    assert answers(f"{server}/200")
    assert not answers(f"{server}/503")
    assert answers(f"{server}/404", accept=lambda status: status < 500)
    assert not answers(f"{server}/503", accept=lambda status: status < 500)


def test_no_server_is_no_answer_and_the_wait_ends_in_a_timeout(server):
    closed = f"http://127.0.0.1:{free_port()}/healthz"
    assert not answers(closed)
    wait_answers(f"{server}/200", timeout_s=5)
    with pytest.raises(TimeoutError, match="did not answer 200"):
        wait_answers(closed, timeout_s=0.2, poll_s=0.05)
