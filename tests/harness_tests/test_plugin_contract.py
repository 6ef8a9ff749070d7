"""A plug-in's ``recommend`` output is held to its contract (one row per user asked, at most k
columns, finite scores or ``-inf`` padding): a list is never credited to another user or dropped
silently; whole-number float ids are the integer ids they name. Expected values by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.datasets import Dataset
from harness.experiment import MetricSuite, run_models
from harness.split import Split

TRAIN = pd.DataFrame({"user": [1, 1, 2, 2, 3, 3], "item": [1, 2, 3, 4, 5, 6]})
TEST = pd.DataFrame({"user": [1, 2, 3], "item": [3, 1, 1]})


class Fixed:
    """Every user gets items 3, 1 (scores 2, 1); options break the contract on purpose."""

    def __init__(self, dtype: type = np.int64, nan_for: int | None = None, skip: int | None = None):
        self.dtype, self.nan_for, self.skip = dtype, nan_for, skip

    def fit(self, train: pd.DataFrame) -> Fixed:
        return self

    def recommend(self, users: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        users = np.asarray(users)
        if self.skip is not None:  # a cold user left out: rows no longer match the users
            users = users[users != self.skip]
        ids = np.tile(np.array([3, 1]), (len(users), 1)).astype(self.dtype)
        scores = np.tile(np.array([2.0, 1.0]), (len(users), 1))
        if self.nan_for is not None:
            scores[users == self.nan_for, 1] = np.nan
        return ids, scores


def _run(tmp_path: Path, models: dict, options: dict | None = None):
    frame = pd.concat([TRAIN, TEST], ignore_index=True)
    split = Split(train=TRAIN, test=TEST, valid=None, stats={}, name="x", params={})
    suite = MetricSuite(k=2, names=("recall@2", "ndcg@2"), options=options or {})
    return run_models(Dataset("d", frame, "d"), split, models, suite, tmp_path, progress=False)


@pytest.mark.parametrize("options", [{}, {"tie_break": "item_desc"}])
def test_broken_lists_fail_the_model_and_float_ids_count(tmp_path: Path, options: dict) -> None:
    result = _run(
        tmp_path,
        {
            "ok": Fixed(),
            "float_ids": Fixed(np.float64),
            "nan": Fixed(nan_for=2),
            "short": Fixed(skip=2),
        },
        options,
    )
    out = result.outcomes
    # user 1's test item 3 is first; users 2 and 3 have item 1 second: recall 1 for everyone
    ndcg = (1.0 + 2 * (1 / math.log2(3))) / 3
    for name in ("ok", "float_ids"):
        assert out[name].ok, out[name].error
        assert out[name].evaluation.summary["recall@2"] == pytest.approx(1.0)
        assert out[name].evaluation.summary["ndcg@2"] == pytest.approx(ndcg, abs=1e-12)
    assert out["nan"].error == (
        "ValueError: Fixed.recommend scored user 2's item at rank 2 nan: scores must be finite "
        "(-inf marks padding)"
    )
    assert out["short"].error == (
        "ValueError: Fixed.recommend returned ids of shape (2, 2) and scores of shape (2, 2) "
        "for 3 users and k=2: it must return one row per user asked, in their order, of at "
        "most k columns (pad short lists with score -inf)"
    )


def test_float_ids_that_are_not_whole_numbers_are_refused(tmp_path: Path) -> None:
    class Halves(Fixed):
        def recommend(self, users: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
            ids, scores = super().recommend(users, k)
            return ids + 0.5, scores

    out = _run(tmp_path, {"halves": Halves(np.float64)}).outcomes["halves"]
    assert out.error == (
        "ValueError: Halves.recommend returned item id 3.5, not a whole number: return the item "
        "ids as they are in the data"
    )
