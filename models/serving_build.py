"""The serving side of a trained version: compiled artifacts, predict costs, fidelity rows.

Runs after the members are trained and weighted (models.version_builder). For each member:
- its compiled ONNX artifact (models.compile), kept only when ONNX Runtime reproduces the
  native scores on the check rows within the tolerance; otherwise it is served natively;
- its predict cost per runtime, a fixed part per call and a part per row, on one thread.
  The layout planner reads these (app.serving.member_layout), so a plan depends on the
  artifacts, not on how busy the host is when an application is built;
The manifest also records the check rows and every member's native scores on them: each
serving replica re-scores them before it serves (app.adapters.member_model.check_fidelity).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from app.contract.artifacts import LoadedArtifact, sha256_of
from app.contract.manifest import Fidelity, Manifest, MemberEntry, PredictCost, ServingArtifact
from models.compile import NotCompilable, compile_member

log = logging.getLogger(__name__)

FIDELITY_TOLERANCE = 1e-6
# Candidate rows of this many held-out players (one row per catalog offer each).
FIDELITY_PLAYERS = 8
# Costs: one login's rows and a coalesced fan-out of BATCH_LOGINS logins, the fastest of
# TIMED_CALLS interleaved calls (noise only ever adds time on a shared host).
BATCH_LOGINS = 16
WARMUP_CALLS = 3
TIMED_CALLS = 15

Predict = Callable[[np.ndarray], np.ndarray]


def _session(model: bytes) -> Predict:
    # Telemetry off before ONNX Runtime loads: it would write under ~/.cache/Microsoft.
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    def predict(matrix: np.ndarray) -> np.ndarray:
        return np.asarray(session.run(["p"], {"X": matrix})[0], dtype=np.float64)

    return predict


def with_serving_artifacts(
    manifest: Manifest, loaded: list[LoadedArtifact], check_rows: np.ndarray, folder: Path
) -> Manifest:
    """The manifest with compiled artifacts, costs and fidelity rows recorded."""
    width = check_rows.shape[1]
    natives = {
        e.name: np.asarray(m.predict(check_rows), np.float64)
        for e, m in zip(manifest.members, loaded, strict=True)
    }
    login = check_rows[: len(manifest.offers)]
    members: list[MemberEntry] = []
    predicts: dict[str, dict[str, Predict]] = {}
    for entry, model in zip(manifest.members, loaded, strict=True):
        runtimes: dict[str, Predict] = {"native": model.predict}
        serving = None
        try:
            started = time.perf_counter()
            compiled = compile_member(model.model, width, entry.name)
            predict = _session(compiled)
            diff = float(np.max(np.abs(predict(check_rows) - natives[entry.name])))
            if diff <= FIDELITY_TOLERANCE:
                artifact = f"{entry.name}.onnx"
                (folder / artifact).write_bytes(compiled)
                serving = ServingArtifact(
                    artifact=artifact,
                    sha256=sha256_of(folder / artifact),
                    size_bytes=len(compiled),
                )
                runtimes["onnx"] = predict
                log.info(
                    "%s: compiled to ONNX in %.2fs, %d bytes, max |diff| %.2g",
                    entry.name,
                    time.perf_counter() - started,
                    len(compiled),
                    diff,
                )
            else:
                log.error(
                    "%s: compiled scores differ from the native ones by %.3g (> %g): "
                    "served natively",
                    entry.name,
                    diff,
                    FIDELITY_TOLERANCE,
                )
        except NotCompilable as exc:
            log.warning("%s: served natively (%s)", entry.name, exc)
        predicts[entry.name] = runtimes
        members.append(entry.model_copy(update={"serving": serving}))
    costs = _measure(predicts, login)
    members = [m.model_copy(update={"costs": costs[m.name]}) for m in members]
    fidelity = Fidelity(
        rows=check_rows.astype(np.float32).tolist(),
        scores={name: scores.tolist() for name, scores in natives.items()},
        tolerance=FIDELITY_TOLERANCE,
    )
    return Manifest.model_validate(
        manifest.model_dump()
        | {"members": [m.model_dump() for m in members], "fidelity": fidelity.model_dump()}
    )


def _measure(
    predicts: dict[str, dict[str, Predict]], login: np.ndarray
) -> dict[str, dict[str, PredictCost]]:
    """Call and row cost of every member under every runtime it has, interleaved."""
    batch = np.concatenate([login] * BATCH_LOGINS, axis=0)
    small_rows, big_rows = login.shape[0], batch.shape[0]
    timings: dict[tuple[str, str], tuple[list[float], list[float]]] = {
        (name, rt): ([], []) for name, rts in predicts.items() for rt in rts
    }
    with threadpool_limits(limits=1):
        for name, rt in timings:
            for _ in range(WARMUP_CALLS):
                predicts[name][rt](login)
                predicts[name][rt](batch)
        for _ in range(TIMED_CALLS):
            for (name, rt), (small, big) in timings.items():
                small.append(_timed_ms(predicts[name][rt], login))
                big.append(_timed_ms(predicts[name][rt], batch))
    out: dict[str, dict[str, PredictCost]] = {name: {} for name in predicts}
    for (name, rt), (small, big) in timings.items():
        t_small, t_big = min(small), min(big)
        row_ms = max(0.0, (t_big - t_small) / (big_rows - small_rows))
        call_ms = max(0.0, t_small - row_ms * small_rows)
        out[name][rt] = PredictCost(call_ms=round(call_ms, 5), row_ms=round(row_ms, 6))
        log.info("%s %s: %.4f ms a call + %.5f ms a row", name, rt, call_ms, row_ms)
    return out


def _timed_ms(predict: Predict, matrix: np.ndarray) -> float:
    started = time.perf_counter()
    predict(matrix)
    return (time.perf_counter() - started) * 1000.0
