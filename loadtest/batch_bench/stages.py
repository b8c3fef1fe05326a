"""The batch benchmark's stages, each timed alone: the model-compute limit, the Scan, the
scoring from Parquet, the whole job; the peak RSS sampler; the snapshot lookup's cost."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from loadtest.harness.resources import Sampler

LIMIT_BATCH_SIZES = (512, 2048, 8192)


class PeakRss(Sampler):
    """Peak total RSS of this process and all its descendants (Ray's workers included),
    and the CPU seconds each kind of process used (the last sample of each pid)."""

    def __init__(self, interval_s: float = 0.25) -> None:
        super().__init__(interval_s)
        self.peak_mb = 0.0
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



def model_compute_limit(version_dir: Path, features: Path, cpus: float) -> dict[str, Any]:
    """Players/s of one process scoring with every member, best batch size, times cpus."""
    import numpy as np
    import pyarrow.parquet as pq

    from app.adapters.member_model import MemberModel
    from app.batch.datasource import feature_columns
    from app.contract.manifest import load_manifest
    from app.core.offers import OfferCatalog
    from app.core.offline.batch_scoring import BatchScorer

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

    from app.batch.job import WRITE_NUM_CPUS, scanned_players
    from app.contract.manifest import load_manifest

    started = time.perf_counter()
    scanned_players(args, load_manifest(args.version_dir())).write_parquet(
        str(out), ray_remote_args={"num_cpus": WRITE_NUM_CPUS}
    )
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
