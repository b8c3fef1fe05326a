"""Where a member is scored never changes the answer: the same players get bit-identical
offers from the planned layout (every member inline), a mixed plan (some inline, some in a
member group) and the grouped layout, and all equal the offline reference computed the way
the service aggregates."""

from __future__ import annotations

import numpy as np
import pytest
import requests

from app.adapters.dynamodb import PARTITION_KEY, player_key
from app.adapters.member_model import MemberModel
from app.contract.manifest import load_manifest
from app.core.aggregation import MemberScores, weighted_mean
from app.core.offers import OfferCatalog
from models.population import player_id
from tests.conftest import TEST_GAME, TEST_TABLE
from tests.integration.conftest import app_args, deploy

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
def placed_apps(serve_app, tiny_version_dir):
    from ray import serve

    base = serve_app.rsplit("/", 2)[0]  # http://host:port
    urls = {}
    try:
        for name, layout in LAYOUTS.items():
            prefix = f"/placement-{name}"
            deploy(app_args(tiny_version_dir, layout=layout), name=f"placement-{name}",
                   route_prefix=prefix)  # fmt: skip
            urls[name] = base + prefix
        yield urls
    finally:
        for name in LAYOUTS:
            serve.delete(f"placement-{name}")


def offline_reference(tiny_version_dir, dynalite_server, pid: str):
    manifest = load_manifest(tiny_version_dir)
    catalog = OfferCatalog(manifest)
    item = dynalite_server.client().get_item(
        TableName=TEST_TABLE, Key={PARTITION_KEY: {"S": player_key(TEST_GAME, pid)}}
    )["Item"]
    candidates = catalog.candidates(manifest.feature_schema.decode_item(item))
    scores = [
        MemberScores(e.name, e.weight, MemberModel.load(e, tiny_version_dir).score(candidates))
        for e in manifest.members
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
    assert {v["placement"] for v in views["planned"].values()} == {"inline"}
    assert all(v["reason"] and v["predict_ms_per_call"] > 0 for v in views["planned"].values())
    assert {v["placement"] for v in views["mixed"].values()} == {"inline", "grouped"}
    assert {v["deployment"] for v in views["mixed"].values()} == {None, "member-group-0"}


def test_answers_are_bit_identical_whatever_the_placement(
    placed_apps, tiny_version_dir, dynalite_server
):
    for index in range(0, 40, 3):
        pid = player_id(index)
        # One login at a time: each is scored alone, as the offline reference scores it.
        answers = {
            name: requests.post(
                f"{url}/v1/offers", json={"player_id": pid, "game": TEST_GAME}, timeout=10
            ).json()
            for name, url in placed_apps.items()
        }
        offline = offline_reference(tiny_version_dir, dynalite_server, pid)
        for name, body in answers.items():
            assert body["personalized"] is True, (name, body)
            assert body["members_answered"] == body["members_total"], (name, body)
            assert body["offer"]["offer_id"] == offline.offer.offer_id, (name, pid)
            # Exact: the same predicts, aggregated in the same order, whatever the process.
            assert body["propensity"] == float(np.float64(offline.propensity)), (name, pid)
            assert body["expected_revenue"] == float(offline.expected_revenue), (name, pid)
