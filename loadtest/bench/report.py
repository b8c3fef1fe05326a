"""Benchmark report: medians with spreads, ratios that count only outside the noise.

report.json keys other tools read (everything else in the file may change):
  rounds                                         runs per system
  systems.<system>.<figure>                      {median, min, max} over the rounds
  ratios.vs_legacy.<figure>, ratios.vs_pool.<figure>
                                                 ensemble median / peer median
  ratios.production_vs_legacy.<figure>           ensemble-production median / legacy median
  verdicts.<comparison>.<figure>                 "higher" | "lower" | "within noise"
  targets                                        the issue's targets, each met or missed
  ablation.<variant>.<figure>, ablation_ratios.<variant>.<figure>
                                                 variant / the shipped config it came from
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from loadtest.bench import capacity
from loadtest.bench.variants import VARIANTS
from loadtest.harness.results import spread

FIGURES = (
    "max_rps_held",
    "c1_p50_ms",
    "peak_rss_mb",
    "rss_mb_per_rps",
    "rate_cpu_ms_per_login",
    "rate_p95_ms",
)
EXTRA_FIGURES = ("c1_p95_ms", "ready_s")
SYSTEMS = ("legacy", "pool", "pool-compiled", "ensemble", "ensemble-production")
# comparison -> (contender, baseline); either may be an ablation variant.
COMPARISONS = {
    "vs_legacy": ("ensemble", "legacy"),
    "vs_pool": ("ensemble", "pool"),
    # The same compiled members in the process pool: what the architecture buys apart from
    # the runtime.
    "vs_pool_compiled": ("ensemble", "pool-compiled"),
    # What the compiled members are worth in the shipped config.
    "vs_native_members": ("ensemble", "native-members"),
    "production_vs_legacy": ("ensemble-production", "legacy"),
    "planned_production_vs_pool": ("planned-production", "pool"),
    "per_member_vs_pool": ("per-member", "pool"),
    "vs_no_autoscaling": ("ensemble", "no-autoscaling"),
}
# (comparison, figure, "min" or "max", bound, profiles it applies to)
TARGETS = (
    ("vs_legacy", "max_rps_held", "min", 3.0, ("standard",)),
    ("vs_pool", "max_rps_held", "min", 2.0, ("standard",)),
    ("vs_pool_compiled", "max_rps_held", "min", 1.0, ("standard",)),
    ("vs_legacy", "c1_p50_ms", "max", 0.7, ("standard",)),
    ("vs_legacy", "c1_p50_ms", "max", 0.4, ("heavy",)),
    ("vs_pool", "rate_cpu_ms_per_login", "max", 0.8, ("standard",)),
    ("vs_pool", "rss_mb_per_rps", "max", 2.0, ("standard",)),
    ("planned_production_vs_pool", "rate_cpu_ms_per_login", "max", 1.3, ("standard",)),
    # The shipped config is not lower than itself without autoscaling: within noise passes.
    ("vs_no_autoscaling", "max_rps_held", "not_lower", 1.0, ("standard",)),
)
LABELS = {
    "max_rps_held": "max logins/s held",
    "c1_p50_ms": "c=1 p50 (ms)",
    "c1_p95_ms": "c=1 p95 (ms)",
    "peak_rss_mb": "peak RSS (MB)",
    "rss_mb_per_rps": "peak RSS per login/s (MB)",
    "ready_s": "start to ready (s)",
    "rate_cpu_ms_per_login": "CPU-ms per login at the fixed rate",
    "rate_p95_ms": "p95 at the fixed rate (ms)",
}


GENERATOR = (
    "locust {version}, open arrivals: {users} users x {user_rps} logins/s each, "
    "on a fixed schedule from a random phase"
)


def new_report(
    args: argparse.Namespace, game: str, version: str, machine: dict[str, Any]
) -> dict[str, Any]:
    """The report a run fills in: its settings, the rule a level is held by, empty runs."""
    contenders = [*args.systems, *args.ablation]
    return {
        "profile": args.profile,
        "command": args.command,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine,
        "game": game,
        "version": version,
        "rounds": args.rounds,
        "order": contenders,
        "settings": {
            "players": args.players,
            "levels": [int(x) for x in args.levels.split(",") if x.strip()],
            "refine": args.refine,
            "user_rps": args.user_rps,
            "step_seconds": args.step_seconds,
            "probe_requests": args.probe_requests,
            "c1_only": args.c1_only,
            "held_rule": {
                "p95_ms_max": capacity.P95_TARGET_MS,
                "failures": 0,
                "achieved_share_min": capacity.MIN_ACHIEVED_SHARE,
                "degraded_fallbacks": 0,
                "retries": 0,
            },
        },
        "load_generator": GENERATOR.format(
            version=importlib.metadata.version("locust"),
            users="offered / user_rps",
            user_rps=args.user_rps,
        ),
        "descriptions": {name: VARIANTS[name].description for name in args.ablation},
        "runs": {name: [] for name in contenders},
    }


def verdict(a: dict[str, float] | None, b: dict[str, float] | None) -> str | None:
    """How a compares with b: only spreads that do not overlap make a difference."""
    if a is None or b is None:
        return None
    if a["min"] > b["max"]:
        return "higher"
    if a["max"] < b["min"]:
        return "lower"
    return "within noise"


def ratio(a: dict[str, float] | None, b: dict[str, float] | None) -> float | None:
    if a is None or b is None or not b["median"]:
        return None
    return round(a["median"] / b["median"], 3)


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    out: dict[str, Any] = {
        figure: spread([r.get(figure) for r in ok]) for figure in (*FIGURES, *EXTRA_FIGURES)
    }
    out["runs"] = len(runs)
    out["failed_runs"] = len(runs) - len(ok)
    out["memory_by_role_mb"] = _roles(ok)
    return out


def _roles(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Median over rounds of what each kind of process held at the run's peak RSS."""
    roles = sorted({role for r in runs for role in r.get("peak_by_role_mb", {})})
    return {
        role: round(statistics.median(r.get("peak_by_role_mb", {}).get(role, 0.0) for r in runs), 1)
        for role in roles
    }


def summarise(report: dict[str, Any]) -> None:
    """Add systems, ratios, verdicts, targets and the ablation to a report with runs."""
    runs = report["runs"]
    report["systems"] = {name: aggregate(runs[name]) for name in SYSTEMS if name in runs}
    systems = report["systems"]
    everyone = {name: aggregate(r) for name, r in runs.items()}
    report["ratios"], report["verdicts"] = {}, {}
    for comparison, (a, b) in COMPARISONS.items():
        if a not in everyone or b not in everyone:
            continue
        report["ratios"][comparison] = {
            f: ratio(everyone[a][f], everyone[b][f]) for f in (*FIGURES, "c1_p95_ms")
        }
        report["verdicts"][comparison] = {
            f: verdict(everyone[a][f], everyone[b][f]) for f in (*FIGURES, "c1_p95_ms")
        }
    report["targets"] = targets(report)
    variants = [name for name in runs if name not in SYSTEMS]
    if variants:
        report["ablation"] = {name: aggregate(runs[name]) for name in variants}
        report["ablation_ratios"], report["ablation_verdicts"] = {}, {}
        for name in variants:
            base = systems.get(_base_of(report, name))
            if base is None:
                continue
            mine = report["ablation"][name]
            report["ablation_ratios"][name] = {f: ratio(mine[f], base[f]) for f in FIGURES}
            report["ablation_verdicts"][name] = {f: verdict(mine[f], base[f]) for f in FIGURES}


def _base_of(report: dict[str, Any], variant: str) -> str:
    return "ensemble-production" if variant.startswith("production") else "ensemble"


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for comparison, figure, kind, bound, profiles in TARGETS:
        if report["profile"] not in profiles:
            continue
        value = report["ratios"].get(comparison, {}).get(figure)
        noise = report["verdicts"].get(comparison, {}).get(figure)
        if value is None:
            met = None
        elif kind == "not_lower":
            met = noise != "lower"
        else:
            within = value >= bound if kind == "min" else value <= bound
            # A ratio counts only where the spreads do not overlap.
            met = within and noise != "within noise"
        out.append(
            {
                "comparison": comparison,
                "figure": figure,
                "target": {"min": f">= {bound}", "max": f"<= {bound}"}.get(kind, "not lower"),
                "ratio": value,
                "verdict": noise,
                "met": met,
            }
        )
    return out


def write_json(report: dict[str, Any], folder: Path) -> Path:
    path = folder / "report.json"
    path.write_text(json.dumps(report, indent=2, allow_nan=False))
    return path


def _run_note(run: dict[str, Any]) -> str:
    """The error of a failed run, else the member deployments it ran with (ensembles)."""
    if run.get("error"):
        return str(run["error"])
    layout = run.get("member_deployments")
    if layout is None:
        return ""
    if not layout:
        return "every member inline"
    return "; ".join(f"{d}: {', '.join(m)}" for d, m in sorted(layout.items()))


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _spread(s: dict[str, float] | None, digits: int = 1) -> str:
    if s is None:
        return "n/a"
    return f"{_fmt(s['median'], digits)} [{_fmt(s['min'], digits)}–{_fmt(s['max'], digits)}]"


def summary_table(report: dict[str, Any]) -> str:
    names = [n for n in SYSTEMS if n in report["systems"]]
    lines = [
        "| figure (median [min–max]) | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for figure in (*FIGURES, *EXTRA_FIGURES):
        digits = 2 if figure == "rss_mb_per_rps" else (0 if figure == "peak_rss_mb" else 1)
        cells = [_spread(report["systems"][n][figure], digits) for n in names]
        lines.append(f"| {LABELS[figure]} | " + " | ".join(cells) + " |")
    lines += ["", "| ratio (medians) | " + " | ".join(report["ratios"]) + " |"]
    lines.append("|---" * (len(report["ratios"]) + 1) + "|")
    for figure in (*FIGURES, "c1_p95_ms"):
        cells = [
            f"{_fmt(report['ratios'][c][figure], 2)}× ({report['verdicts'][c][figure] or 'n/a'})"
            if report["ratios"][c][figure] is not None
            else "n/a"
            for c in report["ratios"]
        ]
        lines.append(f"| {LABELS[figure]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets_table(report: dict[str, Any]) -> str:
    lines = ["| target | ratio | spreads | met |", "|---|---|---|---|"]
    for t in report["targets"]:
        met = "n/a" if t["met"] is None else ("**met**" if t["met"] else "**missed**")
        lines.append(
            f"| {LABELS[t['figure']]}, {t['comparison']} {t['target']} "
            f"| {_fmt(t['ratio'], 2)} | {t['verdict'] or 'n/a'} | {met} |"
        )
    return "\n".join(lines)


def ablation_table(report: dict[str, Any]) -> str:
    lines = [
        "| variant (one lever off) | max logins/s held | × its base | c=1 p50 (ms) | × its base "
        "| peak RSS (MB) | CPU-ms per login at the fixed rate | p95 at the fixed rate (ms) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, v in report.get("ablation", {}).items():
        r = report.get("ablation_ratios", {}).get(name, {})
        w = report.get("ablation_verdicts", {}).get(name, {})
        lines.append(
            f"| {name}: {report['descriptions'].get(name, '')} "
            f"| {_spread(v['max_rps_held'])} "
            f"| {_fmt(r.get('max_rps_held'), 2)} ({w.get('max_rps_held') or 'n/a'}) "
            f"| {_spread(v['c1_p50_ms'])} "
            f"| {_fmt(r.get('c1_p50_ms'), 2)} ({w.get('c1_p50_ms') or 'n/a'}) "
            f"| {_spread(v['peak_rss_mb'], 0)} "
            f"| {_spread(v['rate_cpu_ms_per_login'])} | {_spread(v['rate_p95_ms'], 0)} |"
        )
    return "\n".join(lines)


def memory_table(report: dict[str, Any]) -> str:
    names = [n for n in SYSTEMS if n in report["systems"]]
    roles = sorted({r for n in names for r in report["systems"][n]["memory_by_role_mb"]})
    lines = ["| process (RSS MB at peak, median) | " + " | ".join(names) + " |"]
    lines.append("|---" * (len(names) + 1) + "|")
    for role in roles:
        cells = [_fmt(report["systems"][n]["memory_by_role_mb"].get(role), 0) for n in names]
        lines.append(f"| {role} | " + " | ".join(c if c != "n/a" else "" for c in cells) + " |")
    return "\n".join(lines)


def write_markdown(report: dict[str, Any], folder: Path) -> Path:
    machine = report["machine"]
    lines = [
        f"# Benchmark, profile `{report['profile']}`: {report['rounds']} interleaved rounds",
        "",
        f"Command: `{report['command']}`  ",
        f"Started: {report['started_at']}, finished: {report.get('finished_at', 'n/a')}  ",
        f"Machine: {machine['cpus']} CPUs ({machine['cpu_model']}), "
        f"{machine['memory_gb']} GB, Python {machine['python']}, Ray {machine['ray']}, "
        f"load average at start {machine['loadavg_at_start']}  ",
        f"Order in each round: {', '.join(report['order'])}  ",
        f"Load generator: {report['load_generator']}  ",
        f"CPU isolation: {json.dumps(report['isolation'])}  ",
        f"Held: {json.dumps(report['settings']['held_rule'])}",
        "",
        summary_table(report),
        "",
        "## Targets",
        "",
        targets_table(report),
        "",
        "## Memory by process",
        "",
        memory_table(report),
    ]
    if "ablation" in report:
        lines += ["", "## Ablation", "", ablation_table(report)]
    lines += [
        "",
        "## Runs",
        "",
        "| round | system | ready (s) | c=1 p50 | max logins/s held | peak RSS (MB) | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, runs in report["runs"].items():
        for r in runs:
            lines.append(
                f"| {r['round']} | {name} | {_fmt(r.get('ready_s'), 0)} "
                f"| {_fmt(r.get('c1_p50_ms'))} | {_fmt(r.get('max_rps_held'))} "
                f"| {_fmt(r.get('peak_rss_mb'), 0)} | {_run_note(r)} |"
            )
    lines += [
        "",
        "## Step search",
        "",
        "| round | system | offered | achieved (all) | logins/s | p50 | p95 | p99 | failed "
        "| degraded | held |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in report["runs"].items():
        for r in runs:
            for s in r.get("steps", []):
                lines.append(
                    f"| {r['round']} | {name} | {s['offered_rps']} | {_fmt(s['total_rps'])} "
                    f"| {_fmt(s['rps'])} | {_fmt(s['p50_ms'], 0)} | {_fmt(s['p95_ms'], 0)} "
                    f"| {_fmt(s['p99_ms'], 0)} | {s['failures']} | {s['degraded']} "
                    f"| {'yes' if s['held'] else 'no: ' + '; '.join(s['not_held_because'])} |"
                )
    lines += ["", "![latency vs offered load](latency.png)", ""]
    path = folder / "report.md"
    path.write_text("\n".join(lines))
    return path


def write_plot(report: dict[str, Any], folder: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display on benchmark machines
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    colours = dict(
        zip(SYSTEMS, ("tab:red", "tab:orange", "tab:brown", "tab:blue", "tab:green"), strict=True)
    )
    names = [n for n in SYSTEMS if n in report["systems"]]
    fig, (lat, bars) = plt.subplots(1, 2, figsize=(13, 5), width_ratios=(2, 1))
    for name in names:
        for i, run in enumerate(report["runs"][name]):
            steps = sorted(run.get("steps", []), key=lambda s: s["offered_rps"])
            if not steps:
                continue
            lat.plot(
                [s["offered_rps"] for s in steps],
                [s["p95_ms"] for s in steps],
                "-o",
                color=colours[name],
                alpha=0.75,
                markersize=3,
                label=f"{name} p95" if i == 0 else None,
            )
    lat.axhline(150, color="grey", linewidth=1, label="p95 target 150 ms")
    lat.set_xlabel("offered load (requests/s, open arrivals)")
    lat.set_ylabel("p95 latency (ms)")
    lat.set_yscale("log")
    lat.set_xscale("log")
    # Plain labels: a log axis otherwise shows only powers of ten.
    lat.set_yticks([5, 10, 20, 50, 100, 150, 200, 500, 1000, 2000, 5000])
    lat.set_xticks([10, 20, 50, 100, 200, 400])
    for axis in (lat.xaxis, lat.yaxis):
        axis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        axis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    lat.set_title(f"p95 vs offered load, every round, profile {report['profile']}")
    lat.legend(fontsize=8)
    lat.grid(True, which="both", alpha=0.3)

    held = [report["systems"][n]["max_rps_held"] for n in names]
    medians = [h["median"] if h else 0.0 for h in held]
    errors = [
        [h["median"] - h["min"] if h else 0.0 for h in held],
        [h["max"] - h["median"] if h else 0.0 for h in held],
    ]
    bars.bar(names, medians, yerr=errors, capsize=6, color=[colours[n] for n in names])
    bars.set_ylabel("max logins/s held (median, min-max)")
    bars.set_title(f"{report['rounds']} rounds")
    bars.tick_params(axis="x", labelrotation=20)
    path = folder / "latency.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def finish(report: dict[str, Any], folder: Path) -> None:
    """Aggregate the rounds, write report.json, report.md and latency.png, print the tables."""
    report["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    summarise(report)
    write_json(report, folder)
    write_markdown(report, folder)
    write_plot(report, folder)
    tables = [summary_table(report), targets_table(report)]
    if report["descriptions"]:
        tables.append(ablation_table(report))
    print("\n" + "\n\n".join(tables) + "\n")
