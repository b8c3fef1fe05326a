"""The login day's results: replica samples against load, the cost of autoscaling against a
static layout sized for the same peak, the phases, and the plot (replicas.png)."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.harness.results import study_log

log = study_log("autoscaling")


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the load started
    deployment: str
    target: int
    running: int


def cost(samples: list[Sample], cpus: dict[str, float], duration_s: float) -> dict[str, Any]:
    """Replica-seconds and reserved CPU-seconds, autoscaled (running replicas integrated
    over time) and static (each deployment at its peak running count all day)."""
    by_deployment: dict[str, list[Sample]] = {}
    for s in samples:
        by_deployment.setdefault(s.deployment, []).append(s)
    out: dict[str, Any] = {"deployments": {}}
    totals = {"replica_s": 0.0, "static_replica_s": 0.0, "cpu_s": 0.0, "static_cpu_s": 0.0}
    for name, series in sorted(by_deployment.items()):
        series.sort(key=lambda s: s.t)
        area = sum(
            a.running * (b.t - a.t) for a, b in zip(series, series[1:], strict=False)
        ) + series[-1].running * max(0.0, duration_s - series[-1].t)
        area += series[0].running * series[0].t  # before the first poll
        peak = max(s.running for s in series)
        row = {
            "min_running": min(s.running for s in series),
            "peak_running": peak,
            "peak_target": max(s.target for s in series),
            "replica_s": round(area, 1),
            "static_replica_s": round(peak * duration_s, 1),
            "num_cpus": cpus[name],
        }
        out["deployments"][name] = row
        totals["replica_s"] += area
        totals["static_replica_s"] += peak * duration_s
        totals["cpu_s"] += area * cpus[name]
        totals["static_cpu_s"] += peak * duration_s * cpus[name]
    out["totals"] = {k: round(v, 1) for k, v in totals.items()}
    out["ratio_replica_s"] = round(totals["replica_s"] / totals["static_replica_s"], 3)
    out["ratio_cpu_s"] = round(totals["cpu_s"] / totals["static_cpu_s"], 3)
    return out


def load_history(path: Path, started_unix: float) -> list[dict[str, float]]:
    """Locust's per-second aggregate: users, requests/s and p95, on the run's clock."""
    rows = []
    with path.open() as fh:
        for row in csv.DictReader(fh):
            if row["Name"] != "Aggregated":
                continue
            p95 = row.get("95%", "N/A")
            rows.append(
                {
                    "t": float(row["Timestamp"]) - started_unix,
                    "users": float(row["User Count"]),
                    "rps": float(row["Requests/s"]),
                    "p95_ms": float(p95) if p95 not in ("N/A", "") else float("nan"),
                    "requests": float(row["Total Request Count"]),
                    "failures": float(row["Total Failure Count"]),
                }
            )
    return rows


def phase_at(samples: list[Sample], t: float) -> str:
    """`scaling up` while any deployment has replicas starting (target above running),
    `scaling down` while any drains (target below running), else `steady`; from the latest
    poll at or before t."""
    latest: dict[str, Sample] = {}
    for s in samples:
        if s.t <= t:
            latest[s.deployment] = s
    if any(s.target > s.running for s in latest.values()):
        return "scaling up"
    if any(s.target < s.running for s in latest.values()):
        return "scaling down"
    return "steady"


def phases(samples: list[Sample], history: list[dict[str, float]]) -> dict[str, Any]:
    """Requests, failures and the worst 10-second p95 while scaling up, down and steady."""
    out: dict[str, dict[str, float]] = {}
    ordered = sorted(history, key=lambda h: h["t"])
    for before, row in zip(ordered, ordered[1:], strict=False):
        phase = out.setdefault(
            phase_at(samples, row["t"]),
            {"seconds": 0, "requests": 0, "failures": 0, "worst_p95_ms": 0.0},
        )
        phase["seconds"] += 1
        phase["requests"] += row["requests"] - before["requests"]
        phase["failures"] += row["failures"] - before["failures"]
        if row["p95_ms"] == row["p95_ms"]:  # not NaN
            phase["worst_p95_ms"] = max(phase["worst_p95_ms"], row["p95_ms"])
    return out


def plot(samples: list[Sample], history: list[dict[str, float]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    for name in sorted({s.deployment for s in samples}):
        series = sorted((s for s in samples if s.deployment == name), key=lambda s: s.t)
        top.step([s.t for s in series], [s.running for s in series], where="post", label=name)
    top.set_ylabel("running replicas")
    top.legend(loc="upper left", fontsize=8)
    top.grid(alpha=0.3)
    bottom.plot([h["t"] for h in history], [h["rps"] for h in history], label="logins/s")
    bottom.set_ylabel("offered logins/s")
    bottom.set_xlabel("seconds since the load started")
    twin = bottom.twinx()
    twin.plot([h["t"] for h in history], [h["p95_ms"] for h in history], "r.", ms=3, label="p95")
    twin.set_ylabel("p95 ms (locust, last 10 s)", color="r")
    bottom.grid(alpha=0.3)
    fig.suptitle("Login day: replicas per deployment against load")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def analyze(folder: Path, report: dict[str, Any] | None = None) -> Path:
    """Cost, phases and plot from a run's samples and locust history (again: --analyze)."""
    path = folder / "autoscaling.json"
    report = report or json.loads(path.read_text())
    samples = [Sample(**s) for s in report["samples"]]
    history = load_history(folder / "locust" / "locust_stats_history.csv", report["started_unix"])
    report["cost"] = cost(samples, report["cpus"], report["duration_s"])
    report["phases"] = phases(samples, history)
    path.write_text(json.dumps(report, indent=2) + "\n")
    plot(samples, history, folder / "replicas.png")
    log(json.dumps({k: report[k] for k in ("duration_s", "load", "cost", "phases")}, indent=2))
    log(f"report: {path}, plot: {folder / 'replicas.png'}")
    return folder
