"""The load test's traffic model: who logs in, malformed bodies, verdicts, tally, login day."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from app.api.schemas import OfferRequest
from loadtest.traffic import (
    LOGIN_DAY,
    UNKNOWN_ID_SPAN,
    AnswerVerdict,
    LoginMix,
    Malformed,
    Outcome,
    OutcomeTally,
    PlayerSampler,
    TrafficConfig,
    judge_malformed,
    judge_offer,
    malformed_body,
    offer_body,
    stage_at,
)
from models.population import player_id

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

GAME = "galaxy-raiders"
N_PLAYERS = 10_000


def sampler(seed: int = 7, *, unknown_share: float = 0.0, n: int = N_PLAYERS) -> PlayerSampler:
    return PlayerSampler(
        n, exponent=1.1, unknown_share=unknown_share, rng=np.random.default_rng(seed)
    )


def test_sampler_is_deterministic_per_seed() -> None:
    assert np.array_equal(sampler(1).indices(1_000), sampler(1).indices(1_000))
    assert not np.array_equal(sampler(1).indices(1_000), sampler(2).indices(1_000))


def test_sampler_stays_in_range() -> None:
    indices = sampler(unknown_share=0.5, n=300).indices(20_000)
    known, unknown = indices[indices < 300], indices[indices >= 300]
    assert known.min() >= 0 and len(np.unique(known)) > 250
    assert unknown.max() < 300 + UNKNOWN_ID_SPAN


def test_hot_players_get_a_large_share() -> None:
    counts = np.bincount(sampler().indices(200_000), minlength=N_PLAYERS)
    top_1_percent = np.sort(counts)[::-1][: N_PLAYERS // 100]
    # Zipf(1.1) over 10,000 ranks gives the top 100 about 65% of the logins.
    assert top_1_percent.sum() / counts.sum() > 0.55


def test_hot_players_are_spread_over_the_population() -> None:
    counts = np.bincount(sampler().indices(100_000), minlength=N_PLAYERS)
    hottest = np.argsort(counts)[::-1][:100]
    assert set(hottest) != set(range(100))
    assert hottest.max() > N_PLAYERS // 2
    # ...and every simulated game server agrees on who they are.
    other = np.bincount(sampler(seed=99).indices(100_000), minlength=N_PLAYERS)
    assert np.argmax(counts) == np.argmax(other)


@pytest.mark.parametrize("share", [0.0, 0.05, 0.3])
def test_unknown_share_is_as_configured(share: float) -> None:
    indices = sampler(unknown_share=share).indices(100_000)
    assert abs(np.mean(indices >= N_PLAYERS) - share) < 0.005


def test_next_player_says_whether_the_player_is_seeded() -> None:
    players = sampler(unknown_share=0.5, n=300)
    for _ in range(200):
        pid, known = players.next_player()
        assert (int(pid[1:]) < 300) is known
        assert OfferRequest(player_id=pid, game=GAME)


def test_login_mix_shares_and_determinism() -> None:
    config = TrafficConfig(game=GAME, n_players=300, unknown_share=0.05, malformed_share=0.02)
    mix = LoginMix(config, seed=(1, 0, 3))
    logins = [mix.next_login() for _ in range(50_000)]
    again = LoginMix(config, seed=(1, 0, 3))
    assert [again.next_login() for _ in range(100)] == logins[:100]

    malformed = [login for login in logins if login.malformed]
    real = [login for login in logins if not login.malformed]
    assert abs(len(malformed) / len(logins) - 0.02) < 0.003
    assert abs(sum(not login.known for login in real) / len(real) - 0.05) < 0.005
    # Malformed kinds rotate, so even a short run sends each of them.
    assert [login.malformed for login in malformed[:5]] == list(Malformed)
    for login in real[:100]:
        assert json.loads(login.body) == {"player_id": login.player, "game": GAME}


@pytest.mark.parametrize("kind", list(Malformed))
def test_malformed_bodies_break_the_request_schema(kind: Malformed) -> None:
    body = malformed_body(kind, GAME)
    try:
        payload = json.loads(body)
    except ValueError:
        assert kind is Malformed.NOT_JSON
        return
    with pytest.raises(ValidationError):
        OfferRequest.model_validate(payload)


def test_real_bodies_pass_the_request_schema() -> None:
    OfferRequest.model_validate(json.loads(offer_body(player_id(42), GAME)))


@pytest.mark.parametrize(
    "bad",
    [
        {"n_players": 0},
        {"unknown_share": 1.5},
        {"malformed_share": -0.1},
        {"zipf_exponent": -1.0},
    ],
)
def test_config_rejects_nonsense(bad: dict) -> None:
    with pytest.raises(ValueError):
        TrafficConfig(**bad)


def answer(**overrides: object) -> dict:
    body = {"personalized": True, "fallback_reason": None, "offer": {"offer_id": "o1"}}
    return {**body, **overrides}


@pytest.mark.parametrize(
    ("status", "payload", "expected"),
    [
        (200, answer(), AnswerVerdict(Outcome.PERSONALIZED)),
        (
            200,
            answer(personalized=False, fallback_reason="unknown_player"),
            AnswerVerdict(Outcome.FALLBACK, "unknown_player"),
        ),
        (503, answer(), AnswerVerdict(Outcome.UNEXPECTED, "status 503")),
        (0, None, AnswerVerdict(Outcome.UNEXPECTED, "no response")),
        (200, None, AnswerVerdict(Outcome.UNEXPECTED, "body is not a JSON object")),
        (
            200,
            answer(personalized="yes"),
            AnswerVerdict(Outcome.UNEXPECTED, "no personalized flag"),
        ),
        (200, answer(offer={}), AnswerVerdict(Outcome.UNEXPECTED, "no offer.offer_id")),
        (
            200,
            answer(personalized=False),
            AnswerVerdict(Outcome.UNEXPECTED, "fallback without a fallback_reason"),
        ),
        (
            200,
            answer(fallback_reason="unknown_player"),
            AnswerVerdict(Outcome.UNEXPECTED, "personalized with a fallback_reason"),
        ),
    ],
)
def test_judge_offer(status: int, payload: object, expected: AnswerVerdict) -> None:
    verdict = judge_offer(status, payload)
    assert verdict == expected
    assert verdict.ok is (expected.outcome in (Outcome.PERSONALIZED, Outcome.FALLBACK))


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (422, Outcome.MALFORMED_REJECTED),
        (404, Outcome.MALFORMED_REJECTED),
        (200, Outcome.MALFORMED_ACCEPTED),
        (500, Outcome.UNEXPECTED),
        (0, Outcome.UNEXPECTED),
    ],
)
def test_judge_malformed(status: int, outcome: Outcome) -> None:
    verdict = judge_malformed(Malformed.NOT_JSON, status)
    assert verdict.outcome is outcome
    assert verdict.ok is (outcome is Outcome.MALFORMED_REJECTED)


def test_tally_counts_merges_and_drains() -> None:
    tally = OutcomeTally()
    for verdict in [
        AnswerVerdict(Outcome.PERSONALIZED),
        AnswerVerdict(Outcome.PERSONALIZED),
        AnswerVerdict(Outcome.FALLBACK, "unknown_player"),
        AnswerVerdict(Outcome.MALFORMED_REJECTED),
        judge_malformed(Malformed.WRONG_TYPES, 200),
        judge_offer(503, None),
    ]:
        tally.record(verdict)
    tally.record_response(200, 20.0, late_after_ms=1100)
    tally.record_response(503, 3.0, late_after_ms=1100)
    tally.record_response(200, 1500.0, late_after_ms=1100)
    tally.record_response(0, 60_000.0, late_after_ms=None)  # client timeout
    snapshot = tally.snapshot()
    assert snapshot == {
        "total": 6,
        "personalized": 2,
        "fallback": {"unknown_player": 1},
        "malformed_rejected": 1,
        "malformed_accepted": 1,
        "unexpected": 1,
        "problems": {
            "malformed_accepted: wrong-types: status 200": 1,
            "unexpected: status 503": 1,
        },
        "responses": {"answered": 3, "no_answer": 1, "http_5xx": 1, "late": 2, "max_ms": 60000.0},
    }
    assert json.loads(json.dumps(snapshot)) == snapshot

    master = OutcomeTally()
    master.merge(tally.drain())
    master.merge(json.loads(json.dumps(snapshot)))
    assert tally.snapshot()["total"] == 0
    merged = master.snapshot()
    assert merged["total"] == 12
    assert merged["fallback"] == {"unknown_player": 2}
    assert merged["problems"]["unexpected: status 503"] == 2
    assert merged["responses"] == {
        "answered": 6, "no_answer": 2, "http_5xx": 2, "late": 4, "max_ms": 60000.0
    }  # fmt: skip


def test_login_day_shape() -> None:
    def at(t: float):
        return stage_at(t, LOGIN_DAY, peak_users=40, stage_seconds=20)

    names = [stage.name for stage in LOGIN_DAY]
    assert names[0] == "warm-up" and "peak" in names and "spike" in names
    users = [at(t).users for t in range(0, 180, 20)]
    assert users == [4, 10, 20, 30, 40, 40, 60, 20, 4]
    assert at(0).users < at(100).users < at(125).users
    # The spike arrives much faster than the steps do.
    assert at(125).spawn_rate > 5 * at(30).spawn_rate
    assert at(179.9) is not None and at(180) is None
    assert all(at(t).spawn_rate >= 1 for t in range(180))
    # Same shape at another scale.
    assert stage_at(125, LOGIN_DAY, peak_users=400, stage_seconds=20).users == 600
    assert stage_at(0, LOGIN_DAY, peak_users=1, stage_seconds=20).users == 1
