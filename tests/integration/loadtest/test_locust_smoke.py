"""The locustfile against the real deployment: a short headless run passes its own checks."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import TEST_GAME, TEST_PLAYERS

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
LOCUSTFILE = REPO_ROOT / "loadtest" / "locustfile.py"
RUN_SECONDS = 10


def locust_command(base_url: str, tmp_path: Path) -> list[str]:
    url = urlsplit(base_url)
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "--only-summary",
        *("-u", "10", "-r", "10", "-t", f"{RUN_SECONDS}s"),
        *("--host", f"{url.scheme}://{url.netloc}", "--route-prefix", url.path),
        *("--game", TEST_GAME, "--players", str(TEST_PLAYERS)),
        # ~200 logins: raise the rare shares so every kind of login surely shows up.
        *("--user-rps", "2", "--unknown-share", "0.1", "--malformed-share", "0.1"),
        *("--csv", str(tmp_path / "locust"), "--outcomes-json", str(tmp_path / "outcomes.json")),
    ]


def stats_rows(tmp_path: Path) -> dict[str, dict[str, str]]:
    with (tmp_path / "locust_stats.csv").open(newline="") as f:
        return {row["Name"]: row for row in csv.DictReader(f)}


def test_locust_run_has_no_failures(serve_app: str, tmp_path: Path) -> None:
    # From the repository root, so the locustfile can import loadtest.traffic.
    run = subprocess.run(
        locust_command(serve_app, tmp_path),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS + 60,
    )
    output = (run.stdout + run.stderr)[-4000:]
    # Locust exits 1 when any request failed its checks (judged on the final stats).
    assert run.returncode == 0, output

    rows = stats_rows(tmp_path)
    total = rows["Aggregated"]
    assert int(total["Failure Count"]) == 0, output
    assert int(total["Request Count"]) >= 50, output

    outcomes = json.loads((tmp_path / "outcomes.json").read_text())
    # The CSV is rewritten once a second, so it may miss the last second; the tally is final.
    assert outcomes["total"] >= int(total["Request Count"])
    assert outcomes["personalized"] > 0
    assert outcomes["fallback"].get("unknown_player", 0) > 0
    assert outcomes["malformed_rejected"] >= int(rows["offers [malformed]"]["Request Count"]) > 0
    assert outcomes["malformed_accepted"] == 0
    assert outcomes["unexpected"] == 0
    assert outcomes["problems"] == {}
