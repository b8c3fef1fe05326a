"""The batch job on the test cluster: Scan from dynalite, score on actors, Parquet, snapshot;
parity with the deployed service, a SIGKILLed actor, and the precomputed tier during an
outage."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pyarrow.parquet as pq
import pytest
import requests

from app.config.batch_args import BatchJobArgs
from app.contract.offer_snapshot import SNAPSHOT_FILENAME, parse
from app.local.seeding import ensure_table, seed_game
from models.population import player_id
from tests.conftest import TEST_GAME, TEST_PLAYERS, TEST_TABLE, TEST_VERSION
from tests.integration.conftest import STORE_BUCKET, app_args, deploy

pytestmark = pytest.mark.integration

ALL_PLAYERS = {player_id(i) for i in range(TEST_PLAYERS)}
PARITY_PLAYERS = sorted(ALL_PLAYERS)[:500]
SCORER_TITLE = "MapBatches(ScorePlayers)"


def job_args(tiny_version_dir, output, **overrides) -> BatchJobArgs:
    values = {
        "game": TEST_GAME,
        "version": TEST_VERSION,
        "profile": "tiny",
        "artifacts_root": tiny_version_dir.parents[2],
        "output_uri": str(output),
        "segments": 3,
        "read_budget_per_s": 100_000,
        "read_num_cpus": 0.05,
        "min_actors": 1,
        "max_actors": 1,
        "actor_num_cpus": 0.25,
        "batch_size": 128,
    }
    return BatchJobArgs.model_validate({**values, **overrides})


def read_output(folder) -> dict[str, dict]:
    table = pq.read_table(folder)
    rows = table.to_pylist()
    ids = [r["player_id"] for r in rows]
    assert len(ids) == len(set(ids)), "a player appears more than once"
    return {r["player_id"]: r for r in rows}


@pytest.fixture(scope="module")
def batch_run(serve_app, tiny_version_dir, batch_output_root):
    """One full run into the root the deployed supervisors read."""
    from app.batch.job import run

    return run(job_args(tiny_version_dir, batch_output_root))


def offer(base: str, pid: str) -> dict:
    response = requests.post(
        f"{base}/v1/offers", json={"player_id": pid, "game": TEST_GAME}, timeout=10
    )
    assert response.status_code == 200, response.text
    return response.json()


def online_answer(base: str, pid: str) -> dict:
    """The personalized answer of the whole ensemble, as the batch scores it. A loaded 2-core
    host may fall back, or answer from a quorum when a member misses its deadline (a partial
    ensemble's weighted mean is another figure): retry until every member answered."""
    for _ in range(5):
        body = offer(base, pid)
        if body["tier"] == "online" and body["members_answered"] == body["members_total"]:
            return body
        time.sleep(0.2)
    raise AssertionError(f"{pid}: no answer from the whole ensemble in 5 tries: {body}")


def test_every_player_is_scored_once_into_parquet_and_a_snapshot(batch_run):
    scored = read_output(batch_run.output)
    assert set(scored) == ALL_PLAYERS  # the seed marker and other keys are not players
    assert batch_run.players == TEST_PLAYERS
    row = scored[player_id(7)]
    assert row["version"] == TEST_VERSION
    assert 0 <= row["propensity"] <= 1
    assert row["scored_at"].isoformat() == batch_run.scored_at
    snapshot = parse((batch_run_path(batch_run) / SNAPSHOT_FILENAME).read_bytes())
    assert snapshot.header.players == TEST_PLAYERS
    assert snapshot.nbytes / TEST_PLAYERS == 13


def test_a_job_loads_its_version_from_the_store_and_writes_to_s3(
    serve_app, s3_server, tiny_version_dir, batch_run
):
    """The production shape on the local S3-protocol server: the version published to the
    model store (loaded through each node's cache), the Parquet and snapshot to s3://. The
    same players and scores as the run from the local folder."""
    import pyarrow.fs as pafs

    from app.adapters.model_store import ModelStore
    from app.batch.job import run

    store_uri = f"s3://{STORE_BUCKET}/batch-job"
    ModelStore(s3_server.client(), store_uri).publish(tiny_version_dir)
    s3_server.ensure_bucket("offers-batch")
    summary = run(
        job_args(tiny_version_dir, "s3://offers-batch/runs", artifacts=store_uri)
        .model_copy(update={"artifacts_root": tiny_version_dir.parents[3] / "nowhere"})
    )  # fmt: skip
    assert summary.output.startswith("s3://offers-batch/runs/")
    fs, base = pafs.FileSystem.from_uri(summary.output)
    from_s3 = {r["player_id"]: r for r in pq.read_table(base, filesystem=fs).to_pylist()}
    from_folder = read_output(batch_run.output)
    assert set(from_s3) == ALL_PLAYERS
    for pid in PARITY_PLAYERS:
        assert from_s3[pid]["offer_id"] == from_folder[pid]["offer_id"], pid
        assert from_s3[pid]["propensity"] == pytest.approx(from_folder[pid]["propensity"], abs=1e-6)
    snapshot = fs.open_input_file(f"{base}/{SNAPSHOT_FILENAME}").read()
    assert parse(snapshot).header.players == TEST_PLAYERS


def batch_run_path(summary):
    from pathlib import Path

    return Path(summary.output)


def test_batch_equals_the_online_answer_for_500_players(serve_app, tiny_version_dir, batch_run):
    deploy(app_args(tiny_version_dir))  # trained weights, no live knobs left by other tests
    scored = read_output(batch_run.output)
    with ThreadPoolExecutor(4) as pool:
        answers = dict(
            zip(
                PARITY_PLAYERS,
                pool.map(lambda p: online_answer(serve_app, p), PARITY_PLAYERS),
                strict=True,
            )
        )
    mismatched = [
        (
            pid,
            scored[pid]["offer_id"],
            a["offer"]["offer_id"],
            scored[pid]["propensity"] - a["propensity"],
        )
        for pid, a in answers.items()
        if a["offer"]["offer_id"] != scored[pid]["offer_id"]
        or abs(a["propensity"] - scored[pid]["propensity"]) > 1e-9
    ]
    assert not mismatched, mismatched[:5]
    # Not a degenerate catalog: the ensemble picks different offers for different players.
    assert len({a["offer"]["offer_id"] for a in answers.values()}) > 1


def scorer_pids() -> set[int]:
    """Our own cluster's scoring actors (Ray titles their processes with the actor class)."""
    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if SCORER_TITLE in " ".join(child.cmdline()):
                pids.add(child.pid)
        except psutil.Error:
            continue
    return pids


def test_a_sigkilled_actor_loses_and_duplicates_no_player(serve_app, tiny_version_dir, tmp_path):
    from app.batch.job import run

    # Paced to ~6 s of Scan with small batches: the actor is mid-job for seconds.
    args = job_args(tiny_version_dir, tmp_path, read_budget_per_s=100, batch_size=20)
    outcome: dict = {}
    job = threading.Thread(target=lambda: outcome.setdefault("summary", run(args)))
    job.start()
    deadline = time.monotonic() + 90
    while not (victims := scorer_pids()):
        assert time.monotonic() < deadline, "no scoring actor started"
        assert job.is_alive(), "the job ended before its actor was seen"
        time.sleep(0.1)
    time.sleep(1.5)  # let it score a few batches first
    (victim,) = victims
    assert job.is_alive()
    os.kill(victim, signal.SIGKILL)
    job.join(timeout=180)
    assert not job.is_alive() and "summary" in outcome
    assert not psutil.pid_exists(victim) or psutil.Process(victim).status() == psutil.STATUS_ZOMBIE
    scored = read_output(outcome["summary"].output)
    assert set(scored) == ALL_PLAYERS


def test_precomputed_offers_answer_while_dynamodb_is_down(serve_app, dynalite_server, batch_run):
    scored = read_output(batch_run.output)
    # The deployed replica finds the run's snapshot itself, no redeploy: one that started
    # before any snapshot existed looks every FIRST_SNAPSHOT_POLL_S (5 s), and one started
    # after the run loaded it at start.
    info = requests.get(f"{serve_app}/v1/ensemble", timeout=10).json()
    deadline = time.monotonic() + 30
    while info["precomputed"] is None:
        assert time.monotonic() < deadline, "snapshot not loaded"
        time.sleep(0.5)
        info = requests.get(f"{serve_app}/v1/ensemble", timeout=10).json()
    assert info["precomputed"]["players"] == TEST_PLAYERS and info["precomputed"]["fresh"]

    players = [player_id(i) for i in range(40, 60)]
    dynalite_server.stop()
    try:
        answers = [offer(serve_app, pid) for pid in players]
    finally:
        dynalite_server.start()
        client = dynalite_server.client(timeout_s=10.0)
        ensure_table(client, TEST_TABLE)  # in-memory: the restarted store is empty
        seed_game(client, TEST_TABLE, TEST_GAME, TEST_PLAYERS)
    for pid, answer in zip(players, answers, strict=True):
        assert answer["tier"] == "precomputed", answer
        assert answer["fallback_reason"] == "feature_store_unavailable"
        assert answer["personalized"] is False
        assert answer["offer"]["offer_id"] == scored[pid]["offer_id"]
        assert abs(answer["propensity"] - scored[pid]["propensity"]) < 1e-6  # float32


def test_the_actors_ray_data_leaves_on_the_cluster_are_released(batch_run):
    """A job leaves Ray Data's detached helper actors on the cluster (the stats, autoscaling
    and location actors; the usage actor where Ray's usage stats are on, as on `make run`'s:
    app.batch.data_actors); released, none is left, and a second release finds nothing.
    Last in this module: the tests after it run without them."""
    import ray

    from app.batch.data_actors import RAY_DATA_ACTORS, release_data_actors

    def left() -> set[tuple[str, str]]:
        named = {(a["name"], a["namespace"]) for a in ray.util.list_named_actors(True)}
        return named & set(RAY_DATA_ACTORS)

    found = left()
    assert ("datasets_stats_actor", "_dataset_stats_actor") in found, found  # as Ray names it
    assert sorted(release_data_actors()) == sorted(name for name, _ in found)
    deadline = time.monotonic() + 30
    while left() and time.monotonic() < deadline:  # ray.kill returns before the actor is gone
        time.sleep(0.2)
    assert left() == set()
    assert release_data_actors() == []
