"""The typed `args:` of an ensemble application in serve_config.yaml, and every part of it.

This module is the one source of the service's tunable defaults (budget, quorum, layout,
coalescing, batching, fault injection, replica sizing). Every model forbids unknown keys, so
a misspelt key fails the deploy instead of being silently ignored.
"""

from __future__ import annotations

from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from app.config.knobs import (
    BudgetMs,
    CoalescedRows,
    FaultInjection,
    GraceMs,
    HoldMs,
    Quorum,
    RoundsInFlight,
    SupervisorKnobs,
    deep_merge,
)
from app.config.strict import StrictModel
from app.config.version_args import VersionArgs
from app.contract.manifest import Runtime

# Serve's policy that scales on a deployment's replicas' own utilization
# (app.serving.autoscaling, app.core.load_meter) instead of on ongoing requests.
UTILIZATION_POLICY = "app.serving.autoscaling:UtilizationPolicy"


class AutoscalingArgs(StrictModel):
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=2, ge=1)
    # What the replica count follows. `utilization`: the work the replicas report (share of
    # time a member spends scoring; logins a supervisor holds over its admission bound), which
    # keeps tracking load when the supervisor coalesces logins into a few fan-outs.
    # `ongoing_requests`: Serve's default, requests per replica against
    # target_ongoing_requests (for an ingress deployment, below its admission bound).
    signal: Literal["utilization", "ongoing_requests"] = "ongoing_requests"
    target_utilization: float = Field(default=0.6, gt=0, le=1)
    # utilization only: add replicas only while the most idle host the replicas report from
    # has this many cores idle (app.core.planning.replica_scaling.capped_by_idle_cpu). For a
    # fixed-size node, where a replica without a free core slows the others; null on a
    # cluster that adds nodes for pending replicas.
    min_idle_cpus: float | None = Field(default=None, gt=0)
    target_ongoing_requests: float = Field(default=4.0, gt=0)
    # How long a decision must hold before replicas are added or removed (Serve's own
    # options; its defaults, 30 s and 600 s, are slower than a login spike).
    upscale_delay_s: float = Field(default=10.0, ge=0)
    downscale_delay_s: float = Field(default=120.0, ge=0)
    # How often replicas report, and the window Serve averages their reports over.
    metrics_interval_s: float = Field(default=5.0, gt=0)
    look_back_period_s: float = Field(default=15.0, gt=0)

    def to_serve(self) -> dict[str, Any]:
        """Serve's autoscaling_config for these args."""
        config = self.model_dump(exclude={"signal", "target_utilization", "min_idle_cpus"})
        if self.signal == "utilization":
            config["policy"] = {
                "policy_function": UTILIZATION_POLICY,
                "policy_kwargs": {
                    "target_utilization": self.target_utilization,
                    **(
                        {"min_idle_cpus": self.min_idle_cpus}
                        if self.min_idle_cpus is not None
                        else {}
                    ),
                },
            }
        return config

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"min_replicas ({self.min_replicas}) exceeds max_replicas ({self.max_replicas})"
            )
        return self


def check_reachable_target(autoscaling: AutoscalingArgs, bound: int, deployment: str) -> None:
    """An ingress replica never holds more than its admission bound (HAProxy's maxconn and its
    own gate): Serve's count of its ongoing requests never exceeds the bound, and its
    utilization never exceeds 1. A target at either ceiling could never add a replica."""
    if autoscaling.signal == "ongoing_requests" and autoscaling.target_ongoing_requests >= bound:
        raise ValueError(
            f"{deployment}.autoscaling.target_ongoing_requests "
            f"({autoscaling.target_ongoing_requests:g}) must be below admission.max_in_flight "
            f"({bound}): a replica never holds more than that, so the target could never be "
            "exceeded and no replica would ever be added"
        )
    if autoscaling.signal == "utilization" and autoscaling.target_utilization >= 1.0:
        raise ValueError(
            f"{deployment}.autoscaling.target_utilization must be below 1: a replica never "
            "holds more than its admission bound, so a full replica is utilization 1 and the "
            "target could never be exceeded"
        )


# Autoscaling keys that only one signal reads: given for the other, they would be ignored.
SIGNAL_ONLY_KEYS = {
    "ongoing_requests": ("target_ongoing_requests",),
    "utilization": ("target_utilization", "min_idle_cpus"),
}


class DeploymentArgs(StrictModel):
    """Replica sizing of one deployment (Serve's own options, typed)."""

    num_cpus: float = Field(default=0.1, gt=0, le=64)
    # Memory Ray reserves for each replica (its scheduler and autoscaler count it). None:
    # none reserved, as on one local node; a cluster sets it so replicas are packed onto
    # nodes by memory too (k8s/profile.yaml).
    memory_mb: int | None = Field(default=None, ge=64)
    max_ongoing_requests: int = Field(default=32, ge=1)
    # Requests waiting at each caller beyond max_ongoing_requests; more are rejected at once
    # (HTTP 503 with Retry-After for the ingress) instead of queueing into timeouts.
    max_queued_requests: int = Field(default=64, ge=1)
    autoscaling: AutoscalingArgs = Field(default_factory=AutoscalingArgs)
    # At most this many replicas of the deployment on one Ray node (Serve's own option). 1
    # for the supervisor on a multi-node cluster, so a lost node takes one ingress replica,
    # never all of them. None: no limit (a single-node local run needs none).
    max_replicas_per_node: int | None = Field(default=None, ge=1)
    # How often Serve's controller checks each replica. A SIGKILLed replica is only noticed,
    # and its replacement only started, at its next check: Serve's default of 10 s made that
    # wait 0-10 s of every restart. A check is one small actor call per replica.
    health_check_period_s: float = Field(default=2.0, gt=0, le=60)

    def updated(self, changes: dict[str, Any]) -> DeploymentArgs:
        """A copy with `changes` (a partial, YAML-shaped dict) applied on top. A key of the
        signal the result does not scale on is refused: merged over defaults of the other
        signal, it would be silently ignored."""
        merged = DeploymentArgs.model_validate(deep_merge(self.model_dump(), changes))
        scaling = changes.get("autoscaling")
        signal = merged.autoscaling.signal
        if isinstance(scaling, dict):
            for other, keys in SIGNAL_ONLY_KEYS.items():
                ignored = [k for k in keys if other != signal and scaling.get(k) is not None]
                if ignored:
                    raise ValueError(
                        f"autoscaling {ignored} apply to signal {other}, but this deployment "
                        f"scales on {signal}: set `signal: {other}` too, or drop them"
                    )
        return merged

    def to_options(self, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "ray_actor_options": {
                "num_cpus": self.num_cpus,
                **({"memory": self.memory_mb * 2**20} if self.memory_mb is not None else {}),
            },
            "max_ongoing_requests": self.max_ongoing_requests,
            "max_queued_requests": self.max_queued_requests,
            "autoscaling_config": self.autoscaling.to_serve(),
            "health_check_period_s": self.health_check_period_s,
            **(
                {"max_replicas_per_node": self.max_replicas_per_node}
                if self.max_replicas_per_node is not None
                else {}
            ),
        }


# The supervisor only does I/O and aggregation: light, with many requests per replica.
# Both scale on utilization: the supervisor on the logins it holds, members on the time
# they spend scoring.
SUPERVISOR_DEFAULTS = DeploymentArgs(
    num_cpus=0.2,
    max_ongoing_requests=256,
    max_queued_requests=128,
    autoscaling=AutoscalingArgs(min_replicas=1, max_replicas=2, signal="utilization"),
)
MEMBER_DEFAULTS = DeploymentArgs(autoscaling=AutoscalingArgs(signal="utilization"))


# CPU one Serve handle call costs, caller and callee together, carrying one login's
# candidate matrix: 0.97-1.02 ms sequential, 0.63-1.02 ms 8 at once, on this 2-core host
# (2026-11-25, `.venv/bin/python -m loadtest.hop_cost --rounds 3`, docs/performance.md).
HOP_CPU_MS = 1.0
# HAProxy's static queue cap where nothing else bounds the queue (a router's, or fixed
# admission): measured on this host (docs/reliability.md), a deeper queue only waits out its
# timeout in a burst.
FIXED_MAX_QUEUED = 16
# Where the supervisors report the room they drain (adaptive admission), the static cap is
# only a ceiling, above what they report under load (about 45 logins a replica at ~180
# logins/s, 2026-11-27); before they have measured they report the least room, 1, and
# HAProxy counts 1 per replica while it holds no report (app.edge.haproxy_config.room_rules).
ADAPTIVE_MAX_QUEUED = 128


class MemberLayout(StrictModel):
    """Where each member is scored (app.core.planning.member_placement, app.serving.member_layout).

    In serve_config.yaml: `layout: auto` (planned at build time from the members' predict
    costs measured on the building machine), `layout: per_member` (one deployment per
    member: the production shape of the case study), or `layout: {groups: N}` (N member
    deployments balanced by the manifest's predict cost). `{groups: null}` is per_member.
    """

    placement: Literal["auto", "per_member", "groups"] = "per_member"
    groups: int | None = Field(
        default=None, ge=1, description="placement `groups`: the number of member deployments"
    )
    # What `auto` plans for; ignored otherwise.
    expected_logins_per_s: float = Field(
        default=40.0,
        ge=0,
        description="auto: logins/s one supervisor replica is expected to take; sets how many "
        "logins a coalesced fan-out carries, so the rows per predict call",
    )
    hop_cpu_ms: float = Field(
        default=HOP_CPU_MS,
        ge=0,
        description="auto: CPU-ms one Serve handle call costs, both ends (loadtest.hop_cost)",
    )
    fanout_target_ms: float = Field(
        default=10.0,
        gt=0,
        description="auto: the most one process may spend in series on one fan-out's predicts "
        "before members move out of the supervisor to run in parallel with it",
    )
    max_parallel: int | None = Field(
        default=None,
        ge=1,
        description="auto: cores one fan-out can use at once; null: the building machine's",
    )
    dedicated_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="auto: a member holding this share of the ensemble's predict cost (and "
        "costing more than a hop) gets its own deployment, so it scales on its own",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"placement": value}
        if isinstance(value, dict) and "placement" not in value and "groups" in value:
            # The original form: {groups: N} is N groups, {groups: null} one per member.
            placement = "per_member" if value["groups"] is None else "groups"
            return {**value, "placement": placement}
        return value

    @model_validator(mode="after")
    def _groups_iff_grouped(self) -> Self:
        if (self.placement == "groups") != (self.groups is not None):
            raise ValueError(
                f"layout: `groups` ({self.groups}) goes with placement `groups` only "
                f"(placement is {self.placement!r})"
            )
        return self


class CoalescingConfig(StrictModel):
    """Cross-request batching at the supervisor: one fan-out per batch of logins."""

    enabled: bool = True
    # At most batching.max_batch_rows, so one round is one predict per member.
    max_rows: CoalescedRows = 512
    # Rounds in flight at once; logins arriving while all are busy join the next round.
    max_in_flight: RoundsInFlight = 2
    # A round stops counting as in flight after this long even if a member has not
    # answered, so one slow member cannot stall the queue (its callers still wait for it
    # until their own deadlines).
    max_hold_ms: HoldMs = 100.0


class BatchingConfig(StrictModel):
    """How a member group coalesces concurrent score calls into one predict (runtime-tunable)."""

    max_batch_rows: int = Field(default=1024, ge=1, description="rows per predict call")
    batch_wait_timeout_s: float = Field(default=0.0, ge=0, le=1)


class AdmissionConfig(StrictModel):
    """How many logins one ingress replica (supervisor or router) takes on at once, and how
    long a login may wait for one at the edge (app.core.admission, app.edge)."""

    max_in_flight: int = Field(
        default=16,
        ge=1,
        description="logins held by one ingress replica: HAProxy forwards at most this many to "
        "it at once (its maxconn) and a supervisor's own gate refuses the next with an "
        "immediate 503 and Retry-After. Must stay below the deployment's max_ongoing_requests, "
        "so Serve never queues a login before its budget starts.",
    )
    adaptive: bool = Field(
        default=True,
        description="a supervisor's bound follows the service time it measures, at most "
        "max_in_flight (cut while its logins' p90 runs past the budget less the edge queue's "
        "wait, raised while they are on time), and it tells HAProxy how many logins may wait "
        "for it (X-Offers-Queue-Room: its rate over the queue's wait, at most "
        "edge_max_queued). false: max_in_flight and edge_max_queued, fixed.",
    )
    edge_queue_timeout_ms: int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="how long a login may wait in HAProxy's queue for a replica with room; "
        "then HAProxy answers it 503 with Retry-After itself, without waking a replica. The "
        "wait counts against the login's budget (X-Request-Start), so it must stay below "
        "request_budget_ms. Default (null): half of the application's request_budget_ms. "
        "Long enough that a login admitted to the queue is scored, not refused late: in a "
        "burst the replicas' first logins take a few hundred ms, and a login that waited "
        "them out only to be refused would be the burst's slowest refusal. A game's router "
        "also lets a login wait for room on its version for what is left of it (the two "
        "waits together).",
    )
    edge_max_queued: int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="how many logins may wait in HAProxy's queue for the application's "
        "replicas at once; the next is answered 503 with Retry-After at once. It bounds the "
        "wait (the logins ahead, over the replicas' rate) and makes every other refusal of "
        "an overload immediate. Default (null): 16 where the replicas report no room (a "
        "router, or adaptive false), and 128 where they do: there the room they report (the "
        "rate they drain over the queue's wait; 1 until they have measured it) is the bound, "
        "and this cap a ceiling.",
    )

    edge_replica_keepalive: bool = Field(
        default=True,
        description="HAProxy keeps its connections to the replicas open between logins. "
        "Over a reused connection HAProxy 2.8 closes the caller's connection without an "
        "answer when every retry of a login fails (every replica of the application dead: "
        "1-2 logins per such death), for the client to resend. false: one connection per "
        "login, and that login gets the 503 with Retry-After, for a connection per login "
        "on the supervisors: at 426 logins/s offered, about what kept-alive connections "
        "hold, they answered 0.66x the logins (make run, interleaved medians).",
    )
    edge_relay: bool = Field(
        default=True,
        description="where HAProxy keeps its connections to the replicas alive: each login "
        "first passes a loopback relay inside HAProxy (a frontend on a unix socket, reached "
        "over a connection of its own), so that the login HAProxy 2.8 would close "
        "unanswered when every replica of the application died is replayed by the relay "
        "and answered the 503 with Retry-After. It costs HAProxy a second pass per login, "
        "in C; no Python process sees it. false: no relay (that login's connection closed).",
    )

    def max_queued(self, *, reports_room: bool) -> int:
        """HAProxy's static queue cap for the application (edge_max_queued, or its default
        for replicas that do or do not report their room)."""
        if self.edge_max_queued is not None:
            return self.edge_max_queued
        return ADAPTIVE_MAX_QUEUED if self.adaptive and reports_room else FIXED_MAX_QUEUED

    def queue_timeout_ms(self, request_budget_ms: float) -> int:
        """HAProxy's `timeout queue` for an application whose logins have this budget."""
        if self.edge_queue_timeout_ms is not None:
            return self.edge_queue_timeout_ms
        return max(1, int(request_budget_ms // 2))

    def check_queue_timeout(self, request_budget_ms: float) -> None:
        timeout = self.queue_timeout_ms(request_budget_ms)
        if timeout >= request_budget_ms:
            raise ValueError(
                f"admission.edge_queue_timeout_ms ({timeout}) must be below request_budget_ms "
                f"({request_budget_ms:g}): the queue's wait counts against the budget, and a "
                "login that spent all of it queued could only be refused"
            )


class PrecomputedArgs(StrictModel):
    """The precomputed-offers tier (app.core.online.precomputed): the batch job's snapshot of this
    version, from settings' batch_output_uri, answering when the online path cannot."""

    enabled: bool = True
    max_age_s: float = Field(
        default=36 * 3600.0,
        gt=0,
        description="a snapshot older than this is not loaded, and stops answering once it "
        "ages past it (36 h: a daily run that failed once is still served)",
    )
    refresh_s: float = Field(
        default=300.0, gt=0, description="how often a replica looks for a newer batch run"
    )


class MemberGroupConfig(StrictModel):
    """A member group deployment's user_config (applied in reconfigure, no restart)."""

    batching: BatchingConfig = Field(default_factory=BatchingConfig)
    faults: FaultInjection = Field(default_factory=FaultInjection)


class EnsembleAppArgs(VersionArgs):
    """Typed `args:` of one application in serve_config.yaml."""

    request_budget_ms: BudgetMs = 1000.0
    quorum: Quorum = Field(
        default=0.5,
        description="share of the ensemble's weight that must answer in time for a "
        "personalized offer; below it the answer is the fallback (reason `quorum`)",
    )
    straggler_grace_ms: GraceMs = Field(
        default=150.0,
        description="once members holding `quorum` of the weight have answered, wait at most "
        "this much longer for the others (null: until the request's budget runs out). Bounds "
        "what a dead replica that Serve still routes to costs every login.",
    )
    member_weights: dict[str, float] = Field(
        default_factory=dict,
        description="member name -> weight instead of its trained weight (0: weighted out)",
    )
    retry_after_s: float = Field(default=1.0, ge=0, description="Retry-After on 503")
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)
    supervisor: DeploymentArgs = Field(default_factory=lambda: SUPERVISOR_DEFAULTS)
    members: DeploymentArgs = Field(default_factory=lambda: MEMBER_DEFAULTS)
    # Per member deployment (`member-<name>` or `member-group-<i>`, after `layout`): changes
    # on top of `members`. The builder checks every name against the layout.
    member_deployments: dict[str, dict[str, Any]] = Field(default_factory=dict)
    layout: MemberLayout = Field(default_factory=MemberLayout)
    runtime: Runtime = Field(
        default="onnx",
        description="how members are scored: `onnx` runs each member's compiled graph, every "
        "member of a process fused into one ONNX Runtime call (a member without a compiled "
        "form is scored natively); `native` calls each training library's predict",
    )
    batching: BatchingConfig = Field(default_factory=BatchingConfig)
    coalescing: CoalescingConfig = Field(default_factory=CoalescingConfig)
    faults: FaultInjection = Field(default_factory=FaultInjection)
    precomputed: PrecomputedArgs = Field(default_factory=PrecomputedArgs)

    @field_validator("supervisor", "members", mode="before")
    @classmethod
    def _on_top_of_defaults(cls, value: Any, info: Any) -> Any:
        # A partial entry (say, only max_ongoing_requests) keeps the role's other defaults
        # rather than falling back to the generic DeploymentArgs ones.
        defaults = SUPERVISOR_DEFAULTS if info.field_name == "supervisor" else MEMBER_DEFAULTS
        return defaults.updated(value) if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _coherent(self) -> Self:
        if self.coalescing.enabled and self.coalescing.max_rows > self.batching.max_batch_rows:
            raise ValueError(
                f"coalescing.max_rows ({self.coalescing.max_rows}) exceeds "
                f"batching.max_batch_rows ({self.batching.max_batch_rows}): a coalesced "
                "fan-out would be larger than any member batch, every member call would fail "
                "and every login would get a fallback. Lower max_rows or raise max_batch_rows."
            )
        if self.admission.max_in_flight >= self.supervisor.max_ongoing_requests:
            raise ValueError(
                f"admission.max_in_flight ({self.admission.max_in_flight}) must be below "
                f"supervisor.max_ongoing_requests ({self.supervisor.max_ongoing_requests}): "
                "otherwise logins wait in Serve's queue, where their budget does not run, "
                "instead of being refused at once"
            )
        self.admission.check_queue_timeout(self.request_budget_ms)
        check_reachable_target(
            self.supervisor.autoscaling, self.admission.max_in_flight, "supervisor"
        )
        for name, changes in self.member_deployments.items():
            self.members.updated(changes)  # each entry must be valid on its own
            if not name.startswith("member-"):
                raise ValueError(f"member_deployments: {name!r} is not a member deployment name")
        return self

    def knobs(self) -> SupervisorKnobs:
        """The supervisor's runtime knobs as these args set them: the baseline a live
        user_config is merged over (app.config.knobs)."""
        # The knobs' own fields, read from these args: a knob added to SupervisorKnobs is
        # taken from the args of the same name, never copied here by hand. Whether the
        # supervisor coalesces at all is structural (not a knob).
        values = self.model_dump(
            include=set(SupervisorKnobs.model_fields), exclude={"coalescing": {"enabled"}}
        )
        return SupervisorKnobs.model_validate(values)
