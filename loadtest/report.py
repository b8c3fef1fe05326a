"""Benchmark report: report.json (stable summary for tools), report.md, latency plot."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

# Keys other tools read from report.json; everything else in the file may change.
SUMMARY_KEYS = ("max_rps_at_p95_150ms", "c1_p50_ms", "c1_p95_ms", "peak_rss_mb", "error_rate")
RATIO_KEYS = ("max_rps_at_p95_150ms", "c1_p50_ms")
SYSTEMS = ("ensemble", "legacy")


def ratios(systems: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key in RATIO_KEYS:
        ensemble, legacy = systems["ensemble"].get(key), systems["legacy"].get(key)
        out[key] = round(ensemble / legacy, 3) if ensemble is not None and legacy else None
    return out


def ablation_ratios(report: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Each ablation variant against the legacy system of the same run."""
    legacy = report["systems"]["legacy"]
    out = {}
    for name, variant in report["ablation"].items():
        out[name] = {
            key: round(variant[key] / legacy[key], 3)
            if variant.get(key) is not None and legacy.get(key)
            else None
            for key in RATIO_KEYS
        }
    return out


def ablation_table(report: dict[str, Any]) -> str:
    lines = [
        "| variant | what changes | max RPS p95 ≤ 150 ms | × legacy | c=1 p50 (ms) | × legacy "
        "| peak RSS (MB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, v in report["ablation"].items():
        r = report["ablation_ratios"][name]
        lines.append(
            f"| {name} | {v['description']} | {_fmt(v['max_rps_at_p95_150ms'])} "
            f"| {_fmt(r['max_rps_at_p95_150ms'], 2)} | {_fmt(v['c1_p50_ms'])} "
            f"| {_fmt(r['c1_p50_ms'], 2)} | {_fmt(v['peak_rss_mb'], 0)} |"
        )
    return "\n".join(lines)


def write_json(report: dict[str, Any], folder: Path) -> Path:
    path = folder / "report.json"
    path.write_text(json.dumps(report, indent=2, allow_nan=False, default=_finite))
    return path


def _finite(value: Any) -> Any:
    raise TypeError(f"not JSON serializable: {value!r}")


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def summary_table(report: dict[str, Any]) -> str:
    systems, r = report["systems"], report["ratios"]
    rows = [
        ("max RPS with p95 ≤ 150 ms", "max_rps_at_p95_150ms", r.get("max_rps_at_p95_150ms")),
        ("c=1 p50 (ms)", "c1_p50_ms", r.get("c1_p50_ms")),
        ("c=1 p95 (ms)", "c1_p95_ms", None),
        ("login-day p95 (ms)", "stages_p95_ms", None),
        ("login-day p99 (ms)", "stages_p99_ms", None),
        ("login-day RPS", "stages_rps", None),
        ("error rate", "error_rate", None),
        ("fallback share", "fallback_share", None),
        ("CPU cores used (login day)", "stages_cpu_cores", None),
        ("peak RSS (MB)", "peak_rss_mb", None),
    ]
    lines = ["| figure | ensemble | legacy | ensemble / legacy |", "|---|---|---|---|"]
    for label, key, ratio in rows:
        digits = 4 if key in {"error_rate", "fallback_share"} else 1
        shown_ratio = "" if ratio is None else _fmt(ratio, 2)
        lines.append(
            f"| {label} | {_fmt(systems['ensemble'].get(key), digits)} | "
            f"{_fmt(systems['legacy'].get(key), digits)} | {shown_ratio} |"
        )
    return "\n".join(lines)


def write_markdown(report: dict[str, Any], folder: Path) -> Path:
    machine = report["machine"]
    lines = [
        f"# Benchmark: ensemble (Ray Serve) vs legacy, profile `{report['profile']}`",
        "",
        f"Command: `{report['command']}`  ",
        f"Started: {report['started_at']}  ",
        f"Machine: {machine['cpus']} CPUs ({machine['cpu_model']}), "
        f"{machine['memory_gb']} GB, Python {machine['python']}, Ray {machine['ray']}, "
        f"load average at start {machine['loadavg_at_start']}",
        "",
        summary_table(report),
        "",
        "## Step search (constant offered load, p95 ≤ 150 ms)",
        "",
        "| system | offered RPS | achieved RPS | p50 | p95 | p99 | errors | held |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in SYSTEMS:
        for step in report["systems"][name].get("steps", []):
            lines.append(
                f"| {name} | {step['offered_rps']} | {_fmt(step['rps'])} "
                f"| {_fmt(step['p50_ms'], 0)} | {_fmt(step['p95_ms'], 0)} "
                f"| {_fmt(step['p99_ms'], 0)} | {step['failures']} "
                f"| {'yes' if step['held'] else 'no'} |"
            )
    if "ablation" in report:
        lines += ["", "## Ablation (c=1 probe and step search per variant)", ""]
        lines.append(ablation_table(report))
    lines += ["", "![latency vs offered load](latency.png)", ""]
    path = folder / "report.md"
    path.write_text("\n".join(lines))
    return path


def write_plot(report: dict[str, Any], folder: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display on benchmark machines
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(8, 5))
    styles = {"ensemble": "tab:blue", "legacy": "tab:red"}
    for name in SYSTEMS:
        # The last attempt at each level (a failed level is tried twice).
        attempts = report["systems"][name].get("steps", [])
        steps = list({s["offered_rps"]: s for s in attempts}.values())
        if not steps:
            continue
        x = [s["offered_rps"] for s in steps]
        for key, dash in (("p50_ms", ":"), ("p95_ms", "-"), ("p99_ms", "--")):
            ax.plot(x, [s[key] for s in steps], dash, marker="o", color=styles[name],
                    label=f"{name} {key[:3]}")  # fmt: skip
    ax.axhline(150, color="grey", linewidth=1, label="p95 target 150 ms")
    ax.set_xlabel("offered load (requests/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_yscale("log")
    # Plain millisecond labels: a log axis otherwise shows only powers of ten.
    ax.set_yticks([5, 10, 20, 50, 100, 150, 200, 500, 1000, 2000, 5000])
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_title(f"Latency vs offered load, profile {report['profile']}")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    path = folder / "latency.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
