"""Environment for the processes that start Ray and Serve (`serve run`, `ray start`).

It reaches the controller and the proxy, which an application's runtime_env env_vars do not.
A plain `serve run serve_config.yaml` does not set it: export it first (the README says how;
`make run`, the benchmark and the e2e test set it).
"""

from __future__ import annotations

# RAY_SERVE_THROUGHPUT_OPTIMIZED: Serve's documented fast-path bundle (user code on the
# replica's event loop, buffered request-path logs, gRPC between proxy and replicas, no
# per-request logs to stderr, and a direct-ingress HTTP port on the ingress replica).
SERVE_PROCESS_ENV: dict[str, str] = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"}
