"""The local Ray of `make run` refuses busy ports before starting anything."""

import socket
from pathlib import Path

import pytest

from app.local.processes import free_port
from app.local.ray_head import RayHead, RayHeadFailed

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def test_a_busy_metrics_port_is_refused_before_ray_starts(tmp_path: Path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # A `ray` that must never run: starting it would fail the test differently.
        head = RayHead(
            tmp_path / "no-bin",
            {},
            tmp_path / "ray.log",
            metrics_port=port,
            dashboard_port=free_port(),
        )
        with pytest.raises(RayHeadFailed, match=f"ports \\[{port}\\] are in use"):
            head.start()
    assert not (tmp_path / "ray.log").exists()
    assert not head.temp_dir.exists()  # cleaned up
