"""`make run` builds each served version's snapshot in the background, once the service
answers, only where none is fresh (app.local.precompute)."""

from __future__ import annotations

import http.server
import sys
import threading
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

pytestmark = pytest.mark.unit


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


def test_the_batch_runs_once_per_version_after_the_service_answers(tmp_path, tiny_version_dir):
    apps = [configured(tiny_version_dir, tmp_path / f"batch-{n}", name=n) for n in ("a", "b")]
    ran = tmp_path / "ran"
    events: list[str] = []

    def command(app):
        events.append(f"batch {app.name}")
        return [sys.executable, "-c", f"open({str(ran)!r}, 'a').write({app.name!r})"]

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
