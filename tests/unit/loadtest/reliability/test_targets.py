"""The local target refuses a `--config` that `make run` does not serve: the report would name
one file and the service run another."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from app.local.processes import PROJECT_ROOT as ROOT
from loadtest.reliability.targets import not_as_declared

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def served_as(config: Path) -> dict[str, dict]:
    """Serve's REST details of a `serve run` of `config`, as far as the check reads them."""
    return {
        a["name"]: {"status": "RUNNING", "deployed_app_config": a}
        for a in yaml.safe_load(config.read_text())["applications"]
    }


def test_the_config_make_run_serves_is_served_as_declared():
    config = ROOT / "serve_config.yaml"
    declared = yaml.safe_load(config.read_text())["applications"]
    assert not_as_declared(declared, served_as(config)) == []


def test_another_config_is_named_by_the_applications_that_differ():
    declared = yaml.safe_load((ROOT / "serve_config.yaml").read_text())["applications"]
    served = served_as(ROOT / "serve_config.yaml")
    canary = declared[0]["name"]
    changed = {**served[canary]["deployed_app_config"]}
    changed["args"] = {**changed["args"], "request_budget_ms": 2000}
    served[canary] = {**served[canary], "deployed_app_config": changed}
    assert not_as_declared(declared, served) == [canary]
    moved = {**served_as(ROOT / "serve_config.yaml")}
    router = next(a["name"] for a in declared if a["name"] == "galaxy-raiders")
    moved[router] = {
        "deployed_app_config": {**moved[router]["deployed_app_config"], "route_prefix": "/x"}
    }
    assert not_as_declared(declared, moved) == [router]
    del moved[router]  # not served at all
    assert not_as_declared(declared, moved) == [router]
