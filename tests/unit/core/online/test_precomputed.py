import asyncio
from datetime import UTC, datetime

import numpy as np
import pytest

from app.contract import offer_snapshot as snap
from app.core.offers import OfferCatalog
from app.core.online.fanout import Fanout
from app.core.online.offer_service import FallbackReason, OfferQuery, OfferService, Tier
from app.core.online.precomputed import PrecomputedOffers, PrecomputedTier
from tests.support import FakeFeatureStore, FakeMember, ManualClock, small_manifest

pytestmark = pytest.mark.unit

SCORED_AT = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)
PLAYERS = {"whale": {"level": 80, "spend_28d": 120.0}, "newbie": {"level": 2}}


def snapshot_of(players: dict[str, tuple[int, float]]):
    manifest = small_manifest()
    data = snap.build(
        game=manifest.game,
        version=manifest.version,
        training_config_hash=manifest.training_config_hash,
        offer_ids=[o.offer_id for o in manifest.offers],
        keys=snap.snapshot_keys(players),
        offers=np.array([o for o, _ in players.values()], np.uint8),
        propensities=np.array([p for _, p in players.values()], np.float32),
        scored_at=SCORED_AT,
    )
    return snap.parse(data)


def tier_with(players, *, age_s=60.0, max_age_s=3600.0):
    clock = ManualClock(SCORED_AT.timestamp() + age_s)
    tier = PrecomputedTier(max_age_s, clock=clock)
    catalog = OfferCatalog(small_manifest())
    tier.install(PrecomputedOffers(snapshot_of(players), catalog, "mem://test"))
    return tier, clock


def test_lookup_gives_the_players_offer_with_its_expected_revenue():
    tier, _ = tier_with({"whale": (2, 0.25)})
    decision = tier.lookup("whale")
    assert decision.offer.offer_id == "big"
    assert decision.propensity == pytest.approx(0.25)
    assert decision.expected_revenue == pytest.approx(0.25 * 19.99 * 0.5, rel=1e-6)
    assert tier.lookup("newbie") is None


def test_a_snapshot_past_its_maximum_age_stops_answering():
    tier, clock = tier_with({"whale": (2, 0.25)}, age_s=3500, max_age_s=3600)
    assert tier.fresh() and tier.lookup("whale") is not None
    clock.now += 101
    assert not tier.fresh()
    assert tier.lookup("whale") is None


def test_an_empty_tier_answers_nothing():
    tier = PrecomputedTier(3600)
    assert tier.lookup("whale") is None and tier.age_s() is None and not tier.fresh()


def service(members, tier, *, fail_store=False, quorum=0.0):
    manifest = small_manifest(weights=tuple(m.weight for m in members))
    store = FakeFeatureStore(manifest.feature_schema, PLAYERS, fail=fail_store)
    return OfferService(
        manifest,
        store,
        Fanout(members),
        request_budget_ms=500,
        quorum=quorum,
        precomputed=tier,
    )


def recommend(svc, player):
    return asyncio.run(svc.recommend(OfferQuery(game="test-game", player_id=player)))


def ok_member(weight=1.0):
    return FakeMember("m0", weight, lambda m: np.full(m.shape[0], 0.3))


def failing_member(name, weight):
    def boom(matrix):
        raise RuntimeError("member down")

    return FakeMember(name, weight, boom)


def test_store_down_gives_the_precomputed_offer_and_still_says_why():
    tier, _ = tier_with({"whale": (0, 0.5)})
    answer = recommend(service([ok_member()], tier, fail_store=True), "whale")
    assert answer.tier is Tier.PRECOMPUTED
    assert answer.decision.offer.offer_id == "cheap"
    assert answer.fallback_reason is FallbackReason.FEATURE_STORE_UNAVAILABLE
    assert answer.personalized is False


def test_a_player_missing_from_the_snapshot_gets_the_default_offer():
    tier, _ = tier_with({"whale": (0, 0.5)})
    answer = recommend(service([ok_member()], tier, fail_store=True), "newbie")
    assert answer.tier is Tier.DEFAULT
    assert answer.decision.offer.offer_id == "mid"  # small_manifest's fallback offer


def test_quorum_and_no_members_fall_back_to_precomputed():
    tier, _ = tier_with({"whale": (2, 0.4)})
    members = [ok_member(0.2), failing_member("m1", 0.8)]
    answer = recommend(service(members, tier, quorum=0.5), "whale")
    assert (answer.tier, answer.fallback_reason) == (Tier.PRECOMPUTED, FallbackReason.QUORUM)
    answer = recommend(service([failing_member("m0", 1.0)], tier), "whale")
    assert answer.tier is Tier.PRECOMPUTED
    assert answer.fallback_reason is FallbackReason.NO_MEMBERS_ANSWERED


def test_online_answers_and_unknown_players_do_not_use_the_snapshot():
    tier, _ = tier_with({"whale": (2, 0.4), "ghost": (2, 0.4)})
    svc = service([ok_member()], tier)
    online = recommend(svc, "whale")
    assert (online.tier, online.personalized) == (Tier.ONLINE, True)
    unknown = recommend(svc, "ghost")  # the store does not know it: neither did the batch
    assert unknown.tier is Tier.DEFAULT
    assert unknown.fallback_reason is FallbackReason.UNKNOWN_PLAYER
