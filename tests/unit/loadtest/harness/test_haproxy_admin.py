"""Reading HAProxy's runtime API: the admin socket from a config Serve rendered, the config
from HAProxy's command line, and a backend's servers from `show servers state`."""

from pathlib import Path

import pytest

from loadtest.harness.haproxy_admin import config_path, parse_servers_state, stats_socket
from tests.unit.edge.test_haproxy_config import render_with_ray

pytestmark = pytest.mark.unit

# `show servers state http-galaxy-raiders-2026-11` from HAProxy 2.8 under Serve 2.60.
STATE = """1
# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port
6 http-galaxy-raiders-2026-11 1 SERVE_REPLICA_galaxy-raiders-2026-11-supervisor-3aiuggip 127.0.0.1 2 0 1 1 249 15 3 3 6 0 0 0 - 30001 - 0 0 - - 0
6 http-galaxy-raiders-2026-11 2 SERVE_REPLICA_galaxy-raiders-2026-11-supervisor-xe0gxrww 127.0.0.1 2 0 1 1 249 15 3 3 6 0 0 0 - 30004 - 0 0 - - 0
6 http-galaxy-raiders-2026-11 3 SERVE_PROXY_ACTOR-fallback-7d562e 127.0.0.1 2 0 1 1 256 15 3 3 6 0 0 0 - 8500 - 0 0 - - 0

"""  # noqa: E501 - HAProxy's own lines, verbatim


def test_the_admin_socket_is_the_one_serves_config_declares(tmp_path):
    socket = stats_socket(render_with_ray(tmp_path))
    assert socket.name == "admin.sock"
    with pytest.raises(ValueError, match="stats socket"):
        stats_socket("global\n    maxconn 10\n")


def test_the_config_is_haproxys_dash_f_argument():
    assert config_path(["/bin/haproxy", "-db", "-f", "/x/haproxy.cfg", "-sf", "12"]) == Path(
        "/x/haproxy.cfg"
    )
    assert config_path(["/bin/haproxy", "-v"]) is None


def test_servers_are_read_by_the_headers_column_names():
    servers = parse_servers_state(STATE, "http-galaxy-raiders-2026-11")
    assert [(s.port, s.is_replica) for s in servers] == [
        (30001, True),
        (30004, True),
        (8500, False),
    ]
    assert servers[0].name == "SERVE_REPLICA_galaxy-raiders-2026-11-supervisor-3aiuggip"
    assert parse_servers_state(STATE, "http-other") == []
    with pytest.raises(ValueError, match="show servers state"):
        parse_servers_state("Unknown command\n", "http-galaxy-raiders-2026-11")
