"""Each member's predict cost on this machine, as the layout planner needs it.

Measured where the plan is made (the process building the application, or `offers plan`),
on one thread with OpenMP and BLAS limited to one thread, as a serving replica runs them.
Two sizes separate the fixed cost of a call from the cost of each row: one login's candidate
rows, and the rows of a coalesced fan-out of `BATCH_LOGINS` logins. Each figure is the
fastest of repeated calls, interleaved across members: on a shared host noise only ever adds
time, so the minimum is the cost, and the median moved with the host's load enough to flip
a plan near its threshold from one build to the next.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from app.adapters.member_model import MemberModel
from app.core.planning.member_placement import MemberCost

BATCH_LOGINS = 16
WARMUP_CALLS = 3
TIMED_CALLS = 15


def _timed_ms(model: MemberModel, matrix: np.ndarray) -> float:
    started = time.perf_counter()
    model.score(matrix)
    return (time.perf_counter() - started) * 1000.0


def measure_costs(
    models: Sequence[MemberModel], login_matrix: np.ndarray, *, timed_calls: int = TIMED_CALLS
) -> list[MemberCost]:
    """Per-call and per-row predict cost of each model on `login_matrix` (one login's
    candidate rows) and on BATCH_LOGINS copies of it stacked."""
    batch = np.concatenate([login_matrix] * BATCH_LOGINS, axis=0)
    small_rows, big_rows = login_matrix.shape[0], batch.shape[0]
    small: dict[str, list[float]] = {m.name: [] for m in models}
    big: dict[str, list[float]] = {m.name: [] for m in models}
    with threadpool_limits(limits=1):
        for model in models:
            for _ in range(WARMUP_CALLS):
                model.score(login_matrix)
                model.score(batch)
        for _ in range(timed_calls):
            for model in models:
                small[model.name].append(_timed_ms(model, login_matrix))
                big[model.name].append(_timed_ms(model, batch))
    costs = []
    for model in models:
        t_small = min(small[model.name])
        t_big = min(big[model.name])
        row_ms = max(0.0, (t_big - t_small) / (big_rows - small_rows))
        call_ms = max(0.0, t_small - row_ms * small_rows)
        costs.append(MemberCost(model.name, call_ms=call_ms, row_ms=row_ms))
    return costs
