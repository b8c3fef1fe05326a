"""The production CLI path, on the package's cluster (tests/e2e/conftest.py): `ray start
--head` as `make run` starts it, `serve deploy <config>`, then HTTP and load.

The deployed config is serve_config.yaml as shipped (layout auto, coalescing with
max_in_flight 1, RAY_SERVE_THROUGHPUT_OPTIMIZED where Ray starts) plus small applications
of tiny versions: one with API-key auth on, configured the way production does it (the key's
digest in the replicas' environment), and test_metrics.py's.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml

from app.adapters.dynamodb import PARTITION_KEY, player_key
from app.contract.artifacts import ArtifactIntegrityError
from app.contract.manifest import load_manifest
from app.local.processes import PROJECT_ROOT
from app.local.serve_config import local_store
from loadtest.harness import serve_status
from loadtest.harness.locust_runner import LoadTarget, run_locust
from loadtest.release_walkthrough import replica_pids
from models.population import player_id
from tests.e2e.conftest import (
    API_KEY,
    AUTH_PREFIX,
    DASHBOARD,
    GAME_PREFIX,
    HTTP_BASE,
    PLAYERS,
    ROUTER_APP,
    cli,
    e2e_config,
)
from tests.support import HostStalls, answered_per_s, wait_until

pytestmark = pytest.mark.e2e


def post(prefix: str, pid: str, **kwargs) -> requests.Response:
    return requests.post(
        f"{HTTP_BASE}{prefix}/v1/offers",
        json={"player_id": pid, "game": "galaxy-raiders"},
        timeout=30,
        **kwargs,
    )


def test_serve_deploy_serves_personalized_offers(deployed_cluster):
    apps, status, *_ = deployed_cluster
    for app in apps:
        deployments = status["applications"][app.name]["deployments"]
        manifest = load_manifest(app.args.version_dir())
        # The placement the application reports is the one Serve runs: every member scored
        # once, inline in the supervisor or in a member deployment that exists.
        layout = ensemble_info(app.route_prefix)["layout"]
        assert sorted(layout) == sorted(e.name for e in manifest.members)
        remote = {view["deployment"] for view in layout.values() if view["placement"] != "inline"}
        assert set(deployments) == {"supervisor"} | remote
        assert all(d["status"] == "HEALTHY" for d in deployments.values())

        response = post(app.route_prefix, player_id(11))
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["personalized"] is True
        assert body["members_answered"] == body["members_total"] == len(manifest.members) >= 12


def readme_quickstart() -> tuple[str, dict]:
    """The README's `# try it` command and the example answer printed right after it."""
    text = (PROJECT_ROOT / "README.md").read_text()
    found = re.search(r"```bash\n# try it\n(.*?)```.*?```json\n(.*?)```", text, re.S)
    assert found, "README.md has no ```bash block starting `# try it` followed by a ```json one"
    return found.group(1), json.loads(found.group(2))


def same_fields(shown: dict, answered: dict, where: str = "answer") -> list[str]:
    """Where the README's example and a live answer differ in their fields (nested too)."""
    problems = []
    if set(shown) != set(answered):
        problems.append(
            f"{where}: README shows {sorted(set(shown) - set(answered))} not answered, "
            f"answered {sorted(set(answered) - set(shown))} not shown"
        )
    for key in set(shown) & set(answered):
        if isinstance(shown[key], dict) and shown[key] and isinstance(answered[key], dict):
            problems += same_fields(shown[key], answered[key], f"{where}.{key}")
    return problems


def test_the_readme_quickstart_curl_answers_with_the_fields_it_shows(deployed_cluster):
    command, shown = readme_quickstart()
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert same_fields(shown, answer) == []
    assert answer["personalized"] is True and answer["tier"] == "online"


def test_shipped_layout_holds_a_short_load_without_failures(deployed_cluster, tmp_path):
    apps, *_ = deployed_cluster
    app = apps[0]
    result = run_locust(
        LoadTarget(8000, app.route_prefix, app.args.game, PLAYERS),
        tmp_path / "locust",
        users=10,
        user_rps=2.0,
        run_time_s=10,
        extra_args=["--late-after-ms", str(app.args.request_budget_ms + 500)],
    )
    responses = result.outcomes["responses"]
    assert result.requests > 80
    assert result.failures == 0, result.outcomes
    assert responses["http_5xx"] == 0 and responses["no_answer"] == 0, result.outcomes
    assert responses["late"] == 0, result.outcomes
    assert result.outcomes["personalized"] > 0


def test_known_players_are_served_from_the_feature_cache(deployed_cluster):
    """The shipped config caches known players' features for 30 s in the supervisor."""
    apps, _, client, table, _ = deployed_cluster
    prefix = apps[0].route_prefix

    def key(pid: str) -> dict:
        return {PARTITION_KEY: {"S": player_key("galaxy-raiders", pid)}}

    # Two players no other test or load touches, with a real player's features.
    features = client.get_item(TableName=table, Key=key(player_id(5)))["Item"]
    cached, uncached = "cache-probe-1", "cache-probe-2"
    for pid in (cached, uncached):
        client.put_item(TableName=table, Item={**features, **key(pid)})
    # The shipped config runs 2 supervisor replicas, each with its own cache; HAProxy's
    # leastconn takes turns between equally idle servers, so both see the player.
    assert all(post(prefix, cached).json()["personalized"] is True for _ in range(6))
    for pid in (cached, uncached):
        client.delete_item(TableName=table, Key=key(pid))
    # Both items are gone from the table: only the cache can still personalize `cached`.
    assert all(post(prefix, cached).json()["personalized"] is True for _ in range(6))
    assert post(prefix, uncached).json()["fallback_reason"] == "unknown_player"


def test_api_key_is_required_through_serve_when_its_digest_is_configured(deployed_cluster):
    pid = player_id(12)
    assert post(AUTH_PREFIX, pid).status_code == 401
    wrong = post(AUTH_PREFIX, pid, headers={"X-API-Key": "not-the-key"})
    assert wrong.status_code == 401
    assert wrong.headers["WWW-Authenticate"] == "ApiKey"
    right = post(AUTH_PREFIX, pid, headers={"X-API-Key": API_KEY})
    assert right.status_code == 200 and right.json()["personalized"] is True
    assert requests.get(f"{HTTP_BASE}{AUTH_PREFIX}/healthz", timeout=10).status_code == 200
    # The shipped application has no key configured.
    assert post(apps_prefix(deployed_cluster), pid).status_code == 200


def apps_prefix(deployed_cluster) -> str:
    return deployed_cluster[0][0].route_prefix


def test_the_cluster_address_stays_in_its_own_temp_dir(deployed_cluster):
    """A later `ray.init()` or `serve run` on this host must not find this test's cluster."""
    temp_dir, gcs_port = deployed_cluster[-1]
    assert (temp_dir / "ray_current_cluster").read_text().strip().endswith(f":{gcs_port}")
    shared = Path("/tmp/ray/ray_current_cluster")
    assert not shared.exists() or not shared.read_text().strip().endswith(f":{gcs_port}")


def split_of(weights: dict[str, float]):
    from app.core.routing.version_split import VersionSplit

    return VersionSplit("galaxy-raiders", ["2026-10", "2026-11"], weights)


def test_the_game_route_splits_players_by_weight_sticky_by_player(deployed_cluster):
    """POST /galaxy-raiders/v1/offers: each player answered by the version the split assigns,
    the same one on every login, and the response says which."""
    split = split_of({"2026-10": 90, "2026-11": 10})
    players = [player_id(i) for i in range(60)]
    seen: dict[str, str] = {}
    for _ in range(2):  # two logins each
        for pid in players:
            response = post(GAME_PREFIX, pid)
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["assigned_version"] == split.assign(pid)
            assert body["ensemble_version"] == body["assigned_version"]
            assert body["rerouted_reason"] is None and body["personalized"] is True
            assert seen.setdefault(pid, body["ensemble_version"]) == body["ensemble_version"]
    assert set(seen.values()) == {"2026-10", "2026-11"}
    split_info = requests.get(f"{HTTP_BASE}{GAME_PREFIX}/v1/split", timeout=10).json()
    assert {v["version"]: v["weight"] for v in split_info["versions"]} == split.weights


def ensemble_info(prefix: str) -> dict:
    return requests.get(f"{HTTP_BASE}{prefix}/v1/ensemble", timeout=10).json()


def test_serve_deploy_changes_knobs_and_weights_live_without_restarts_or_errors(
    deployed_cluster, tmp_path, tiny_version_dir
):
    """Under a steady load through the game route, `serve deploy` of new knobs (quorum, a
    member weighted out) and new version weights: 0 errors, the same replica processes,
    the new values in GET /v1/ensemble and /v1/split and in the answers within seconds. A
    bad value next is refused and reported, the old one kept, nothing restarts."""
    import asyncio
    import threading

    from loadtest.harness.open_loop import (
        Caller,
        constant_rate_until,
        open_loop,
        random_players,
    )

    apps, *_ = deployed_cluster
    canary = next(a for a in apps if a.args.version == "2026-11")
    names = [a.name for a in apps] + [ROUTER_APP]
    before = replica_pids(names)
    assert all(before.values()), before

    document = yaml.safe_load(e2e_config(tmp_path, tiny_version_dir).read_text())
    by_name = {a["name"]: a for a in document["applications"]}

    def deploy(supervisor_knobs: dict, weights: dict) -> None:
        by_name[canary.name]["deployments"] = [
            {"name": "supervisor", "user_config": supervisor_knobs}
        ]
        by_name[ROUTER_APP]["deployments"] = [
            {"name": "router", "user_config": {"weights": weights}}
        ]
        path = tmp_path / "serve_config.knobs.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        cli("serve", "deploy", str(path), "--address", DASHBOARD)

    shots: list = []
    sent = 0
    stop = threading.Event()

    def counted():  # the logins sent, each of which must end as one shot
        nonlocal sent
        for offset in constant_rate_until(8, stop):
            sent += 1
            yield offset

    caller = Caller(f"{HTTP_BASE}{GAME_PREFIX}", "galaxy-raiders")

    def load() -> None:
        shots.extend(asyncio.run(open_loop(caller, counted(), random_players(PLAYERS))))

    driver = threading.Thread(target=load)
    driver.start()
    time.sleep(3)
    new_weights = {"2026-10": 50, "2026-11": 50}
    deploy_at = time.monotonic()
    deploy({"quorum": 0.9, "member_weights": {"logreg-all": 0}}, new_weights)
    started = time.monotonic()
    # Every read of the canary's knobs (HAProxy spreads them over both replicas) and of the
    # split shows the new values.
    wait_until(
        lambda: all(ensemble_info(canary.route_prefix)["knobs"]["quorum"] == 0.9 for _ in range(6)),
        "quorum 0.9 on every canary supervisor",
    )
    wait_until(
        lambda: all(
            {
                v["version"]: v["weight"]
                for v in requests.get(f"{HTTP_BASE}{GAME_PREFIX}/v1/split", timeout=10).json()[
                    "versions"
                ]
            }
            == new_weights
            for _ in range(4)
        ),
        "the new version weights",
    )
    applied_s = time.monotonic() - started
    # The load runs on past the change (not for a fixed time that a slow host's change could
    # outlast): logins from 3 s before the deploy to 2 s after every read showed it.
    applied_at = time.monotonic()
    time.sleep(2)
    stop.set()
    driver.join()

    assert len(shots) == sent and sent >= 8 * 5
    sent_at = sorted(caller.started + s.sent_s for s in shots)
    assert sent_at[0] < deploy_at and sent_at[-1] > applied_at
    assert [s for s in shots if s.status != 200] == [], "errors during the live change"
    assert replica_pids(names) == before, "a replica restarted"
    assert applied_s < 30

    # Behaviour: a player the old split sent to the stable version and the new one sends to
    # the canary is answered by the canary, without the weighted-out member.
    old, new = split_of({"2026-10": 90, "2026-11": 10}), split_of(new_weights)
    moved = next(
        pid
        for pid in (player_id(i) for i in range(PLAYERS))
        if old.assign(pid) == "2026-10" and new.assign(pid) == "2026-11"
    )
    body = post(GAME_PREFIX, moved).json()
    assert body["ensemble_version"] == body["assigned_version"] == "2026-11"
    assert body["missing_members"].get("logreg-all") == "weighted_out"
    assert "logreg-all" not in body["answered_members"] and body["personalized"] is True

    # A bad value: refused by every replica, reported, the old knobs kept, no restart loop.
    deploy({"quorum": 1.5}, new_weights)
    rejected = wait_until(
        lambda: (
            all(ensemble_info(canary.route_prefix)["knobs_rejected"] for _ in range(6))
            and ensemble_info(canary.route_prefix)
        ),
        "the refusal of quorum 1.5",
    )
    assert "quorum" in rejected["knobs_rejected"]
    assert rejected["knobs"]["quorum"] == 0.9
    time.sleep(3)
    assert replica_pids(names) == before, "a bad knob restarted a replica"
    assert post(canary.route_prefix, player_id(3)).status_code == 200

    # Back to the shipped values for the tests that follow.
    deploy({}, {"2026-10": 90, "2026-11": 10})
    wait_until(
        lambda: all(ensemble_info(canary.route_prefix)["knobs"]["quorum"] == 0.5 for _ in range(6)),
        "the shipped knobs back",
    )


def supervisor_processes(app_name: str) -> list:
    """The supervisor replicas of an application, as processes (psutil.Process)."""
    import psutil

    from loadtest.reliability.faults import replica_pids as deployment_pids

    return [psutil.Process(pid) for pid in deployment_pids(app_name, "supervisor", None)]


def haproxy_admin(command: str) -> str:
    """The answer of the running HAProxy's admin socket to one command. The socket sits
    beside the config file the running HAProxy was started with."""
    import socket

    import psutil

    configs = {
        Path(arg).parent
        for p in psutil.process_iter(["name", "cmdline"])
        if "haproxy" in (p.info["name"] or "")
        for arg in p.info["cmdline"] or []
        if arg.endswith(".cfg")
    }
    assert len(configs) == 1, f"one HAProxy config directory, found {configs}"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(str(configs.pop() / "admin.sock"))
        sock.sendall(f"{command}\n".encode())
        return b"".join(iter(lambda: sock.recv(65536), b"")).decode()


def haproxy_pid() -> int:
    """The pid of the HAProxy process answering on the admin socket: it changes at every
    reload, and with it every counter starts again from zero."""
    info = dict(
        line.split(": ", 1) for line in haproxy_admin("show info").splitlines() if ": " in line
    )
    return int(info["Pid"])


def haproxy_servers(app_name: str) -> dict[str, tuple[str, int, int, int]]:
    """HAProxy's own view of an application's ingress replicas, from its admin socket's
    `show stat`: server name -> (status, sessions now, queued now, sessions ever)."""
    raw = haproxy_admin("show stat")
    header, *rows = raw.lstrip("# ").splitlines()
    fields = header.split(",")
    servers = {}
    for row in filter(None, rows):
        stat = dict(zip(fields, row.split(","), strict=False))
        if stat["pxname"] == f"http-{app_name}" and stat["svname"] not in {"FRONTEND", "BACKEND"}:
            servers[stat["svname"]] = (
                stat["status"],
                int(stat["scur"]),
                int(stat["qcur"]),
                int(stat["stot"]),
            )
    return servers


def wait_both_up(app_name: str) -> None:
    wait_until(
        lambda: (
            sorted(
                status
                for server, (status, *_) in haproxy_servers(app_name).items()
                if server.startswith("SERVE_REPLICA")
            )
            == ["UP", "UP"]
        ),
        "HAProxy sending to both supervisor replicas",
    )


def test_the_edge_refuses_in_c_while_every_replica_loop_is_stopped(deployed_cluster):
    """Every supervisor replica of a version SIGSTOPped, so no Python event loop of it can
    run: HAProxy forwards exactly `admission.max_in_flight` logins to each replica and answers
    every other login itself, a 503 with the service's own body and Retry-After (not Serve's
    500). The held ones HAProxy refuses too, the same 503, once they are past budget + 100 ms
    (its answer timeout), while the replicas are still stopped: a late answer is never given.

    Asserted from HAProxy's counters and a lower bound on time, not from which logins are
    still open at some instant: on a loaded host the refusals can take long enough that the
    held ones time out before such a look (CI, 2026-11-27)."""
    import asyncio
    import signal as signals
    import time

    import aiohttp

    from app.config.edge import ANSWER_GRACE_MS
    from app.core.admission import OVERLOADED_DETAIL

    apps, *_ = deployed_cluster
    app = apps[0]
    stopped = supervisor_processes(app.name)
    assert len(stopped) == 2, "the shipped config runs 2 supervisor replicas"
    bound = app.args.admission.max_in_flight
    held = len(stopped) * bound
    answer_timeout_s = (app.args.request_budget_ms + ANSWER_GRACE_MS) / 1000
    beyond = 24
    url = f"{HTTP_BASE}{app.route_prefix}/v1/offers"

    async def burst_while_stopped():
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def login(i: int):
                sent = time.monotonic()
                body = {"player_id": player_id(i), "game": app.args.game}
                async with session.post(url, json=body) as response:
                    return (
                        response.status,
                        response.headers.get("Retry-After"),
                        (await response.json(content_type=None)),
                        time.monotonic() - sent,
                    )

            answers = [login(i) for i in range(held + beyond)]
            return await asyncio.wait_for(asyncio.gather(*answers), timeout=20)

    def stopped_burst():
        # HAProxy must be sending to both replicas before they stop. After a `serve deploy`
        # that reconfigures them (the previous test's), HAProxy's backend can list one of
        # them for seconds, and then brings it back only after its health checks pass.
        wait_both_up(app.name)
        pid, before = haproxy_pid(), haproxy_servers(app.name)
        for proc in stopped:
            proc.send_signal(signals.SIGSTOP)
        try:
            answers = asyncio.run(burst_while_stopped())
            # Read while still stopped: every login was answered with no replica able to run.
            after = haproxy_servers(app.name)
            same_process = haproxy_pid() == pid
        finally:
            for proc in stopped:
                proc.send_signal(signals.SIGCONT)
        return same_process, before, after, answers

    # HAProxy's counters are per process: a reload meanwhile (Serve reloads it at every change
    # of any application's replicas, e.g. still settling after the previous test's deploy)
    # makes them incomparable, so the burst is measured again (CI, 2026-11-27: one did).
    for _ in range(3):
        same_process, before, after, answers = stopped_burst()
        if same_process:
            break
    assert same_process, "HAProxy was reloaded during each of 3 bursts"
    forwarded = {server: after[server][3] - before[server][3] for server in before}
    assert sorted(forwarded.values()) == [bound, bound], (
        f"HAProxy forwarded exactly the bound to each stopped replica: {forwarded}"
    )
    assert {(status, retry) for status, retry, _, _ in answers} == {(503, "1")}
    assert all(body == {"detail": OVERLOADED_DETAIL} for _, _, body, _ in answers), answers[:3]
    # The held ones were refused at HAProxy's answer timeout, no sooner: a lower bound, so it
    # holds however loaded the host. The others were answered by HAProxy from its queue.
    waited = sorted(elapsed for *_, elapsed in answers)
    assert all(elapsed >= answer_timeout_s for elapsed in waited[-held:]), waited
    # The version answers normally again.
    assert post(app.route_prefix, player_id(1)).status_code == 200


# The survivor of a killed supervisor takes every login alone while Serve starts its
# replacement beside it (a Ray worker, its imports, the constructor: a CPU-second or more),
# so the test offers a quarter of what the version's two replicas answer on this host now
# (measured just before, callers sending back to back): half of what the survivor answers
# alone, the other half left to the replacement's start. At most 20 logins/s, what a quiet
# 2-core host gets. A fixed 20/s held only there: with this host's processes held to one
# core of cgroup quota (twice slower, 2026-11-27), 33 and 36 of 160 logins were refused,
# most at HAProxy's 1.1 s answer timeout (docs/runs/reliability.md, S).
KILL_TEST_SHARE_OF_MEASURED = 1 / 4
KILL_TEST_MAX_RATE = 20.0
KILL_TEST_SECONDS = 8.0
KILL_TEST_CALLERS = 8


def test_a_killed_supervisor_replica_costs_no_error_and_no_lost_request(deployed_cluster):
    """Open-loop logins through the shipped ingress (HAProxy) while one of the two supervisor
    replicas is SIGKILLed: logins caught on it are replayed on the other (offers are
    idempotent reads), so every login gets an answer and none is a 5xx. The rate is one the
    survivor can carry while its replacement starts beside it, measured on this host (the
    constants above): a slower host gets fewer logins per second, never a looser check."""
    import asyncio
    import signal as signals

    from loadtest.harness.open_loop import Caller, constant_rate, open_loop, random_players

    apps, *_ = deployed_cluster
    app = apps[0]
    victims = supervisor_processes(app.name)
    assert len(victims) == 2, "the shipped config runs 2 supervisor replicas"
    # One of two live replicas dies, as the test says: HAProxy must be sending to both. After
    # the previous test stopped them, its health checks bring them back UP within seconds.
    wait_both_up(app.name)
    capacity = answered_per_s(
        f"{HTTP_BASE}{app.route_prefix}", app.args.game, PLAYERS, KILL_TEST_CALLERS
    )
    rate = min(KILL_TEST_MAX_RATE, KILL_TEST_SHARE_OF_MEASURED * capacity)
    schedule = constant_rate(rate, KILL_TEST_SECONDS)
    print(f"answered {capacity:.0f}/s: {rate:.1f} logins/s, {len(schedule)} logins")
    wait_both_up(app.name)

    async def load_with_kill():
        caller = Caller(f"{HTTP_BASE}{app.route_prefix}", app.args.game)
        load = asyncio.ensure_future(open_loop(caller, schedule, random_players(PLAYERS)))
        await asyncio.sleep(3)
        victims[0].send_signal(signals.SIGKILL)
        return await load

    shots = asyncio.run(load_with_kill())
    assert len(shots) == len(schedule)
    assert [s for s in shots if s.status is None] == []
    assert [s for s in shots if s.status != 200] == []


def test_a_version_whose_supervisors_all_died_refuses_fast_until_it_serves_again(
    deployed_cluster,
):
    """Every supervisor replica of a version SIGKILLed (the auth-check application runs one),
    then logins on its own route: each is answered, a 503 with Retry-After or a 200, never a
    hang or a reset, and the version serves personalized offers again once Serve has replaced
    the replica. Before, Serve's proxy held each login for its 10 s request timeout, then,
    once HAProxy listed no replica of it, to HAProxy's answer timeout (1.1 s). The bound here
    (0.5 s) separates that hold from HAProxy's own 503 on a loaded host; the refusal target
    is tighter (docs/reliability.md). A login in flight at the very instant of the kill can
    still be closed without an answer."""

    victims = supervisor_processes("auth-check")
    assert len(victims) == 1, "the auth-check application runs 1 supervisor replica"
    headers = {"X-API-Key": API_KEY}
    assert post(AUTH_PREFIX, player_id(3), headers=headers).status_code == 200
    victims[0].kill()
    victims[0].wait(timeout=10)
    killed = time.monotonic()
    # (seconds since the kill, seconds taken less the host's stalls of this process, status,
    # Retry-After): a 2-core host that runs nothing of this test for a while is not a hold.
    answers = []
    raw: list[float] = []  # seconds taken, stalls included
    with HostStalls() as stalls:
        while time.monotonic() - killed < 90:
            sent, started = time.monotonic(), time.perf_counter()
            try:
                response = post(AUTH_PREFIX, player_id(len(answers) % PLAYERS), headers=headers)
            except requests.RequestException as exc:  # a hang (timeout) or a reset fails it
                pytest.fail(f"{time.monotonic() - killed:.1f}s after the kill: {exc!r}; {answers}")
            ended = time.perf_counter()
            raw.append(ended - started)
            took = ended - started - stalls.within(started, ended)
            answers.append((round(sent - killed, 2), round(took, 3), response.status_code,
                            response.headers.get("Retry-After")))  # fmt: skip
            if response.status_code == 200 and response.json()["personalized"]:
                if any(status == 503 for _, _, status, _ in answers):
                    break
            time.sleep(0.05)
    print("answers after the kill:", answers)  # shown when the test fails
    refused = [a for a in answers if a[2] == 503]
    assert refused, "the version had no live replica for a while: its logins were refused"
    assert {status for _, _, status, _ in answers} <= {200, 503}
    assert all(retry == "1" and took < 0.5 for _, took, _, retry in refused), refused
    # The stalls are this process's only; the service may be starved while it runs. Raw,
    # every refusal stays under the 1.1 s hold the discounted bound tells apart.
    refused_raw = [s for s, a in zip(raw, answers, strict=True) if a[2] == 503]
    assert max(refused_raw) < 1.0, (refused_raw, answers)
    assert max(took for _, took, _, _ in answers) < 3.0, answers
    assert answers[-1][2] == 200, "personalized again once the replica was replaced"


def test_a_version_is_released_through_the_store_while_the_game_route_serves(
    deployed_cluster, tmp_path, tiny_version_dir
):
    """The release walkthrough (docs/release.md) on the running cluster: train 2026-12,
    `offers publish` it, `serve deploy` it at weight 0, raise it to 10. Meanwhile logins on
    the game's route all answer, and no replica of the versions already served, nor of the
    router, is replaced: the router takes the new version live."""
    from loadtest.release_walkthrough import walk

    deployed = e2e_config(tmp_path, tiny_version_dir)  # the config the cluster serves
    report = walk(
        deployed,
        "2026-12",
        "tiny",  # trains in seconds; the walk is the same for any profile
        dashboard=DASHBOARD,
        base=HTTP_BASE,
        workdir=tmp_path / "release",
    )
    print(report.summary())  # shown when the test fails
    assert report.logins.sent > 0 and report.logins.failed == 0, report.logins.failures
    assert report.other_replicas_kept
    assert all(report.other_replicas_before.values()) and report.router_replicas_before
    # The release's target (issue: from `offers publish` to serving within a minute).
    assert report.publish_to_serving_s < 60
    split = requests.get(f"{HTTP_BASE}{GAME_PREFIX}/v1/split", timeout=10).json()
    assert {v["version"]: v["weight"] for v in split["versions"]}["2026-12"] == 10
    body = post("/galaxy-raiders/2026-12", player_id(5)).json()
    assert body["ensemble_version"] == "2026-12" and body["personalized"] is True
    # Published, it is listed.
    listed = cli("offers", "versions", "--config", str(deployed)).stdout
    assert "2026-12" in listed

    # The cluster as it was, for the tests that follow.
    cli("serve", "deploy", str(deployed), "--address", DASHBOARD)
    wait_until(
        lambda: (
            "2026-12"
            not in {
                v["version"]
                for v in requests.get(f"{HTTP_BASE}{GAME_PREFIX}/v1/split", timeout=10).json()[
                    "versions"
                ]
            }
            or None
        ),
        "the router back to the config's versions",
    )


def test_a_version_tampered_with_in_the_store_fails_its_application_only(
    deployed_cluster, tmp_path, tiny_version_dir
):
    """`serve deploy` of an application whose published version was altered in the store:
    `serve status` shows it failed, naming the integrity error, the artifact and both hashes;
    every other application keeps serving. (The one test of a tampered version served: each
    costs three failed replica starts.)"""
    from app.adapters.model_store import ModelStore
    from app.local.s3_server import local_s3_client

    apps, *_ = deployed_cluster
    host, port = local_store(apps)
    client = local_s3_client(f"http://{host}:{port}")
    store = ModelStore(client, "s3://offers-models/tampered")
    store.publish(tiny_version_dir)
    manifest = load_manifest(tiny_version_dir)
    entry = manifest.members[0]
    key = f"tampered/{manifest.game}/{manifest.version}/{entry.artifact}"
    client.put_object(Bucket="offers-models", Key=key, Body=b"tampered")

    deployed = e2e_config(tmp_path, tiny_version_dir)
    document = yaml.safe_load(deployed.read_text())
    auth = next(a for a in document["applications"] if a["name"] == "auth-check")
    tampered = {**auth, "name": "tampered-check", "route_prefix": "/tampered-check"}
    tampered["args"] = {**auth["args"], "artifacts": store.uri}
    tampered["args"].pop("artifacts_root")
    document["applications"].append(tampered)
    path = tmp_path / "serve_config.tampered.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    cli("serve", "deploy", str(path), "--address", DASHBOARD)

    def failed() -> str | None:
        status, message = serve_status.statuses(DASHBOARD).get("tampered-check", ("", ""))
        return message if status == serve_status.DEPLOY_FAILED else None

    wait_until(failed, "tampered-check DEPLOY_FAILED", timeout_s=120)
    # What the operator reads: `serve status`.
    status = yaml.safe_load(cli("serve", "status", "--address", DASHBOARD).stdout) or {}
    app = (status.get("applications") or {}).get("tampered-check") or {}
    assert app.get("status") == "DEPLOY_FAILED", app
    message = app.get("message", "")
    assert ArtifactIntegrityError.__name__ in message, message
    assert entry.artifact in message and entry.sha256 in message, message
    assert hashlib.sha256(b"tampered").hexdigest() in message, message
    for app in apps:
        assert post(app.route_prefix, player_id(4)).status_code == 200
    assert post(GAME_PREFIX, player_id(4)).status_code == 200

    cli("serve", "deploy", str(deployed), "--address", DASHBOARD)


def test_a_missing_version_hands_its_players_to_the_other_flagged(
    deployed_cluster, tmp_path, tiny_version_dir
):
    """The canary's application is deleted (`serve deploy` of the served config without it)
    while logins arrive: its players get the stable version's answers, flagged, and not one
    is a 5xx. The other applications stay as they are (one change at a time)."""
    apps, *_ = deployed_cluster
    canary = next(a for a in apps if a.args.version == "2026-11")
    split = split_of({"2026-10": 90, "2026-11": 10})
    canary_players = [
        p for p in (player_id(i) for i in range(PLAYERS)) if split.assign(p) == "2026-11"
    ]
    assert canary_players

    document = yaml.safe_load(e2e_config(tmp_path, tiny_version_dir).read_text())
    document["applications"] = [a for a in document["applications"] if a["name"] != canary.name]
    path = tmp_path / "serve_config.no-canary.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    cli("serve", "deploy", str(path), "--address", DASHBOARD)

    deadline = time.monotonic() + 60
    answers = []
    while time.monotonic() < deadline:
        for pid in canary_players[:5]:
            response = post(GAME_PREFIX, pid)
            assert response.status_code == 200, response.text
            answers.append(response.json())
        if answers[-1]["rerouted_reason"] == "unavailable":
            break
        time.sleep(0.5)
    last = answers[-1]
    assert last["assigned_version"] == "2026-11" and last["ensemble_version"] == "2026-10"
    assert last["rerouted_reason"] == "unavailable" and last["personalized"] is True
    assert all(a["rerouted_reason"] in {None, "unavailable", "timeout", "failed"} for a in answers)
