import asyncio

import numpy as np
import pytest

from app.fanout import Fanout, MemberRef
from app.offer_service import OfferService, UnknownGame
from app.schemas import FallbackReason, OfferRequest
from tests.support import FakeFeatureStore, FakeMember, small_manifest

pytestmark = pytest.mark.unit

PLAYERS = {"whale": {"level": 80, "spend_28d": 120.0, "platform": "ios"}, "newbie": {"level": 2}}


def constant(values):
    return lambda matrix: np.asarray(values, dtype=np.float64)


def make_service(members, *, fail_store=False, budget_ms=500.0):
    manifest = small_manifest(weights=tuple(m.weight for m in members))
    store = FakeFeatureStore(manifest.feature_schema, PLAYERS, fail=fail_store)
    return OfferService(manifest, store, Fanout(members), request_budget_ms=budget_ms)


def request(player_id="whale", **kwargs):
    return OfferRequest(player_id=player_id, game="test-game", **kwargs)


def run(coro):
    return asyncio.run(coro)


def test_personalized_offer_aggregates_all_members():
    members = [
        FakeMember("m0", 0.5, constant([0.6, 0.2, 0.01])),
        FakeMember("m1", 0.3, constant([0.4, 0.2, 0.05])),
        FakeMember("m2", 0.2, constant([0.5, 0.3, 0.30])),
    ]
    response = run(make_service(members).recommend(request(), request_id="req-1"))
    expected = np.array([0.5 * 0.6 + 0.3 * 0.4 + 0.2 * 0.5, 0.22, 0.5 * 0.01 + 0.3 * 0.05 + 0.06])
    revenue = expected * np.array([0.99, 4.99 * 0.8, 19.99 * 0.5])
    best = int(np.argmax(revenue))
    assert response.personalized is True
    assert response.fallback_reason is None
    assert response.request_id == "req-1"
    assert response.offer.offer_id == ["cheap", "mid", "big"][best]
    assert response.propensity == pytest.approx(expected[best], abs=1e-12)
    assert response.expected_revenue == pytest.approx(revenue[best], abs=1e-12)
    assert (response.members_answered, response.members_total) == (3, 3)
    assert response.answered_members == ["m0", "m1", "m2"]
    assert response.timings.total_ms >= response.timings.fanout_ms >= 0


def test_members_score_one_matrix_with_a_row_per_offer():
    member = FakeMember("m0", 1.0, constant([0.1, 0.1, 0.1]))
    run(make_service([member]).recommend(request()))
    (matrix,) = member.calls
    assert matrix.shape == (3, 5)
    np.testing.assert_array_equal(matrix[:, :3], [[80, 120, 1]] * 3)


def test_context_platform_overrides_stored_platform():
    member = FakeMember("m0", 1.0, constant([0.1, 0.1, 0.1]))
    run(make_service([member]).recommend(request(context={"platform": "android"})))
    assert member.calls[0][0, 2] == 0.0


def test_unknown_player_gets_flagged_fallback():
    member = FakeMember("m0", 1.0, constant([0.9, 0.9, 0.9]))
    response = run(make_service([member]).recommend(request("nobody")))
    assert response.personalized is False
    assert response.fallback_reason == FallbackReason.UNKNOWN_PLAYER
    assert response.offer.offer_id == "mid"
    assert response.propensity == pytest.approx(0.05)
    assert response.members_answered == 0
    assert member.calls == []  # no member work for a player we cannot personalize


def test_feature_store_failure_gets_flagged_fallback():
    member = FakeMember("m0", 1.0, constant([0.9, 0.9, 0.9]))
    response = run(make_service([member], fail_store=True).recommend(request()))
    assert response.personalized is False
    assert response.fallback_reason == FallbackReason.FEATURE_STORE_UNAVAILABLE


def test_failed_member_is_left_out_and_weights_renormalize():
    members = [
        FakeMember("m0", 0.5, constant([0.2, 0.2, 0.2])),
        FakeMember("m1", 0.5, constant([0.9, 0.9, 0.9]), error=RuntimeError("replica died")),
    ]
    response = run(make_service(members).recommend(request()))
    assert response.personalized is True
    assert response.answered_members == ["m0"]
    assert response.propensity == pytest.approx(0.2)


def test_member_slower_than_budget_is_left_out_and_cancelled():
    slow = FakeMember("m1", 0.5, constant([0.9, 0.9, 0.9]), delay_s=5.0)
    members = [FakeMember("m0", 0.5, constant([0.3, 0.3, 0.3])), slow]
    response = run(make_service(members, budget_ms=100).recommend(request()))
    assert response.answered_members == ["m0"]
    assert response.propensity == pytest.approx(0.3)
    assert response.timings.total_ms < 1000
    assert slow.cancelled


def test_no_member_answering_gets_flagged_fallback():
    members = [FakeMember("m0", 1.0, constant([0.5] * 3), error=TimeoutError())]
    response = run(make_service(members).recommend(request()))
    assert response.personalized is False
    assert response.fallback_reason == FallbackReason.NO_MEMBERS_ANSWERED
    assert response.members_answered == 0


def test_other_game_is_refused():
    service = make_service([FakeMember("m0", 1.0, constant([0.5] * 3))])
    with pytest.raises(UnknownGame):
        run(service.recommend(OfferRequest(player_id="whale", game="other-game")))


def test_describe_lists_members_and_offers():
    info = make_service([FakeMember("m0", 1.0, constant([0.5] * 3))]).describe()
    assert [m.name for m in info.members] == ["m0"]
    assert [o.offer_id for o in info.offers] == ["cheap", "mid", "big"]
    assert info.features == ["level", "spend_28d", "platform", "price", "discount"]


def test_warm_up_routes_a_default_matrix_through_every_member():
    members = [FakeMember(f"m{i}", 0.5, constant([0.1, 0.1, 0.1])) for i in range(2)]
    result = run(make_service(members).warm_up(budget_s=1.0))
    assert [a.name for a in result.answers] == ["m0", "m1"]
    # schema defaults: level 1, spend 0, platform android (0)
    np.testing.assert_array_equal(members[0].calls[0][:, :3], [[1, 0, 0]] * 3)


@pytest.mark.parametrize(
    "bad_scores", [[0.5, 0.5], [0.5, float("nan"), 0.5], [0.5, 1.5, 0.5], [[0.5, 0.5, 0.5]]]
)
def test_member_with_unusable_scores_is_left_out(bad_scores):
    members = [
        FakeMember("m0", 0.5, constant([0.3, 0.3, 0.3])),
        FakeMember("m1", 0.5, constant(bad_scores)),
    ]
    response = run(make_service(members).recommend(request()))
    assert response.personalized is True
    assert response.answered_members == ["m0"]
    assert response.propensity == pytest.approx(0.3)


def test_cancelled_request_cancels_member_work():
    slow = [FakeMember(f"m{i}", 0.5, constant([0.1] * 3), delay_s=5.0) for i in range(2)]
    service = make_service(slow, budget_ms=10_000)

    async def disconnect_midway():
        task = asyncio.ensure_future(service.recommend(request()))
        await asyncio.sleep(0.05)
        task.cancel()  # what Serve does when the HTTP client goes away
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)  # let the member tasks run their cancellation
        # Checked here, inside the loop: asyncio.run would cancel leftovers on exit anyway.
        return [member.cancelled for member in slow]

    assert run(disconnect_midway()) == [True, True]


class PairGroup:
    """Two members behind one call, like a grouped member deployment."""

    def __init__(self, scores):
        self.name = "member-group-0"
        self.members = (MemberRef("g0", 0.5), MemberRef("g1", 0.5))
        self._scores = scores

    async def score(self, matrix):
        return np.asarray(self._scores, dtype=np.float64)


def grouped_service(group):
    solo = FakeMember("m0", 1.0, constant([0.5, 0.5, 0.5]))
    manifest = small_manifest(weights=(1.0, 0.5, 0.5))
    store = FakeFeatureStore(manifest.feature_schema, PLAYERS)
    return OfferService(manifest, store, Fanout([solo, group]), request_budget_ms=500)


def test_grouped_members_count_individually_and_a_bad_one_is_left_out_alone():
    group = PairGroup([[0.2, 0.2, 0.2], [0.2, 7.0, 0.2]])
    response = run(grouped_service(group).recommend(request()))
    assert response.answered_members == ["m0", "g0"]
    assert response.members_total == 3
    assert response.propensity == pytest.approx((1.0 * 0.5 + 0.5 * 0.2) / 1.5)


def test_group_with_wrong_shape_loses_all_its_members():
    response = run(grouped_service(PairGroup([[0.2, 0.2, 0.2]])).recommend(request()))
    assert response.answered_members == ["m0"]
    assert response.propensity == pytest.approx(0.5)


def test_caller_deadline_tightens_the_budget():
    slow = FakeMember("m1", 0.5, constant([0.9, 0.9, 0.9]), delay_s=0.3)
    members = [FakeMember("m0", 0.5, constant([0.3, 0.3, 0.3])), slow]
    service = make_service(members, budget_ms=2000)
    response = run(service.recommend(request(deadline_ms=50)))
    assert response.answered_members == ["m0"]
    assert response.missing_members == {"m1": "timeout"}
    assert response.timings.total_ms < 250
    assert slow.cancelled is True


def test_caller_deadline_cannot_extend_the_configured_budget():
    slow = FakeMember("m1", 0.5, constant([0.9, 0.9, 0.9]), delay_s=0.3)
    members = [FakeMember("m0", 0.5, constant([0.3, 0.3, 0.3])), slow]
    response = run(make_service(members, budget_ms=50).recommend(request(deadline_ms=5000)))
    assert response.answered_members == ["m0"]


def quorum_service(quorum):
    members = [
        FakeMember("m0", 0.5, constant([0.6, 0.2, 0.01]), error=RuntimeError("replica died")),
        FakeMember("m1", 0.3, constant([0.4, 0.2, 0.05])),
        FakeMember("m2", 0.2, constant([0.5, 0.3, 0.30])),
    ]
    manifest = small_manifest(weights=(0.5, 0.3, 0.2))
    store = FakeFeatureStore(manifest.feature_schema, PLAYERS)
    return OfferService(manifest, store, Fanout(members), request_budget_ms=500, quorum=quorum)


def test_below_quorum_by_weight_the_answer_is_the_flagged_fallback():
    response = run(quorum_service(0.6).recommend(request()))  # 0.5 of 1.0 answered
    assert response.personalized is False
    assert response.fallback_reason == FallbackReason.QUORUM
    assert response.offer.offer_id == "mid"  # the manifest's fallback offer
    assert response.answered_members == ["m1", "m2"]
    assert response.missing_members == {"m0": "RuntimeError"}


def test_at_quorum_the_answer_is_personalized_over_the_members_that_answered():
    response = run(quorum_service(0.5).recommend(request()))
    assert response.personalized is True
    assert response.members_answered == 2
    # re-normalized over m1 and m2: [0.44, 0.24, 0.14]; "big" has the best expected revenue
    assert response.offer.offer_id == "big"
    assert response.propensity == pytest.approx((0.3 * 0.05 + 0.2 * 0.30) / 0.5)


def test_quorum_outside_zero_one_is_rejected():
    with pytest.raises(ValueError):
        quorum_service(1.5)


def test_answers_are_listed_in_manifest_order_whatever_the_grouping():
    group = PairGroup([[0.2, 0.2, 0.2], [0.3, 0.3, 0.3]])  # g0, g1
    solo = FakeMember("m0", 1.0, constant([0.5, 0.5, 0.5]))
    manifest = small_manifest(weights=(1.0, 0.5, 0.5))
    store = FakeFeatureStore(manifest.feature_schema, PLAYERS)
    fanout = Fanout([group, solo], member_order=["m0", "g0", "g1"])
    service = OfferService(manifest, store, fanout, request_budget_ms=500)
    assert run(service.recommend(request())).answered_members == ["m0", "g0", "g1"]
    with pytest.raises(ValueError):
        Fanout([group, solo], member_order=["m0", "g0"])
