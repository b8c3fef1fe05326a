"""The step search for the highest load a system holds, and the rule for "held".

A level is one run at a constant offered load with open-loop arrivals (logins are sent on a
schedule, whatever the answers, so an overloaded system cannot lower its own load). It is
held only if the system answered all of it, in time and in full:
  - p95 <= 150 ms, as the caller measures it;
  - no failed request (a 5xx, a timeout, a malformed request not answered with its 4xx);
  - at least 95% of the offered load achieved;
  - no degraded fallback: every fallback is an unknown player's (quorum,
    no_members_answered or feature_store_unavailable mean the system shed work).
Each level runs once: a level that fails is not retried.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loadtest.harness.locust_runner import LoadResult

P95_TARGET_MS = 150.0
MIN_ACHIEVED_SHARE = 0.95


@dataclass(frozen=True)
class LevelVerdict:
    held: bool
    reasons: tuple[str, ...]  # why not, empty when held


def judge(result: LoadResult, offered_rps: float) -> LevelVerdict:
    reasons = []
    if result.p95_ms > P95_TARGET_MS:
        reasons.append(f"p95 {result.p95_ms:.0f} ms > {P95_TARGET_MS:.0f}")
    if result.failures:
        reasons.append(f"{result.failures} failed requests")
    if result.total_rps < MIN_ACHIEVED_SHARE * offered_rps:
        reasons.append(f"achieved {result.total_rps:.1f} of {offered_rps:g} rps offered")
    if result.degraded:
        reasons.append(f"{result.degraded} degraded fallbacks")
    return LevelVerdict(not reasons, tuple(reasons))


def step_search(run_level: Callable[[int], bool], levels: list[int], refine: float) -> list[int]:
    """Run `levels` in rising order until one is not held, then probe between the last held
    level and that one in steps of `refine` (x1.15: a 15% resolution) until one fails.

    `run_level(offered)` runs one level and says whether it held. Returns the levels run.
    """
    run: list[int] = []
    last_held: int | None = None
    for offered in sorted(levels):
        run.append(offered)
        if run_level(offered):
            last_held = offered
            continue
        if last_held is None or refine <= 1.0:
            break
        level = last_held
        while True:
            level = max(level + 1, round(level * refine))
            if level >= offered:
                break
            run.append(level)
            if not run_level(level):
                break
        break
    return run
