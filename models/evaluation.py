"""Member weights and ensemble scoring, computed exactly the way serving computes them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from app.aggregation import MemberScores
from app.aggregation import weighted_mean as serving_weighted_mean
from app.manifest import Manifest
from app.member_model import MemberModel

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
    """The ensemble propensity, through serving's own aggregation (all members answered)."""
    answers = [
        MemberScores(name=str(i), weight=w, scores=s)
        for i, (s, w) in enumerate(zip(scores, weights, strict=True))
    ]
    return serving_weighted_mean(answers)


def load_members(manifest: Manifest, folder: Path) -> list[MemberModel]:
    """Every member of a version, through the same checksum-verifying loader serving uses."""
    return [MemberModel.load(entry, folder) for entry in manifest.members]


def ensemble_scores(manifest: Manifest, folder: Path, X: np.ndarray) -> np.ndarray:
    members = load_members(manifest, folder)
    return weighted_mean([m.score(X) for m in members], [e.weight for e in manifest.members])
