"""The c=1 probe against a real HTTP server: the players it logs in, and the pause it
keeps between logins when paced."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loadtest.harness.probe import latency_probe

pytestmark = pytest.mark.unit


@pytest.fixture
def server():
    seen: list[tuple[float, str]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the probe expects

        def do_POST(self):  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((time.monotonic(), body["player_id"]))
            payload = b"{}"
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *_args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1], seen
    httpd.shutdown()


def test_given_players_are_logged_in_in_order(server):
    port, seen = server
    result = latency_probe(port, "/g/v", "g", 10, requests=3, warmup=2, player_ids=[5, 6, 7, 8, 9])
    assert [player for _, player in seen] == [f"p{i:07d}" for i in (5, 6, 7, 8, 9)]
    assert (result.requests, result.errors) == (3, 0)
    with pytest.raises(ValueError, match="player ids"):
        latency_probe(port, "/g/v", "g", 10, requests=3, warmup=2, player_ids=[1])


def test_without_ids_the_draw_is_the_same_every_time(server):
    port, seen = server
    latency_probe(port, "/g/v", "g", 1000, requests=5, warmup=1)
    first = [player for _, player in seen]
    seen.clear()
    latency_probe(port, "/g/v", "g", 1000, requests=5, warmup=1)
    assert [player for _, player in seen] == first
    assert all(int(player[1:]) < 1000 for player in first)


def test_a_paced_probe_waits_between_logins(server):
    port, seen = server
    latency_probe(port, "/g/v", "g", 10, requests=3, warmup=1, think_s=0.05)
    arrivals = [t for t, _ in seen]
    # sleep() waits at least that long, however loaded the host.
    assert all(b - a >= 0.05 for a, b in zip(arrivals, arrivals[1:], strict=False))
