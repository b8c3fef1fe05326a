"""The batch benchmark: players/s of the Ray Data job against the model-compute limit.

    python -m loadtest.batch_bench [--players 100000] [--rounds 3] [--profile standard]
                                   [--report loadtest/results/<ts>/report.json]

One dynalite (in memory) seeded with `--players` players; one local Ray on every core. Each
round, in rotating order:

- **limit**: the model-compute limit. One process (this one) scores the same players'
  candidate matrices with every member, at the batch size that was fastest among
  LIMIT_BATCH_SIZES, times the CPUs Ray may use.
- **read**: the Scan stage alone (paced Scan -> decode -> Parquet of the decoded items, no
  scoring). Its output is the Parquet snapshot the next stage reads.
- **score**: the scoring stage alone: that Parquet -> the actor pool -> Parquet.
- **e2e**: the whole job (app.batch.job.run): Scan -> actors -> Parquet -> snapshot.
- **e2e-native**: the same job with the members' native runtime (`--runtime native`): the
  compiled members' gain on the batch path, as a ratio per round.

Peak RSS of the whole tree (this driver, Ray, its workers; dynalite apart) is sampled during
e2e, at the full population and at a quarter of it (a second game's rows are not needed:
the quarter run reads a table of its own), to show that memory does not grow with the
population. Figures are medians over the rounds with min-max. The report is
`<folder>/report.json` under the key "batch" (merged into an existing report with --report).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from app.local.dynalite import Dynalite
from app.local.processes import LOCAL_CREDENTIALS, free_port
from app.local.ray_auth import ray_auth_env
from app.local.seeding import ensure_table, seed_game
from loadtest.batch_bench.stages import (
    e2e_stage,
    lookup_cost,
    model_compute_limit,
    read_stage,
    score_stage,
)
from loadtest.harness.results import Study, add_version_args, spread
from models.train import ensure_trained

TABLE = "player-features-batch-bench"
SMALL_TABLE = "player-features-batch-bench-quarter"

STUDY = Study("loadtest.batch_bench", __doc__, "batch-bench")
log = STUDY.log


def run(ns: argparse.Namespace) -> Path:
    """Seed, interleaved rounds of every stage on one local Ray, the quarter run, the report."""

    # The clusters this run starts use the project's token, not one under ~/.ray. Set before
    # Ray is imported: the driver reads its auth mode once, at import.
    os.environ.update(ray_auth_env())
    import ray

    from app.config.batch_args import BatchJobArgs

    if ns.worker_niceness is not None:
        # Read by the raylet this process starts: its workers (the actors) run at this
        # niceness instead of Ray's 15.
        os.environ["RAY_worker_niceness"] = str(ns.worker_niceness)
    folder = STUDY.folder("batch")
    from app.config.settings import get_settings

    version_dir = ensure_trained(
        ns.game, ns.version, ns.profile, root=get_settings().artifacts_root
    )
    cpus = float(os.cpu_count() or 1)
    work = Path(tempfile.mkdtemp(prefix="batch-bench-", dir=folder))
    with Dynalite(free_port(), data_dir=None, log_path=folder / "dynalite.log") as dynalite:
        client = dynalite.client(timeout_s=30.0)
        started = time.perf_counter()
        for table, players in ((TABLE, ns.players), (SMALL_TABLE, ns.players // 4)):
            ensure_table(client, table)
            seed_game(client, table, ns.game, players)
        seeded_s = time.perf_counter() - started
        log(f"seeded {ns.players} + {ns.players // 4} players in {seeded_s:.0f}s")
        env = {
            "OFFERS_DYNAMODB_ENDPOINT_URL": dynalite.endpoint_url,
            "OFFERS_DYNAMODB_TABLE": TABLE,
            **{k.upper(): v for k, v in LOCAL_CREDENTIALS.items()},
        }
        os.environ.update(env)
        ray.init(
            address="local",
            num_cpus=int(cpus),
            include_dashboard=False,
            runtime_env={"env_vars": env},
            log_to_driver=False,
        )
        try:
            job = BatchJobArgs(
                game=ns.game,
                version=ns.version,
                profile=ns.profile,
                artifacts_root=version_dir.parents[2],
                output_uri=str(work / "runs"),
                segments=ns.segments,
                read_budget_per_s=ns.read_budget,
                # 2 segments x 0.1 + a write's 0.1 + 2 actors x 0.85 = 2.0 CPUs: one actor
                # per core, and the Scan and the writes still get scheduled.
                read_num_cpus=0.1,
                actor_num_cpus=0.85,
                min_actors=int(cpus),
                max_actors=int(cpus),
            )
            rounds: dict[str, list[dict[str, Any]]] = {
                k: [] for k in ("limit", "read", "score", "e2e", "e2e_native")
            }
            features = work / "features-0"
            for r in range(ns.rounds):
                # Interleaved, rotating order; the scoring stage reads what this round's
                # read stage wrote, and the limit scores the newest of those.
                units = ["read+score", "limit", "e2e", "e2e-native"]
                for unit in units[r % len(units) :] + units[: r % len(units)]:
                    if unit == "read+score":
                        fresh = work / f"features-{r}"
                        rounds["read"].append(read_stage(job, fresh))
                        log(f"round {r} read: {rounds['read'][-1]}")
                        rounds["score"].append(score_stage(job, fresh, work / f"scored-{r}"))
                        log(f"round {r} score: {rounds['score'][-1]}")
                        features = fresh
                    elif unit == "limit":
                        rounds["limit"].append(model_compute_limit(version_dir, features, cpus))
                        log(f"round {r} limit: {rounds['limit'][-1]}")
                    elif unit == "e2e":
                        rounds["e2e"].append(e2e_stage(job))
                        log(f"round {r} e2e: {rounds['e2e'][-1]}")
                    else:
                        native = job.model_copy(update={"runtime": "native"})
                        rounds["e2e_native"].append(e2e_stage(native))
                        log(f"round {r} e2e native: {rounds['e2e_native'][-1]}")
        finally:
            ray.shutdown()
        # The quarter-size run on a fresh Ray whose workers read the small table.
        ray.init(
            address="local",
            num_cpus=int(cpus),
            include_dashboard=False,
            runtime_env={"env_vars": {**env, "OFFERS_DYNAMODB_TABLE": SMALL_TABLE}},
            log_to_driver=False,
        )
        try:
            quarter = e2e_stage(job.model_copy(update={"output_uri": str(work / "runs-quarter")}))
            log(f"quarter e2e: {quarter}")
        finally:
            ray.shutdown()
    limit = [x["players_per_s"] for x in rounds["limit"]]
    e2e = [x["players_per_s"] for x in rounds["e2e"]]
    score = [x["players_per_s"] for x in rounds["score"]]
    read = [x["players_per_s"] for x in rounds["read"]]
    native = [x["players_per_s"] for x in rounds["e2e_native"]]
    report = {
        "command": ns.command,
        "players": ns.players,
        "rounds": ns.rounds,
        "cpus": cpus,
        "worker_niceness": ns.worker_niceness,
        "job": json.loads(job.model_dump_json()),
        "players_per_s": {
            "model_compute_limit": spread(limit, digits=1),
            "end_to_end": spread(e2e, digits=1),
            "scoring_stage_from_parquet": spread(score, digits=1),
            "read_stage": spread(read, digits=1),
            "end_to_end_native_members": spread(native, digits=1),
        },
        # Each round's compiled job over the same round's native one (the job's `runtime`).
        "end_to_end_compiled_over_native": spread(
            [e / n for e, n in zip(e2e, native, strict=True)], digits=2
        ),
        # Each round's throughput over the same round's limit.
        "end_to_end_over_limit": spread(
            [e / lim for e, lim in zip(e2e, limit, strict=True)], digits=3
        ),
        "scoring_over_limit": spread(
            [s / lim for s, lim in zip(score, limit, strict=True)], digits=3
        ),
        "peak_rss_mb": {
            str(ns.players): spread([x["peak_rss_mb"] for x in rounds["e2e"]], digits=1),
            str(ns.players // 4): quarter["peak_rss_mb"],
        },
        "snapshot_bytes_per_player": rounds["e2e"][-1]["snapshot_bytes_per_player"],
        "lookup_us": lookup_cost(ns.players),
        "raw": rounds,
        "quarter_run": quarter,
    }
    target = ns.report or folder / "report.json"
    merged = json.loads(target.read_text()) if target.exists() else {}
    merged["batch"] = report
    target.write_text(json.dumps(merged, indent=2))
    keys = (
        "players_per_s",
        "end_to_end_compiled_over_native",
        "end_to_end_over_limit",
        "scoring_over_limit",
        "peak_rss_mb",
    )
    log(json.dumps({k: report[k] for k in (*keys, "lookup_us")}))
    log(f"report: {target}")
    return folder


def main(argv: list[str] | None = None) -> int:
    p = STUDY.parser(rounds=3)
    p.add_argument("--players", type=int, default=100_000)
    add_version_args(p)
    p.add_argument("--segments", type=int, default=2)
    p.add_argument("--read-budget", type=float, default=1_000_000.0, help="items/s (unpaced)")
    p.add_argument("--report", type=Path, default=None, help="merge into this report.json")
    p.add_argument(
        "--worker-niceness",
        type=int,
        default=None,
        help="Ray's worker niceness (RAY_worker_niceness; Ray's default is 15, the limit "
        "process runs at 0)",
    )
    ns = STUDY.parse(p, argv)
    return STUDY.run(lambda: run(ns))
