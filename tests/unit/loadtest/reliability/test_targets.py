"""The local target refuses a `--config` that `make run` does not serve: the report would name
one file and the service run another."""

from __future__ import annotations

import argparse

import pytest
import requests
import yaml

from app.local.processes import PROJECT_ROOT
from app.local.serve_config import configured_apps
from loadtest.reliability import targets
from loadtest.reliability.targets import not_as_declared

pytestmark = [pytest.mark.unit, pytest.mark.untimed]

CONFIG = PROJECT_ROOT / "serve_config.yaml"


def declared() -> list[dict]:
    return yaml.safe_load(CONFIG.read_text())["applications"]


def details(apps: list[dict]) -> dict[str, dict]:
    """Serve's REST details of these applications, as far as the check reads them: what the
    config set, and nothing it left out (Serve leaves unset fields out)."""
    return {a["name"]: {"status": "RUNNING", "deployed_app_config": a} for a in apps}


def test_what_a_config_leaves_out_is_served_by_serves_defaults():
    bare = [{"name": "plain", "import_path": "x:y"}]  # no route_prefix, no args
    assert not_as_declared(bare, details(bare)) == []
    assert not_as_declared(bare, details([{**bare[0], "route_prefix": "/", "args": {}}])) == []


def test_another_config_is_named_by_the_applications_that_differ():
    canary, *others = declared()
    budget = {**canary, "args": {**canary["args"], "request_budget_ms": 2000}}
    assert not_as_declared(declared(), details([budget, *others])) == [canary["name"]]
    router = next(a for a in others if a["import_path"].endswith(":build_router"))
    moved = [{**a, "route_prefix": "/x"} if a["name"] == router["name"] else a for a in declared()]
    assert not_as_declared(declared(), details(moved)) == [router["name"]]
    missing = [a for a in declared() if a["name"] != router["name"]]
    assert not_as_declared(declared(), details(missing)) == [router["name"]]


def local_target_with(monkeypatch, served) -> None:
    """targets.local_target for serve_config.yaml, its service answering and its dashboard
    listing `served` (or raising it, an exception)."""

    def applications(_dashboard):
        if isinstance(served, Exception):
            raise served
        return served

    monkeypatch.setattr(targets, "answers", lambda url, timeout_s: True)
    monkeypatch.setattr(targets.serve_status, "applications", applications)
    args = argparse.Namespace(config=CONFIG, players=100)
    targets.local_target(args, configured_apps(CONFIG)[0])


def test_the_local_target_refuses_a_config_make_run_does_not_serve(monkeypatch):
    local_target_with(monkeypatch, details(declared()))  # as declared: a target
    canary, *others = declared()
    with pytest.raises(SystemExit, match=canary["name"]):
        local_target_with(monkeypatch, details([{**canary, "args": {}}, *others]))
    with pytest.raises(SystemExit, match="make run's dashboard"):
        local_target_with(monkeypatch, requests.ConnectionError("refused"))
