"""What the supervisor's coalesced fan-out adds to a lone login's predicts, in one process.

    .venv/bin/python -m loadtest.fanout_cost --rounds 5

No Ray and no HTTP: the supervisor's scoring path (CoalescingScorer over a Fanout with the
shipped quorum and straggler grace, members on one predict thread as in a supervisor with
every member inline) is called for one login at a time, and compared with calling the same
predicts directly on the caller's thread, as the legacy server does. Three ways, interleaved
in every round:

- `direct`: the predicts, nothing else;
- `batched`: the scoring path as a login takes it while others are in progress (a loop
  turn to batch with them, the batch's own task);
- `lone`: the scoring path of the only login in progress (its round starts in its own task).

Each is timed twice: with no-op members (`machinery`: what the path itself costs, thread hop
included) and with the version's real members (`members`, the `--profile`'s artifacts). Per
call: wall and CPU microseconds (the process's CPU time, both threads). Prints medians with
their min-max over rounds; writes loadtest/results/<timestamp>-fanout/fanout.json.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from app.adapters.member_model import InProcessGroupClient, MemberGroupModel, MemberModel
from app.contract.artifacts import LoadedArtifact
from app.contract.manifest import MemberEntry, load_manifest
from app.core.offers import OfferCatalog
from app.core.online.coalescing import CoalescingScorer
from app.core.online.fanout import Fanout
from app.local.processes import PROJECT_ROOT
from loadtest.harness.results import Study, add_version_args, spread

STUDY = Study("loadtest.fanout_cost", __doc__, "fanout-cost")
log = STUDY.log
WAYS = ("direct", "batched", "lone")
# The shipped supervisor's knobs (serve_config.yaml): one batch in flight, 100 ms hold,
# quorum 0.5 with a 50 ms straggler grace.
MAX_IN_FLIGHT, MAX_HOLD_S, QUORUM, GRACE_S = 1, 0.1, 0.5, 0.05


def no_op(entry: MemberEntry) -> MemberModel:
    """A member whose predict returns at once: isolates the path's own cost."""
    return MemberModel(entry, LoadedArtifact(None, lambda m: np.full(m.shape[0], 0.5), None))


def ways(
    group: MemberGroupModel, order: list[str], login: np.ndarray
) -> dict[str, Callable[[], Any]]:
    """One login's scoring, each way (see the module's docstring)."""
    fanout = Fanout(
        [InProcessGroupClient("inline", group)], order, quorum=QUORUM, straggler_grace_s=GRACE_S
    )

    def scorer(alone: Callable[[], bool] | None) -> CoalescingScorer:
        return CoalescingScorer(
            fanout, max_rows=512, max_in_flight=MAX_IN_FLIGHT, max_hold_s=MAX_HOLD_S, alone=alone
        )

    batched, lone = scorer(None), scorer(lambda: True)
    return {
        "direct": lambda: group.score(login),
        "batched": lambda: batched.score(login, 1.0),
        "lone": lambda: lone.score(login, 1.0),
    }


async def time_calls(call: Callable[[], Any], calls: int) -> dict[str, float]:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(calls):
        result = call()
        if asyncio.isfuture(result) or asyncio.iscoroutine(result):
            await result
    return {
        "wall_us": (time.perf_counter() - wall0) * 1e6 / calls,
        "cpu_us": (time.process_time() - cpu0) * 1e6 / calls,
    }


async def measure(args: argparse.Namespace) -> dict[str, dict[str, list[dict[str, float]]]]:
    version_dir = PROJECT_ROOT / "models" / "artifacts" / args.profile / args.game / args.version
    manifest = load_manifest(version_dir)
    login = OfferCatalog(manifest).candidates(manifest.feature_schema.encode_record({}))
    order = [e.name for e in manifest.members]
    groups = {
        "machinery": MemberGroupModel([no_op(e) for e in manifest.members]),
        "members": MemberGroupModel([MemberModel.load(e, version_dir) for e in manifest.members]),
    }
    out: dict[str, dict[str, list[dict[str, float]]]] = {}
    for kind, group in groups.items():
        calls = ways(group, order, login)
        n = args.calls if kind == "machinery" else max(args.calls // 10, 50)
        for way in WAYS:  # warm: threads, caches, first predicts
            await time_calls(calls[way], max(n // 10, 10))
        out[kind] = {way: [] for way in WAYS}
        for r in range(args.rounds):
            # A different way first in each round: no way always runs on a warmer cache.
            for way in WAYS[r % len(WAYS) :] + WAYS[: r % len(WAYS)]:
                out[kind][way].append(await time_calls(calls[way], n))
            log(
                f"{kind} round {r + 1}: "
                + ", ".join(f"{way} {out[kind][way][-1]['wall_us']:.0f} us" for way in WAYS)
            )
        group.close()
    return out


def run(args: argparse.Namespace) -> Path:
    folder = STUDY.folder("fanout")
    rounds = asyncio.run(measure(args))
    summary = {
        kind: {
            way: {
                unit: spread([x[unit] for x in per_round[way]], digits=1)
                for unit in ("wall_us", "cpu_us")
            }
            for way in WAYS
        }
        for kind, per_round in rounds.items()
    }
    report = {"command": args.command, "rounds": rounds, "summary": summary}
    STUDY.save(folder, "fanout.json", report)
    for kind, per_way in summary.items():
        for way, figures in per_way.items():
            wall, cpu = figures["wall_us"], figures["cpu_us"]
            assert wall is not None and cpu is not None
            log(
                f"{kind:9} {way:7}: wall {wall['median']:.0f} us [{wall['min']:.0f}-"
                f"{wall['max']:.0f}], CPU {cpu['median']:.0f} us [{cpu['min']:.0f}-"
                f"{cpu['max']:.0f}] per login"
            )
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = STUDY.parser(rounds=5)
    parser.add_argument("--calls", type=int, default=2000, help="per round, no-op members")
    add_version_args(parser)
    args = STUDY.parse(parser, argv)
    return STUDY.run(lambda: run(args))


if __name__ == "__main__":
    raise SystemExit(main())
