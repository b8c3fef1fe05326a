"""The edge limits HAProxy gets (OFFERS_EDGE) from a Serve config's applications."""

from __future__ import annotations

import pytest
import yaml

from app.local.processes import PROJECT_ROOT
from app.local.serve_config import edge_config

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def test_the_shipped_config_queues_a_login_for_up_to_half_its_budget():
    document = yaml.safe_load((PROJECT_ROOT / "serve_config.yaml").read_text())
    backends = edge_config(document).backends
    budgets = {app["name"]: app["args"]["request_budget_ms"] for app in document["applications"]}
    assert set(backends) == set(budgets)
    for name, limits in backends.items():
        assert limits.queue_timeout_ms == budgets[name] // 2, name


def test_an_explicit_queue_timeout_and_each_applications_own_budget_are_used():
    document = {
        "applications": [
            {
                "name": "v1",
                "import_path": "app.serving.builder:build_app",
                "args": {
                    "game": "galaxy-raiders",
                    "version": "2026-11",
                    "request_budget_ms": 400,
                    "admission": {"max_in_flight": 8, "edge_queue_timeout_ms": 60},
                },
            },
            {
                "name": "front",
                "import_path": "app.serving.builder:build_router",
                "args": {
                    "game": "galaxy-raiders",
                    "versions": [{"version": "2026-11", "weight": 1, "application": "v1"}],
                    "request_budget_ms": 600,
                },
            },
        ]
    }
    backends = edge_config(document).backends
    assert backends["v1"].queue_timeout_ms == 60
    assert backends["v1"].max_in_flight == 8
    assert backends["front"].queue_timeout_ms == 300
    assert backends["front"].max_in_flight == 32


def test_the_static_queue_cap_is_a_ceiling_only_where_the_replicas_report_their_room():
    """Adaptive supervisors tell HAProxy the room they drain, so their static cap is only a
    ceiling (ADAPTIVE_MAX_QUEUED); a router, or fixed admission, reports none and keeps the
    cap that bounds its queue (FIXED_MAX_QUEUED). An explicit edge_max_queued wins."""
    from app.config.app_args import ADAPTIVE_MAX_QUEUED, FIXED_MAX_QUEUED

    def version(name: str, **admission: object) -> dict:
        return {
            "name": name,
            "import_path": "app.serving.builder:build_app",
            "args": {"game": "galaxy-raiders", "version": "2026-11", "admission": admission},
        }

    router = {
        "name": "front",
        "import_path": "app.serving.builder:build_router",
        "args": {
            "game": "galaxy-raiders",
            "versions": [{"version": "2026-11", "weight": 1, "application": "adaptive"}],
        },
    }
    document = {
        "applications": [
            version("adaptive"),
            version("fixed", adaptive=False),
            version("explicit", edge_max_queued=40),
            router,
        ]
    }
    caps = {name: b.max_queued for name, b in edge_config(document).backends.items()}
    assert caps == {
        "adaptive": ADAPTIVE_MAX_QUEUED,
        "fixed": FIXED_MAX_QUEUED,
        "explicit": 40,
        "front": FIXED_MAX_QUEUED,
    }
    assert FIXED_MAX_QUEUED < ADAPTIVE_MAX_QUEUED
