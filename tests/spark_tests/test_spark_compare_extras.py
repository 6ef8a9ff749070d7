"""The comparison's extras on ``engine=spark``: ``compare.human_labels`` and
``compare.user_groups`` give the in-process rows and notes (to 1e-9, string ids), and
``python -m harness.compare`` compares two model runs of ``engine=spark`` from the Parquet
tables their MLflow tags name, with the table the run itself logged.

References: the in-process comparison (:func:`harness.compare.compare_models`, pandas) of the
same run's driver copies; GSB counts and group means counted by hand from the labels and the
per-user tables; the comparison table logged by the run (``comparison.json``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml

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
    for user_groups in ("activity", str(where / "groups.csv")):
        spec = CompareSpec(
            **{
                **base.__dict__,
                "human_labels": str(where / "labels.csv"),
                "user_groups": user_groups,
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


# ---------------------------------------------------------------------------------------------
# python -m harness.compare on two model runs of engine=spark
# ---------------------------------------------------------------------------------------------
def compare_cli(harness_cli: Any, cwd: Path, *args: str) -> Any:
    return harness_cli.run(cwd, *args, module="harness.compare", timeout=900)


def inprocess_split(folder: Path) -> Any:
    """The run's split made in-process from its resolved config (the reference for the copy
    the Spark run cached)."""
    from harness.datasets import load_dataset
    from harness.split import make_split

    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    params = dict(cfg["split"])
    method = params.pop("method")
    return make_split(load_dataset(cfg["dataset"]).frame, method, **params)


def sorted_rows(frame: pd.DataFrame) -> pd.DataFrame:
    columns = sorted(frame.columns)
    return frame[columns].sort_values(columns, kind="stable").reset_index(drop=True)


def test_harness_compare_reads_spark_runs_tables(harness_cli: Any, tmp_path: Path) -> None:
    from harness.compare import compare_pair, labels_row, segment_data

    cwd = tmp_path / "work"
    cwd.mkdir()
    labels = pd.DataFrame(
        {"unit": range(6), "label": ["good", "good", "bad", "same", "good", "bad"]}
    )
    labels.to_csv(cwd / "labels.csv", index=False)
    opts = ["compare.n_resamples=200", f"compare.human_labels={cwd / 'labels.csv'}"]
    proc = harness_cli.run(
        cwd,
        "engine=spark",
        "engine.master='local[2]'",
        "model=[popularity,item_knn]",
        *opts,
        quick=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = next((cwd / "runs" / "results").rglob("summary.csv")).parent
    client = mlflow.MlflowClient(f"sqlite:///{cwd / 'runs' / 'mlflow.db'}")
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], "tags.model != ''"
    )
    by_model = {r.data.tags["model"]: r for r in runs}
    base, cand = by_model["popularity"], by_model["item_knn"]
    ids = (base.info.run_id, cand.info.run_id)
    got = client.download_artifacts(cand.info.run_id, "comparison.json", str(tmp_path))
    logged = pd.DataFrame(json.loads(Path(got).read_text()))
    assert {"all", "cold", "heavy"} <= set(logged["segment"])
    assert "human_labels" in set(logged["metric"])  # the labels row of the Spark run

    def table(out: str) -> pd.DataFrame:
        return pd.read_csv(cwd / out / "comparison.csv")

    # 1. the Spark run cached its (small) split where harness.compare looks: the in-process rows
    split_dir = cwd / "runs" / "splits" / base.data.tags["split.sha256"]
    assert (split_dir / "split.json").is_file()
    reference = inprocess_split(folder)
    for part in ("train", "test"):
        pd.testing.assert_frame_equal(
            sorted_rows(pd.read_parquet(split_dir / f"{part}.parquet")),
            sorted_rows(getattr(reference, part)),
            check_dtype=False,
        )
    aside = split_dir.with_name("aside")
    split_dir.rename(aside)  # without the split: the rows on all users, with a note
    first = compare_cli(harness_cli, cwd, *ids, *opts, "--out", "c1")
    aside.rename(split_dir)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "segments skipped" in first.stdout
    assert_same_table(table("c1"), logged[logged["segment"] == "all"].reset_index(drop=True))

    # 2. with the split: the whole table the run logged (on the driver, as the rule picks for
    # small tables), and the same with the tables kept in Spark (--driver-rows 1)
    second = compare_cli(harness_cli, cwd, *ids, *opts, "--out", "c2")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "comparing in Spark" not in second.stdout
    assert_same_table(table("c2"), logged)
    on_spark = compare_cli(
        harness_cli, cwd, *ids, *opts, "--out", "c3", "--driver-rows", "1",
        "--spark-master", "local[2]",
    )  # fmt: skip
    assert on_spark.returncode == 0, on_spark.stderr[-3000:]
    assert "comparing in Spark (--engine auto" in on_spark.stdout
    assert_same_table(table("c3"), logged)

    # 3. the in-process comparison of the same per-user tables (read here with pandas)
    def read(path: str, order: list[str]) -> pd.DataFrame:
        frame = pd.read_parquet(path).sort_values(order, kind="stable").reset_index(drop=True)
        return frame.astype({"user": np.int64})

    per_user = [
        read(r.data.tags["model.per_user_uri"], ["user"]).set_index("user") for r in (base, cand)
    ]
    recs = [read(r.data.tags["model.topk_uri"], ["user", "rank"]) for r in (base, cand)]
    train = pd.read_parquet(split_dir / "train.parquet")
    test = pd.read_parquet(split_dir / "test.parquet")
    spec = CompareSpec(n_resamples=200)
    summaries = [
        json.loads((folder / m / "result.json").read_text())["summary"]
        for m in ("popularity", "item_knn")
    ]
    pair = compare_pair(
        "popularity", "item_knn", (per_user[0], per_user[1]), list(per_user[0].columns), spec,
        summaries=(summaries[0], summaries[1]),
        segments=segment_data(train, per_user[0].index.to_numpy(), spec),
        qrels=test[["user", "item"]].drop_duplicates().assign(relevance=1.0),
        recs=(recs[0], recs[1]),
    )  # fmt: skip
    in_process = pd.concat(
        [pair.table, pd.DataFrame([labels_row(labels["label"], spec)])], ignore_index=True
    )
    assert_same_table(in_process, logged)

    # 4. the results folder's table gone: the run's artifact copy is read; gone from both: one
    # error line naming the folder
    gone = Path(base.data.tags["model.per_user_uri"])
    shutil.rmtree(gone)
    copy = compare_cli(harness_cli, cwd, *ids, *opts, "--out", "c4")
    assert copy.returncode == 0, copy.stderr[-3000:]
    assert_same_table(table("c4"), logged)
    artifacts = Path(client.get_run(base.info.run_id).info.artifact_uri.removeprefix("file://"))
    shutil.rmtree(artifacts / "per_user.parquet")
    failed = compare_cli(harness_cli, cwd, *ids, *opts, "--out", "c5")
    assert failed.returncode == 2
    errors = [x for x in failed.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and str(gone) in errors[0] and "is gone" in errors[0], failed.stderr
