"""The traffic model behind the locustfile: who logs in, what a login sends, how answers count.

Nothing here imports locust (whose import monkey-patches the process with gevent), so the model
is unit-testable on its own.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache
from typing import Any

import numpy as np

from models.population import player_id

# Fixed, so every simulated game server (and every locust worker) agrees on who the hot players
# are; a user's own seed only changes the order in which they log in.
POPULARITY_SEED = 20_261_126
# Unknown players come from this many ids just past the seeded range: fresh installs that the
# feature store has not heard of yet.
UNKNOWN_ID_SPAN = 1_000_000


@dataclass(frozen=True)
class TrafficConfig:
    """What one simulated game server sends, as set on the locust command line."""

    game: str = "galaxy-raiders"
    n_players: int = 10_000
    unknown_share: float = 0.05
    malformed_share: float = 0.02
    zipf_exponent: float = 1.1

    def __post_init__(self) -> None:
        if self.n_players < 1:
            raise ValueError(f"n_players must be >= 1, got {self.n_players}")
        for name in ("unknown_share", "malformed_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.zipf_exponent < 0:
            raise ValueError(f"zipf_exponent must be >= 0, got {self.zipf_exponent}")


# --- who logs in ---------------------------------------------------------------------------


@lru_cache(maxsize=8)
def _popularity(n_players: int, exponent: float) -> tuple[np.ndarray, np.ndarray]:
    """CDF over popularity ranks and the rank -> player-index map, shared by all users."""
    cdf = np.cumsum(np.arange(1, n_players + 1, dtype=np.float64) ** -exponent)
    cdf /= cdf[-1]
    # A fixed shuffle: the hottest players are spread over the population instead of being
    # p0000000, p0000001, ... (which would all sit in the first population block).
    by_rank = np.random.default_rng(POPULARITY_SEED).permutation(n_players)
    cdf.flags.writeable = False
    by_rank.flags.writeable = False
    return cdf, by_rank


class PlayerSampler:
    """Bounded Zipf over the seeded players, plus a share of unknown ones.

    Rank k (1-based) is drawn with probability proportional to k**-exponent. Indices at or
    beyond `n_players` are unknown players.
    """

    def __init__(
        self,
        n_players: int,
        *,
        exponent: float,
        unknown_share: float,
        rng: np.random.Generator,
    ) -> None:
        self.n_players = n_players
        self.unknown_share = unknown_share
        self._cdf, self._by_rank = _popularity(n_players, float(exponent))
        self._rng = rng

    def indices(self, size: int) -> np.ndarray:
        """`size` player indices; those >= n_players are unknown players."""
        ranks = np.searchsorted(self._cdf, self._rng.random(size), side="right")
        known = self._by_rank[np.minimum(ranks, self.n_players - 1)]
        unknown = self.n_players + self._rng.integers(0, UNKNOWN_ID_SPAN, size)
        return np.where(self._rng.random(size) < self.unknown_share, unknown, known)

    def next_player(self) -> tuple[str, bool]:
        """(player id, whether the player is in the seeded population)."""
        index = int(self.indices(1)[0])
        return player_id(index), index < self.n_players


# --- what a login sends --------------------------------------------------------------------


class Malformed(StrEnum):
    """Ways a buggy game server breaks the request body; each must be refused with a 4xx."""

    MISSING_GAME = "missing-game"
    BAD_PLAYER_ID = "bad-player-id"
    WRONG_TYPES = "wrong-types"
    UNKNOWN_FIELD = "unknown-field"
    NOT_JSON = "not-json"


def offer_body(player: str, game: str) -> bytes:
    return json.dumps({"player_id": player, "game": game}).encode()


def malformed_body(kind: Malformed, game: str) -> bytes:
    """A body that breaks exactly one rule of the API's request schema."""
    valid = {"player_id": player_id(1), "game": game}
    match kind:
        case Malformed.MISSING_GAME:
            body: dict[str, Any] = {"player_id": valid["player_id"]}
        case Malformed.BAD_PLAYER_ID:
            body = {**valid, "player_id": "p0000001'; DROP TABLE players;--"}
        case Malformed.WRONG_TYPES:
            body = {"player_id": 1, "game": [game]}
        case Malformed.UNKNOWN_FIELD:
            body = {**valid, "coupon": "FREE-GEMS"}
        case Malformed.NOT_JSON:
            return offer_body(valid["player_id"], game)[:-10]  # cut off mid-document
    return json.dumps(body).encode()


@dataclass(frozen=True)
class Login:
    """One request to send: a real login (player set) or a malformed one (malformed set)."""

    body: bytes
    player: str | None = None
    known: bool = False
    malformed: Malformed | None = None


class LoginMix:
    """The logins one simulated game server sends: real players and a few malformed bodies."""

    def __init__(self, config: TrafficConfig, seed: int | Sequence[int]) -> None:
        self.config = config
        self._rng = np.random.default_rng(seed)
        self._players = PlayerSampler(
            config.n_players,
            exponent=config.zipf_exponent,
            unknown_share=config.unknown_share,
            rng=self._rng,
        )
        self._malformed_sent = 0

    def next_login(self) -> Login:
        if self._rng.random() < self.config.malformed_share:
            # Rotate rather than draw, so even a short run sends every kind.
            kinds = list(Malformed)
            kind = kinds[self._malformed_sent % len(kinds)]
            self._malformed_sent += 1
            return Login(body=malformed_body(kind, self.config.game), malformed=kind)
        player, known = self._players.next_player()
        return Login(body=offer_body(player, self.config.game), player=player, known=known)


# --- how answers count ---------------------------------------------------------------------


class Outcome(StrEnum):
    PERSONALIZED = "personalized"
    FALLBACK = "fallback"
    MALFORMED_REJECTED = "malformed_rejected"
    MALFORMED_ACCEPTED = "malformed_accepted"
    UNEXPECTED = "unexpected"


@dataclass(frozen=True)
class AnswerVerdict:
    outcome: Outcome
    detail: str | None = None  # the fallback reason, or what was wrong

    @property
    def ok(self) -> bool:
        return self.outcome in (Outcome.PERSONALIZED, Outcome.FALLBACK, Outcome.MALFORMED_REJECTED)


def _status(status: int) -> str:
    # Locust's FastHttp client reports a connection error as status 0.
    return f"status {status}" if status else "no response"


def judge_offer(status: int, payload: Any) -> AnswerVerdict:
    """A real login must get a 200 with a usable offer; a flagged fallback is a usable offer."""
    if status != 200:
        return AnswerVerdict(Outcome.UNEXPECTED, _status(status))
    if not isinstance(payload, dict):
        return AnswerVerdict(Outcome.UNEXPECTED, "body is not a JSON object")
    personalized = payload.get("personalized")
    offer = payload.get("offer")
    reason = payload.get("fallback_reason")
    if not isinstance(personalized, bool):
        return AnswerVerdict(Outcome.UNEXPECTED, "no personalized flag")
    if not isinstance(offer, dict) or not offer.get("offer_id"):
        return AnswerVerdict(Outcome.UNEXPECTED, "no offer.offer_id")
    if personalized:
        if reason is not None:
            return AnswerVerdict(Outcome.UNEXPECTED, "personalized with a fallback_reason")
        return AnswerVerdict(Outcome.PERSONALIZED)
    if not isinstance(reason, str) or not reason:
        return AnswerVerdict(Outcome.UNEXPECTED, "fallback without a fallback_reason")
    return AnswerVerdict(Outcome.FALLBACK, reason)


def judge_malformed(kind: Malformed, status: int) -> AnswerVerdict:
    """A malformed body must be refused by validation (4xx), not accepted and not crash."""
    if 400 <= status < 500:
        return AnswerVerdict(Outcome.MALFORMED_REJECTED)
    if 0 < status < 400:
        return AnswerVerdict(Outcome.MALFORMED_ACCEPTED, f"{kind}: {_status(status)}")
    return AnswerVerdict(Outcome.UNEXPECTED, f"{kind}: {_status(status)}")


class OutcomeTally:
    """Counts of login outcomes; snapshots merge, so locust workers can report to the master.

    The snapshot (also the --outcomes-json format)::

        {"total": 1000, "personalized": 930, "fallback": {"unknown_player": 50},
         "malformed_rejected": 20, "malformed_accepted": 0, "unexpected": 0, "problems": {},
         "responses": {"answered": 1000, "no_answer": 0, "http_5xx": 0, "late": 0,
                       "max_ms": 212.5}}

    `problems` counts the bad outcomes by detail, e.g. {"unexpected: status 503": 3}.
    `responses` is about delivery, whatever the body: answered (any HTTP status), no_answer
    (connection error or client timeout), http_5xx, late (slower than --late-after-ms, the
    deadline plus slack; 0 when unset) and the slowest response.
    """

    def __init__(self) -> None:
        self._outcomes: Counter[str] = Counter()
        self._fallback: Counter[str] = Counter()
        self._problems: Counter[str] = Counter()
        self._responses: Counter[str] = Counter()
        self._max_ms = 0.0

    def record_response(self, status: int, elapsed_ms: float, late_after_ms: float | None) -> None:
        self._responses["answered" if status > 0 else "no_answer"] += 1
        if status >= 500:
            self._responses["http_5xx"] += 1
        if status <= 0 or (late_after_ms is not None and elapsed_ms > late_after_ms):
            self._responses["late"] += 1
        self._max_ms = max(self._max_ms, elapsed_ms)

    def record(self, verdict: AnswerVerdict) -> None:
        self._outcomes[verdict.outcome] += 1
        if verdict.outcome is Outcome.FALLBACK:
            self._fallback[verdict.detail or "?"] += 1
        elif not verdict.ok:
            self._problems[f"{verdict.outcome}: {verdict.detail}"] += 1

    def snapshot(self) -> dict[str, Any]:
        counts = {outcome.value: self._outcomes[outcome] for outcome in Outcome}
        counts[Outcome.FALLBACK] = dict(sorted(self._fallback.items()))
        return {
            "total": sum(self._outcomes.values()),
            **counts,
            "problems": dict(sorted(self._problems.items())),
            "responses": {
                **{k: self._responses[k] for k in ("answered", "no_answer", "http_5xx", "late")},
                "max_ms": round(self._max_ms, 1),
            },
        }

    def merge(self, snapshot: dict[str, Any]) -> None:
        for outcome in Outcome:
            if outcome is not Outcome.FALLBACK:
                self._outcomes[outcome] += int(snapshot.get(outcome.value, 0))
        for reason, count in snapshot.get("fallback", {}).items():
            self._outcomes[Outcome.FALLBACK] += int(count)
            self._fallback[reason] += int(count)
        self._problems.update({k: int(v) for k, v in snapshot.get("problems", {}).items()})
        responses = dict(snapshot.get("responses", {}))
        self._max_ms = max(self._max_ms, float(responses.pop("max_ms", 0.0)))
        self._responses.update({k: int(v) for k, v in responses.items()})

    def drain(self) -> dict[str, Any]:
        """The snapshot, then start from zero (what a worker sends with each report)."""
        snapshot = self.snapshot()
        self.reset()
        return snapshot

    def reset(self) -> None:
        self._outcomes.clear()
        self._fallback.clear()
        self._problems.clear()
        self._responses.clear()
        self._max_ms = 0.0


# --- a login day ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    name: str
    users: float  # share of --peak-users
    units: float = 1.0  # length, in --stage-seconds
    ramp: float = 0.5  # share of the stage spent getting to `users`


# Ordered; each stage starts from the previous one's user count.
LOGIN_DAY: tuple[Stage, ...] = (
    # Warm-up: early birds. Caches, connection pools and replicas start cold; keep it gentle so
    # cold-start latency is visible without being mistaken for overload.
    Stage("warm-up", 0.10),
    # Step-up: the day builds in steps, each held long enough for autoscaling to react, so
    # the step where latency bends shows up in the stats history.
    Stage("step-up 25%", 0.25),
    Stage("step-up 50%", 0.50),
    Stage("step-up 75%", 0.75),
    # Peak: prime time, held for two stages so replicas settle at their peak count.
    Stage("peak", 1.00, units=2),
    # Spike: an event starts or a push notification lands and half again as many players
    # log in within seconds, faster than the autoscaler reacts.
    Stage("spike", 1.50, ramp=0.1),
    # Cool-down: back down past peak to the night's trickle; replicas scale in.
    Stage("cool-down", 0.50),
    Stage("night", 0.10),
)


@dataclass(frozen=True)
class StageTick:
    stage: Stage
    users: int
    spawn_rate: float


def stage_at(
    elapsed_s: float, stages: Sequence[Stage], *, peak_users: int, stage_seconds: float
) -> StageTick | None:
    """Users and spawn rate `elapsed_s` into the day, or None once the day is over."""
    start_s, previous_users = 0.0, 0
    for stage in stages:
        length_s = stage.units * stage_seconds
        users = max(1, round(stage.users * peak_users))
        if elapsed_s < start_s + length_s:
            ramp_s = max(stage.ramp * length_s, 1e-3)
            return StageTick(stage, users, max(1.0, abs(users - previous_users) / ramp_s))
        start_s, previous_users = start_s + length_s, users
    return None
