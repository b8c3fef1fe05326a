"""The local DynamoDB server runner."""

from __future__ import annotations

import psutil
import pytest

from app.local.dynalite import Dynalite, free_port

pytestmark = pytest.mark.integration


def test_dynalite_runs_with_its_log_file_held_by_the_child_only(tmp_path):
    log = tmp_path / "dynalite.log"
    with Dynalite(free_port(), data_dir=None, log_path=log) as server:
        server.client().list_tables()
        child = psutil.Process(server.pid)
        assert any(f.path == str(log) for f in child.open_files())
        # Our copy of the descriptor was closed once the child had its own.
        assert all(f.path != str(log) for f in psutil.Process().open_files())
    assert not psutil.pid_exists(child.pid) or child.status() == psutil.STATUS_ZOMBIE
