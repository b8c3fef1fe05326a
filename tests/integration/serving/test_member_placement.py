"""Where and how a member is scored never changes the offer.

- Placement: the same players get bit-identical offers from the planned layout (every member
  inline), a mixed plan (some inline, some in a member group) and the grouped layout, and all
  equal the offline reference computed the way the service aggregates, with the same runtime.
- Runtime: the compiled members (`runtime: onnx`, shipped) and the native predicts
  (`runtime: native`) give every player of the test population the same offer, with
  propensities within the fidelity tolerance (1e-6)."""

from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests

from app.adapters.dynamodb import PARTITION_KEY, player_key
from app.adapters.member_model import load_group
from app.contract.manifest import load_manifest
from app.core.aggregation import MemberScores, weighted_mean
from app.core.offers import OfferCatalog
from models.population import player_id
from tests.conftest import TEST_GAME, TEST_PLAYERS, TEST_TABLE
from tests.integration.conftest import SUPERVISOR, app_args, deploy_many, reconfigure, undeploy
from tests.support import wait_until

pytestmark = pytest.mark.integration

LAYOUTS = {
    "grouped": {"groups": 2},
    # The tiny members cost a fraction of a hop: the plan scores them all in the supervisor.
    "planned": {"placement": "auto"},
    # Two places and no room for a member in series: the supervisor takes about half the
    # predict cost and the rest goes to one member group (none dedicated).
    "mixed": {
        "placement": "auto",
        "max_parallel": 2,
        "fanout_target_ms": 0.001,
        "dedicated_share": 1.0,
    },
}


@pytest.fixture(scope="module")
def placed_apps(serve_app, native_app, tiny_version_dir):
    """Each layout's base URL, and "native": the same members scored by each training
    library's own predict (planned, the session's application)."""
    base = serve_app.rsplit("/", 2)[0]  # http://host:port
    apps = {
        f"placement-{name}": app_args(tiny_version_dir, layout=layout, runtime="onnx")
        for name, layout in LAYOUTS.items()
    }
    try:
        deploy_many(apps)
        yield {**{name: f"{base}/placement-{name}" for name in LAYOUTS}, "native": native_app}
    finally:
        undeploy(*apps)


@functools.cache
def offline_members(version_dir: Path, runtime: str):
    """The version's members loaded in this process, once per runtime (a load is ~0.3 s)."""
    manifest = load_manifest(version_dir)
    return manifest, load_group(manifest.members, version_dir, runtime, manifest.fidelity)


def offline_reference(tiny_version_dir, features, pid: str, runtime: str):
    """`features`: a DynamoDB client of the test table (one for the test: making one is
    ~0.2 s of the test process's CPU)."""
    manifest, group = offline_members(tiny_version_dir, runtime)
    catalog = OfferCatalog(manifest)
    item = features.get_item(
        TableName=TEST_TABLE, Key={PARTITION_KEY: {"S": player_key(TEST_GAME, pid)}}
    )["Item"]
    candidates = catalog.candidates(manifest.feature_schema.decode_item(item))
    scores = [
        MemberScores(e.name, e.weight, row)
        for e, row in zip(manifest.members, group.score(candidates), strict=True)
    ]
    return catalog.decide(weighted_mean(scores))


def test_each_layout_reports_where_its_members_are_scored(placed_apps, tiny_version_dir):
    members = sorted(e.name for e in load_manifest(tiny_version_dir).members)
    views = {
        name: requests.get(f"{url}/v1/ensemble", timeout=10).json()["layout"]
        for name, url in placed_apps.items()
    }
    for view in views.values():
        assert sorted(view) == members
    assert {v["placement"] for v in views["grouped"].values()} == {"grouped"}
    assert {v["runtime"] for v in views["native"].values()} == {"native"}
    for name in ("grouped", "planned", "mixed"):
        assert {v["runtime"] for v in views[name].values()} == {"onnx"}, name
    assert {v["placement"] for v in views["planned"].values()} == {"inline"}
    assert all(v["reason"] and v["predict_ms_per_call"] > 0 for v in views["planned"].values())
    assert {v["placement"] for v in views["mixed"].values()} == {"inline", "grouped"}
    assert {v["deployment"] for v in views["mixed"].values()} == {None, "member-group-0"}


_sessions = threading.local()


def _session() -> requests.Session:
    """This thread's keep-alive session: the population test's 1,200 logins would otherwise
    open a connection each, client CPU taken from the replicas on a 2-core host."""
    if not hasattr(_sessions, "session"):
        _sessions.session = requests.Session()
    session: requests.Session = _sessions.session
    return session


def whole_answer(url: str, pid: str) -> dict:
    """A personalized answer from every member: a loaded host may answer from a quorum (the
    rest past the straggler grace), which is not the answer the others are compared with."""
    for _ in range(5):
        body = (
            _session()
            .post(f"{url}/v1/offers", json={"player_id": pid, "game": TEST_GAME}, timeout=10)
            .json()
        )
        if body["personalized"] and body["members_answered"] == body["members_total"]:
            return body
    raise AssertionError(f"{pid}: no answer from the whole ensemble at {url}: {body}")


def test_answers_are_bit_identical_whatever_the_placement(
    placed_apps, tiny_version_dir, dynalite_server
):
    features = dynalite_server.client()
    for index in range(0, 40, 3):
        pid = player_id(index)
        # One login at a time: each is scored alone, as the offline reference scores it.
        answers = {name: whole_answer(url, pid) for name, url in placed_apps.items()}
        offline = {
            runtime: offline_reference(tiny_version_dir, features, pid, runtime)
            for runtime in ("onnx", "native")
        }
        for name, body in answers.items():
            reference = offline["native" if name == "native" else "onnx"]
            assert body["offer"]["offer_id"] == reference.offer.offer_id, (name, pid)
            # Exact: the same predicts, aggregated in the same order, whatever the process.
            assert body["propensity"] == float(np.float64(reference.propensity)), (name, pid)
            assert body["expected_revenue"] == float(reference.expected_revenue), (name, pid)


def test_compiled_and_native_members_give_the_test_population_the_same_offers(placed_apps):
    """Every seeded player, through the service: the shipped runtime against the native one."""

    players = [player_id(i) for i in range(TEST_PLAYERS)]
    with ThreadPoolExecutor(4) as pool:
        compiled = list(pool.map(lambda p: whole_answer(placed_apps["planned"], p), players))
        native = list(pool.map(lambda p: whole_answer(placed_apps["native"], p), players))
    pairs = list(zip(compiled, native, strict=True))
    differences = [abs(c["propensity"] - n["propensity"]) for c, n in pairs]
    other_offer = [
        (p, c["offer"]["offer_id"], n["offer"]["offer_id"])
        for p, c, n in zip(players, compiled, native, strict=True)
        if c["offer"]["offer_id"] != n["offer"]["offer_id"]
    ]
    assert not other_offer, other_offer[:5]
    assert max(differences) <= 1e-6
    # The runtimes really differ (else this compares a runtime with itself).
    assert max(differences) > 0


def test_a_live_fault_slows_the_members_the_supervisor_scores_itself(placed_apps):
    """faults.slow_members_ms in the supervisor's user_config reaches its inline members (the
    same replicas, reconfigured); the grouped ones keep answering; removing it restores them."""
    url = placed_apps["mixed"]
    layout = requests.get(f"{url}/v1/ensemble", timeout=10).json()["layout"]
    inline = sorted(m for m, v in layout.items() if v["placement"] == "inline")
    grouped = sorted(m for m, v in layout.items() if v["placement"] == "grouped")
    assert inline and grouped, layout
    login = {"player_id": player_id(7), "game": TEST_GAME}

    reconfigure({SUPERVISOR: {"faults": {"slow_members_ms": {inline[0]: 3000}}}}, "placement-mixed")
    try:
        slowed = requests.post(f"{url}/v1/offers", json=login, timeout=10).json()
    finally:
        reconfigure({}, "placement-mixed")
    # The inline group waits for its slowest member: all of it misses the 1 s budget (the
    # grouped members answer in milliseconds, well inside it).
    assert slowed["missing_members"] == {m: "timeout" for m in inline}, slowed
    assert sorted(slowed["answered_members"]) == grouped

    def whole() -> bool:
        body = requests.post(f"{url}/v1/offers", json=login, timeout=10).json()
        return body["members_answered"] == body["members_total"]

    wait_until(whole, "every member answering again", 30.0)
