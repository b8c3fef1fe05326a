"""`offers-batch` / `python -m app.batch`: score every player of a game with one version.

    offers-batch --game G --version V [--profile P] [--artifacts s3://bucket/prefix]
                 [--output-uri URI] [--segments N]
                 [--read-budget N] [--read-budget-unit items|read_units] [--batch-size N]
                 [--actors MIN:MAX] [--actor-num-cpus F] [--release-data-actors]

Reads the feature table named by the OFFERS_ settings (OFFERS_DYNAMODB_TABLE,
OFFERS_DYNAMODB_ENDPOINT_URL, ...), writes Parquet under OFFERS_BATCH_OUTPUT_URI (or
--output-uri), shows Ray Data's progress, prints a summary, and ends with `output: <folder>`.
Connects to the Ray cluster in RAY_ADDRESS (a RayJob sets it), else starts a local one; the
driver's OFFERS_* and AWS_* variables go to the job's workers (runtime_env).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping

from pydantic import ValidationError

from app.config.batch_args import BatchJobArgs


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="offers-batch", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--game", required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--profile", default="standard")
    p.add_argument(
        "--artifacts", default=None, help="the model store (s3://...); default: a local folder"
    )
    p.add_argument("--output-uri", default=None)
    p.add_argument("--segments", type=int, default=None)
    p.add_argument("--read-budget", type=float, default=None, help="per second, whole run")
    p.add_argument("--read-budget-unit", choices=("items", "read_units"), default=None)
    p.add_argument("--batch-size", type=int, default=None, help="players per scoring call")
    p.add_argument("--actors", default=None, help="MIN:MAX scoring actors, or N")
    p.add_argument("--actor-num-cpus", type=float, default=None)
    p.add_argument("--runtime", choices=("onnx", "native"), default=None)
    p.add_argument(
        "--release-data-actors",
        action="store_true",
        help="after the job, end the helper actors Ray Data leaves on the cluster "
        "(app.batch.data_actors): only where no other Ray Data job runs at the same time",
    )
    return p


def to_args(ns: argparse.Namespace) -> BatchJobArgs:
    values = {
        "game": ns.game,
        "version": ns.version,
        "profile": ns.profile,
        "artifacts": ns.artifacts,
        "output_uri": ns.output_uri,
        "segments": ns.segments,
        "read_budget_per_s": ns.read_budget,
        "read_budget_unit": ns.read_budget_unit,
        "batch_size": ns.batch_size,
        "actor_num_cpus": ns.actor_num_cpus,
        "runtime": ns.runtime,
    }
    if ns.actors:
        low, _, high = ns.actors.partition(":")
        values["min_actors"] = int(low)
        values["max_actors"] = int(high or low)
    return BatchJobArgs.model_validate({k: v for k, v in values.items() if v is not None})


def job_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The driver's OFFERS_ and AWS_ variables, for the job's workers: on a cluster that
    was started without them (a local `ray start`, the reliability runner's), a read task
    must see the table and credentials the driver was given."""
    return {k: v for k, v in environ.items() if k.startswith(("OFFERS_", "AWS_"))}


def _release_data_actors() -> None:
    """After a job that succeeded: its snapshot is written, so a failure here is reported
    and the job still succeeds."""
    from app.batch.data_actors import release_data_actors

    try:
        print(f"released Ray Data's actors: {release_data_actors()}", flush=True)
    except Exception as exc:  # a Ray error of any kind: the actors stay, as Ray leaves them
        print(f"Ray Data's actors not released: {exc!r}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    ns = cli.parse_args(argv)
    try:
        args = to_args(ns)
    except (ValidationError, ValueError) as exc:
        cli.error(str(exc))
    if not args.artifacts and not (args.version_dir() / "manifest.json").is_file():
        print(f"offers-batch: no trained version at {args.version_dir()}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import ray

    from app.batch.job import run

    ray.init(
        address=os.environ.get("RAY_ADDRESS") or "local",
        log_to_driver=False,
        runtime_env={"env_vars": job_env(os.environ)},
    )
    try:
        summary = run(args)
        if ns.release_data_actors:
            _release_data_actors()
    finally:
        ray.shutdown()
    print(
        f"scored {summary.players} {summary.game} players with {summary.version} in "
        f"{summary.elapsed_s:.1f}s: {summary.players_per_s:.0f} players/s, "
        f"{summary.parquet_files} Parquet files; snapshot {summary.snapshot_bytes} bytes "
        f"({summary.snapshot_bytes_per_player:.2f} bytes/player, "
        f"{summary.dropped_collisions} key collisions dropped)"
    )
    print(f"output: {summary.output}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
