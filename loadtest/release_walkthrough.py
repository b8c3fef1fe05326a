"""A release through the model store, on a running local service, timed and under load.

    python -m loadtest.release_walkthrough [--config serve_config.yaml] [--version 2026-12]
        [--profile standard] [--dashboard http://127.0.0.1:8265] [--base http://127.0.0.1:8000]

Against the service `make run` (or `ray start` + `serve deploy`) serves from `--config`, whose
ensemble applications load from a model store (`artifacts: s3://...`):

1. `offers train` the new version;
2. `offers publish` it into the config's store;
3. add it to the config (a copy of the first ensemble application, renamed) and, at weight
   0, to its game's router's live `user_config` weights, and `serve deploy`;
4. raise its weight to 10 there, and `serve deploy`.

Meanwhile one client sends logins to the game's route at a steady pace. The report says how
long each step took, from `offers publish` to the new version's first personalized answer,
what the game route answered, and whether any replica of the versions already served or of
the router was replaced (their pids before and after): none should be, the router takes a
new version live (app.serving.router). The deployed config is left with the new version in
it; `serve deploy` the original to remove it. tests/e2e/test_serve_deploy.py runs this walk
on the e2e cluster; docs/release.md quotes a run on `make run`.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import requests
import yaml

from app.local.processes import PROJECT_ROOT
from app.local.ray_auth import ray_auth_env
from app.local.serve_config import BUILDER_IMPORT_PATH, ROUTER_IMPORT_PATH, configured_apps
from loadtest.harness.systems import run_cli
from models.population import player_id

NEW_WEIGHT = 10.0
# A game-route answer slower than this is listed in the report: the route answers in tens of
# milliseconds, so one this slow waited on something the release did (on 2 cores, the new
# version's processes starting: tests/e2e, 2026-11-27).
SLOW_MS = 200.0


@dataclass
class Logins:
    """What the game's route answered while the release went on."""

    sent: int = 0
    statuses: Counter[str] = field(default_factory=Counter)  # "200", "503", "none"
    personalized: int = 0
    by_version: Counter[str] = field(default_factory=Counter)
    slowest_ms: float = 0.0
    # (seconds since the release started, status or "none" and why, ms it took) of each
    # failure: a refusal's body names what refused it (the edge, the router, a supervisor)
    failures: list[tuple[float, str, float]] = field(default_factory=list)
    # the same for each 200 slower than SLOW_MS, naming the version that answered and how long
    # the login spent inside its supervisor (the rest is the hops and the router)
    slow: list[tuple[float, str, float]] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return self.sent - self.statuses["200"]


@dataclass
class Release:
    version: str
    profile: str
    train_s: float = 0.0
    publish_s: float = 0.0
    publish_to_serving_s: float = 0.0  # `offers publish` started -> first personalized answer
    raise_to_routed_s: float = 0.0  # weight 10 deployed -> a game-route login answered by it
    # seconds since the release started (publish) at which each step began
    steps: dict[str, float] = field(default_factory=dict)
    other_replicas_before: dict[str, list[int]] = field(default_factory=dict)
    other_replicas_after: dict[str, list[int]] = field(default_factory=dict)
    router_replicas_before: list[int] = field(default_factory=list)
    router_replicas_after: list[int] = field(default_factory=list)
    logins: Logins = field(default_factory=Logins)

    @property
    def other_replicas_kept(self) -> bool:
        return (self.other_replicas_before, self.router_replicas_before) == (
            self.other_replicas_after,
            self.router_replicas_after,
        )

    def summary(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "logins"}
        out["logins"] = {
            "sent": self.logins.sent,
            "failed": self.logins.failed,
            "statuses": dict(self.logins.statuses),
            "personalized": self.logins.personalized,
            "by_version": dict(self.logins.by_version),
            "slowest_ms": round(self.logins.slowest_ms, 1),
            "failures": [[round(t, 2), what, round(ms)] for t, what, ms in self.logins.failures],
            "slow": [[round(t, 2), what, round(ms)] for t, what, ms in self.logins.slow],
        }
        out["other_replicas_kept"] = self.other_replicas_kept
        return out


class GameRouteLoad:
    """One client at a steady pace on a game's route, until stopped; every answer counted."""

    def __init__(self, url: str, game: str, per_s: float, players: int) -> None:
        self.url, self.game, self.pause_s, self.players = url, game, 1.0 / per_s, players
        self.origin = time.monotonic()
        self.logins = Logins()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> GameRouteLoad:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        session = requests.Session()
        i = 0
        while not self._stop.is_set():
            started = time.monotonic()
            self.logins.sent += 1
            try:
                response = session.post(
                    self.url,
                    json={"player_id": player_id(i % self.players), "game": self.game},
                    timeout=5,
                )
                self.logins.statuses[str(response.status_code)] += 1
                if response.status_code == 200:
                    body = response.json()
                    self.logins.personalized += bool(body.get("personalized"))
                    self.logins.by_version[str(body.get("ensemble_version"))] += 1
                status = str(response.status_code)
                why = response.text[:300]
            except requests.RequestException as exc:
                status, why = "none", type(exc).__name__
                self.logins.statuses[status] += 1
            took = time.monotonic() - started
            self.logins.slowest_ms = max(self.logins.slowest_ms, took * 1000)
            if status != "200":
                failed = (started - self.origin, f"{status} {why}", took * 1000)
                self.logins.failures.append(failed)
            elif took * 1000 > SLOW_MS:
                inside = (body.get("timings") or {}).get("total_ms", 0.0)
                answered = f"{body.get('ensemble_version')} ({inside:.0f} ms in its supervisor)"
                self.logins.slow.append((started - self.origin, answered, took * 1000))
            i += 1
            self._stop.wait(max(0.0, self.pause_s - took))


def replica_pids(app_names: list[str]) -> dict[str, list[int]]:
    """Pids of each application's replica processes (a replaced replica changes them)."""
    pids: dict[str, set[int]] = {name: set() for name in app_names}
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        for name in app_names:
            if f"ServeReplica:{name}:" in line:
                pids[name].add(proc.pid)
    return {name: sorted(found) for name, found in pids.items()}


def with_new_version(document: dict[str, Any], version: str, profile: str) -> dict[str, Any]:
    """The config plus `version`: a copy of its first ensemble application under the new
    version's name and route, and weight 0 for it in that game's router's user_config."""
    out = copy.deepcopy(document)
    apps = out["applications"]
    first = next(a for a in apps if a.get("import_path") == BUILDER_IMPORT_PATH)
    game = first["args"]["game"]
    added = copy.deepcopy(first)
    added.update(name=f"{game}-{version}", route_prefix=f"/{game}/{version}")
    added["args"].update(version=version, profile=profile)
    added.pop("deployments", None)
    apps.append(added)
    return with_weight(out, game, version, 0)


def with_weight(document: dict[str, Any], game: str, version: str, weight: float) -> dict[str, Any]:
    """The config with one version's weight set in the router's `user_config` (live: the
    router neither restarts nor drops a login; the args' weights stay the baseline)."""
    out = copy.deepcopy(document)
    router = router_of(out, game)
    others = [d for d in router.get("deployments") or [] if d["name"] != "router"]
    mine = next((d for d in router.get("deployments") or [] if d["name"] == "router"), {})
    user_config = copy.deepcopy(mine.get("user_config") or {})
    user_config["weights"] = {**user_config.get("weights", {}), version: weight}
    router["deployments"] = [*others, {**mine, "name": "router", "user_config": user_config}]
    return out


def router_of(document: dict[str, Any], game: str) -> dict[str, Any]:
    return next(
        a
        for a in document["applications"]
        if a.get("import_path") == ROUTER_IMPORT_PATH and a["args"]["game"] == game
    )


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float) -> float:
    """Seconds until `predicate` held; TimeoutError after timeout_s."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what}: not seen after {timeout_s:.0f} s")
        time.sleep(0.25)
    return time.monotonic() - started


def answered_by(url: str, game: str, version: str, players: range) -> bool:
    for i in players:
        try:
            response = requests.post(
                url, json={"player_id": player_id(i), "game": game}, timeout=5
            )
        except requests.RequestException:
            return False
        if response.status_code != 200:
            return False
        body = response.json()
        if body.get("ensemble_version") == version and body.get("personalized"):
            return True
    return False


def walk(
    config: Path,
    version: str,
    profile: str,
    *,
    dashboard: str,
    base: str,
    workdir: Path,
    env: dict[str, str] | None = None,
    load_per_s: float = 8.0,
    players: int = 200,
    timeout_s: float = 300.0,
) -> Release:
    """The release, steps 1-4 of the module's docstring, on the service `config` deployed."""
    env = {**os.environ, **ray_auth_env(), **(env or {})}
    document = yaml.safe_load(config.read_text())
    served = configured_apps(config)
    game = served[0].args.game
    others = [a.name for a in served]
    router_name = router_of(document, game)["name"]
    report = Release(version=version, profile=profile)

    def run(*args: str) -> None:
        # The operator's commands run at the serving replicas' niceness (19): in production
        # they run on the operator's machine, and at 0 on a 2-core node their imports (~4
        # CPU-s each) took the cores the replicas answer the game's logins with (one login
        # of 250 refused at 1.1 s during `serve deploy`, .ci/run, 2026-11-28).
        result = run_cli(env, *args, niceness=19)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {result.returncode}: {result.stderr}")

    def deploy(doc: dict[str, Any], name: str) -> None:
        path = workdir / name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        run("serve", "deploy", str(path), "--address", dashboard)

    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    identity = ("--game", game, "--version", version, "--profile", profile)
    run("offers", "train", *identity)
    report.train_s = time.monotonic() - started

    report.other_replicas_before = replica_pids(others)
    router_before = replica_pids([router_name])
    game_url = f"{base}/{game}/v1/offers"
    version_url = f"{base}/{game}/{version}/v1/offers"
    with GameRouteLoad(game_url, game, load_per_s, players) as load:
        published = load.origin = time.monotonic()
        run("offers", "publish", *identity, "--config", str(config))
        report.publish_s = time.monotonic() - published
        report.steps["deploy at weight 0"] = time.monotonic() - published
        added = with_new_version(document, version, profile)
        deploy(added, f"serve_config.{version}-at-0.yaml")
        wait_for(
            lambda: answered_by(version_url, game, version, range(3)),
            f"{version} answering on its route",
            timeout_s,
        )
        report.publish_to_serving_s = time.monotonic() - published
        raised = time.monotonic()
        report.steps["deploy at weight 10"] = raised - published
        deploy(with_weight(added, game, version, NEW_WEIGHT), f"serve_config.{version}-at-10.yaml")
        wait_for(
            lambda: answered_by(game_url, game, version, range(players)),
            f"{version} answering on the game's route",
            timeout_s,
        )
        report.raise_to_routed_s = time.monotonic() - raised
        report.logins = load.logins
    report.other_replicas_after = replica_pids(others)
    report.router_replicas_before = router_before[router_name]
    report.router_replicas_after = replica_pids([router_name])[router_name]
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--config", type=Path, default=PROJECT_ROOT / "serve_config.yaml")
    parser.add_argument("--version", default="2026-12")
    parser.add_argument("--profile", default="standard")
    parser.add_argument("--dashboard", default="http://127.0.0.1:8265")
    parser.add_argument("--base", default="http://127.0.0.1:8000")
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "loadtest" / "results")
    args = parser.parse_args(argv)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    folder = args.out / f"{stamp}-release"
    report = walk(
        args.config,
        args.version,
        args.profile,
        dashboard=args.dashboard,
        base=args.base,
        workdir=folder,
    )
    (folder / "release.json").write_text(json.dumps(report.summary(), indent=2))
    print(json.dumps(report.summary(), indent=2))
    print(f"results: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
