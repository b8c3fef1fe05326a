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
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from app.local.dynalite import Dynalite
from app.local.processes import LOCAL_CREDENTIALS, PROJECT_ROOT, free_port
from app.local.ray_auth import ray_auth_env
from app.local.seeding import ensure_table, seed_game
from models.train import ensure_trained

RESULTS = PROJECT_ROOT / "loadtest" / "results"
LIMIT_BATCH_SIZES = (512, 2048, 8192)
TABLE = "player-features-batch-bench"
SMALL_TABLE = "player-features-batch-bench-quarter"


def log(message: str) -> None:
    print(f"[batch-bench {datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


class PeakRss:
    """Peak total RSS of this process and all its descendants (Ray's workers included),
    and the CPU seconds each kind of process used (the last sample of each pid)."""

    def __init__(self, interval_s: float = 0.25) -> None:
        self.peak_mb = 0.0
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._cpu: dict[int, tuple[str, float]] = {}
        self._base: dict[int, float] = {}

    @staticmethod
    def _kind(command: str) -> str:
        if "dynalite" in command:
            return "dynalite"
        if "MapBatches(ScorePlayers)" in command:
            return "scoring actors"
        if "ReadDynamoDBScan" in command or "Write" in command:
            return "read and write tasks"
        return "driver and Ray"

    def _sample(self) -> None:
        me = psutil.Process()
        total = 0
        for proc in [me, *me.children(recursive=True)]:
            try:
                command = " ".join(proc.cmdline())
                times = proc.cpu_times()
                used = times.user + times.system
                self._base.setdefault(proc.pid, used)
                kind = self._kind(command)
                if kind != "driver and Ray" or proc.pid not in self._cpu:
                    self._cpu[proc.pid] = (kind, used)
                else:
                    self._cpu[proc.pid] = (self._cpu[proc.pid][0], used)
                if kind == "dynalite":
                    continue  # the table, not the job
                total += proc.memory_info().rss
            except psutil.Error:
                continue
        self.peak_mb = max(self.peak_mb, total / 2**20)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds used while sampling, by kind of process (a worker counts as what it
        was last seen doing)."""
        out: dict[str, float] = {}
        for pid, (kind, used) in self._cpu.items():
            out[kind] = out.get(kind, 0.0) + used - self._base.get(pid, 0.0)
        return {k: round(v, 1) for k, v in sorted(out.items())}

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def __enter__(self) -> PeakRss:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def spread(values: list[float], digits: int = 1) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def model_compute_limit(version_dir: Path, features: Path, cpus: float) -> dict[str, Any]:
    """Players/s of one process scoring with every member, best batch size, times cpus."""
    import numpy as np
    import pyarrow.parquet as pq

    from app.adapters.member_model import MemberModel
    from app.batch.datasource import feature_columns
    from app.contract.manifest import load_manifest
    from app.core.batch_scoring import BatchScorer
    from app.core.offers import OfferCatalog

    manifest = load_manifest(version_dir)
    catalog = OfferCatalog(manifest)
    members = [MemberModel.load(e, version_dir) for e in manifest.members]
    scorer = BatchScorer(catalog, members, {e.name: e.weight for e in manifest.members})
    table = pq.read_table(features, columns=feature_columns(manifest.feature_schema))
    rows = np.column_stack([table.column(c).to_numpy() for c in table.column_names]).astype(
        np.float32
    )
    rows = rows[:40_000]  # enough for a steady rate; the limit is a rate, not a run
    by_size = {}
    for size in LIMIT_BATCH_SIZES:
        started = time.perf_counter()
        for i in range(0, rows.shape[0], size):
            scorer.score(rows[i : i + size])
        by_size[size] = rows.shape[0] / (time.perf_counter() - started)
    best = max(by_size, key=lambda s: by_size[s])
    return {
        "one_process_players_per_s": round(by_size[best], 1),
        "best_batch_size": best,
        "by_batch_size": {str(k): round(v, 1) for k, v in by_size.items()},
        "cpus": cpus,
        "players_per_s": round(by_size[best] * cpus, 1),
    }


def read_stage(args: Any, out: Path) -> dict[str, Any]:
    import ray

    from app.batch.datasource import PlayerScanDatasource
    from app.batch.job import WRITE_NUM_CPUS
    from app.contract.manifest import load_manifest

    manifest = load_manifest(args.version_dir())
    source = PlayerScanDatasource(
        manifest.feature_schema,
        manifest.game,
        segments=args.segments,
        read_budget_per_s=args.read_budget_per_s,
        unit=args.read_budget_unit,
    )
    started = time.perf_counter()
    ray.data.read_datasource(
        source, override_num_blocks=args.segments, num_cpus=args.read_num_cpus
    ).write_parquet(str(out), ray_remote_args={"num_cpus": WRITE_NUM_CPUS})
    elapsed = time.perf_counter() - started
    players = _rows(out)
    return {"players": players, "elapsed_s": round(elapsed, 2), "players_per_s": players / elapsed}


def score_stage(args: Any, features: Path, out: Path) -> dict[str, Any]:
    import ray

    from app.batch.job import WRITE_NUM_CPUS, score

    # The pool starts at one actor: read_parquet lists its files in a task that takes a
    # whole CPU (not configurable), which two actors holding 1.7 of 2 CPUs would starve.
    args = args.model_copy(update={"min_actors": 1})
    started = time.perf_counter()
    features_read = ray.data.read_parquet(str(features), num_cpus=args.read_num_cpus)
    score(features_read, args, datetime.now(UTC)).write_parquet(
        str(out), ray_remote_args={"num_cpus": WRITE_NUM_CPUS}
    )
    elapsed = time.perf_counter() - started
    players = _rows(out)
    return {"players": players, "elapsed_s": round(elapsed, 2), "players_per_s": players / elapsed}


def e2e_stage(args: Any) -> dict[str, Any]:
    from app.batch.job import run

    with PeakRss() as memory:
        started = time.perf_counter()
        summary = run(args)
        whole = time.perf_counter() - started
    return {
        "players": summary.players,
        "elapsed_s": summary.elapsed_s,
        "players_per_s": summary.players_per_s,
        "with_snapshot_s": round(whole, 2),
        "peak_rss_mb": round(memory.peak_mb, 1),
        "snapshot_bytes_per_player": summary.snapshot_bytes_per_player,
        "cpu_seconds": memory.cpu_seconds(),
    }


def _rows(folder: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in folder.rglob("*.parquet"))


def lookup_cost(players: int) -> dict[str, float]:
    """µs per precomputed-tier lookup at this population and at 100x it (synthetic keys)."""
    import numpy as np

    from app.contract import offer_snapshot as snap

    out = {}
    for n in (players, players * 100):
        rng = np.random.default_rng(0)
        data = snap.build(
            game="g",
            version="v",
            training_config_hash="h",
            offer_ids=["a", "b"],
            keys=rng.integers(0, 2**63, n, dtype=np.uint64),
            offers=np.zeros(n, np.uint8),
            propensities=np.full(n, 0.5, np.float32),
            scored_at=datetime.now(UTC),
        )
        snapshot = snap.parse(data)
        ids = [f"p{i:07d}" for i in range(20_000)]
        started = time.perf_counter()
        for pid in ids:
            snapshot.find(snap.snapshot_key(pid))
        out[str(n)] = round((time.perf_counter() - started) / len(ids) * 1e6, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="batch_bench", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--players", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--game", default="galaxy-raiders")
    p.add_argument("--version", default="2026-11")
    p.add_argument("--profile", default="standard")
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
    ns = p.parse_args(argv)

    # The clusters this run starts use the project's token, not one under ~/.ray. Set before
    # Ray is imported: the driver reads its auth mode once, at import.
    os.environ.update(ray_auth_env())
    import ray

    from app.config.batch_args import BatchJobArgs

    if ns.worker_niceness is not None:
        # Read by the raylet this process starts: its workers (the actors) run at this
        # niceness instead of Ray's 15.
        os.environ["RAY_worker_niceness"] = str(ns.worker_niceness)
    folder = RESULTS / (datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-batch")
    folder.mkdir(parents=True)
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
                k: [] for k in ("limit", "read", "score", "e2e")
            }
            features = work / "features-0"
            for r in range(ns.rounds):
                # Interleaved, rotating order; the scoring stage reads what this round's
                # read stage wrote, and the limit scores the newest of those.
                units = ["read+score", "limit", "e2e"]
                for unit in units[r % 3 :] + units[: r % 3]:
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
                    else:
                        rounds["e2e"].append(e2e_stage(job))
                        log(f"round {r} e2e: {rounds['e2e'][-1]}")
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
    report = {
        "command": "python -m loadtest.batch_bench " + " ".join(argv or sys.argv[1:]),
        "players": ns.players,
        "rounds": ns.rounds,
        "cpus": cpus,
        "worker_niceness": ns.worker_niceness,
        "job": json.loads(job.model_dump_json()),
        "players_per_s": {
            "model_compute_limit": spread(limit),
            "end_to_end": spread(e2e),
            "scoring_stage_from_parquet": spread(score),
            "read_stage": spread(read),
        },
        # Each round's throughput over the same round's limit.
        "end_to_end_over_limit": spread(
            [e / lim for e, lim in zip(e2e, limit, strict=True)], digits=3
        ),
        "scoring_over_limit": spread(
            [s / lim for s, lim in zip(score, limit, strict=True)], digits=3
        ),
        "peak_rss_mb": {
            str(ns.players): spread([x["peak_rss_mb"] for x in rounds["e2e"]]),
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
    keys = ("players_per_s", "end_to_end_over_limit", "scoring_over_limit", "peak_rss_mb")
    log(json.dumps({k: report[k] for k in (*keys, "lookup_us")}))
    log(f"report: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
