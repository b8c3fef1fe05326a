"""`make run` (app.local.cli.run_local) trains while dynalite, its seed and the Ray head
start, and publishes and serves only once training is done. The steps are stand-ins that
record what happens when: the order is the behaviour under test here; each step itself is
tested with real processes elsewhere (test_ray_head, test_dynalite, the e2e tier)."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest

from app.local import cli
from app.local.serve_config import ConfigError

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


class Steps:
    def __init__(self) -> None:
        self.seen: list[str] = []
        self.head_up = threading.Event()

    def record(self, what: str) -> None:
        self.seen.append(what)


@pytest.fixture
def steps(monkeypatch, tmp_path):
    steps = Steps()

    class Context:
        def __init__(self, name: str, on_enter=None) -> None:
            self.name, self.on_enter = name, on_enter
            self.endpoint_url, self.pid = "http://127.0.0.1:1", 1
            self.address = self.metrics_url = self.dashboard_url = "x"
            self.env: dict[str, str] = {}

        def __enter__(self):
            steps.record(f"{self.name} up")
            if self.on_enter:
                self.on_enter()
            return self

        def __exit__(self, *exc):
            steps.record(f"{self.name} stopped")

        def supervise(self) -> None:
            pass

        def client(self, **_):
            return None

    @contextlib.contextmanager
    def store(apps, log_path):
        steps.record("store up, versions published")
        yield None
        steps.record("store stopped")

    monkeypatch.setattr(cli, "LOCAL_STATE", tmp_path)
    monkeypatch.setattr(cli, "Dynalite", lambda *a, **k: Context("dynalite"))
    monkeypatch.setattr(cli, "RayHead", lambda *a, **k: Context("head", steps.head_up.set))
    monkeypatch.setattr(cli, "seed", lambda *a: steps.record("seeded"))
    monkeypatch.setattr(cli, "edge_env", lambda config: {})
    monkeypatch.setattr(cli, "local_model_store", store)
    monkeypatch.setattr(cli, "_serve", lambda *a: steps.record("serving") or 0)
    return steps


def run(apps=()) -> int:
    return cli.run_local(list(apps), ("127.0.0.1", 1, "t"), Path("serve.yaml"), 10)


def test_training_runs_while_dynalite_the_seed_and_the_head_start(steps, monkeypatch):
    def prepare(apps) -> None:
        steps.record("training")
        # Training ends only once the head is up: run in series, this would never happen.
        assert steps.head_up.wait(30), "the head did not start while training ran"
        steps.record("trained")

    monkeypatch.setattr(cli, "prepare", prepare)
    assert run() == 0
    assert steps.seen.index("training") < steps.seen.index("head up")
    assert steps.seen.index("seeded") < steps.seen.index("trained")
    # Published and served only from trained versions; stopped in the reverse order.
    assert steps.seen[steps.seen.index("trained") + 1 :] == [
        "store up, versions published",
        "serving",
        "store stopped",
        "head stopped",
        "dynalite stopped",
    ]


def test_a_config_error_found_by_training_stops_everything_before_anything_is_served(
    steps, monkeypatch
):
    def prepare(apps) -> None:
        raise ConfigError("deployments: `member-nope` is not a deployment of the plan")

    monkeypatch.setattr(cli, "prepare", prepare)
    with pytest.raises(ConfigError, match="member-nope"):
        run()
    assert "store up, versions published" not in steps.seen and "serving" not in steps.seen
    assert steps.seen[-2:] == ["head stopped", "dynalite stopped"]
