"""The locustfile sends the API key from OFFERS_API_KEY (as the in-cluster Job does) on every
login, malformed ones included, and sends none when it is unset."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO_ROOT = Path(__file__).resolve().parents[3]


class RecordingHandler(BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        RecordingHandler.seen.append(self.headers.get("X-API-Key"))
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def keys_sent(env_key: str | None) -> list[str | None]:
    RecordingHandler.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), RecordingHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {k: v for k, v in os.environ.items() if k != "OFFERS_API_KEY"}
    if env_key is not None:
        env["OFFERS_API_KEY"] = env_key
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                str(REPO_ROOT / "loadtest" / "locustfile.py"),
                "--headless",
                "--only-summary",
                "--host",
                f"http://127.0.0.1:{server.server_address[1]}",
                "-u",
                "4",
                "-r",
                "4",
                "-t",
                "3s",
                "--user-rps",
                "5",
                "--malformed-share",
                "0.3",
                "--loglevel",
                "ERROR",
            ],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
    finally:
        server.shutdown()
        server.server_close()
    return list(RecordingHandler.seen)


def test_every_login_carries_the_key_from_the_environment():
    sent = keys_sent("the-plain-key")
    assert len(sent) >= 10
    assert set(sent) == {"the-plain-key"}


def test_no_key_header_without_the_variable():
    sent = keys_sent(None)
    assert sent and set(sent) == {None}
