"""Run the locustfile headless as a subprocess and read back its CSV stats and outcomes."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from app.local.processes import PROJECT_ROOT

LOCUSTFILE = PROJECT_ROOT / "loadtest" / "locustfile.py"
REAL_REQUESTS = "offers"  # the locustfile names malformed requests apart


@dataclass(frozen=True)
class LoadTarget:
    port: int
    route_prefix: str
    game: str
    players: int


@dataclass(frozen=True)
class LoadResult:
    requests: int
    failures: int
    rps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    outcomes: dict = field(default_factory=dict)
    # Every request sent, malformed ones included: what the offered load is made of.
    total_rps: float = 0.0

    @property
    def error_rate(self) -> float:
        return self.failures / self.requests if self.requests else 0.0

    @property
    def fallback_share(self) -> float:
        """Share of real requests answered with a fallback, any reason (incl. unknown players)."""
        fallbacks = sum((self.outcomes.get("fallback") or {}).values())
        answered = fallbacks + self.outcomes.get("personalized", 0)
        return fallbacks / answered if answered else 0.0

    @property
    def degraded(self) -> int:
        """Fallbacks for any reason but an unknown player: load the service shed."""
        reasons = self.outcomes.get("fallback") or {}
        return sum(n for reason, n in reasons.items() if reason != "unknown_player")


def run_locust(
    target: LoadTarget,
    out_dir: Path,
    *,
    users: int,
    user_rps: float,
    run_time_s: int | None = None,
    login_day: tuple[int, int] | None = None,
    timeout_s: float = 900.0,
    arrivals: str = "closed",
    extra_args: list[str] | None = None,
) -> LoadResult:
    """One headless locust run. Plain constant load (`users`, `run_time_s`) unless `login_day`
    = (peak_users, stage_seconds) selects the login-day stages."""
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary",
        "--host", f"http://127.0.0.1:{target.port}",
        "--route-prefix", target.route_prefix,
        "--game", target.game,
        "--players", str(target.players),
        "--user-rps", str(user_rps),
        "--arrivals", arrivals,
        "--csv", str(out_dir / "locust"),
        "--outcomes-json", str(out_dir / "outcomes.json"),
        "--loglevel", "WARNING",
        # When the shape lowers the user count, let users finish the login in flight instead
        # of killing them mid-request (which locust reports as a connection failure).
        "--stop-timeout", "30",
    ]  # fmt: skip
    if login_day is None:
        assert run_time_s is not None
        # Spawn everyone within a second, then forget the ramp: stats cover steady load only.
        args += ["-u", str(users), "-r", str(users), "-t", f"{run_time_s}s", "--reset-stats"]
    else:
        peak_users, stage_seconds = login_day
        args += ["--stages", "login-day", "--peak-users", str(peak_users)]
        args += ["--stage-seconds", str(stage_seconds)]
    args += extra_args or []
    completed = subprocess.run(
        args, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=timeout_s
    )
    (out_dir / "locust.log").write_text(completed.stdout + completed.stderr)
    stats = out_dir / "locust_stats.csv"
    if not stats.is_file():
        raise RuntimeError(f"locust wrote no stats (exit {completed.returncode}); see {out_dir}")
    outcomes_path = out_dir / "outcomes.json"
    outcomes = json.loads(outcomes_path.read_text()) if outcomes_path.is_file() else {}
    return _read_stats(stats, outcomes)


def _read_stats(path: Path, outcomes: dict) -> LoadResult:
    with path.open() as fh:
        rows = {row["Name"]: row for row in csv.DictReader(fh)}
    row = rows.get(REAL_REQUESTS)
    if row is None or int(row["Request Count"]) == 0:
        # Even a saturated system answers some logins in a run; none at all means the load
        # generator itself is broken, and its "results" must not reach a report.
        raise RuntimeError(f"locust recorded no {REAL_REQUESTS!r} requests; see {path.parent}")
    # Failures of any request name count (a malformed request that did not get a 4xx too).
    failures = sum(int(r["Failure Count"]) for name, r in rows.items() if name != "Aggregated")
    return LoadResult(
        requests=int(row["Request Count"]),
        failures=failures,
        rps=float(row["Requests/s"]),
        p50_ms=float(row["50%"]),
        p95_ms=float(row["95%"]),
        p99_ms=float(row["99%"]),
        outcomes=outcomes,
        total_rps=float(rows["Aggregated"]["Requests/s"]) if "Aggregated" in rows else 0.0,
    )
