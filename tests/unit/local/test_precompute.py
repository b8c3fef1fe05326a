"""`make run` builds each served version's snapshot in the background, once the service
answers, only where none is fresh (app.local.precompute)."""

from __future__ import annotations

import http.server
import os
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.adapters.snapshot_store import write_snapshot
from app.config.app_args import EnsembleAppArgs
from app.config.settings import Settings
from app.contract.manifest import load_manifest
from app.contract.offer_snapshot import run_folder, version_prefix
from app.local.precompute import build_snapshots, needs_snapshot
from app.local.processes import free_port
from app.local.serve_config import ConfiguredApp
from tests.conftest import TEST_GAME, TEST_VERSION

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def configured(tiny_version_dir, output, name="tiny", max_age_s=3600.0):
    args = EnsembleAppArgs.model_validate(
        {
            "game": TEST_GAME,
            "version": TEST_VERSION,
            "profile": "tiny",
            "artifacts_root": tiny_version_dir.parents[2],
            "precomputed": {"max_age_s": max_age_s},
        }
    )
    settings = Settings(batch_output_uri=str(output))
    return ConfiguredApp(name, f"/{name}", args, settings, ())


def write_run(output, tiny_version_dir, scored_at):
    manifest = load_manifest(tiny_version_dir)
    folder = output / version_prefix(TEST_GAME, TEST_VERSION) / run_folder(scored_at)
    folder.mkdir(parents=True)
    offer = manifest.offers[0].offer_id
    pq.write_table(
        pa.table({"player_id": ["p1"], "offer_id": [offer], "propensity": [0.5]}),
        folder / "part-0.parquet",
    )
    write_snapshot(str(folder), manifest, scored_at)


def test_a_version_needs_a_snapshot_until_a_fresh_one_exists(tmp_path, tiny_version_dir):
    app = configured(tiny_version_dir, tmp_path / "batch")
    assert needs_snapshot(app)
    write_run(tmp_path / "batch", tiny_version_dir, datetime.now(UTC) - timedelta(hours=2))
    assert needs_snapshot(app)  # older than its max_age_s: it would not be served
    write_run(tmp_path / "batch", tiny_version_dir, datetime.now(UTC) - timedelta(minutes=5))
    assert not needs_snapshot(app)


class Service(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the handler's name
        self.send_response(200 if self.path.endswith("/v1/ensemble") else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def two_versions(tmp_path, version_dir):
    return [configured(version_dir, tmp_path / f"batch-{n}", name=n) for n in ("a", "b")]


def job(events: list[str], code: str):
    """A batch job command for the builder: runs `code` (`{name}`: the version's app), and
    notes which version it started for in `events`."""

    def command(app):
        events.append(f"batch {app.name}")
        return [sys.executable, "-c", code.replace("{name}", app.name)]

    return command


def test_the_batch_runs_once_per_version_after_the_service_answers(tmp_path, tiny_version_dir):
    apps = two_versions(tmp_path, tiny_version_dir)
    ran = tmp_path / "ran"
    events: list[str] = []
    command = job(events, f"open({str(ran)!r}, 'a').write('{{name}}')")

    port = free_port()
    stop = threading.Event()
    worker = threading.Thread(
        target=build_snapshots,
        args=(apps, command, {}, stop, f"http://127.0.0.1:{port}"),
        daemon=True,
    )
    worker.start()
    # Nothing answers yet: the builder waits, and runs nothing.
    worker.join(timeout=3)
    assert worker.is_alive() and events == []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        worker.join(timeout=60)
        assert not worker.is_alive()
    finally:
        server.shutdown()
        stop.set()
    assert events == ["batch a", "batch b"]
    assert ran.read_text() == "ab"


def test_nothing_runs_when_every_version_has_a_fresh_snapshot(tmp_path, tiny_version_dir):
    write_run(tmp_path / "batch", tiny_version_dir, datetime.now(UTC))
    app = configured(tiny_version_dir, tmp_path / "batch")
    events: list[str] = []
    build_snapshots([app], lambda a: events.append(a.name) or [], {}, threading.Event(), "x")
    assert events == []


def _answering_service() -> tuple[http.server.ThreadingHTTPServer, str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_job_ended_by_a_signal_stops_the_builder_before_the_next_version(
    tmp_path, tiny_version_dir
):
    """Ctrl-C reaches `make run`'s whole process group, the running job with it, before the
    builder is told to stop: the next version's job must not start on a Ray going away."""
    apps = two_versions(tmp_path, tiny_version_dir)
    events: list[str] = []
    command = job(events, "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")

    server, url = _answering_service()
    try:
        build_snapshots(apps, command, {}, threading.Event(), url)
    finally:
        server.shutdown()
    assert events == ["batch a"]


def test_stopping_the_builder_stops_its_running_job(tmp_path, tiny_version_dir):
    apps = two_versions(tmp_path, tiny_version_dir)
    pid_file = tmp_path / "job.pid"
    events: list[str] = []
    command = job(
        events,
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(600)",
    )

    server, url = _answering_service()
    stop = threading.Event()
    worker = threading.Thread(target=build_snapshots, args=(apps, command, {}, stop, url))
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.05)
        pid = int(pid_file.read_text())
        stop.set()
        worker.join(timeout=60)
        assert not worker.is_alive()
    finally:
        stop.set()
        server.shutdown()
    assert events == ["batch a"]  # the job was stopped, and no other started
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # gone, and reaped
