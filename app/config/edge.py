"""What the edge (Serve's HAProxy, through app/edge) enforces per application, as the
`offers-haproxy` wrapper reads it from OFFERS_EDGE in the environment Ray was started with.

Built from the Serve config by the tooling that starts Ray (app.local.serve_config.edge_env,
the k8s renderer), so the bound HAProxy holds per replica is the admission bound the
application declares (`admission:` in its args) and cannot drift from it by hand.
"""

from __future__ import annotations

from pydantic import Field

from app.config.strict import FrozenModel

EDGE_ENV = "OFFERS_EDGE"
# How far past its budget a login may be answered before the edge refuses it instead: the
# service's promise is an answer within budget + 100 ms (docs/reliability.md).
ANSWER_GRACE_MS = 100


class BackendLimits(FrozenModel):
    """One application's ingress replicas, as HAProxy servers."""

    # Logins HAProxy forwards to one ingress replica at once (its `maxconn`); the rest wait
    # in HAProxy's queue, in C, instead of on the replica's event loop.
    max_in_flight: int = Field(ge=1, le=10_000)
    # How long a login may wait in that queue before HAProxy answers it 503 itself (by
    # default half the application's budget: long enough that a queued login is scored).
    queue_timeout_ms: int = Field(ge=1, le=10_000)
    # How many logins may wait in that queue at once (all the application's replicas
    # together); the next is answered 503 at once, so an overload's refusals are immediate
    # and the queue's wait stays short (the logins ahead, over the replicas' rate).
    max_queued: int = Field(ge=1, le=10_000)
    # Retry-After on HAProxy's 503, the same as the application's own refusals.
    retry_after_s: int = Field(ge=0, le=3600)
    # HAProxy waits min(timeout connect, 1 s) before retrying a refused connection (a replica
    # that just died): with Serve's 5 s, that wait alone took a whole 1 s budget, and the
    # retried login reached the other replica too late (measured: 503 after 1003 ms); at
    # 250 ms, the logins sent at the instant every supervisor of a version died were refused
    # after 250 ms, the refusal p99 of the kill (2026-11-27). A refusal may cost at most 50 ms
    # over what the caller cannot go below (docs/reliability.md), so the wait is kept inside
    # that. A connect is the kernels' handshake, well under a millisecond on a LAN however
    # busy the cores are; one that takes longer is retried on another replica.
    connect_timeout_ms: int = Field(default=40, ge=10, le=10_000)
    # How long HAProxy waits for a forwarded login's answer (its `timeout server`) before it
    # answers 503 itself: the application's budget plus ANSWER_GRACE_MS. A replica answers
    # within its budget by construction (the deadline falls back), so this only fires where
    # nothing can answer in time: Serve's proxy, which HAProxy falls back to while it lists
    # no replica of the application, holds a login until a replica is back (measured in CI,
    # 2026-11-26: a 503 after 3.0 s). A late answer would be a silent slow one.
    answer_timeout_ms: int = Field(ge=1, le=20_000)
    # Whether HAProxy keeps its connections to the replicas open between logins. HAProxy
    # 2.8 answers nothing (it closes the caller's connection) when a login that reached a
    # replica over a reused connection fails on every retry: the keep-alive close a client
    # may resend on. When every replica of the application dies under it, that is 1-2
    # logins per kill with no answer (docs/reliability.md). A fresh connection per login
    # gets the 503 with Retry-After instead, but costs the supervisors a connection per
    # login: under overload they answered a third to half fewer logins
    # (AdmissionConfig.edge_replica_keepalive).
    reuse_connections: bool = True
    # Where connections are reused: whether each login first passes through a loopback
    # relay inside HAProxy (a frontend on a unix socket in front of the replicas' backend,
    # reached over a fresh connection per login). The close above then reaches the relay,
    # not the caller: the relay replays the login once the inner HAProxy stream sees no
    # replica left, which answers it the 503, and the supervisors keep their connections.
    # HAProxy's work per login doubles (C, no Python process touched).
    relay: bool = True


class EdgeConfig(FrozenModel):
    # Ray Serve application name -> its limits.
    backends: dict[str, BackendLimits] = Field(default_factory=dict)
    # For an application's HTTP backend the config does not list: one `serve deploy` added
    # after Ray started (a release: docs/release.md), or on Kubernetes, where the pods' edge
    # settings name only the front doors so that adding a version stays a serveConfigV2
    # change. At least its answer timeout and no fallback proxy while a replica is listed:
    # without them a version with no live replica held a login for Serve's
    # request_timeout_s (10 s, then a 408). None: such backends are left as Serve renders.
    unlisted: BackendLimits | None = None
    # Retry-After on a 503 HAProxy gives outside any listed application.
    retry_after_s: int = Field(default=1, ge=0, le=3600)
