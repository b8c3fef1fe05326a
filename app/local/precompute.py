"""`make run`'s precomputed tier from the first run: the batch snapshot, built in the background.

The supervisors fall back on the batch job's snapshot when DynamoDB is down
(app.core.online.precomputed). A fresh `make run` has none until someone runs `make batch`, so for
its first hour a feature-store outage gave every known player the version's default offer.
Once the service answers, this scores every seeded player of each served version that has no
snapshot younger than its `precomputed.max_age_s`, one version after another, with the batch
job on `make run`'s own Ray (no second cluster), small enough to leave the replicas their CPU.
The supervisors look for a first snapshot every few seconds and load it without a restart.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable

from app.adapters.snapshot_store import latest_snapshot
from app.contract.manifest import load_manifest
from app.local.processes import PROJECT_ROOT
from app.local.serve_config import ConfiguredApp

log = logging.getLogger(__name__)

SERVICE_URL = "http://127.0.0.1:8000"
READY_POLL_S = 2.0
READY_TIMEOUT_S = 600.0
# The scoring actor and the read tasks of one job: a sliver of the head's CPUs, beside the
# replicas it has reserved. The jobs run one at a time, the only Ray Data work on this
# cluster: each ends the helper actors Ray Data would leave beside the replicas for good.
BATCH_OPTIONS = (
    *("--actors", "1", "--actor-num-cpus", "0.25", "--segments", "2"),
    "--release-data-actors",
)
JOB_POLL_S = 0.5
JOB_STOP_TIMEOUT_S = 10.0


def needs_snapshot(app: ConfiguredApp) -> bool:
    """True when the version has no snapshot young enough to be served."""
    if not app.args.precomputed.enabled:
        return False
    manifest = load_manifest(app.version_dir())
    found = latest_snapshot(
        app.settings.batch_output_uri, manifest, max_age_s=app.args.precomputed.max_age_s
    )
    return found is None


def service_answers(app: ConfiguredApp, service_url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(
            f"{service_url}{app.route_prefix}/v1/ensemble", timeout=timeout_s
        ) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def build_snapshots(
    apps: list[ConfiguredApp],
    batch_command: Callable[[ConfiguredApp], list[str]],
    env: dict[str, str],
    stop: threading.Event,
    service_url: str = SERVICE_URL,
) -> None:
    """Wait for the service, then run the batch job for every app that needs a snapshot."""
    wanted = [a for a in apps if needs_snapshot(a)]
    if not wanted:
        log.info("precomputed offers: every served version has a fresh snapshot")
        return
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(service_answers(a, service_url) for a in wanted):
        if stop.wait(READY_POLL_S) or time.monotonic() > deadline:
            return
    for app in wanted:
        if stop.is_set():
            return
        started = time.monotonic()
        log.info("precomputed offers: scoring %s in the background (make batch)", app.name)
        returncode, output = _run_job(batch_command(app), env, stop)
        if returncode == 0:
            log.info(
                "precomputed offers: %s snapshot ready in %.0fs (%s)",
                app.name,
                time.monotonic() - started,
                output.strip().splitlines()[-1] if output.strip() else "",
            )
        elif stop.is_set() or returncode < 0:
            # Stopped, or ended by a signal: Ctrl-C reaches `make run`'s whole process
            # group, the job included, before this thread is told to stop. Starting the next
            # version's job then left it waiting on a Ray that was going away (seen: it
            # outlived `make run`).
            log.info("precomputed offers: %s not scored, `make run` is stopping", app.name)
            return
        else:
            tail = "\n".join(output.strip().splitlines()[-15:])
            log.error(
                "precomputed offers: the batch job for %s failed (exit %d); run "
                "`make batch GAME=%s VERSION=%s` by hand. Its last lines:\n%s",
                app.name,
                returncode,
                app.args.game,
                app.args.version,
                tail,
            )


def _run_job(command: list[str], env: dict[str, str], stop: threading.Event) -> tuple[int, str]:
    """(exit code, output) of one batch job; stopped (SIGTERM, then SIGKILL) when `stop` is
    set, so that no job outlives `make run`."""
    with tempfile.TemporaryFile(mode="w+") as output:
        job = subprocess.Popen(
            command, cwd=PROJECT_ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, text=True
        )
        while job.poll() is None:
            if stop.wait(JOB_POLL_S):
                job.terminate()
                try:
                    job.wait(timeout=JOB_STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    job.kill()
                    job.wait()
        output.seek(0)
        return job.returncode, output.read()


def batch_command(app: ConfiguredApp) -> list[str]:
    return [
        sys.executable,
        "-m",
        "app.batch",
        *("--game", app.args.game, "--version", app.args.version, "--profile", app.args.profile),
        *BATCH_OPTIONS,
    ]


def start(
    apps: list[ConfiguredApp], env: dict[str, str]
) -> tuple[threading.Thread, threading.Event]:
    """The background builder; set the event to stop it and its running job, then join the
    thread (at most JOB_STOP_TIMEOUT_S and a poll) before Ray goes."""
    stop = threading.Event()
    thread = threading.Thread(
        target=build_snapshots,
        args=(apps, batch_command, {**os.environ, **env}, stop),
        name="precompute",
        daemon=True,
    )
    thread.start()
    return thread, stop
