"""Ensemble configurations for the ablation: each lever of the shipped design taken out alone.

A variant is the shipped configuration (serve_config.yaml, or the production layout) with
one lever switched off, measured in the same rounds as the shipped one: its ratio to the
shipped configuration is what that lever is worth. A few try one setting other than the
shipped one instead (a Serve default, or a candidate): their ratio is what shipping it
would change.
"""

from __future__ import annotations

from loadtest.harness.variant import PRODUCTION, SHIPPED, Variant

__all__ = ["PRODUCTION", "SHIPPED", "VARIANTS", "Variant"]

_NO_HAPROXY = {
    "RAY_SERVE_ENABLE_HA_PROXY": None,
    "RAY_SERVE_HAPROXY_RETRY_ON": None,
    "RAY_SERVE_HAPROXY_RETRIES": None,
    "RAY_SERVE_HAPROXY_NBTHREAD": None,
}
_NO_COALESCING = {"coalescing": {"enabled": False}}
_OLD_READS = {"OFFERS_FEATURE_CACHE_TTL_S": "0", "OFFERS_DYNAMODB_BATCH_READS": "false"}
# serve_config.yaml's minimums, held: the replicas the shipped config starts with.
_FIXED_REPLICAS = {
    "supervisor": {"autoscaling": {"min_replicas": 2, "max_replicas": 2}},
    "members": {"autoscaling": {"min_replicas": 1, "max_replicas": 1}},
}
# k8s/profile.yaml's serve.ensemble_args.layout (a unit test keeps them equal): the plan
# production makes, built on this machine.
PRODUCTION_LAYOUT = {
    "placement": "auto",
    "expected_logins_per_s": 100.0,
    "max_parallel": 4,
    "fanout_target_ms": 3.0,
}

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(
            "python-proxy",
            "Serve's Python proxy on the documented port instead of HAProxy",
            ray_env=_NO_HAPROXY,
            edge=False,  # no HAProxy, so nothing for the edge's wrapper to configure
        ),
        Variant(
            "haproxy-4-threads",
            "Serve's HAProxy with its default 4 threads instead of the shipped 1 "
            "(RAY_SERVE_HAPROXY_NBTHREAD)",
            ray_env={"RAY_SERVE_HAPROXY_NBTHREAD": "4"},
        ),
        Variant(
            "control-loop-0.25",
            "Serve's controller ticks every 0.25 s instead of Serve's 0.1 "
            "(RAY_SERVE_CONTROL_LOOP_INTERVAL_S): its fixed cost, and the GCS polls it makes, "
            "against how fast it reacts",
            ray_env={"RAY_SERVE_CONTROL_LOOP_INTERVAL_S": "0.25"},
        ),
        Variant(
            "grpc-off",
            "handle calls over Ray actor calls instead of gRPC",
            ray_env={"RAY_SERVE_USE_GRPC_BY_DEFAULT": "0"},
        ),
        Variant(
            "no-coalescing",
            "one fan-out per login instead of one per batch of concurrent logins",
            args=_NO_COALESCING,
        ),
        Variant(
            "uncached-reads",
            "no feature cache, one GetItem per login (legacy's read path)",
            replica_env=_OLD_READS,
        ),
        Variant(
            "production-uncoalesced",
            "production layout, one fan-out (12 handle calls) per login",
            base=PRODUCTION,
            args=_NO_COALESCING,
        ),
        Variant(
            "no-edge-admission",
            "HAProxy as Serve configures it: no maxconn per replica, no queue timeout, no "
            "arrival stamp; every login reaches a supervisor's event loop",
            edge=False,
        ),
        Variant(
            "fresh-replica-connections",
            "HAProxy opens a connection to a supervisor per login instead of keeping them "
            "open (admission.edge_replica_keepalive false): what answering the last logins "
            "of a version whose replicas all die costs",
            args={"admission": {"edge_replica_keepalive": False}},
        ),
        Variant(
            "no-edge-relay",
            "HAProxy sends each login straight to the supervisors' backend instead of "
            "through its loopback relay (admission.edge_relay false): what the relay, a "
            "second pass through HAProxy per login, costs",
            args={"admission": {"edge_relay": False}},
        ),
        Variant(
            "deep-edge-queue",
            "HAProxy's queue for the supervisors effectively uncapped (edge_max_queued "
            "10000): a login past the replicas' slots waits up to the queue timeout before "
            "its 503, as before the cap",
            args={"admission": {"edge_max_queued": 10_000}},
        ),
        Variant(
            "fixed-edge-queue",
            "HAProxy's queue for the supervisors capped at 16 logins (edge_max_queued 16), "
            "the cap shipped until 2026-11-27: the room the replicas report counts only below "
            "it",
            args={"admission": {"edge_max_queued": 16}},
        ),
        Variant(
            "shallow-edge-queue",
            "HAProxy's queue for the supervisors one login deep (edge_max_queued 1): a login "
            "past the replicas' slots is refused at once unless it is the only one waiting",
            args={"admission": {"edge_max_queued": 1}},
        ),
        Variant(
            "short-edge-queue",
            "HAProxy's queue for the supervisors as shipped, its timeout 5 ms "
            "(edge_queue_timeout_ms 5): a queued login is refused after 5 ms, not half its "
            "budget",
            args={"admission": {"edge_queue_timeout_ms": 5}},
        ),
        Variant(
            "edge-queue-30ms",
            "HAProxy's queue for the supervisors as shipped, its timeout 30 ms "
            "(edge_queue_timeout_ms 30, the default until 2026-11-26): a queued login is "
            "refused after 30 ms, not half its budget",
            args={"admission": {"edge_queue_timeout_ms": 30}},
        ),
        Variant(
            "per-member",
            "layout per_member: one deployment per member (the case study's shape), members "
            "at num_cpus 0.1 as in serve_config.production-layout.yaml",
            # 12 members at the shipped 0.25 would ask for 3 of the node's 2 CPUs: replicas
            # that never schedule.
            args={"layout": {"placement": "per_member"}, "members": {"num_cpus": 0.1}},
        ),
        Variant(
            "grouped",
            "layout groups 2: every member in one of 2 member deployments, none inline",
            args={"layout": {"placement": "groups", "groups": 2}},
        ),
        Variant(
            "planned-production",
            "layout auto with k8s/profile.yaml's planning inputs (its expected load and cores)",
            args={"layout": PRODUCTION_LAYOUT},
        ),
        Variant(
            "no-autoscaling",
            "every deployment at a fixed replica count (its min_replicas)",
            args=_FIXED_REPLICAS,
        ),
        Variant(
            "replicas-at-ray-niceness",
            "every replica thread as Ray starts it (Python threads at 15, HAProxy's too; "
            "gRPC and Ray threads at 0) instead of the shipped 19 (OFFERS_REPLICA_NICENESS=0)",
            replica_env={"OFFERS_REPLICA_NICENESS": "0"},
        ),
        Variant(
            "native-members",
            "members scored by each training library's own predict (runtime native) instead "
            "of their compiled graphs fused into one ONNX Runtime call",
            args={"runtime": "native"},
        ),
        Variant(
            "direct-ingress",
            "clients call one supervisor replica's own port (not a production address)",
            direct_ingress=True,
        ),
    )
}
