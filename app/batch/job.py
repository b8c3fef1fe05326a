"""The batch run: Scan -> score on an actor pool -> Parquet -> snapshot, and its summary."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import ray
from ray.data import ActorPoolStrategy, Dataset

from app.adapters.model_store import local_version
from app.adapters.snapshot_store import write_snapshot
from app.batch.datasource import PlayerScanDatasource
from app.batch.scoring import ScorePlayers
from app.config.batch_args import BatchJobArgs
from app.contract.manifest import Manifest, load_manifest
from app.contract.offer_snapshot import run_folder, version_prefix

logger = logging.getLogger(__name__)

SUMMARY_FILENAME = "_SUCCESS.json"
# Parquet writes are I/O and encoding, a sliver of a core. Ray Data's default (a whole CPU
# per write task) deadlocks a small cluster whose CPUs the scoring actors already hold:
# the actors wait for a write to drain their output, the write waits for a CPU.
WRITE_NUM_CPUS = 0.1


@dataclass(frozen=True)
class BatchSummary:
    game: str
    version: str
    players: int
    elapsed_s: float
    players_per_s: float
    output: str
    scored_at: str
    parquet_files: int
    snapshot: str
    snapshot_bytes: int
    snapshot_bytes_per_player: float
    dropped_collisions: int


def actor_pool(args: BatchJobArgs) -> ActorPoolStrategy:
    """`min_actors`..`max_actors` scoring actors (max: what the cluster's CPUs hold once
    every Scan segment and a write task have theirs)."""
    most = args.max_actors
    if most is None:
        cpus = float(ray.cluster_resources().get("CPU", 1.0))  # type: ignore[no-untyped-call]
        spare = cpus - args.segments * args.read_num_cpus - WRITE_NUM_CPUS
        most = max(args.min_actors, int(spare // args.actor_num_cpus))
    return ActorPoolStrategy(min_size=args.min_actors, max_size=most)


def scored_players(args: BatchJobArgs, manifest: Manifest, scored_at: datetime) -> Dataset:
    """The lazy pipeline: the paced Scan, then the actor pool's scoring."""
    return score(scanned_players(args, manifest), args, scored_at)


def scanned_players(args: BatchJobArgs, manifest: Manifest) -> Dataset:
    """The paced parallel Scan's decoded feature rows (the batch benchmark times it alone)."""
    source = PlayerScanDatasource(
        manifest.feature_schema,
        manifest.game,
        segments=args.segments,
        read_budget_per_s=args.read_budget_per_s,
        unit=args.read_budget_unit,
    )
    # One block stream per segment; without override_num_blocks Ray would split each
    # segment's output to reach its default parallelism.
    players: Dataset = ray.data.read_datasource(
        source,
        override_num_blocks=args.segments,
        num_cpus=args.read_num_cpus,
    )
    return players


def score(players: Dataset, args: BatchJobArgs, scored_at: datetime) -> Dataset:
    """Players' feature rows, scored lazily on the actor pool into offer rows (the batch job's
    scoring stage; the batch benchmark times it alone, from Parquet)."""
    scored: Dataset = players.map_batches(
        ScorePlayers,
        fn_constructor_kwargs={
            "version_dir": args.version_source(),
            "scored_at_us": int(scored_at.timestamp() * 1_000_000),
            "runtime": args.runtime,
        },
        batch_size=args.batch_size,
        batch_format="numpy",
        compute=actor_pool(args),
        num_cpus=args.actor_num_cpus,
    )
    return scored


def run(args: BatchJobArgs, *, now: datetime | None = None) -> BatchSummary:
    """Score every player of the game with the version; Ray must be initialized."""
    # From a store: the driver's node cache (each scoring actor fills its own node's).
    manifest = load_manifest(local_version(args.version_source()))
    scored_at = (now or datetime.now(UTC)).replace(microsecond=0)
    root = args.output_root().rstrip("/")
    output = f"{root}/{version_prefix(args.game, args.version)}/{run_folder(scored_at)}"
    started = time.perf_counter()
    # Streaming: blocks flow from the Scan through the actors into Parquet files; nothing is
    # collected on the driver.
    scored_players(args, manifest, scored_at).write_parquet(
        output,
        min_rows_per_file=args.min_rows_per_file,
        ray_remote_args={"num_cpus": WRITE_NUM_CPUS},
        # On S3 there are no folders to create, and creating them would need rights on the
        # bucket outside the output prefix (k8s/iam/batch-policy.json grants none).
        try_create_dir=not output.startswith("s3://"),
    )
    players, files = _count_rows(output)
    elapsed = time.perf_counter() - started
    snapshot, header, size = write_snapshot(output, manifest, scored_at)
    summary = BatchSummary(
        game=args.game,
        version=args.version,
        players=players,
        elapsed_s=round(elapsed, 3),
        players_per_s=round(players / elapsed, 1) if elapsed > 0 else 0.0,
        output=output,
        scored_at=scored_at.isoformat(),
        parquet_files=files,
        snapshot=snapshot,
        snapshot_bytes=size,
        snapshot_bytes_per_player=round(size / max(header.players, 1), 2),
        dropped_collisions=header.dropped_collisions,
    )
    fs, base = pafs.FileSystem.from_uri(output)
    with fs.open_output_stream(f"{base}/{SUMMARY_FILENAME}") as out:
        out.write(json.dumps(asdict(summary), indent=2).encode())
    return summary


def _count_rows(output: str) -> tuple[int, int]:
    """Rows and files of a run, from the Parquet footers (no data read)."""
    fs, base = pafs.FileSystem.from_uri(output)
    files = [
        i.path
        for i in fs.get_file_info(pafs.FileSelector(base, recursive=True))
        if i.type == pafs.FileType.File and i.base_name.endswith(".parquet")
    ]
    rows = 0
    for path in files:
        with fs.open_input_file(path) as fh:
            rows += pq.ParquetFile(fh).metadata.num_rows
    return rows, len(files)
