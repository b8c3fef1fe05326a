"""Compiled against native members on every seeded player: the same offer, and how close.

    .venv/bin/python -m loadtest.runtime_fidelity [--players 10000]

For each version `serve_config.yaml` serves, every player `make run` seeds goes the way the
service reads it (the DynamoDB item the seeder writes, decoded by the feature schema), then
through the whole ensemble twice: the members of `runtime: onnx` and of `runtime: native`,
aggregated and decided as a supervisor does (app.core.offline.batch_scoring). Reports per version
the players whose offer differs (the target: none) and the largest |difference| in
propensity (the target: <= 1e-6); writes loadtest/results/<timestamp>-fidelity/.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from app.adapters.member_model import load_group
from app.contract.manifest import load_manifest
from app.core.offers import OfferCatalog
from app.core.offline.batch_scoring import BatchScorer
from app.local.seeding import player_item
from app.local.serve_config import configured_apps
from loadtest.harness.results import Study
from models.population import generate_players

STUDY = Study("loadtest.runtime_fidelity", __doc__, "runtime-fidelity")
log = STUDY.log

TOLERANCE = 1e-6


def player_rows(game: str, manifest_dir: Path, players: int) -> np.ndarray:
    """The encoded features of the first `players` seeded players, as a supervisor reads them."""
    schema = load_manifest(manifest_dir).feature_schema
    records = generate_players(game, players)
    items = [player_item(game, schema, r, "2026-01-01T00:00:00+00:00") for r in records]
    return np.stack([schema.decode_item(item) for item in items])


def compare(version_dir: Path, rows: np.ndarray) -> dict[str, object]:
    manifest = load_manifest(version_dir)
    catalog = OfferCatalog(manifest)
    weights = {e.name: e.weight for e in manifest.members}
    scored = {
        runtime: BatchScorer(
            catalog, load_group(manifest.members, version_dir, runtime, manifest.fidelity), weights
        ).score(rows)
        for runtime in ("onnx", "native")
    }
    onnx, native = scored["onnx"], scored["native"]
    differs = np.flatnonzero(onnx.offer_index != native.offer_index)
    delta = np.abs(onnx.propensity - native.propensity)
    return {
        "players": int(len(rows)),
        "other_offer": int(len(differs)),
        "max_abs_propensity_diff": float(delta.max()),
        "median_abs_propensity_diff": float(np.median(delta)),
        "met": bool(len(differs) == 0 and delta.max() <= TOLERANCE),
    }


def run(args: argparse.Namespace) -> Path:
    out = STUDY.folder("fidelity")
    report: dict[str, object] = {"command": args.command, "tolerance": TOLERANCE, "versions": {}}
    versions: dict[str, object] = {}
    for app in configured_apps(args.config):
        folder = app.version_dir()
        rows = player_rows(app.args.game, folder, args.players)
        result = compare(folder, rows)
        versions[f"{app.args.game}/{app.args.version}"] = result
        log(f"{app.args.game} {app.args.version}: {result}")
    report["versions"] = versions
    STUDY.save(out, "fidelity.json", report)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = STUDY.parser()
    parser.add_argument("--config", type=Path, default=Path("serve_config.yaml"))
    parser.add_argument("--players", type=int, default=10_000, help="as `make run` seeds")
    args = STUDY.parse(parser, argv)
    return STUDY.run(lambda: run(args))


if __name__ == "__main__":
    raise SystemExit(main())
