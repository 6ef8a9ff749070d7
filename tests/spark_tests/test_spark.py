"""The Spark engine gives the numpy engine's numbers: metrics, splits and top-k.

Needs PySpark and Java 17. Without them these tests skip, except under ``CI=true`` where they
fail: a CI run must not pass by skipping the engine it is meant to check.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import metrics
from harness import split as hsplit
from harness.spark import (
    evaluate_spark,
    global_time_spark,
    leave_one_out_spark,
    topk_spark,
)
from harness.spark.split import _kth_smallest, _quantile_index
from harness.synthetic import generate
from metrics.registry import get

pytestmark = pytest.mark.spark

REF = Path(__file__).resolve().parents[3] / "shared" / "reference" / "trec_eval"
TOL = 1e-9


# ------------------------------------------------------------------------------- helpers


def features(n_items: int = 60, text_ids: bool = False) -> pd.DataFrame:
    """An item table (item, genre) for the metrics with item side inputs."""
    items = [f"i{i}" if text_ids else i for i in range(n_items)]
    return pd.DataFrame({"item": items, "genre": [f"g{i % 4}" for i in range(n_items)]})


def synthetic(seed: int, n: int = 150, n_items: int = 40, text_ids: bool = False) -> tuple:
    """(qrels, run, train) with score ties, graded relevance, truth users missing from the
    run, run users missing from the truth, users without relevant items, unsorted rows."""
    rng = np.random.default_rng(seed)
    run_rows, truth_rows = [], []
    for u in range(10, n + 20):  # truth users 0..9 have no list; n+10.. are not in the truth
        m = int(rng.integers(1, 26))
        items = rng.choice(n_items, size=m, replace=False)
        scores = rng.integers(0, 4, m) + np.where(rng.random(m) < 0.3, rng.random(m), 0.0)
        run_rows += [(u, int(i), float(s)) for i, s in zip(items, scores, strict=True)]
    for u in range(n + 10):
        m = int(rng.integers(1, 9))
        items = rng.choice(n_items, size=m, replace=False)
        truth_rows += [
            (u, int(i), float(r)) for i, r in zip(items, rng.integers(0, 4, m), strict=True)
        ]
    run = pd.DataFrame(run_rows, columns=["user", "item", "score"])
    run = run.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    qrels = pd.DataFrame(truth_rows, columns=["user", "item", "relevance"])
    train = pd.DataFrame({"user": rng.integers(0, n, 3000), "item": rng.integers(0, 50, 3000)})
    if text_ids:  # text sorts differently from numbers ("u10" < "u9")
        for df in (run, qrels, train):
            df["user"] = "u" + df["user"].astype(str)
            df["item"] = "i" + df["item"].astype(str)
    return qrels, run, train


def same(a: metrics.Evaluation, b: metrics.Evaluation, tol: float = TOL) -> None:
    """Summary, per-user table, counts and options equal (NaN where NaN)."""
    assert list(a.summary) == list(b.summary)
    for name, x in a.summary.items():
        y = b.summary[name]
        assert (np.isnan(x) and np.isnan(y)) or abs(x - y) <= tol, (name, x, y)
    assert a.counts == b.counts and list(a.counts) == list(b.counts)
    assert a.options == b.options
    pd.testing.assert_index_equal(a.per_user.index, b.per_user.index)
    assert list(a.per_user.columns) == list(b.per_user.columns)
    va, vb = a.per_user.to_numpy(), b.per_user.to_numpy()
    assert (np.isnan(va) == np.isnan(vb)).all(), "NaN positions differ"
    diff = np.abs(np.where(np.isnan(va), 0.0, va - vb))
    assert diff.max(initial=0.0) <= tol


def both(spark: Any, qrels: Any, run: Any, names: list[str], **kw: Any) -> tuple:
    a = metrics.evaluate(qrels, run, names, **kw)
    b = evaluate_spark(qrels, run, names, spark=spark, **kw)
    same(a, b)
    return a, b


# ------------------------------------------------------------------------------- metrics


OPTION_SETS = [
    {},
    {"average": "micro"},
    {"preset": "trec_eval"},
    {"empty_users": "zero", "user_set": "intersection", "gain": "linear"},
    {"tie_break": "input_order", "relevance_threshold": 2, "ap_denominator": "hits"},
    {"tie_break": "item_desc", "average": "micro", "empty_users": "zero"},
]


@pytest.mark.parametrize("options", OPTION_SETS, ids=lambda o: ",".join(map(str, o.values())))
def test_every_metric_matches_numpy(spark: Any, every_metric: Any, options: dict[str, Any]) -> None:
    qrels, run, train = synthetic(1)
    names = every_metric()
    assert {n.split("@")[0] for n in names} >= set(metrics.list_metrics()) - {"exposure"} - {
        n for n in metrics.list_metrics() if get(n).name != n
    }
    _, ev = both(spark, qrels, run, names, train=train, item_features=features(), **options)
    unlisted = ev.counts["users_missing_from_run"] + ev.counts["truth_users_not_evaluated"]
    assert unlisted > 0 and ev.counts["run_users_not_in_truth"] > 0
    assert ev.counts["users_without_relevant"] > 0
    assert not np.isnan(ev.summary["global_auc"]) and not np.isnan(ev.summary["gini@5"])


def test_a_metric_registered_at_run_time_runs_on_spark(spark: Any) -> None:
    """A plug-in metric, declared in one place (kernel + reduction), needs nothing from the
    engine: its definition travels to the workers with the plan."""
    from metrics.reduce import Part, Pooled
    from metrics.registry import register, unregister

    def compute(view: Any, spec: Any) -> Part:  # misses in the top k, pooled over users
        j = view.judged
        length = np.minimum(j.n_ret, j.cut(spec.k)).astype(np.float64)
        miss = length - j.hits_at(spec.k)
        rate = np.full(len(length), np.nan)
        np.divide(miss, length, out=rate, where=length > 0)
        return Part(rate, {"miss": miss, "len": length})

    register(
        metrics.MetricDef(
            "toy_spark_miss_rate",
            "ranking",
            lambda j, k: j.hits_at(k),
            "misses in the top k / list length, pooled",
            needs_relevant=False,
            compute=compute,
            reduction=Pooled(("miss", "len"), lambda s: s["miss"] / s["len"]),
        )
    )
    try:
        qrels, run, _ = synthetic(4)
        _, ev = both(spark, qrels, run, ["toy_spark_miss_rate@5", "precision@5"])
        top = run.sort_values(["user", "score", "item"], ascending=[True, False, True])
        top = top[top["user"].isin(qrels["user"])].groupby("user").head(5)
        relevant = top.merge(qrels[qrels["relevance"] >= 1], on=["user", "item"])
        assert ev.summary["toy_spark_miss_rate@5"] == pytest.approx(
            1 - len(relevant) / len(top), abs=1e-12
        )
    finally:
        unregister("toy_spark_miss_rate")


def test_text_ids_catalog_and_parquet_inputs(spark: Any, every_metric: Any, tmp_path: Path) -> None:
    qrels, run, train = synthetic(2, text_ids=True)
    names = every_metric((3,))
    for frame, name in ((qrels, "qrels"), (run, "run"), (train, "train")):
        frame.to_parquet(tmp_path / f"{name}.parquet")
    feats = features(text_ids=True)
    a = metrics.evaluate(qrels, run, names, train=train, catalog=500, item_features=feats)
    b = evaluate_spark(
        str(tmp_path / "qrels.parquet"),
        tmp_path / "run.parquet",
        names,
        spark=spark,
        train=str(tmp_path / "train.parquet"),
        catalog=500,
        buckets=5,
        item_features=spark.createDataFrame(feats),
    )
    same(a, b)
    ids = sorted(f"i{i}" for i in range(60))
    same(
        metrics.evaluate(qrels, run, ["coverage@5", "gini"], catalog=ids),
        evaluate_spark(qrels, run, ["coverage@5", "gini"], spark=spark, catalog=ids),
    )


def test_rating_metrics_on_rating_data(spark: Any) -> None:
    rng = np.random.default_rng(3)
    users, items = rng.integers(0, 300, 4000), rng.integers(0, 200, 4000)
    pairs = pd.DataFrame({"user": users, "item": items}).drop_duplicates(ignore_index=True)
    qrels = pairs.assign(relevance=rng.integers(1, 6, len(pairs)).astype(float))
    run = pairs.sample(frac=0.9, random_state=3).assign(score=lambda d: rng.normal(3, 1, len(d)))
    both(spark, qrels, run, ["rmse", "mae", "auc", "ndcg@10"], relevance_threshold=4)


@pytest.mark.parametrize("text_ids", [False, True])
@pytest.mark.parametrize("user_set", ["truth", "intersection"])
def test_sparse_buckets_with_one_side_only(spark: Any, user_set: str, text_ids: bool) -> None:
    """Many buckets hold only truth users or only run users (or nothing)."""
    qrels = pd.DataFrame(
        {"user": [1, 1, 2, 3, 4, 5], "item": [1, 2, 1, 3, 2, 2], "relevance": [1, 0, 2, 1, 1, 0]}
    )
    run = pd.DataFrame(
        {
            "user": [1, 1, 1, 2, 9, 9, 8],
            "item": [1, 2, 3, 1, 1, 2, 3],
            "score": [1, 1, 0, 3, 2, 1, 0],
        }
    ).astype({"score": float})
    if text_ids:
        qrels, run = (df.astype({"user": str, "item": str}) for df in (qrels, run))
    names = ["ndcg@2", "recall", "auc", "gauc", "global_auc", "rmse", "coverage@2", "num_ret"]
    for buckets in (1, 3, 64):
        a = metrics.evaluate(qrels, run, names, user_set=user_set)
        same(a, evaluate_spark(qrels, run, names, spark=spark, buckets=buckets, user_set=user_set))


def test_summary_aggregated_in_spark_and_per_user_parquet(
    spark: Any, every_metric: Any, tmp_path: Path
) -> None:
    qrels, run, train = synthetic(4)
    names = every_metric((5,))
    a = metrics.evaluate(qrels, run, names, train=train, average="micro", item_features=features())
    path = tmp_path / "per_user"
    b = evaluate_spark(
        qrels,
        run,
        names,
        spark=spark,
        train=train,
        item_features=features(),
        average="micro",
        collect_per_user=False,
        per_user_path=path,
    )
    for name, x in a.summary.items():
        y = b.summary[name]
        assert (np.isnan(x) and np.isnan(y)) or abs(x - y) <= TOL, (name, x, y)
    assert a.counts == b.counts and len(b.per_user) == 0
    written = pd.read_parquet(path).set_index("user").sort_index()
    written.index.name = "user"
    pd.testing.assert_frame_equal(
        written.astype(float), a.per_user, check_exact=False, rtol=0, atol=TOL
    )


@pytest.mark.parametrize(
    ("run_file", "extra"), [("results.test", {}), ("results.trunc", {"user_set": "truth"})]
)
def test_trec_eval_reference_files(spark: Any, run_file: str, extra: dict[str, Any]) -> None:
    qrels = metrics.read_trec_qrels(REF / "qrels.test")
    run = metrics.read_trec_run(REF / run_file)
    names = [
        "map", "ndcg", "Rprec", "recip_rank", "num_ret", "num_rel", "num_rel_ret", "P_5",
        "P_10", "recall_10", "ndcg_cut_10", "map_cut_5", "success_1", "auc", "global_auc",
        "coverage@10",
    ]  # fmt: skip
    both(spark, qrels, run, names, preset="trec_eval", **extra)


def test_errors_are_the_numpy_engines(spark: Any) -> None:
    qrels, run, _ = synthetic(5, n=20)
    dup = pd.concat([run, run.iloc[:1]], ignore_index=True)
    with pytest.raises(ValueError, match="duplicate"):
        metrics.evaluate(qrels, dup, ["ndcg@5"])
    with pytest.raises(ValueError, match="duplicate"):
        evaluate_spark(qrels, dup, ["ndcg@5"], spark=spark)
    with pytest.raises(ValueError, match="needs train="):
        evaluate_spark(qrels, run, ["novelty@5"], spark=spark)
    empty = spark.createDataFrame(run).limit(0)
    with pytest.raises(ValueError, match="run is empty"):
        evaluate_spark(qrels, empty, ["ndcg@5"], spark=spark)
    with pytest.raises(ValueError, match="integers in one table and strings"):
        evaluate_spark(qrels.astype({"user": str}), run, ["ndcg@5"], spark=spark)


# -------------------------------------------------------------------------------- splits


def interactions() -> pd.DataFrame:
    """Synthetic events with same-second ties (timestamps floored to the day) and repeated
    events, plus a ``row`` column naming each input row."""
    df = generate(n_users=300, n_items=120, n_events=6000, seed=7)
    df["timestamp"] = df["timestamp"] // 86_400 * 86_400
    df = pd.concat([df, df.iloc[::50]], ignore_index=True)
    return df.assign(row=np.arange(len(df)))


def rows_of(part: Any) -> list[int]:
    if isinstance(part, pd.DataFrame):
        return sorted(part["row"].tolist())
    return sorted(r["row"] for r in part.select("row").collect())


@pytest.mark.parametrize(
    ("cut", "valid_cut"), [(0.8, None), (0.8, 0.6), ("2023-10-01", "2023-07-15T12:00:00")]
)
def test_global_time_same_rows(spark: Any, cut: Any, valid_cut: Any) -> None:
    df = interactions()
    want = hsplit.global_time(df, cut=cut, valid_cut=valid_cut)
    got = global_time_spark(spark.createDataFrame(df), cut, valid_cut=valid_cut)
    for key in ("cut", "cut_iso", "valid_cut", "valid_cut_iso"):
        assert got.stats[key] == want.stats[key]
    assert rows_of(got.train) == rows_of(want.train)
    assert rows_of(got.test) == rows_of(want.test)
    if valid_cut is None:
        assert got.valid is None
    else:
        assert rows_of(got.valid) == rows_of(want.valid)


@pytest.mark.parametrize(("valid", "min_history"), [(True, 2), (False, 4)])
def test_leave_one_out_same_rows(spark: Any, valid: bool, min_history: int) -> None:
    df = interactions()
    want = hsplit.leave_one_out(df, valid=valid, min_history=min_history)
    got = leave_one_out_spark(spark.createDataFrame(df), valid=valid, min_history=min_history)
    assert rows_of(got.test) == rows_of(want.test)
    assert rows_of(got.train) == rows_of(want.train)
    assert (got.valid is None) == (want.valid is None)
    if valid:
        assert rows_of(got.valid) == rows_of(want.valid)


@pytest.mark.parametrize("whole", [0, 100_000], ids=["bracketed", "collected"])
def test_quantile_order_statistic_is_numpys(
    spark: Any, whole: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ways to the order statistic: bracketed by ``approxQuantile``, and every value
    collected (``WHOLE_COLUMN_ROWS``: up to how many values)."""
    from harness.spark import split as ssplit

    monkeypatch.setattr(ssplit, "WHOLE_COLUMN_ROWS", whole)
    rng = np.random.default_rng(8)
    for n in (1, 2, 3, 10, 999, 4096):
        for q in (1e-9, 0.1, 0.25, 0.5, 1 / 3, 0.8, 0.999999):
            want = np.quantile(np.arange(n), q, method="higher")
            assert _quantile_index(n, q) == want, (n, q)
    ts = rng.integers(0, 500, 20_000)  # many ties
    frame = spark.createDataFrame(pd.DataFrame({"timestamp": ts}))
    for q in (0.01, 0.5, 0.97):
        want = int(np.quantile(ts, q, method="higher"))
        assert _kth_smallest(frame, "timestamp", _quantile_index(len(ts), q), len(ts)) == want


# --------------------------------------------------------------------------------- top-k


@pytest.mark.parametrize("tie_break", ["item_asc", "item_desc", "input_order"])
def test_topk_equals_a_pandas_sort(spark: Any, tie_break: str) -> None:
    _, run, _ = synthetic(9)
    got = topk_spark(spark.createDataFrame(run), 5, tie_break=tie_break).toPandas()
    order = run.assign(row=np.arange(len(run)))
    tie = {"item_asc": ("item", True), "item_desc": ("item", False), "input_order": ("row", True)}
    col, up = tie[tie_break]
    order = order.sort_values(["user", "score", col], ascending=[True, False, up])
    order["rank"] = order.groupby("user").cumcount() + 1
    want = order[order["rank"] <= 5][["user", "item", "score", "rank"]]
    got = got.sort_values(["user", "rank"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(
        got.astype({"rank": np.int64}), want.reset_index(drop=True), check_dtype=False
    )


# ------------------------------------------------------------------------------ segments


def test_item_bucket_segments_through_the_engine(spark: Any) -> None:
    """The comparison's item-bucket segments, evaluated by the Spark engine, equal the numpy
    engine's; string and integer ids give the same values."""
    from functools import partial

    from harness.compare import _bucket_tables

    names = ["ndcg@5", "recall@5", "mrr", "precision@3"]
    found = {}
    for text_ids in (False, True):
        qrels, run, _ = synthetic(11, n=60, text_ids=text_ids)
        recs = []
        for seed in (0, 1):  # two models: the run's order, and a reshuffled one
            r = run.sample(frac=1.0, random_state=seed).reset_index(drop=True)
            r["rank"] = r.groupby("user").cumcount() + 1
            recs.append(r[["user", "item", "rank"]])
        items = pd.unique(pd.concat([qrels["item"], run["item"]]))
        bucket_of = pd.Series(np.resize(["head", "mid", "tail"], len(items)), index=items)
        a = _bucket_tables(qrels, tuple(recs), names, bucket_of, {}, metrics.evaluate)
        b = _bucket_tables(
            qrels, tuple(recs), names, bucket_of, {}, partial(evaluate_spark, spark=spark)
        )
        for bucket in ("head", "mid", "tail"):
            for x, y in zip(a[bucket], b[bucket], strict=True):
                assert len(x) > 0
                pd.testing.assert_frame_equal(x, y, check_exact=False, rtol=0, atol=TOL)
        found[text_ids] = a
    for bucket in ("head", "mid", "tail"):
        plain = found[False][bucket][0]
        text = found[True][bucket][0]
        text.index = text.index.str[1:].astype(np.int64)
        pd.testing.assert_frame_equal(
            text.sort_index(), plain, check_exact=False, rtol=0, atol=TOL, check_names=False
        )


# ------------------------------------------------------------------------------- reading


def test_read_interactions_same_rows_and_errors_as_the_loader(spark: Any, tmp_path: Path) -> None:
    """Parquet and CSV read in Spark give the in-process loader's rows and types; bad input
    gives its one-line error (the loader's message, less the row number Spark does not keep)."""
    from harness import data as hdata
    from harness.errors import DataError
    from harness.spark.io import read_interactions

    good = pd.DataFrame(
        {
            "user": [3, 1, 2, 2],
            "item": ["b", "a", "c", "a"],
            "timestamp": [f"2023-0{m}-0{d}T10:00:00" for m, d in ((1, 1), (1, 2), (1, 3), (2, 1))],
            "rating": [1.0, 2.5, 3.0, 5.0],
        }
    )
    good.to_csv(tmp_path / "good.csv", index=False)
    good.assign(timestamp=pd.to_datetime(good["timestamp"]).astype("int64") // 10**9).to_parquet(
        tmp_path / "good.parquet"
    )
    for name in ("good.csv", "good.parquet"):
        want = hdata.load_interactions(tmp_path / name, rating_range=(1, 5))
        got = read_interactions(spark, str(tmp_path / name), rating_range=(1, 5)).toPandas()
        got = got.sort_values(["timestamp"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(
            got, want.sort_values(["timestamp"]).reset_index(drop=True), check_dtype=False
        )
        assert got["user"].dtype.kind == "i" and got["timestamp"].dtype.kind == "i"
    bad = {
        "missing.csv": good.drop(columns="timestamp"),
        "null_user.parquet": good.assign(user=[1.0, None, 2.0, 3.0]),
        "rating.csv": good.assign(rating=[1.0, 9.0, 2.0, 7.0]),
        "text_rating.csv": good.assign(rating=["1", "x", "2", "3"]),
        # (Spark parses each text timestamp on its own: no one-format-per-column inference)
        "bad_time.csv": good.assign(timestamp=["x", "yesterday", "?", "never"]),
    }
    for name, frame in bad.items():
        path = tmp_path / name
        frame.to_csv(path, index=False) if name.endswith(".csv") else frame.to_parquet(path)
        with pytest.raises(DataError) as want:
            hdata.load_interactions(path, rating_range=(1, 5))
        with pytest.raises(DataError) as got:
            read_interactions(spark, str(path), rating_range=(1, 5))
        message = str(got.value)
        assert "\n" not in message and message.startswith(str(path))
        head, _, example = message.partition(", e.g. ")
        assert str(want.value).startswith(head), (str(want.value), message)
        no_rows = re.sub(r" at rows? \S+( \(0-based data rows?\))?", "", str(want.value))
        assert not example or f"e.g. {example}" in no_rows, (str(want.value), message)


def test_a_pandas_frame_becomes_one_partition_per_core_in_its_row_order(spark: Any) -> None:
    """A pandas frame (the synthetic dataset, an API caller's tables) reaches Spark as at most
    one partition per core, its rows in pandas order (the ``input_order`` ties and the rating
    sums read it). Above ``spark.sql.execution.arrow.localRelationThreshold`` (48 MB: 2M
    events) Spark made one partition per Arrow batch of 10,000 rows, and every scan of the
    events then ran 200 tasks: a 2M-event synthetic run's split took 117 s (55 s merged).
    Here the threshold is 0 and the batches 1,000 rows, so a small frame takes that path."""
    from pyspark.sql import functions as sf

    from harness.spark.io import _frame

    keys = (
        "spark.sql.execution.arrow.localRelationThreshold",
        "spark.sql.execution.arrow.maxRecordsPerBatch",
    )
    before = {k: spark.conf.get(k) for k in keys}
    spark.conf.set(keys[0], "0")
    spark.conf.set(keys[1], "1000")
    try:
        rows = pd.DataFrame({"user": np.arange(4001)[::-1] % 97, "x": np.arange(4001)})
        df = _frame(spark, rows, "events")
        parts = df.select(sf.spark_partition_id().alias("p")).distinct().count()
        at = df.withColumn("_at", sf.monotonically_increasing_id()).orderBy("_at").toPandas()
    finally:
        for k, v in before.items():
            spark.conf.set(k, v)
    assert parts <= spark.sparkContext.defaultParallelism
    np.testing.assert_array_equal(at["x"].to_numpy(), rows["x"].to_numpy())
    np.testing.assert_array_equal(at["user"].to_numpy(), rows["user"].to_numpy())
