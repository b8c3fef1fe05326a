"""Combining member scores into one ensemble propensity per candidate row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MemberScores:
    """One member's propensities for every row of a candidate matrix."""

    name: str
    weight: float
    scores: np.ndarray


def weighted_mean(answers: Sequence[MemberScores]) -> np.ndarray:
    """Weighted mean over the members that answered, re-normalized over their weights.

    Members missing from `answers` (failed, or later: too slow) simply do not count, so the
    remaining weights are scaled back up to sum to one.
    """
    if not answers:
        raise ValueError("cannot aggregate zero member answers")
    rows = answers[0].scores.shape
    total = 0.0
    acc = np.zeros(rows, dtype=np.float64)
    for answer in answers:
        if answer.scores.shape != rows:
            raise ValueError(f"{answer.name}: {answer.scores.shape} scores, expected {rows}")
        acc += answer.weight * answer.scores
        total += answer.weight
    if total <= 0:
        raise ValueError("member weights must sum to a positive number")
    return acc / total
