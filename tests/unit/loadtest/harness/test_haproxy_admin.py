"""Reading HAProxy's runtime API: the admin socket from a config Serve rendered, the config
from HAProxy's command line, and a backend's servers from `show servers state`."""

import pytest

from loadtest.harness.haproxy_admin import (
    Refusals,
    parse_pid,
    parse_refusals,
    parse_servers_state,
    stats_socket,
)
from tests.unit.edge.test_haproxy_config import render_with_ray

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

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


# `show stat` rows of one backend from a real HAProxy 2.8 with the edge's rewrite, after 5
# logins denied by the queue cap, 2 that waited out the queue timeout, 1 answered 200 and
# 1 answered 503 by the replica (tests/integration/loadtest/test_haproxy_admin.py).
SHOW_STAT = """# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid,throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,check_code,check_duration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,hanafail,req_rate,req_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,comp_out,comp_byp,comp_rsp,lastsess,last_chk,last_agt,qtime,ctime,rtime,ttime,agent_status,agent_code,agent_duration,check_desc,agent_desc,check_rise,check_fall,check_health,agent_rise,agent_fall,agent_health,addr,cookie,mode,algo,conn_rate,conn_rate_max,conn_tot,intercepted,dcon,dses,wrew,connect,reuse,cache_lookups,cache_hits,srv_icur,src_ilim,qtime_max,ctime_max,rtime_max,ttime_max,eint,idle_conn_cur,safe_conn_cur,used_conn_cur,need_conn_est,uweight,agg_server_status,agg_server_check_status,agg_check_status,srid,sess_other,h1sess,h2sess,h3sess,req_other,h1req,h2req,h3req,proto,-,ssl_sess,ssl_reused_sess,ssl_failed_handshake,h2_headers_rcvd,h2_data_rcvd,h2_settings_rcvd,h2_rst_stream_rcvd,h2_goaway_rcvd,h2_detected_conn_protocol_errors,h2_detected_strm_protocol_errors,h2_rst_stream_resp,h2_goaway_resp,h2_open_connections,h2_backend_open_streams,h2_total_connections,h2_backend_total_streams,h1_open_connections,h1_open_streams,h1_total_connections,h1_total_streams,h1_bytes_in,h1_bytes_out,h1_spliced_bytes_in,h1_spliced_bytes_out,
http-galaxy-raiders-2026-11,SERVE_REPLICA_galaxy-raiders-2026-11-supervisor-r1,0,0,0,1,1,2,426,356,,0,,0,0,0,0,UP,1,1,0,0,0,2,0,,1,5,1,,2,,2,2,,2,L7OK,200,0,0,1,0,0,1,0,0,,,2,0,0,,,,,0,,,0,0,253,404,,,,Layer7 check passed,,2,2,3,,,,127.0.0.1:42915,,http,,,,,,,,0,1,1,,,1,,0,0,505,505,0,0,1,0,1,1,,,,0,,,,,,,,,,-,0,0,0,,,,,,,,,,,,,,,,,,,,,,
http-galaxy-raiders-2026-11,head-proxy,0,0,0,0,,0,0,0,,0,,0,0,0,0,DOWN,1,0,1,1,1,1,1,,1,5,2,,0,,2,0,,0,L4CON,,0,0,0,0,0,0,0,,,,0,0,0,,,,,-1,Connection refused,,0,0,0,0,,,,Layer4 connection problem,,2,2,0,,,,127.0.0.1:49865,,http,,,,,,,,0,0,0,,,0,,0,0,0,0,0,0,0,0,1,1,,,,0,,,,,,,,,,-,0,0,0,,,,,,,,,,,,,,,,,,,,,,
http-galaxy-raiders-2026-11,BACKEND,0,2,0,4,410,9,1875,2162,5,0,,2,0,0,0,UP,1,1,0,,0,2,0,,1,5,0,,2,,1,9,,9,,,,0,1,0,0,8,0,,,,9,0,0,0,0,0,0,0,,,0,0,57,90,,,,,,,,,,,,,,http,leastconn,,,,,,,0,1,1,0,0,,,0,0,505,505,0,,,,,1,0,0,0,,,,,,,,,,,-,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,1,0,8,9,512,545,0,0,
"""  # noqa: E501 - HAProxy's own lines, verbatim


def test_refusals_are_told_apart_by_who_made_them():
    refused = parse_refusals(SHOW_STAT, "http-galaxy-raiders-2026-11")
    # haproxy_5xx counts every 5xx HAProxy made, the queue's refusals included.
    assert refused == Refusals(queue_full=5, queue_timeout=2, servers_5xx=1, haproxy_5xx=7)
    with pytest.raises(LookupError, match="no backend"):
        parse_refusals(SHOW_STAT, "http-other")


def test_an_interval_is_the_difference_of_two_readings():
    later = Refusals(queue_full=9, queue_timeout=3, servers_5xx=4, haproxy_5xx=12)
    earlier = Refusals(queue_full=5, queue_timeout=2, servers_5xx=1, haproxy_5xx=7)
    assert (later - earlier).as_dict() == {
        "queue_full": 4,
        "queue_timeout": 1,
        "servers_5xx": 3,
        "haproxy_5xx": 5,
    }


def test_the_counting_process_is_shows_infos_pid():
    assert parse_pid("Name: HAProxy\nVersion: 2.8.25\nPid: 983\nUptime: 0d 0h04m04s\n") == 983
    with pytest.raises(ValueError, match="show info"):
        parse_pid("Unknown command\n")
