"""What the service reads from a Serve config document, wherever it is read: which
applications are ensembles and which are game routers (by import path), and the edge's
admission limits they declare. The local tooling (app.local) and the Kubernetes rendering
(app.k8s) both read serve_config.yaml through this, so neither depends on the other."""

from __future__ import annotations

import math
from typing import Any

from app.config.app_args import EnsembleAppArgs
from app.config.edge import ANSWER_GRACE_MS, BackendLimits, EdgeConfig
from app.config.router_args import RouterAppArgs

BUILDER_IMPORT_PATH = "app.serving.builder:build_app"
ROUTER_IMPORT_PATH = "app.serving.builder:build_router"


def edge_config(document: dict[str, Any]) -> EdgeConfig:
    """The edge limits of every ensemble and router application a Serve config declares:
    each one's `admission` bound, queue timeout and queue depth, and its Retry-After."""
    backends: dict[str, BackendLimits] = {}
    for app in document.get("applications", []):
        args: EnsembleAppArgs | RouterAppArgs
        if app.get("import_path") == BUILDER_IMPORT_PATH:
            args = EnsembleAppArgs.model_validate(app.get("args") or {})
        elif app.get("import_path") == ROUTER_IMPORT_PATH:
            args = RouterAppArgs.model_validate(app.get("args") or {})
        else:
            continue
        backends[app["name"]] = BackendLimits(
            max_in_flight=args.admission.max_in_flight,
            queue_timeout_ms=args.admission.queue_timeout_ms(args.request_budget_ms),
            max_queued=args.admission.max_queued(reports_room=isinstance(args, EnsembleAppArgs)),
            retry_after_s=math.ceil(args.retry_after_s),
            answer_timeout_ms=math.ceil(args.request_budget_ms) + ANSWER_GRACE_MS,
            reuse_connections=args.admission.edge_replica_keepalive,
            relay=args.admission.edge_relay,
        )
    return EdgeConfig(backends=backends, unlisted=unlisted_limits(list(backends.values())))


def unlisted_limits(listed: list[BackendLimits]) -> BackendLimits | None:
    """The edge's limits for an application the config does not list (one added later by
    `serve deploy`): the most lenient of the listed ones, field by field, so that it is
    never refused or cut short where a listed application would not be; it keeps its own
    supervisors' admission, this only bounds the wait (EdgeConfig.unlisted)."""
    if not listed:
        return None
    return BackendLimits(
        max_in_flight=max(b.max_in_flight for b in listed),
        queue_timeout_ms=max(b.queue_timeout_ms for b in listed),
        max_queued=max(b.max_queued for b in listed),
        retry_after_s=max(b.retry_after_s for b in listed),
        answer_timeout_ms=max(b.answer_timeout_ms for b in listed),
        # Only where every listed application reuses them: a fresh connection answers
        # every login a reused one answers, and the last one of a version that died.
        reuse_connections=all(b.reuse_connections for b in listed),
        # Where any listed application relays: the relay answers every login the direct
        # path answers, and the last one of a version that died.
        relay=any(b.relay for b in listed),
    )
