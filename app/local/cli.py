"""Local operations: train, seed dynalite, run everything (the `offers` command).

    offers train     --game G --version V [--profile P] [--force] | --all [--profile P]
    offers prepare   [--config serve_config.yaml]
    offers seed      [--config serve_config.yaml] [--players 10000]
    offers run-local [--config serve_config.yaml] [--players 10000] [--metrics-port 8080]
                     [--dashboard-port 8265]
    offers batch     --game G --version V [--config serve_config.yaml] [--players 10000]
                     [-- offers-batch options]
    offers ray-env   [--config serve_config.yaml]   (`export` lines: eval them before `ray start`)
    offers plan      [--config serve_config.yaml] [--load LOGINS_PER_S] [--cores N]
                     [--runtime onnx|native]
    offers publish   --game G --version V [--profile P] [--config serve_config.yaml]
    offers versions  [--config serve_config.yaml]         (what the model store holds)

(`offers` is `.venv/bin/offers`; `python -m app.local.cli` is the same.) `prepare` trains
(or finds cached) every version the config serves and checks its `deployments:` names
against the layout. `run-local` is what `make run` calls: it prepares, starts dynalite (data
in .local/, git-ignored), creates and seeds the table if needed, starts a one-node Ray with
fixed metrics and dashboard ports (app.local.ray_head), then runs `serve run` against it in
the foreground with Serve's process settings and the config's edge admission (app.edge).
When the config's apps load from a model store (`artifacts: s3://...`), it first starts the
local S3-protocol server they name (moto) and publishes their trained versions into it
(app.local.publishing); `publish` and `versions` default to that store.
Ctrl-C stops Serve, then Ray, then dynalite.
Artifacts go to OFFERS_ARTIFACTS_ROOT (default models/artifacts), unless an app's
`args.artifacts_root` says otherwise. `batch` (what `make batch` calls) scores every player of
one served version with the Ray Data job (`offers-batch`, app.batch) against the local
dynalite: the running one of `make run` if its port answers, else one it starts (and seeds)
and stops. Runs go to OFFERS_BATCH_OUTPUT_URI (default .local/batch), where `make run`'s
supervisors pick up the snapshot. `ray-env` prints the token-auth settings of the project's
clusters (app.local.ray_auth), making the project's token file if it is missing, for a
cluster started by hand and for `serve deploy`/`serve status` against `make run`'s; with
`--config`, also Serve's process settings and that config's edge admission, as `make run`
starts Ray with them. `plan` prints, per ensemble application, the member layout `layout:
auto` builds (app.local.layout_plan): each member's runtime and its predict cost as recorded
at training, its placement and why, and the expected CPU per login against one deployment
per member; `--load`, `--cores` and `--runtime` plan for another load, machine or runtime.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

from pydantic import ValidationError

from app.adapters.model_store import ModelStore
from app.config.ray_env import ray_node_env
from app.config.settings import get_settings
from app.contract.manifest import load_manifest
from app.local import precompute
from app.local.dynalite import Dynalite, local_client
from app.local.layout_plan import PlanRequest, planned_layout, render
from app.local.processes import LOCAL_CREDENTIALS, PROJECT_ROOT, default_sigint, port_is_free
from app.local.publishing import local_model_store, publish, versions_table
from app.local.ray_auth import ray_auth_env, shell_exports
from app.local.ray_head import RayHead
from app.local.s3_server import local_s3_client
from app.local.seeding import ensure_table, seed_game
from app.local.serve_config import (
    ConfigError,
    ConfiguredApp,
    check_deployment_overrides,
    configured_apps,
    configured_routers,
    edge_env,
    local_endpoint,
    local_store,
)
from models import recipes
from models.catalog import GAMES
from models.train import ensure_trained, ensure_trained_all

DEFAULT_CONFIG = PROJECT_ROOT / "serve_config.yaml"
LOCAL_STATE = PROJECT_ROOT / ".local"
# Fixed local ports (README): Prometheus metrics of the node, and the dashboard with the REST
# API that `serve deploy` / `serve status` use.
METRICS_PORT = 8080
DASHBOARD_PORT = 8265

log = logging.getLogger(__name__)


def train(targets: list[tuple[str, str]], profile: str, *, force: bool) -> None:
    """Train (or find cached) versions into the settings' artifacts root; one line each."""
    root = get_settings().artifacts_root
    for game, version in targets:
        started = time.perf_counter()
        folder = ensure_trained(game, version, profile, root=root, force=force)
        manifest = load_manifest(folder)
        mean_auc = sum(m.auc for m in manifest.members) / len(manifest.members)
        print(
            f"{game} {version} {profile}: ensemble AUC {manifest.ensemble_auc:.4f}, "
            f"mean member AUC {mean_auc:.4f}, oracle AUC {manifest.oracle_auc:.4f}, "
            f"{len(manifest.members)} members, {time.perf_counter() - started:.1f}s -> {folder}",
            flush=True,
        )


def prepare(apps: list[ConfiguredApp]) -> None:
    """Train (or find cached) every ensemble version the config serves, the ones to train in
    parallel; check its overrides."""
    started = time.perf_counter()
    folders = ensure_trained_all(
        [(a.args.game, a.args.version, a.args.profile, a.artifacts_root) for a in apps]
    )
    for app, folder in zip(apps, folders, strict=True):
        log.info("models ready: %s (%.1fs)", folder, time.perf_counter() - started)
        check_deployment_overrides(app)


def seed(apps: list[ConfiguredApp], client: Any, table: str, players: int) -> None:
    if ensure_table(client, table):
        log.info("created table %s", table)
    for game in sorted({a.args.game for a in apps}):
        started = time.perf_counter()
        written = seed_game(client, table, game, players)
        if written:
            log.info("seeded %d %s players (%.1fs)", written, game, time.perf_counter() - started)
        else:
            log.info("%s players already seeded", game)


def run_local(
    apps: list[ConfiguredApp],
    endpoint: tuple[str, int, str],
    config: Path,
    players: int,
    *,
    metrics_port: int = METRICS_PORT,
    dashboard_port: int = DASHBOARD_PORT,
) -> int:
    """Trains (or finds) the served versions while dynalite, its seed and the Ray head start:
    none of those needs a model, and training is the longest step of a fresh machine's first
    run (one process per version). Then the model store, the versions published into it, and
    `serve run` in the foreground. A ConfigError (an override naming no deployment of the
    plan) is raised once training has found it, everything stopped.

    On this 2-core host the two versions' training fills both cores, so the overlap measured
    within noise (fresh clones, 2 interleaved rounds, 2026-11-28: 171.5 s [159.1-183.9] to
    the first answer against 173.7 s [169.3-178.1] in series); it pays where a machine has
    more cores than the config has versions."""
    host, port, table = endpoint
    LOCAL_STATE.mkdir(exist_ok=True)
    dynalite = Dynalite(
        port, LOCAL_STATE / "dynalite", host=host, log_path=LOCAL_STATE / "dynalite.log"
    )
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="training") as training:
        trained = training.submit(prepare, apps)
        with dynalite:
            log.info("dynalite on %s (pid %s)", dynalite.endpoint_url, dynalite.pid)
            # Its data is on disk: if it dies, it comes back with it, and the breaker in each
            # supervisor lets the next trial read through (no restart of the service).
            dynalite.supervise()
            seed(apps, dynalite.client(timeout_s=10.0), table, players)
            # Serve's process-level performance settings and the edge's admission (app.edge)
            # where Ray starts; the caller's environment wins.
            env = {**ray_node_env(), **edge_env(config), **os.environ}
            head = RayHead(
                Path(sys.executable).parent,
                env,
                LOCAL_STATE / "ray-head.log",
                metrics_port=metrics_port,
                dashboard_port=dashboard_port,
            )
            with head:
                log.info("Ray up: metrics at %s, dashboard at %s", head.metrics_url,
                         head.dashboard_url)  # fmt: skip
                trained.result()
                with local_model_store(apps, LOCAL_STATE / "s3.log"):
                    return _serve(apps, config, head, endpoint)


def _serve(
    apps: list[ConfiguredApp], config: Path, head: RayHead, endpoint: tuple[str, int, str]
) -> int:
    """`serve run` of the config on the head, in the foreground, and each version's
    precomputed snapshot scored beside it once the service answers."""
    for game in configured_routers(config):
        log.info("serving %s at http://127.0.0.1:8000%s/v1/offers", game[0], game[1])
    for app in apps:
        log.info("serving %s at http://127.0.0.1:8000%s/v1/offers", app.name, app.route_prefix)
    # The fallback tier from the first run: each version's snapshot, scored on this Ray once
    # the service answers, when none is fresh (app.local.precompute).
    builder, stop = precompute.start(
        apps, {**_batch_env(apps[0], endpoint), "RAY_ADDRESS": head.address}
    )
    try:
        return _run_serve(config, head.address, head.env)
    finally:
        # Its job stopped before the head: none is left waiting on a Ray that is gone.
        stop.set()
        builder.join(timeout=precompute.JOB_STOP_TIMEOUT_S + 5)


def batch(
    app: ConfiguredApp, endpoint: tuple[str, int, str], players: int, extra: list[str]
) -> int:
    """The batch job on one served version, against the local dynalite (started if down)."""
    host, port, table = endpoint
    env = {**os.environ, **_batch_env(app, endpoint)}
    command = [
        sys.executable,
        "-m",
        "app.batch",
        *("--game", app.args.game, "--version", app.args.version, "--profile", app.args.profile),
        *extra,
    ]
    if not port_is_free(host, port):
        log.info("using the dynalite already on %s:%d", host, port)
        seed([app], local_client(f"http://{host}:{port}", timeout_s=10.0), table, players)
        return subprocess.run(command, cwd=PROJECT_ROOT, env=env, check=False).returncode
    LOCAL_STATE.mkdir(exist_ok=True)
    with Dynalite(
        port, LOCAL_STATE / "dynalite", host=host, log_path=LOCAL_STATE / "dynalite.log"
    ) as dynalite:
        seed([app], dynalite.client(timeout_s=10.0), table, players)
        return subprocess.run(command, cwd=PROJECT_ROOT, env=env, check=False).returncode


def _batch_env(app: ConfiguredApp, endpoint: tuple[str, int, str]) -> dict[str, str]:
    """What the batch job needs to read the local table and write where `make run`'s
    supervisors look for snapshots."""
    host, port, table = endpoint
    return {
        "OFFERS_DYNAMODB_ENDPOINT_URL": f"http://{host}:{port}",
        "OFFERS_DYNAMODB_TABLE": table,
        "OFFERS_ARTIFACTS_ROOT": str(app.artifacts_root),
        "OFFERS_BATCH_OUTPUT_URI": app.settings.batch_output_uri,
        **{k.upper(): v for k, v in LOCAL_CREDENTIALS.items()},
        # The job's ray.init() starts or joins a cluster with the project's token, never
        # one Ray would write under ~/.ray.
        **ray_auth_env(),
    }


def _run_serve(config: Path, address: str, env: dict[str, str]) -> int:
    serve_cli = Path(sys.executable).with_name("serve")
    child = subprocess.Popen(
        [str(serve_cli), "run", "--address", address, str(config)],
        cwd=PROJECT_ROOT,
        env=env,
        # A shell that starts us in the background leaves SIGINT ignored, and the child would
        # inherit that; reset it so `serve run` always shuts its Ray down on SIGINT.
        preexec_fn=default_sigint,
    )

    # A terminal Ctrl-C reaches `serve run` by itself (same process group); a SIGTERM to us
    # is forwarded as SIGINT so `serve run` shuts its Ray instance down cleanly either way.
    def forward(signum: int, _frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signal.SIGINT)

    signal.signal(signal.SIGTERM, forward)
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:
            forward(signal.SIGINT, None)
            try:
                return child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
                return child.wait()


def store_command(args: argparse.Namespace) -> int:
    from app.adapters.model_store import StoreUnavailable, VersionConflict, store_of
    from app.contract.artifacts import ArtifactIntegrityError

    settings = get_settings()
    try:
        store = store_of(settings) if settings.model_store_uri else config_store(args.config)
        if args.command == "publish":
            print(publish(store, settings.artifacts_root, args.profile, args.game, args.version))
        else:
            print(versions_table(store.versions()))
    except (ValueError, FileNotFoundError, VersionConflict, ArtifactIntegrityError) as exc:
        print(f"offers {args.command}: {exc}", file=sys.stderr)
        return 2
    except StoreUnavailable as exc:
        print(f"offers {args.command}: {exc}", file=sys.stderr)
        return 3
    return 0


def config_store(config: Path) -> ModelStore:
    """With no OFFERS_MODEL_STORE_URI: the local store the config's apps load from (the
    one `make run` starts), with the local server's credentials."""
    apps = configured_apps(config)
    store = local_store(apps)
    if store is None:
        raise ValueError(
            f"no model store: set OFFERS_MODEL_STORE_URI=s3://bucket/prefix, or serve "
            f"`artifacts: s3://...` in {config}"
        )
    uri = next(a.store_uri for a in apps if a.store_uri)
    host, port = store
    return ModelStore(local_s3_client(f"http://{host}:{port}", timeout_s=30.0), str(uri))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="offers", description=(__doc__ or "").split("\n")[0])
    commands = p.add_subparsers(dest="command", required=True)
    for name in ("prepare", "seed", "run-local", "batch"):
        command = commands.add_parser(name)
        command.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
        if name == "batch":
            command.add_argument("--game", required=True)
            command.add_argument("--version", required=True)
            command.add_argument(
                "extra", nargs=argparse.REMAINDER, help="after --: offers-batch options"
            )
        if name != "prepare":
            command.add_argument("--players", type=int, default=10_000, help="players per game")
        if name == "run-local":
            command.add_argument("--metrics-port", type=int, default=METRICS_PORT)
            command.add_argument("--dashboard-port", type=int, default=DASHBOARD_PORT)
    ray_env = commands.add_parser(
        "ray-env", help="exports for starting the project's Ray clusters by hand"
    )
    ray_env.add_argument(
        "--config",
        type=Path,
        help="also Serve's process settings and this config's edge admission (offers-haproxy)",
    )
    plan = commands.add_parser("plan", help="the member layout `layout: auto` builds here")
    plan.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    plan.add_argument("--load", type=float, help="logins/s per supervisor replica")
    plan.add_argument("--cores", type=int, help="cores one fan-out can use")
    plan.add_argument(
        "--runtime", choices=["onnx", "native"], help="member runtime (default: the app's)"
    )
    publishing = commands.add_parser("publish", help="a trained version into the model store")
    publishing.add_argument("--game", required=True)
    publishing.add_argument("--version", required=True)
    publishing.add_argument("--profile", choices=sorted(recipes.PROFILES), default="standard")
    versions = commands.add_parser("versions", help="the versions the model store holds")
    for command in (publishing, versions):
        command.add_argument(
            "--config",
            type=Path,
            default=DEFAULT_CONFIG,
            help="without OFFERS_MODEL_STORE_URI: the local store this config loads from",
        )
    training = commands.add_parser("train", help="train ensemble versions (cached)")
    training.add_argument("--game", choices=GAMES)
    training.add_argument("--version", choices=sorted(recipes.VERSIONS))
    training.add_argument("--profile", choices=sorted(recipes.PROFILES), default="standard")
    training.add_argument("--all", action="store_true", help="every game and version")
    training.add_argument("--force", action="store_true", help="retrain even if cached")
    return p


def main(argv: list[str] | None = None) -> int:
    # Ctrl-C must always unwind (stopping Serve, then dynalite), even if we were started with
    # SIGINT ignored (a background job of a non-interactive shell).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cli = parser()
    args = cli.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    if args.command == "ray-env":
        serve_env = {**ray_node_env(), **edge_env(args.config)} if args.config else {}
        print(shell_exports(extra=serve_env))
        return 0
    if args.command in ("publish", "versions"):
        return store_command(args)
    if args.command == "train":
        if not args.all and not (args.game and args.version):
            cli.error("give --game and --version, or --all")
        targets = (
            [(g, v) for g in GAMES for v in recipes.VERSIONS]
            if args.all
            else [(args.game, args.version)]
        )
        train(targets, args.profile, force=args.force)
        return 0
    try:
        apps = configured_apps(args.config)
        if not apps:
            cli.error(f"{args.config} declares no ensemble applications")
        if args.command == "prepare":
            prepare(apps)
            return 0
        if args.command == "plan":
            prepare(apps)
            request = PlanRequest(load=args.load, cores=args.cores, runtime=args.runtime)
            for app in apps:
                print(render(app, *planned_layout(app, request)), end="\n\n")
            return 0
    except (ValidationError, ConfigError) as exc:
        # A config a user wrote: say what is wrong with it, no traceback.
        print(f"offers {args.command}: {args.config}: {exc}", file=sys.stderr)
        return 2
    try:
        host, port, table = local_endpoint(apps)
    except ConfigError as exc:
        print(f"offers {args.command}: {args.config}: {exc}", file=sys.stderr)
        return 2
    if args.command == "seed":
        seed(apps, local_client(f"http://{host}:{port}", timeout_s=10.0), table, args.players)
        return 0
    if args.command == "batch":
        chosen = [a for a in apps if (a.args.game, a.args.version) == (args.game, args.version)]
        if not chosen:
            served = sorted(f"{a.args.game} {a.args.version}" for a in apps)
            print(
                f"offers batch: {args.config} serves no {args.game} {args.version} "
                f"(it serves: {', '.join(served)})",
                file=sys.stderr,
            )
            return 2
        prepare(chosen)
        extra = [a for a in args.extra if a != "--"]
        return batch(chosen[0], (host, port, table), args.players, extra)
    try:
        return run_local(
            apps,
            (host, port, table),
            args.config,
            args.players,
            metrics_port=args.metrics_port,
            dashboard_port=args.dashboard_port,
        )
    except ConfigError as exc:
        print(f"offers {args.command}: {args.config}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
