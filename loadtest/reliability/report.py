"""The reliability run's outputs: a plot per scenario and the tables printed at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadtest.harness.open_loop import Shot
from loadtest.reliability.startup_trace import STEPS, median_steps


def plot(
    shots: list[Shot], name: str, limit_ms: float, fault: str | None, fault_at_s: float, out: Path
) -> None:
    """Client latency over send time, one colour per outcome, the fault and the limit marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = {
        "200 personalized": ([], [], "tab:green", "."),
        "200 fallback": ([], [], "tab:orange", "."),
        "503 refused": ([], [], "tab:blue", "."),
        "other 5xx": ([], [], "tab:red", "x"),
        "no answer": ([], [], "black", "x"),
    }
    for s in shots:
        if s.status is None:
            key = "no answer"
        elif s.status == 503:
            key = "503 refused"
        elif s.status >= 500:
            key = "other 5xx"
        elif s.personalized:
            key = "200 personalized"
        else:
            key = "200 fallback"
        groups[key][0].append(s.sent_s)
        groups[key][1].append(s.latency_ms)
    fig, ax = plt.subplots(figsize=(9, 4))
    for label, (xs, ys, color, marker) in groups.items():
        if xs:
            ax.scatter(xs, ys, s=6, c=color, marker=marker, label=f"{label} ({len(xs)})")
    ax.axhline(limit_ms, color="grey", ls="--", lw=1, label="budget + 100 ms")
    if fault:
        ax.axvline(fault_at_s, color="red", lw=1)
        label = fault if len(fault) <= 70 else fault[:67] + "..."
        ax.text(fault_at_s, ax.get_ylim()[1] * 0.95, f" {label}", color="red", fontsize=8, va="top")
    ax.set_xlabel("seconds since the start of the scenario (send time)")
    ax.set_ylabel("client latency (ms)")
    ax.set_title(name)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def table(report: dict[str, Any]) -> str:
    lines = [
        "| scenario | sent | status counts | 5xx (not 503) | no answer | p50 / p99 / max (ms) "
        "| refusal p99 (ms) | > budget+100 | fallback share | precomputed / default "
        "| recovered (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report["scenarios"].items():
        counts = ", ".join(f"{k}: {v}" for k, v in s["status_counts"].items())
        shares = ", ".join(f"{k} {v:.3f}" for k, v in s["fallback_share_by_reason"].items())
        tiers = s.get("tier_share", {})
        tier = f"{tiers.get('precomputed', 0):.3f} / {tiers.get('default', 0):.3f}"
        # A fault with nothing to act on was plain load: the row must not read as survived.
        shown = f"{name} (fault not applied)" if s.get("fault_applied") is False else name
        lines.append(
            f"| {shown} | {s['sent']} | {counts} | {s['http_5xx_non503']} | {s['no_answer']} "
            f"| {s['client_p50_ms']} / {s['client_p99_ms']} / {s['client_max_ms']} "
            f"| {s['refusal_p99_ms'] if s['refusal_p99_ms'] is not None else '-'} "
            f"| {s['over_budget_plus_100ms']} | {shares or '-'} | {tier} "
            f"| {s.get('recovered_after_s', '-')} |"
        )
    return "\n".join(lines)


REFUSAL_MARGIN_MS = 50.0  # the target: refusal p99 within the client floor + 50 ms
RESTART_TARGET_S = 5.0
PRECOMPUTED_TARGET = 0.95


def floor_for(name: str, floors: dict[str, float | None]) -> float | None:
    """The client floor a scenario's refusals are held to: its burst's size, else the
    smallest burst's (every other scenario refuses a few logins at a time)."""
    for key, value in floors.items():
        if name.endswith(key) or f"{key}_" in name:
            return value
    return min((v for v in floors.values() if v is not None), default=None)


def target_rows(report: dict[str, Any]) -> str:
    """One row per scenario against the targets: 0 unanswered, 0 x 5xx other than 503,
    0 accepted over budget + 100 ms, refusal p99 within the client floor + 50 ms (for a
    slow_host scenario, the floor with its neighbours running), and the scenario's own (a
    version back in 5 s, the precomputed tier's share)."""
    slow = report.get("client_floor_p99_ms_slow_host", {})
    lines = [
        "| scenario | unanswered | 5xx (not 503) | accepted > budget+100 | refusal p99 / floor "
        "(ms) | own figures | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in report["scenarios"].items():
        # A slow host's scenario is held to the floor measured with the same neighbours.
        host = next((key for key in slow if name.startswith(key)), None)
        floors = slow[host] if host else report.get("client_floor_p99_ms", {})
        floor = floor_for(name, floors)
        refusal = s.get("refusal_p99_ms")
        misses = []
        if s["no_answer"]:
            misses.append("unanswered")
        if s["http_5xx_non503"]:
            misses.append("5xx")
        if s["over_budget_plus_100ms"]:
            misses.append("over budget")
        if refusal is not None and floor is not None and refusal > floor + REFUSAL_MARGIN_MS:
            misses.append("refusal p99")
        own, own_misses = own_figures(name, s)
        misses += own_misses
        shown = f"{name} (fault not applied)" if s.get("fault_applied") is False else name
        floor_text = f"{floor:.0f}" if floor is not None else "-"
        lines.append(
            f"| {shown} | {unanswered(s)} | {s['http_5xx_non503']} "
            f"| {s['over_budget_plus_100ms']} "
            f"| {refusal if refusal is not None else '-'} / {floor_text} | {own or '-'} "
            f"| {'yes' if not misses else 'no: ' + ', '.join(misses)} |"
        )
    return "\n".join(lines)


def unanswered(s: dict[str, Any]) -> str:
    """The unanswered count, and what the closed ones got when resent once (a game server
    does that, docs/api.md); still unanswered for the target."""
    resent = s.get("resent_after_close") or {}
    if not resent.get("resent"):
        return str(s["no_answer"])
    counts = ", ".join(f"{status}: {n}" for status, n in resent["status_counts"].items())
    return f"{s['no_answer']} (closed, resent once: {counts}; ≤ {resent['max_ms']} ms)"


def own_figures(name: str, s: dict[str, Any]) -> tuple[str, list[str]]:
    figures: list[str] = []
    misses: list[str] = []

    def seconds(label: str, value: float | None, limit: float | None = None) -> None:
        figures.append(f"{label} {value if value is not None else 'never'} s")
        if limit is not None and (value is None or value > limit):
            misses.append(label)

    if name == "version_down_direct":
        seconds("replaced at HAProxy", s.get("replaced_after_s"))
        seconds("personalized again", s.get("recovered_after_s"), RESTART_TARGET_S)
    elif name == "restart_time":
        seconds("one replaced", s.get("one_replaced_after_s"), RESTART_TARGET_S)
        seconds("all replaced", s.get("all_replaced_after_s"))
        seconds("personalized again after all", s.get("all_personalized_again_after_s"))
    elif name == "tier_outage_fresh":
        share = s.get("tier_share_after_fault", {}).get("precomputed", 0.0)
        figures.append(f"precomputed {share:.3f} while DynamoDB is out")
        if share < PRECOMPUTED_TARGET:
            misses.append("precomputed share")
    elif s.get("cpu_neighbours"):
        figures.append(f"{s['cpu_neighbours']} CPU-bound neighbours")
    late = s.get("client_late_max_ms")
    if late is not None and late > REFUSAL_MARGIN_MS:
        # Not a miss of the service's: the load generator itself stalled (open_loop.Shot).
        figures.append(f"client sent up to {late:.0f} ms late")
    return "; ".join(figures), misses


def startup_rows(report: dict[str, Any]) -> str:
    """Where the restart scenarios' ways back went (startup_trace): per kill, the median of
    each step over the replicas that came back, in seconds; empty if none was traced."""
    lines = [
        "| kill | replicas | " + " | ".join(STEPS) + " | HAProxy | listed after |",
        "|---|---|" + "---|" * (len(STEPS) + 2),
    ]
    for name, s in report["scenarios"].items():
        for key, starts in s.items():
            if not key.endswith("_steps") or not starts:
                continue
            steps = median_steps(starts)
            listed = s.get(key.removesuffix("_steps") + "_after_s")
            cells = [f"{steps[k]:.2f}" if k in steps else "-" for k in (*STEPS, "haproxy_s")]
            lines.append(
                f"| {name}: {key.removesuffix('_steps').replace('_', ' ')} | {len(starts)} "
                f"| {' | '.join(cells)} | {listed if listed is not None else 'never'} |"
            )
    return "\n".join(lines) if len(lines) > 2 else ""
