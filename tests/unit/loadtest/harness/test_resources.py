"""What each process of a system's tree is, for the memory breakdown."""

import pytest

from loadtest.harness.resources import role

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ray::ServeReplica:galaxy-raiders-2026-11:member-group-0", "replica:member-group-0"),
        ("ray::ServeReplica:galaxy-raiders-2026-11:supervisor extra", "replica:supervisor"),
        (
            "ray::ServeReplica:galaxy-raiders-2026-11:supervisor.initialize_and_get_metadata",
            "replica:supervisor",
        ),
        (
            "ray::SERVE_REPLICA::galaxy-raiders-2026-11#supervisor#n0jz6as9:ServeReplica:"
            "galaxy-raiders-2026-11:supervisor.__init__  ",
            "replica:supervisor",
        ),
        ("ray::ServeController", "serve controller"),
        ("ray::HAProxyManager   ", "serve haproxy manager"),
        ("ray::SERVE_CONTROLLER_ACTOR:ServeController.__init__", "serve controller"),
        ("ray::SERVE_PROXY_ACTOR-abc:ProxyActor.__init__", "serve proxy actor"),
        ("ray::ProxyActor", "serve proxy actor"),
        ("ray::IDLE", "ray idle worker"),
        ("ray::DashboardAgent", "ray dashboard agent (exports metrics)"),
        ("/x/ray/core/src/ray/gcs/gcs_server --log_dir=/tmp", "ray gcs"),
        ("/x/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp", "ray raylet"),
        ("python /x/ray/dashboard/dashboard.py --host=127.0.0.1", "ray dashboard head + modules"),
        ("ray-dashboard-NodeHead-0 (python -c ...multiprocessing", "ray dashboard head + modules"),
        ("python -B -c from multiprocessing.resource_tracker import main;main(25)", "subprocess"),
        ("haproxy -f /tmp/haproxy.cfg", "haproxy"),
        ("/v/bin/serve run /tmp/x.yaml", "serve run (driver)"),
        ("/v/bin/uvicorn loadtest.bench.legacy_server:create_app --factory", "web process"),
        ("/usr/bin/something-else", "other"),
    ],
)  # fmt: skip
def test_roles_from_command_lines(command, expected):
    assert role(command) == expected
