"""The edge limits HAProxy gets (OFFERS_EDGE) from a Serve config's applications."""

from __future__ import annotations

import pytest
import yaml

from app.local.processes import PROJECT_ROOT
from app.local.serve_config import edge_config

pytestmark = pytest.mark.unit


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
