"""The comparison on Spark (per-user tables kept in Spark, sums to the driver) gives
``harness.compare``'s rows: every number to 1e-9, below and above ``NORMAL_MIN_N``, with user
segments and item-bucket segments, for integer and string ids."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

import metrics
from harness.compare import (
    CompareSpec,
    PairComparison,
    SegmentData,
    compare_models,
    compare_pair,
    segment_data,
)
from harness.experiment import MetricSuite, ModelOutcome
from harness.spark import evaluate_spark
from harness.spark.aggregate import _pairs_histogram, _pooled_pairs
from harness.spark.compare import (
    SparkSegments,
    _linear_quantile,
    bucket_tables_spark,
    compare_models_spark,
    compare_spark,
    segments_spark,
)
from harness.spark.io import _frame
from metrics.evaluate import State, finish_state
from metrics.stats import NORMAL_MIN_N

pytestmark = pytest.mark.spark

TOL = 1e-9
TEXT = ("segment", "metric", "kind", "method")


def ids(n: int, kind: str) -> np.ndarray:
    """``n`` user ids, integers or strings (which sort differently: "u10" < "u9")."""
    return np.arange(n) * 7 + 3 if kind == "int" else np.array([f"u{i}" for i in range(n)], object)


def per_user_tables(n: int, kind: str, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two per-user tables on the same users, sorted by user as ``metrics.evaluate`` gives them:
    a continuous metric, a discrete one with many ties, a lower-is-better one, a pooled one
    (rmse: compared on its summaries), a metric with NaN for some users, a whole-run metric
    (all NaN) and one with a single large difference
    (so that its normal interval is not trusted and it stays bootstrapped at any size)."""
    rng = np.random.default_rng(seed)
    base = rng.beta(2, 3, n)
    a = pd.DataFrame(
        {
            "ndcg@10": base,
            "precision@10": rng.integers(0, 4, n) / 10,
            "popularity@10": rng.gamma(2.0, 0.5, n),
            "rmse": rng.gamma(2.0, 0.5, n),
            "mrr@10": np.where(rng.random(n) < 0.2, np.nan, rng.random(n)),
            "coverage@10": np.full(n, np.nan),
            "recall@10": rng.random(n) * 0.01,
        },
        index=pd.Index(ids(n, kind), name="user"),
    )
    b = a.copy()
    b["ndcg@10"] = np.clip(base + rng.normal(0.01, 0.05, n), 0, 1)
    b["precision@10"] = np.clip(a["precision@10"] + rng.integers(-1, 2, n) / 10, 0, 1)
    b["popularity@10"] = a["popularity@10"] * rng.lognormal(-0.02, 0.1, n)
    b["rmse"] = a["rmse"] * rng.lognormal(-0.02, 0.1, n)
    b["mrr@10"] = np.where(rng.random(n) < 0.1, np.nan, a["mrr@10"] + rng.normal(0, 0.1, n))
    b["recall@10"] = a["recall@10"] + rng.random(n) * 0.001
    b.loc[b.index[n // 2], "recall@10"] = 50.0  # holds almost all of Σd²
    order = np.argsort(a.index.to_numpy(), kind="stable")
    return a.iloc[order], b.iloc[order]


def spark_table(spark: Any, table: pd.DataFrame) -> Any:
    """A per-user table as Spark holds it (``user`` a column)."""
    return _frame(spark, table.reset_index(), "per-user table")


def assert_same(mine: PairComparison, ref: PairComparison, tol: float = TOL) -> None:
    """The same rows, columns and notes; every number to ``tol`` (NaN where NaN)."""
    assert (mine.baseline, mine.candidate, mine.gsb_metric) == (
        ref.baseline,
        ref.candidate,
        ref.gsb_metric,
    )
    assert mine.notes == ref.notes and mine.segments == ref.segments
    assert list(mine.table.columns) == list(ref.table.columns)
    assert len(mine.table) == len(ref.table) > 0
    for col in ref.table.columns:
        x, y = mine.table[col], ref.table[col]
        if col in TEXT or x.dtype == object or y.dtype == object:
            assert x.tolist() == y.tolist(), col
            continue
        xv, yv = x.to_numpy(np.float64), y.to_numpy(np.float64)
        assert (np.isnan(xv) == np.isnan(yv)).all(), col
        ok = ~np.isnan(xv) & np.isfinite(yv)
        np.testing.assert_allclose(xv[ok], yv[ok], rtol=tol, atol=tol, err_msg=col)
        assert (xv[np.isinf(yv)] == yv[np.isinf(yv)]).all(), col


def user_segments(a: pd.DataFrame, size: int) -> dict[str, np.ndarray]:
    """Two overlapping user segments: every third user, and the last ``size`` users."""
    users = a.index.to_numpy()
    return {"cold": users[::3], "heavy": users[-size:]}


def as_spark_segments(spark: Any, groups: dict[str, np.ndarray]) -> SparkSegments:
    rows = pd.DataFrame(
        {
            "user": np.concatenate(list(groups.values())),
            "segment": np.repeat(list(groups), [len(v) for v in groups.values()]),
        }
    )
    return SparkSegments(_frame(spark, rows, "segments"), tuple(groups), {"cold": "c"})


@pytest.mark.parametrize("kind", ["int", "str"])
@pytest.mark.parametrize(
    ("n", "spec"),
    [
        (400, CompareSpec(n_resamples=300, seed=3)),
        (
            400,
            CompareSpec(n_resamples=200, tolerance=0.05, relative_tolerance=True, gsb_metric="x"),
        ),
        (
            25_000,
            CompareSpec(n_resamples=200, tolerance=0.01, correction="bh", alpha=0.01, power=0.9),
        ),
    ],
    ids=["bootstrap", "relative-tolerance", "normal"],
)
def test_same_comparison_as_in_process(spark: Any, kind: str, n: int, spec: CompareSpec) -> None:
    a, b = per_user_tables(n, kind)
    names = list(a.columns)
    summaries = ({"coverage@10": 0.4, "rmse": 1.1}, {"coverage@10": 0.5, "rmse": 0.9})
    groups = user_segments(a, 2_000)
    ref = compare_pair(
        "base", "cand", (a, b), names, spec, summaries=summaries,
        segments=SegmentData(groups, pd.Series(dtype=object), {"cold": "c"}),
    )  # fmt: skip
    mine = compare_spark(
        spark_table(spark, a), spark_table(spark, b), names, spec, baseline="base",
        candidate="cand", summaries=summaries, segments=as_spark_segments(spark, groups),
    )  # fmt: skip
    assert_same(mine, ref)
    t = ref.table
    # rmse is pooled over pairs: its row is the summaries' values, on segment "all" only
    pooled = t[t["metric"] == "rmse"]
    assert pooled[["segment", "kind", "mean_a", "mean_b"]].values.tolist() == [
        ["all", "run-level", 1.1, 0.9]
    ]
    # users without a value on a side are counted (they were left out silently: dropped 0)
    left_out = int((a["mrr@10"].isna() | b["mrr@10"].isna()).sum())
    mrr = t[(t["segment"] == "all") & (t["metric"] == "mrr@10")].iloc[0]
    assert (mrr["dropped"], mrr["n"]) == (left_out, n - left_out) and left_out > 0
    assert any(x.startswith(f"mrr@10: compared on the {n - left_out:,} of") for x in ref.notes)
    # each side's per-user sd (what sizes the online test), from Spark's sums or its collected
    # pairs, is numpy's over the users both tables hold
    mt = mine.table
    for row in mt[(mt["segment"] == "all") & (mt["kind"] == "per-user")].itertuples():
        ok = a[row.metric].notna() & b[row.metric].notna()
        want = (a[row.metric][ok].std(ddof=1), b[row.metric][ok].std(ddof=1))
        assert (row.sd_a, row.sd_b) == pytest.approx(want, rel=1e-9), row.metric
    methods = dict(zip(zip(t["segment"], t["metric"], strict=True), t["method"], strict=True))
    if n >= NORMAL_MIN_N:  # both branches ran: normal from the sums, bootstrap collected
        assert methods[("all", "ndcg@10")] == "normal"
        assert methods[("all", "recall@10")] == "bootstrap"  # one user holds Σd²
        assert methods[("heavy", "ndcg@10")] == "bootstrap"  # 2,000 users
    else:
        assert set(ref.table["method"].dropna()) == {"bootstrap"}
    if spec.gsb_metric in names:
        pd.testing.assert_series_equal(
            mine.differences[spec.gsb_metric], ref.differences[spec.gsb_metric],
            check_exact=False, rtol=TOL, atol=TOL, check_index_type=False,
        )  # fmt: skip
    else:
        assert mine.differences == {}


def test_different_users_is_one_line(spark: Any) -> None:
    a, b = per_user_tables(50, "str")
    one_line = (
        r"^'base' and 'cand' were evaluated on different users "
        r"\(2 differ, e\.g\. 'u0'\); compare models on the same split$"
    )
    with pytest.raises(ValueError, match=one_line):
        compare_spark(
            spark_table(spark, a.iloc[1:]), spark_table(spark, b.iloc[:-1]), ["ndcg@10"],
            CompareSpec(), baseline="base", candidate="cand",
        )  # fmt: skip


@pytest.mark.parametrize("n", [400, 21_000])
def test_intersection_compares_the_users_both_tables_hold(spark: Any, n: int) -> None:
    # user_set=intersection (here through the trec_eval preset): a model is evaluated on the
    # users it gave a list, so the tables differ; both engines pair the users both hold
    a, b = per_user_tables(n, "str")
    a, b = a.iloc[5:], b.iloc[:-3]  # 5 users of the candidate only, 3 of the baseline only
    names = list(a.columns)
    common = a.index.intersection(b.index)
    summaries = ({"coverage@10": 0.4}, {"coverage@10": 0.5})
    groups = user_segments(a, 300)
    spec, opts = CompareSpec(n_resamples=200), {"preset": "trec_eval"}
    ref = compare_pair(
        "base", "cand", (a, b), names, spec, summaries=summaries, options=opts,
        segments=SegmentData(groups, pd.Series(dtype=object), {"cold": "c"}),
    )  # fmt: skip
    row = ref.row("ndcg@10")
    assert row["n"] == len(common) == n - 8
    assert row["mean_a"] == pytest.approx(a.loc[common, "ndcg@10"].mean(), abs=TOL)
    assert row["mean_b"] == pytest.approx(b.loc[common, "ndcg@10"].mean(), abs=TOL)
    assert ref.notes[0].startswith(
        f"compared on the {n - 8:,} users both models were evaluated on, leaving out 3 of the "
        f"{n - 5:,} users of 'base' and 5 of the {n - 3:,} users of 'cand'"
    )
    mine = compare_spark(
        spark_table(spark, a), spark_table(spark, b), names, spec, baseline="base",
        candidate="cand", summaries=summaries, segments=as_spark_segments(spark, groups),
        options=opts,
    )  # fmt: skip
    assert_same(mine, ref)


def test_linear_quantile_from_counts_is_numpys() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        x = rng.integers(0, 30, int(rng.integers(1, 60)))
        q = float(rng.random())
        values, counts = np.unique(x, return_counts=True)
        got = _linear_quantile(values.astype(np.float64), counts, q)
        assert got == pytest.approx(float(np.quantile(x, q)), rel=1e-12, abs=1e-12)


def test_bucket_sizes_are_the_shares_as_written_in_both_engines(spark: Any) -> None:
    """100 items, head_share 0.07, tail_share 0.57: the doubles 0.07 * 100 = 7.000000000000001
    and 0.57 * 100 = 56.99999999999999 would give ceil 8 head and floor 56 tail items; the
    shares as written give 7 and 57. Expected by hand: 7 head, 36 mid, 57 tail."""
    rng = np.random.default_rng(4)
    popular = np.repeat(np.arange(100), np.arange(100, 0, -1))  # item i trained 100 - i times
    train = pd.DataFrame({"user": rng.integers(0, 30, popular.size), "item": popular})
    spec = CompareSpec(head_share=0.07, tail_share=0.57)
    assert 0.07 * 100 > 7 and 0.57 * 100 < 57  # the doubles are off
    got = segments_spark(
        _frame(spark, train, "train"), _frame(spark, train[["user"]], "users"), spec
    ).item_bucket
    assert got is not None
    mine = got.toPandas().set_index("item")["bucket"].sort_index()
    expected = pd.Series(["head"] * 7 + ["mid"] * 36 + ["tail"] * 57, index=np.arange(100))
    assert mine.tolist() == expected.tolist() and mine.index.tolist() == list(range(100))
    ref = segment_data(train, np.sort(train["user"].unique()), spec).item_bucket
    assert ref.sort_index().tolist() == expected.tolist()


def dataset(
    kind: str, n_users: int = 240, n_items: int = 80, seed: int = 1, n_models: int = 2
) -> tuple:
    """(train, qrels, recs of ``n_models`` models): top-10 lists from random scores."""
    rng = np.random.default_rng(seed)
    train = pd.DataFrame(
        {
            "user": rng.integers(0, n_users, 4_000),
            "item": (rng.pareto(1.2, 4_000) * 5).astype(np.int64) % (n_items - 10),
        }
    )  # items n_items-10 .. n_items-1 are never trained on: unseen, bucketed as tail
    users = np.repeat(np.arange(n_users), 4)
    qrels = pd.DataFrame(
        {"user": users, "item": rng.integers(0, n_items, users.size), "relevance": 1.0}
    ).drop_duplicates(["user", "item"])
    recs = []
    for _ in range(n_models):
        scores = rng.random((n_users, n_items))
        top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
        recs.append(
            pd.DataFrame(
                {
                    "user": np.repeat(np.arange(n_users), 10),
                    "item": top.ravel(),
                    "rank": np.tile(np.arange(1, 11), n_users),
                }
            )
        )
    frames = [train, qrels, *recs]
    if kind == "str":
        for df in frames:
            df["user"] = "u" + df["user"].astype(str)
            df["item"] = "i" + df["item"].astype(str)
    return frames[0], frames[1], frames[2:]


@pytest.mark.parametrize("kind", ["int", "str"])
def test_segments_and_item_buckets_through_the_engine(
    spark: Any, tmp_path: Path, kind: str
) -> None:
    train, qrels, recs = dataset(kind)
    names = ["ndcg@10", "recall@5", "precision@10", "coverage@10"]
    spec = CompareSpec(n_resamples=200, cold_max_events=14, heavy_quantile=0.8)
    runs = [r.assign(score=-r["rank"].astype(np.float64))[["user", "item", "score"]] for r in recs]
    evs = [metrics.evaluate(qrels, run, names) for run in runs]
    seg = segment_data(train, np.sort(qrels["user"].unique()), spec)
    ref = compare_pair(
        "pop", "knn", (evs[0].per_user, evs[1].per_user), names, spec,
        summaries=(evs[0].summary, evs[1].summary), segments=seg, qrels=qrels, recs=tuple(recs),
    )  # fmt: skip
    assert {"cold", "heavy", "items:head", "items:mid", "items:tail"} <= set(ref.table["segment"])

    q, t = _frame(spark, qrels, "qrels"), _frame(spark, train, "train")
    tables, summaries = {}, {}
    for name, run in zip(("pop", "knn"), runs, strict=True):
        path = tmp_path / name
        ev = evaluate_spark(q, run, names, spark=spark, per_user_path=path, collect_per_user=False)
        tables[name], summaries[name] = spark.read.parquet(str(path)), ev.summary
    sseg = segments_spark(t, q.select("user"), spec)
    got_users = sseg.users.toPandas()
    for name, users in seg.users.items():
        mine = got_users.loc[got_users["segment"] == name, "user"].to_numpy()
        assert sorted(mine.tolist()) == sorted(users.tolist()), name
    buckets = sseg.item_bucket.toPandas() if sseg.item_bucket is not None else None
    assert buckets is not None
    pd.testing.assert_series_equal(
        pd.Series(buckets["bucket"].to_numpy(), index=buckets["item"].to_numpy()).sort_index(),
        seg.item_bucket.sort_index(),
        check_names=False,
        check_dtype=False,
        check_index_type=False,
    )
    assert sseg.definitions == seg.definitions

    srecs = {n: _frame(spark, r, "recs") for n, r in zip(("pop", "knn"), recs, strict=True)}
    pairs, notes = compare_models_spark(
        tables, summaries, names, replace(spec, baseline="pop"),
        train=t, qrels=q, recs=srecs, folder=tmp_path / "buckets",
    )  # fmt: skip
    assert notes == [] and len(pairs) == 1
    assert_same(pairs[0], ref)


@pytest.mark.parametrize("kind", ["int", "str"])
def test_three_models_share_one_bucket_evaluation(
    spark: Any, tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A baseline and two candidates: compare_models_spark evaluates the item buckets of the
    three models in one evaluate_spark call (one table, ``folder/items``), and every pair's
    rows equal the in-process compare_models' (pandas, one bucket pass per model) to 1e-9."""
    import harness.spark.metrics as spark_metrics

    train, qrels, recs = dataset(kind, n_models=3)
    models = ("pop", "knn", "rnd")
    names = ["ndcg@10", "recall@5", "precision@10", "coverage@10"]
    suite = MetricSuite(k=10, names=tuple(names))
    spec = CompareSpec(
        baseline="pop", n_resamples=200, cold_max_events=14, heavy_quantile=0.8, seed=2
    )
    runs = [r.assign(score=-r["rank"].astype(np.float64))[["user", "item", "score"]] for r in recs]
    evs = [metrics.evaluate(qrels, run, names, **suite.evaluate_options()) for run in runs]
    outcomes = {
        m: ModelOutcome(m, evaluation=ev, recommendations=r)
        for m, ev, r in zip(models, evs, recs, strict=True)
    }
    split = SimpleNamespace(train=train, test=qrels[["user", "item"]])
    result: Any = SimpleNamespace(
        outcomes=outcomes, suite=suite, split=split, candidates={"candidates.kind": "full"}
    )
    ref_pairs, ref_notes = compare_models(result, spec)
    assert [(p.baseline, p.candidate) for p in ref_pairs] == [("pop", "knn"), ("pop", "rnd")]

    calls = []
    original = spark_metrics.evaluate_spark

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("per_user_path"))
        return original(*args, **kwargs)

    monkeypatch.setattr(spark_metrics, "evaluate_spark", counted)
    q, t = _frame(spark, qrels, "qrels"), _frame(spark, train, "train")
    pairs, notes = compare_models_spark(
        {m: spark_table(spark, ev.per_user) for m, ev in zip(models, evs, strict=True)},
        {m: ev.summary for m, ev in zip(models, evs, strict=True)},
        names, spec, train=t, qrels=q,
        recs={m: _frame(spark, r, "recs") for m, r in zip(models, recs, strict=True)},
        options=suite.evaluate_options(), folder=tmp_path / "cmp",
    )  # fmt: skip
    assert calls == [str(tmp_path / "cmp" / "items")]
    assert sorted(os.listdir(tmp_path / "cmp")) == ["items"]
    assert notes == ref_notes == [] and len(pairs) == len(ref_pairs) == 2
    for got, want in zip(pairs, ref_pairs, strict=True):
        assert {"items:head", "items:mid", "items:tail"} <= set(want.table["segment"])
        assert_same(got, want)


def test_missing_lists_of_a_later_candidate_is_one_line(spark: Any, tmp_path: Path) -> None:
    """The per-pair checks keep their messages: a candidate without lists names itself, as the
    in-process comparison does, before any bucket is evaluated."""
    train, qrels, recs = dataset("int", n_users=30, n_models=3)
    names = ["ndcg@10"]
    runs = [r.assign(score=-r["rank"].astype(np.float64))[["user", "item", "score"]] for r in recs]
    evs = [metrics.evaluate(qrels, run, names) for run in runs]
    tables = {m: spark_table(spark, ev.per_user) for m, ev in zip("abc", evs, strict=True)}
    summaries = {m: ev.summary for m, ev in zip("abc", evs, strict=True)}
    q, t = _frame(spark, qrels, "qrels"), _frame(spark, train, "train")
    lists = {m: _frame(spark, r, "recs") for m, r in zip("ab", recs[:2], strict=True)}  # no "c"
    spec = CompareSpec(baseline="a")
    with pytest.raises(RuntimeError, match=r"^a or c was evaluated without its top-k lists$"):
        compare_models_spark(
            tables, summaries, names, spec, train=t, qrels=q, recs=lists, folder=tmp_path
        )
    with pytest.raises(ValueError, match=r"^item-bucket segments need qrels= and folder=$"):
        compare_models_spark(tables, summaries, names, spec, train=t, qrels=q, recs=lists)
    assert not (tmp_path / "items").exists()


@pytest.mark.parametrize(
    ("kind", "n_models"), [("int", 2), ("str", 2), ("int", 3), ("str", 3), ("str", 11)]
)
def test_bucket_tables_are_one_evaluation_per_model_and_bucket(
    spark: Any, tmp_path: Path, kind: str, n_models: int
) -> None:
    """bucket_tables_spark (one evaluate_spark for all models and all buckets) gives, per
    bucket and model, exactly metrics.evaluate's per-user values on that bucket's truth rows
    and its users' lists, computed here in pandas; ids keep their type; a bucket without test
    items gets empty tables. Eleven models take two-digit tags ("00".."10")."""
    train, qrels, recs = dataset(kind, n_models=n_models)
    names = ["ndcg@10", "recall@5", "precision@10"]
    item_bucket = segment_data(train, np.sort(qrels["user"].unique()), CompareSpec()).item_bucket
    frame = pd.DataFrame({"item": item_bucket.index, "bucket": item_bucket.to_numpy()})
    spark_buckets = _frame(spark, frame, "buckets")
    srecs = [_frame(spark, r, "recs") for r in recs]
    bucket_of = item_bucket.reindex(qrels["item"]).fillna("tail").to_numpy()
    passes = [(qrels, set()), (qrels[bucket_of == "head"], {"mid", "tail"})]
    if n_models > 3:  # the tags' width only: empty buckets are the smaller cases' (21 s -> 8 s)
        passes = passes[:1]
    for truth_rows, empty in passes:
        got = bucket_tables_spark(
            _frame(spark, truth_rows, "qrels"), srecs, names, spark_buckets, tmp_path / "b"
        )
        assert list(got) == ["head", "mid", "tail"]
        assert all(len(tables) == n_models for tables in got.values())
        of = item_bucket.reindex(truth_rows["item"]).fillna("tail").to_numpy()
        for bucket, tables in got.items():
            truth = truth_rows[of == bucket]
            assert truth.empty == (bucket in empty)
            for r, table in zip(recs, tables, strict=True):
                mine = table.toPandas().set_index("user").sort_index()
                if truth.empty:
                    assert mine.empty
                    continue
                run = r[r["user"].isin(truth["user"])]
                run = run.assign(score=-run["rank"].astype(np.float64))
                ref = metrics.evaluate(truth, run[["user", "item", "score"]], names).per_user
                assert mine.index.dtype == ref.index.dtype
                assert mine.index.tolist() == ref.sort_index().index.tolist()
                np.testing.assert_array_equal(mine[names].to_numpy(), ref.sort_index().to_numpy())


def test_bucket_tables_check_a_given_buckets_option(spark: Any, tmp_path: Path) -> None:
    """A user-given ``buckets`` is evaluate_spark's per-evaluation count, checked as such before
    it is scaled by the models and buckets (unchecked, ``True`` would pass as 6 groups and
    ``2.0`` reach evaluate_spark as ``12.0``)."""
    train, qrels, recs = dataset("int", n_users=20, n_models=2)
    item_bucket = segment_data(train, np.sort(qrels["user"].unique()), CompareSpec()).item_bucket
    frame = pd.DataFrame({"item": item_bucket.index, "bucket": item_bucket.to_numpy()})
    args = (
        _frame(spark, qrels, "qrels"),
        [_frame(spark, r, "recs") for r in recs],
        ["ndcg@10"],
        _frame(spark, frame, "buckets"),
        tmp_path / "b",
    )
    for bad in (0, True, 2.0):
        message = rf"^'buckets' must be a positive int \(got {bad!r}\)$"
        with pytest.raises(ValueError, match=message):
            bucket_tables_spark(*args, {"buckets": bad})
    assert not (tmp_path / "b").exists()


# ------------------------------------------------------------- global AUC: bounded state


def test_pairs_histogram_gives_the_same_pooled_auc() -> None:
    """A few-row histogram with the same pair counts finishes to the same AUC, bit for bit
    (reference: the pooled AUC of the full histogram by a naive count over all pairs)."""
    rng = np.random.default_rng(11)
    for _ in range(500):
        m = int(rng.integers(1, 40))
        score = rng.integers(0, int(rng.integers(1, 12)), m).astype(np.float64)
        relevant = rng.random(m) < rng.random()
        p, q = score[relevant], score[~relevant]
        wins2 = int(2 * (p[:, None] > q[None, :]).sum() + (p[:, None] == q[None, :]).sum())
        small = _pairs_histogram(len(p), len(q), wins2, ["pos", "neg"])
        assert len(small) <= 4 and (small.to_numpy() >= 0).all()
        assert int(small["pos"].sum()) == len(p) and int(small["neg"].sum()) == len(q)
        expected = wins2 / 2 / (len(p) * len(q)) if len(p) and len(q) else np.nan
        summary, _ = finish_state(State(tables={"scores": small}), ["global_auc"])
        assert summary["global_auc"] == pytest.approx(expected, rel=1e-15, nan_ok=True)


def test_pooled_pairs_in_spark_are_exact(spark: Any) -> None:
    """2·wins over 200k candidates with 150k distinct scores (ties too), summed per score and
    spread over many partitions, equals a numpy count by sorting."""
    rng = np.random.default_rng(2)
    n = 200_000
    score = np.round(rng.random(n), 5)  # ~100k distinct values, many ties
    relevant = rng.random(n) < 0.1
    rows = pd.DataFrame({"score": score, "v0": relevant * 1.0, "v1": (~relevant) * 1.0})
    pos, neg = np.sort(score[relevant]), np.sort(score[~relevant])
    below = np.searchsorted(neg, pos, side="left")
    tied = np.searchsorted(neg, pos, side="right") - below
    expected = int((2 * below + tied).sum())
    frame = _frame(spark, rows, "scores").repartition(7)
    assert _pooled_pairs(frame) == (int(relevant.sum()), int((~relevant).sum()), expected)


def test_gsb_at_exactly_the_tolerance_is_same_as_in_process(spark: Any) -> None:
    # one-step changes of precision@10 equal the tolerance 0.1 whatever their binary rounding
    # (0.4 − 0.3 > 0.1 > 0.3 − 0.2 in floating point): by hand 1 good, 4 same, 1 bad
    idx = pd.Index([1, 2, 3, 4, 5, 6], name="user")
    a = pd.DataFrame({"precision@10": [0.3, 0.7, 0.2, 0.6, 0.2, 0.4]}, index=idx)
    b = pd.DataFrame({"precision@10": [0.4, 0.8, 0.3, 0.5, 0.4, 0.1]}, index=idx)
    spec = CompareSpec(n_resamples=50, tolerance=0.1, gsb_metric="precision@10")
    mine = compare_spark(
        spark_table(spark, a), spark_table(spark, b), ["precision@10"], spec,
        baseline="base", candidate="cand",
    )  # fmt: skip
    row = mine.row("precision@10")
    assert (row["gsb_good"], row["gsb_same"], row["gsb_bad"]) == (1, 4, 1)
    # tolerance 0: rounding of equal values is "same" (metrics.gsb's rule), a real gain good
    a = pd.DataFrame({"map@10": [0.2, 0.5, 0.2, 0.0, 0.3, 0.4]}, index=idx)
    b = pd.DataFrame({"map@10": [0.19999999999999998, 0.5, 0.2000001, 1e-9, 0.3, 0.4]}, index=idx)
    spec = CompareSpec(n_resamples=50, gsb_metric="map@10")
    zero = compare_spark(
        spark_table(spark, a), spark_table(spark, b), ["map@10"], spec,
        baseline="base", candidate="cand",
    ).row("map@10")  # fmt: skip
    assert (zero["gsb_good"], zero["gsb_same"], zero["gsb_bad"]) == (2, 4, 0)
