"""The comparison's extras on ``engine=spark``: ``compare.human_labels`` and
``compare.user_groups`` give the in-process rows and notes (to 1e-9, string ids).
(``python -m harness.compare`` on the tables of an ``engine=spark`` run: test_spark_cli_quick.py,
which shares its CLI run with the end-to-end check.)

References: the in-process comparison (:func:`harness.compare.compare_models`, pandas) of the
same run's driver copies; GSB counts and group means counted by hand from the labels and the
per-user tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness import synthetic
from harness.compare import CompareSpec, PairComparison, compare_models, user_groups_of

pytestmark = pytest.mark.spark

TOL = 1e-9
TEXT = ("segment", "metric", "kind", "method")


def assert_same_table(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Same rows in the same order, text equal, every number equal to ``TOL`` (NaN = NaN)."""
    assert list(got["segment"]) == list(want["segment"])
    assert list(got["metric"]) == list(want["metric"])
    for column in want.columns:
        assert column in got.columns, column
        if column in TEXT or column == "higher_is_better":
            text = [[("" if pd.isna(v) else str(v)) for v in t[column]] for t in (got, want)]
            assert text[0] == text[1], column
            continue
        a = pd.to_numeric(got[column], errors="coerce").to_numpy(np.float64)
        b = pd.to_numeric(want[column], errors="coerce").to_numpy(np.float64)
        assert np.allclose(a, b, atol=TOL, rtol=0, equal_nan=True), column


# ---------------------------------------------------------------------------------------------
# compare.human_labels and compare.user_groups on Spark = in-process
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spark_run(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A small ``engine=spark`` run with string ids ("u10" sorts before "u9"): popularity and
    precomputed scores, per-user tables in Spark and (small) driver copies."""
    from harness.experiment import MetricSuite
    from harness.models import PopularityModel, PrecomputedScores
    from harness.spark.pipeline import load_spark, run_models_spark, split_spark

    where = tmp_path_factory.mktemp("extras")
    events = synthetic.generate(n_users=90, n_items=50, n_events=1500, seed=3)
    events = events.drop(columns=[c for c in ("rating",) if c in events.columns])
    events = events.assign(
        user="u" + events["user"].astype(str), item="i" + events["item"].astype(str)
    )
    events.to_parquet(where / "events.parquet", index=False)
    rng = np.random.default_rng(1)
    grid = pd.MultiIndex.from_product(
        [pd.unique(events["user"]), pd.unique(events["item"])], names=["user", "item"]
    ).to_frame(index=False)
    grid["score"] = rng.random(len(grid))
    grid.to_parquet(where / "scores.parquet", index=False)
    spec = {"kind": "file", "path": str(where / "events.parquet"), "name": "extras"}
    frame, dataset = load_spark(spark, spec, 10**6)
    sp, split = split_spark(frame, "global_time", {"cut": 0.8}, 10**6)
    suite = MetricSuite(k=5, names=("ndcg@5", "recall@5", "precision@5", "coverage@5"))
    models = {
        "popularity": PopularityModel(),
        "scores": PrecomputedScores(where / "scores.parquet"),
    }
    result = run_models_spark(spark, dataset, frame, sp, split, models, suite, where / "out")
    assert all(o.ok for o in result.outcomes.values()), {
        n: o.error for n, o in result.outcomes.items()
    }
    return result, where


def labels_file(users: np.ndarray, path: Path) -> pd.Series:
    """Side-by-side judgements (good / same / bad, mixed case) of some users: the labels."""
    labels = pd.Series(["good", "Same", "bad", "good", "good", "bad", " same", "good"])
    pd.DataFrame({"unit": users[: len(labels)], "label": labels}).to_csv(path, index=False)
    return labels.str.strip().str.lower()


def test_labels_and_groups_on_spark_equal_in_process(spark_run: Any) -> None:
    from harness.spark.compare import group_gap_inputs_spark, user_groups_spark
    from harness.spark.pipeline import compare_result_spark
    from metrics.beyond import group_gap

    result, where = spark_run
    per_user = result.outcomes["scores"].evaluation.per_user
    users = per_user.index.to_numpy()
    labels = labels_file(users, where / "labels.csv")
    # three user groups, not aligned with the id order ("u10" < "u9"), some users without one
    groups = pd.DataFrame({"user": users[::-1][: len(users) - 5]})
    groups["group"] = np.array(["x", "y", "z"])[np.arange(len(groups)) % 3]
    groups.to_csv(where / "groups.csv", index=False)
    base = CompareSpec(baseline="popularity", n_resamples=300, gsb_metric="ndcg@5")
    # the user and item-bucket segments once (with the activity groups, which come from the
    # cold segment); the group file's pass compares all users only: its rows would be the
    # first pass's, and the item buckets are the costliest Spark step of the comparison
    for user_groups, segments in (("activity", True), (str(where / "groups.csv"), False)):
        spec = CompareSpec(
            **{
                **base.__dict__,
                "human_labels": str(where / "labels.csv"),
                "user_groups": user_groups,
                "segments": segments,
            }
        )
        on_spark = compare_result_spark(result, spec)
        assert on_spark is not None
        spark_pairs, spark_notes = on_spark
        ref_pairs, ref_notes = compare_models(result, spec)
        assert spark_notes == ref_notes
        (got,), (want,) = spark_pairs, ref_pairs
        assert isinstance(got, PairComparison)
        assert_same_table(got.table, want.table)
        segmented = {"cold", "heavy", "items:head", "items:tail"} <= set(got.table["segment"])
        assert segmented == segments, set(got.table["segment"])
        assert got.notes == want.notes  # the group-gap note, word for word
        assert any(n.startswith("user-group gap of ndcg@5 (") for n in got.notes), got.notes

        # the human_labels row: counts and ΔGSB by hand
        row = got.table[got.table["metric"] == "human_labels"].iloc[0]
        good, same, bad = ((labels == v).sum() for v in ("good", "same", "bad"))
        assert (row["gsb_good"], row["gsb_same"], row["gsb_bad"]) == (good, same, bad)
        assert row["gsb_delta"] == pytest.approx((good - bad) / len(labels), abs=TOL)

        # the gap's inputs joined in Spark give in-process group_gap's numbers to 1e-9
        tables = result.tables
        by_user = user_groups_of(spec, result)
        spark_groups = user_groups_spark(
            spec,
            tables.per_user["popularity"],
            train=tables.train,
            users=tables.qrels.select("user").distinct(),
        )
        a, b, g = group_gap_inputs_spark(
            tables.per_user["popularity"], tables.per_user["scores"], spark_groups, "ndcg@5"
        )
        for model, mine in (("popularity", a), ("scores", b)):
            ref_table = result.outcomes[model].evaluation.per_user
            ref = group_gap(ref_table, by_user, "ndcg@5", n_resamples=300, seed=0)
            gap = group_gap(mine, g, "ndcg@5", n_resamples=300, seed=0)
            assert gap.sizes == ref.sizes
            assert abs(gap.gap - ref.gap) <= TOL
            assert np.allclose(gap.ci, ref.ci, atol=TOL, rtol=0)
            # the group means by hand
            joined = ref_table[["ndcg@5"]].join(by_user.rename("group"), how="inner").dropna()
            means = joined.groupby("group")["ndcg@5"].mean()
            assert gap.means == pytest.approx(means.to_dict(), abs=TOL)
            assert gap.gap == pytest.approx(means.max() - means.min(), abs=TOL)
        if user_groups != "activity":
            assert set(g) == {"x", "y", "z"} and len(g) == len(users) - 5
