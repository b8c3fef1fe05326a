"""Member weights and ensemble scoring.

The ensemble propensity is the weighted mean of the members' propensities, the rule serving
applies (app.core.aggregation); a test checks both give the same numbers. Members are read
back through the contract's artifact loader, the same one serving uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from app.contract.artifacts import LoadedArtifact, load_artifact
from app.contract.manifest import Manifest

# A member no better than chance still gets a sliver of weight rather than a zero, which the
# manifest does not allow.
MIN_WEIGHT_EDGE = 0.01


def auc(y: np.ndarray, scores: np.ndarray) -> float:
    return float(roc_auc_score(y, scores))


def weights_from_validation_aucs(aucs: Sequence[float]) -> list[float]:
    """Weight ∝ the member's edge over chance on the validation sample; sums to 1."""
    edges = [max(a - 0.5, MIN_WEIGHT_EDGE) for a in aucs]
    total = sum(edges)
    return [e / total for e in edges]


def weighted_mean(scores: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """The ensemble propensity when every member answered: sum(w_i * s_i) / sum(w_i)."""
    stacked = np.stack([np.asarray(s, dtype=np.float64) for s in scores])
    w = np.asarray(weights, dtype=np.float64)
    if stacked.shape[0] != w.shape[0] or w.sum() <= 0:
        raise ValueError("need one positive weight per member")
    return np.asarray((w[:, None] * stacked).sum(axis=0) / w.sum())


def load_members(manifest: Manifest, folder: Path) -> list[LoadedArtifact]:
    """Every member of a version, through the checksum-verifying loader serving uses."""
    return [load_artifact(entry, folder) for entry in manifest.members]


def ensemble_scores(manifest: Manifest, folder: Path, X: np.ndarray) -> np.ndarray:
    members = load_members(manifest, folder)
    return weighted_mean([m.predict(X) for m in members], [e.weight for e in manifest.members])
