"""Start, watch and stop a system under test, each as its own process tree: the ensemble under
`serve run` (EnsembleSystem) and the process every Ray node or peer server runs in
(ManagedProcess)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import yaml

from app.local.dynalite import Dynalite
from app.local.processes import (
    LOCAL_CREDENTIALS,
    PROJECT_ROOT,
    ChildProcess,
    Managed,
    ProcessFailed,
    free_port,
)
from app.local.ray_auth import ray_auth_env
from app.local.seeding import ensure_table, seed_game
from app.local.serve_config import edge_env, from_checkout
from loadtest.harness import variant as variants
from loadtest.harness.http_ready import answers
from loadtest.harness.variant import Variant

BIN = Path(sys.executable).parent


def run_cli(
    env: dict[str, str], *args: str, timeout: float = 600, niceness: int = 0
) -> subprocess.CompletedProcess[str]:
    """One of this environment's commands (`serve`, `ray`, `offers`, ...) from the project
    root, its output captured: what the README has a user type. `niceness` > 0 runs it at
    that niceness: an operator's command that, in production, runs on another machine than
    the replicas it deploys to."""
    return subprocess.run(
        [str(BIN / args[0]), *args[1:]],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=(lambda: os.nice(niceness)) if niceness > 0 else None,
    )


class SystemFailed(RuntimeError):
    pass


class ManagedProcess(ChildProcess):
    """A system under test or a Ray node: a ChildProcess (its own session, log, group stop)
    stopped with SIGINT, then SIGTERM, then SIGKILL, whose descendants that left its group
    (Ray workers orphaned by a hard kill) are found from its process tree and killed by pid,
    never by a pattern."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        log_path: Path,
        *,
        before_exec: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(args, log_path=log_path, env=env, before_exec=before_exec)

    def tree(self) -> list[psutil.Process]:
        """The process and every descendant (for Ray: GCS, raylet and all replicas)."""
        if self.pid is None:
            return []
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self, grace_s: float = 60.0) -> None:
        family = self.tree()
        self.stop_steps = ((signal.SIGINT, grace_s), (signal.SIGTERM, 10.0))
        super().stop()
        _, alive = psutil.wait_procs([p for p in family if p.is_running()], timeout=10)
        for leftover in alive:
            try:
                leftover.kill()
            except psutil.NoSuchProcess:
                pass


def dynamo_env(endpoint_url: str, table: str) -> dict[str, str]:
    return {
        "OFFERS_DYNAMODB_ENDPOINT_URL": endpoint_url,
        "OFFERS_DYNAMODB_TABLE": table,
        "AWS_ACCESS_KEY_ID": LOCAL_CREDENTIALS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": LOCAL_CREDENTIALS["aws_secret_access_key"],
    }


class System(Managed):
    """One system under test: a process tree serving `<base_url><route_prefix>/v1/offers`."""

    name: str

    def __init__(self, port: int, route_prefix: str, log_path: Path) -> None:
        self.port = port
        self.route_prefix = route_prefix
        self.log_path = log_path
        self.process: ManagedProcess | None = None
        # Runs in the system's first process before exec (loadtest.harness.isolation).
        self.before_exec: Callable[[], None] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def start(self, ready_timeout_s: float = 600.0) -> System:
        args, env = self._command()
        self.process = ManagedProcess(args, env, self.log_path, before_exec=self.before_exec)
        self.process.start()
        try:
            self._wait_ready(ready_timeout_s)
        except BaseException:
            # Includes Ctrl-C/SIGTERM while starting: `with` would not call __exit__ here.
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.process is not None
        url = f"{self.base_url}{self.route_prefix}/healthz"
        try:
            self.process.wait_ready(lambda: answers(url), timeout_s, poll_s=0.5)
        except ProcessFailed as exc:
            raise SystemFailed(f"{self.name}: {exc}") from exc

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None


class EnsembleSystem(System):
    """`serve run` of a Serve config derived from serve_config.yaml (local Ray started by it)."""

    name = "ensemble"

    def __init__(
        self,
        config_path: Path,
        route_prefix: str,
        port: int,
        log_path: Path,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(port, route_prefix, log_path)
        self.config_path = config_path
        self.extra_env = extra_env or {}

    def _command(self) -> tuple[list[str], dict[str, str]]:
        # `serve run` starts a local Ray: with the project's token, not one under ~/.ray.
        return [str(BIN / "serve"), "run", str(self.config_path)], {
            **os.environ,
            **ray_auth_env(),
            **self.extra_env,
        }


def derived_serve_config(
    base: Path,
    *,
    profile: str,
    port: int,
    endpoint_url: str,
    table: str,
    out: Path,
    variant: Variant | None = None,
) -> tuple[Path, str, dict[str, str]]:
    """Write a copy of `base` serving its first application with `profile` on `port`,
    optionally rewritten to an ablation variant.

    Returns the new config's path, the application's route prefix and the environment
    `serve run` must start Ray with.
    """
    document = yaml.safe_load(base.read_text())
    document["http_options"] = {**document.get("http_options", {}), "port": port}
    app = document["applications"][0]
    document["applications"] = [app]
    app["args"] = {**app.get("args", {}), "profile": profile}
    env = app.setdefault("runtime_env", {}).setdefault("env_vars", {})
    env.update(dynamo_env(endpoint_url, table))
    from_checkout(app)  # `profile` may differ from the store's build
    if variant is not None:
        variants.apply(variant, app)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(document, sort_keys=False))
    return out, app["route_prefix"], variants.ray_env(variant, edge_env(out))


@dataclass(frozen=True)
class SeededEnsemble:
    """A dynalite of its own, seeded, and the derived Serve config that reads it."""

    dynalite: Dynalite
    config: Path
    route_prefix: str
    ray_env: dict[str, str]
    port: int


@contextmanager
def seeded_ensemble(
    base: Path, *, profile: str, game: str, players: int, table: str, folder: Path
) -> Iterator[SeededEnsemble]:
    """The start-up the single-system studies share: a dynalite (stopped on exit) with
    `players` of `game` in `table`, and `base`'s first application derived for `profile`
    on a free port against it (derived_serve_config). Start EnsembleSystem on it."""
    with Dynalite(free_port(), data_dir=None, log_path=folder / "dynalite.log") as dynalite:
        client = dynalite.client(timeout_s=10.0)
        ensure_table(client, table)
        seed_game(client, table, game, players)
        port = free_port()
        config, prefix, ray_env = derived_serve_config(
            base,
            profile=profile,
            port=port,
            endpoint_url=dynalite.endpoint_url,
            table=table,
            out=folder / "serve_config.yaml",
        )
        yield SeededEnsemble(dynalite, config, prefix, ray_env, port)
