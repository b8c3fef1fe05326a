"""Each member runtime against the native predicts, member by member, on one thread.

    .venv/bin/python -m loadtest.member_runtimes --rounds 5 [--tl2cgen]

For every member of a trained version (default: the standard galaxy-raiders 2026-11), and
for each runtime that can hold it:

- `native`: the training library's predict, as a replica ran it before (XGBoost's
  inplace_predict, scikit-learn's predict_proba on float64);
- `onnx`: the member's compiled graph (models.compile) in ONNX Runtime, one session each;
- `gtil`: Treelite 4.8's reference interpreter on the model Treelite imports;
- `tl2cgen`: TL2cgen 1.0's C code for that model, compiled with gcc (`--tl2cgen`: minutes
  per version, so not by default);
- and `onnx-fused`: every compiled member in one session, one call for all (what a
  supervisor with every member inline runs; app.adapters.onnx_members).

Each is timed on one login's candidate rows (10) and on 1,000 rows of held-out-like players,
single-threaded (OpenMP, BLAS and every runtime's own pool capped at one thread), in
interleaved rounds: the figure is the median over rounds of each round's median call, with
the rounds' min-max. Per call and per row; the max |difference| from native on the
manifest's check rows; the artifact's size on disk and its load time. Prints a Markdown
table; writes loadtest/results/<timestamp>-runtimes/runtimes.json and runtimes.md.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from app.adapters.member_model import load_group
from app.adapters.onnx_members import FusedMembers
from app.contract.artifacts import load_artifact, verified_artifact, verified_serving_artifact
from app.contract.manifest import Manifest, MemberEntry, load_manifest
from app.local.processes import PROJECT_ROOT
from loadtest.harness.results import Study, add_version_args, machine_info, spread

STUDY = Study("loadtest.member_runtimes", __doc__, "member-runtimes")
log = STUDY.log

Predict = Callable[[np.ndarray], np.ndarray]
ROWS = (10, 1000)


@dataclass
class Candidate:
    member: str
    runtime: str
    predict: Predict
    size_bytes: int | None
    load_s: float
    build_s: float | None = None


def _native(entry: MemberEntry, folder: Path) -> Candidate:
    started = time.perf_counter()
    loaded = load_artifact(entry, folder)
    load_s = time.perf_counter() - started
    size = verified_artifact(entry, folder).stat().st_size
    return Candidate(entry.name, "native", loaded.predict, size, load_s)


def _onnx(entry: MemberEntry, folder: Path) -> Candidate | None:
    if entry.serving is None:
        return None
    started = time.perf_counter()
    fused = FusedMembers.load([entry], folder)
    load_s = time.perf_counter() - started
    size = verified_serving_artifact(entry, folder).stat().st_size

    def predict(matrix: np.ndarray) -> np.ndarray:
        return fused.score(matrix)[0]

    return Candidate(entry.name, "onnx", predict, size, load_s)


def _treelite_model(entry: MemberEntry, folder: Path) -> Any | None:
    """The member as Treelite imports it; None for what Treelite cannot hold (pipelines)."""
    import treelite

    loaded = load_artifact(entry, folder)
    if entry.framework == "xgboost":
        return treelite.frontend.from_xgboost(loaded.model)
    kind = type(loaded.model).__name__
    if kind in ("ExtraTreesClassifier", "HistGradientBoostingClassifier"):
        return treelite.sklearn.import_model(loaded.model)
    return None


def _positive_class(raw: np.ndarray, n: int) -> np.ndarray:
    """Treelite's outputs are (n, targets, classes): a binary forest keeps both classes."""
    out = np.asarray(raw, dtype=np.float64).reshape(n, -1)
    return out[:, -1]


def _gtil(entry: MemberEntry, folder: Path) -> Candidate | None:
    import treelite

    started = time.perf_counter()
    model = _treelite_model(entry, folder)
    if model is None:
        return None
    load_s = time.perf_counter() - started

    def predict(matrix: np.ndarray) -> np.ndarray:
        return _positive_class(treelite.gtil.predict(model, matrix, nthread=1), len(matrix))

    size = len(model.serialize_bytes())
    return Candidate(entry.name, "gtil", predict, size, load_s)


def _tl2cgen(entry: MemberEntry, folder: Path, build_dir: Path) -> Candidate | None:
    import tl2cgen

    model = _treelite_model(entry, folder)
    if model is None:
        return None
    lib = build_dir / f"{entry.name}.so"
    started = time.perf_counter()
    tl2cgen.export_lib(model, toolchain="gcc", libpath=str(lib), params={"parallel_comp": 8})
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    predictor = tl2cgen.Predictor(str(lib), nthread=1)
    load_s = time.perf_counter() - started

    def predict(matrix: np.ndarray) -> np.ndarray:
        return _positive_class(predictor.predict(tl2cgen.DMatrix(matrix)), len(matrix))

    return Candidate(entry.name, "tl2cgen", predict, lib.stat().st_size, load_s, build_s)


def _fused(manifest: Manifest, folder: Path) -> tuple[Predict, float]:
    started = time.perf_counter()
    group = load_group(manifest.members, folder, "onnx", manifest.fidelity)
    return group.score, time.perf_counter() - started


def _native_all(manifest: Manifest, folder: Path) -> Predict:
    group = load_group(manifest.members, folder, "native", manifest.fidelity)
    return group.score


def _matrices(manifest: Manifest) -> dict[int, np.ndarray]:
    """One login's rows and 1,000 rows: the check rows (held-out players' candidates),
    repeated with a little noise so the trees take varied paths."""
    assert manifest.fidelity is not None
    check = np.asarray(manifest.fidelity.rows, dtype=np.float32)
    rng = np.random.default_rng(0)
    big = np.resize(check, (1000, check.shape[1])) * rng.uniform(0.8, 1.25, (1000, 1))
    return {10: check[:10], 1000: big.astype(np.float32)}


def _median_call_ms(predict: Predict, matrix: np.ndarray, calls: int) -> float:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        predict(matrix)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000.0


def run(args: argparse.Namespace) -> Path:
    folder_in = PROJECT_ROOT / "models" / "artifacts" / args.profile / args.game / args.version
    manifest = load_manifest(folder_in)
    assert manifest.fidelity is not None, "a manifest from before models-3: retrain"
    matrices = _matrices(manifest)
    check = np.asarray(manifest.fidelity.rows, dtype=np.float32)
    out = STUDY.folder("runtimes")
    log(f"{manifest.game} {manifest.version} ({manifest.profile}): {len(manifest.members)} members")
    candidates: list[Candidate] = []
    with tempfile.TemporaryDirectory() as build, threadpool_limits(limits=1):
        for entry in manifest.members:
            found = [_native(entry, folder_in), _onnx(entry, folder_in), _gtil(entry, folder_in)]
            if args.tl2cgen:
                log(f"{entry.name}: compiling with TL2cgen")
                found.append(_tl2cgen(entry, folder_in, Path(build)))
            candidates.extend(c for c in found if c is not None)
        fused, fused_load_s = _fused(manifest, folder_in)
        native_all = _native_all(manifest, folder_in)
        timed: dict[tuple[str, str, int], list[float]] = {}
        ways = [(c.member, c.runtime, c.predict) for c in candidates]
        ways += [("all members", "onnx-fused", fused), ("all members", "native", native_all)]
        for _name, _runtime, predict in ways:  # warm-up
            for rows in ROWS:
                predict(matrices[rows])
        for round_no in range(args.rounds):
            for name, runtime, predict in ways:
                for rows in ROWS:
                    calls = args.calls if rows == 10 else max(3, args.calls // 20)
                    ms = _median_call_ms(predict, matrices[rows], calls)
                    timed.setdefault((name, runtime, rows), []).append(ms)
            log(f"round {round_no + 1}/{args.rounds} done")
        natives = {n: np.asarray(s) for n, s in manifest.fidelity.scores.items()}
        rows_out: list[dict[str, Any]] = []
        for c in candidates:
            diff = float(np.max(np.abs(c.predict(check) - natives[c.member])))
            rows_out.append(
                {
                    "member": c.member,
                    "runtime": c.runtime,
                    "ms_per_call": {r: spread(timed[(c.member, c.runtime, r)], 4) for r in ROWS},
                    "us_per_row_1000": round(
                        statistics.median(timed[(c.member, c.runtime, 1000)]), 4
                    ),
                    "max_abs_diff": diff,
                    "size_bytes": c.size_bytes,
                    "load_ms": round(c.load_s * 1000, 2),
                    "build_s": None if c.build_s is None else round(c.build_s, 2),
                }
            )
        all_native = native_all(check)
        fused_diff = float(np.max(np.abs(fused(check) - all_native)))
        for runtime, diff, load_s in (
            ("onnx-fused", fused_diff, fused_load_s),
            ("native", 0.0, None),
        ):
            rows_out.append(
                {
                    "member": "all members",
                    "runtime": runtime,
                    "ms_per_call": {r: spread(timed[("all members", runtime, r)], 4) for r in ROWS},
                    "us_per_row_1000": round(
                        statistics.median(timed[("all members", runtime, 1000)]), 4
                    ),
                    "max_abs_diff": diff,
                    "size_bytes": None,
                    "load_ms": None if load_s is None else round(load_s * 1000, 2),
                    "build_s": None,
                }
            )
    report = {
        "command": args.command,
        "version": f"{manifest.game}/{manifest.version}",
        "profile": manifest.profile,
        "rounds": args.rounds,
        "machine": machine_info(),
        "rows": rows_out,
    }
    STUDY.save(out, "runtimes.json", report)
    table = render(report)
    (out / "runtimes.md").write_text(table + "\n")
    print(table)
    return out


def _cell(figure: dict[str, float] | None) -> str:
    if figure is None:
        return "-"
    return f"{figure['median']:.3f} [{figure['min']:.3f}-{figure['max']:.3f}]"


def render(report: dict[str, Any]) -> str:
    lines = [
        f"`{report['command']}` ({report['version']}, {report['profile']}, "
        f"{report['rounds']} rounds; medians [min-max over rounds])",
        "",
        "| member | runtime | ms per call, 10 rows | ms per call, 1,000 rows | µs per row at 1,000 "
        "| max \\|Δ\\| vs native | size | load | build |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        size = "-" if row["size_bytes"] is None else f"{row['size_bytes'] / 1024:.0f} KiB"
        load = "-" if row["load_ms"] is None else f"{row['load_ms']:.1f} ms"
        build = "-" if row["build_s"] is None else f"{row['build_s']:.1f} s"
        per_row = row["ms_per_call"][1000]
        lines.append(
            f"| {row['member']} | {row['runtime']} | {_cell(row['ms_per_call'][10])} "
            f"| {_cell(per_row)} | {row['us_per_row_1000']:.2f} | {row['max_abs_diff']:.1e} "
            f"| {size} | {load} | {build} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = STUDY.parser(rounds=5)
    parser.add_argument("--calls", type=int, default=200, help="per round and way, 10 rows")
    add_version_args(parser)
    parser.add_argument("--tl2cgen", action="store_true", help="also compile with TL2cgen (slow)")
    args = STUDY.parse(parser, argv)
    return STUDY.run(lambda: run(args))


if __name__ == "__main__":
    raise SystemExit(main())
