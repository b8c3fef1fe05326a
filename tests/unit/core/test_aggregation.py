import numpy as np
import pytest

from app.core.aggregation import MemberScores, weighted_mean

pytestmark = [pytest.mark.unit, pytest.mark.untimed]


def test_weighted_mean_uses_member_weights():
    answers = [
        MemberScores("a", 3.0, np.array([0.1, 0.5])),
        MemberScores("b", 1.0, np.array([0.5, 0.1])),
    ]
    np.testing.assert_allclose(weighted_mean(answers), [0.2, 0.4])


def test_missing_member_renormalizes_remaining_weights():
    full = [
        MemberScores("a", 0.5, np.array([0.2])),
        MemberScores("b", 0.25, np.array([0.6])),
        MemberScores("c", 0.25, np.array([1.0])),
    ]
    partial = full[:2]
    # Without c, a and b keep their 2:1 ratio and sum to one: (0.5*0.2 + 0.25*0.6) / 0.75.
    np.testing.assert_allclose(weighted_mean(partial), [0.25 / 0.75])
    np.testing.assert_allclose(weighted_mean(full), [0.5])


def test_single_member_is_its_own_score():
    scores = np.array([0.3, 0.7, 0.01])
    np.testing.assert_allclose(weighted_mean([MemberScores("only", 0.1, scores)]), scores)


def test_no_answers_is_an_error():
    with pytest.raises(ValueError, match="zero member answers"):
        weighted_mean([])


def test_mismatched_shapes_are_refused():
    with pytest.raises(ValueError, match="expected"):
        weighted_mean([MemberScores("a", 1, np.zeros(3)), MemberScores("b", 1, np.zeros(2))])
