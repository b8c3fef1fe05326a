"""`python -m tests`: the whole suite (`make test`) as two pytest processes at once.

- The foreground: every test that starts or uses a Ray cluster (marked `ray_cluster` by
  tests/conftest.py), one cluster at a time, in collection order, and every test whose
  outcome may depend on real elapsed time: every module not marked `untimed`, so a new
  module runs here until someone has checked that it only computes.
- Beside it, under SCHED_IDLE: the `untimed` modules. The kernel runs an idle-class process
  only on CPU nothing else wants, so the clusters' replicas (niceness 19, which a second
  process at any niceness would compete with) keep what they had alone, and these tests
  fill the time the foreground spends waiting on deploys, health checks and graceful
  shutdowns. They may be frozen for seconds at a time, which is why nothing timed runs there.

The versions the tests serve are trained first, once, in this process: their manifests
record predict costs measured at training, which a frozen process would inflate.

Given pytest arguments (`make test PYTEST_ARGS=...`), one pytest runs them as given: a
selection is run the way it was asked for.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app.local.processes import PROJECT_ROOT, default_sigint

BESIDE = "untimed and not ray_cluster"
FOREGROUND = f"not ({BESIDE})"
STOP_GRACE_S = 60.0
INTERRUPTED = 130  # a shell's exit code after SIGINT; pytest's own is 2


def _idle_class() -> None:
    """Runs in the child before pytest starts (and is inherited by what it spawns). SIGINT
    back to its default too: a shell that starts `make test` in the background leaves it
    ignored, and _stop() relies on it to run the fixtures' teardown."""
    default_sigint()
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux: the lowest niceness there is
        os.nice(19)


def _pytest(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", *args]


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C for the tests beside (their fixtures stop what they started), then SIGKILL."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _train_test_versions() -> None:
    """Every version a test serves (the tiny one, the shipped configs'), trained or found."""
    from app.config.settings import Settings
    from app.local.serve_config import configured_apps
    from models.train import ensure_trained, ensure_trained_all
    from tests.conftest import TEST_GAME, TEST_VERSION

    root = Settings().artifacts_root
    ensure_trained(TEST_GAME, TEST_VERSION, "tiny", root=root)
    configs = ("serve_config.yaml", "serve_config.production-layout.yaml")
    apps = [app for config in configs for app in configured_apps(PROJECT_ROOT / config)]
    # As configured, and the tiny builds of the same versions (the e2e tier serves both).
    served = {(a.args.game, a.args.version, p) for a in apps for p in (a.args.profile, "tiny")}
    ensure_trained_all([(*version, root) for version in sorted(served)])


def _wait_out(process: subprocess.Popen[bytes]) -> int:
    """The process's exit code, or INTERRUPTED after a Ctrl-C: the terminal sent SIGINT to
    the foreground pytest too, so it is waited for while its fixtures stop their clusters
    (subprocess.call would give it up after 0.25 s and leave it tearing down alone)."""
    interrupted = False
    while True:
        try:
            code = process.wait()
        except KeyboardInterrupt:
            interrupted = True
            continue
        return INTERRUPTED if interrupted else code


def main(argv: list[str]) -> int:
    if argv:
        return subprocess.call(_pytest(*argv))
    started = time.monotonic()
    _train_test_versions()
    with tempfile.TemporaryDirectory(prefix="offers-tests-") as folder:
        log_path = Path(folder) / "beside.log"
        with log_path.open("wb") as log:
            # A session of its own: Ctrl-C at the terminal reaches the foreground only, and
            # _stop() ends this one's whole tree. No cache: two processes would race on it.
            beside = subprocess.Popen(
                _pytest("-m", BESIDE, "-p", "no:cacheprovider"),
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_idle_class,
                start_new_session=True,
            )
            try:
                foreground = _wait_out(subprocess.Popen(_pytest("-m", FOREGROUND)))
                beside_rc = _wait_out(beside) if foreground != INTERRUPTED else INTERRUPTED
            finally:
                _stop(beside)
        print(f"\n{'=' * 30} the tests beside the clusters (SCHED_IDLE) {'=' * 30}", flush=True)
        sys.stdout.write(log_path.read_text(errors="replace"))
    minutes, seconds = divmod(round(time.monotonic() - started), 60)
    print(
        f"\nforeground (-m '{FOREGROUND}'): exit {foreground}; beside (-m '{BESIDE}'): "
        f"exit {beside_rc}; the whole suite took {minutes}:{seconds:02d}",
        flush=True,
    )
    return foreground or beside_rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
