"""The local DynamoDB server runner."""

from __future__ import annotations

import psutil
import pytest

from app.local.dynalite import Dynalite
from app.local.processes import free_port

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


def abort_mid_request(server: Dynalite) -> None:
    """A client that dies halfway through a request body (what a botocore read timeout or a
    killed replica does): dynalite 4.0.0 throws `aborted` from its handler and exits."""
    import socket
    import time

    sock = socket.create_connection((server.host, server.port))
    sock.sendall(
        b"POST / HTTP/1.1\r\nHost: dynalite\r\nContent-Type: application/x-amz-json-1.0\r\n"
        b'X-Amz-Target: DynamoDB_20120810.ListTables\r\nContent-Length: 1000\r\n\r\n{"Lim'
    )
    time.sleep(0.2)
    sock.close()


def test_supervised_dynalite_comes_back_with_its_data_after_a_crash(tmp_path):
    import time

    from app.local.seeding import ensure_table

    server = Dynalite(free_port(), data_dir=tmp_path / "data", log_path=tmp_path / "d.log")
    restarted = []
    with server:
        client = server.client(timeout_s=5.0)
        ensure_table(client, "player-features-crash")
        client.put_item(TableName="player-features-crash", Item={"pk": {"S": "kept"}})
        first = server.pid
        server.supervise(poll_s=0.1, on_restart=lambda s: restarted.append(s.pid))

        abort_mid_request(server)
        deadline = time.monotonic() + 10
        while not restarted and time.monotonic() < deadline:
            time.sleep(0.1)
        assert restarted, "dynalite was not restarted within 10 s"
        assert server.restarts == 1 and server.pid != first and not psutil.pid_exists(first)
        item = server.client().get_item(
            TableName="player-features-crash", Key={"pk": {"S": "kept"}}
        )
        assert item["Item"]["pk"]["S"] == "kept"
        pid = server.pid
    # stop() ends the supervision before the process: nothing comes back after it.
    time.sleep(0.3)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert server.pid is None and server.restarts == 1
