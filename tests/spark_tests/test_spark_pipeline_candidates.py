"""``engine=spark`` with ``candidates=sampled`` / ``candidates=file``, score metrics (AUC family)
and rating metrics (RMSE/MAE): the candidate rows, the ranked lists and the per-user metrics of
the Spark pipeline equal the in-process engine's on the same data.

The reference is the numpy engine (its own code path: ``harness.candidates.build_candidates``,
the models' ``score_items`` / ``predict_ratings`` and ``metrics.evaluate``, tested on its own
against trec_eval, sklearn and hand counts); nothing expected here comes from the Spark code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness import synthetic
from harness.candidates import CandidateSpec, build_candidates
from harness.datasets import Dataset
from harness.errors import DataError
from harness.experiment import MetricSuite, run_models
from harness.models import BiasRating, PopularityModel, PrecomputedScores
from harness.split import make_split

TOL = 1e-9
NAMES = ("ndcg@5", "recall@5", "map", "mrr", "auc", "gauc", "global_auc", "rmse", "mae")


def events(text: bool) -> pd.DataFrame:
    """Tiny synthetic events with ratings; ``text``: string ids (``u3``, ``i7``)."""
    frame = synthetic.generate(n_users=40, n_items=30, n_events=600, seed=3)
    if text:
        frame = frame.assign(
            user="u" + frame["user"].astype(str), item="i" + frame["item"].astype(str)
        ).astype({"user": object, "item": object})
    return frame


def scores_file(frame: pd.DataFrame, path: Path) -> str:
    """A precomputed model version: tied scores on most (user, item) pairs (some missing)."""
    rng = np.random.default_rng(1)
    users, items = pd.unique(frame["user"]), pd.unique(frame["item"])
    grid = pd.MultiIndex.from_product([users, items], names=["user", "item"]).to_frame(index=False)
    grid = grid[rng.random(len(grid)) < 0.8]
    grid = grid.assign(score=rng.integers(0, 4, len(grid)).astype(float))
    grid.to_parquet(path, index=False)
    return str(path)


def both_splits(spark: Any, frame: pd.DataFrame) -> tuple[Any, Any, Any]:
    """The events on Spark, the Spark split and the in-process split (same rows, tested in
    test_spark.py)."""
    from harness.spark.split import make_split_spark

    df = spark.createDataFrame(frame).cache()
    sp = make_split_spark(df, "leave_one_out")
    return df, sp, make_split(frame, "leave_one_out")


@pytest.fixture(scope="module")
def shared(spark: Any) -> Any:
    """``shared(text)``: the events of one id kind, their Spark frame and both splits, built
    once for the module (the Spark split's aggregate jobs ran once per test before); no test
    changes them."""
    built: dict[bool, tuple[pd.DataFrame, Any, Any, Any]] = {}

    def get(text: bool) -> tuple[pd.DataFrame, Any, Any, Any]:
        if text not in built:
            frame = events(text)
            built[text] = (frame, *both_splits(spark, frame))
        return built[text]

    return get


def sorted_rows(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return frame[cols].sort_values(cols, kind="stable").reset_index(drop=True)


@pytest.mark.parametrize("text", [False, True])
@pytest.mark.parametrize("sampling", ["uniform", "popularity"])
def test_sampled_candidates_equal_in_process_rows(shared: Any, text: bool, sampling: str) -> None:
    from harness.spark.candidates import build_candidates_spark

    _, _, sp, split = shared(text)
    spec = CandidateSpec(kind="sampled", n_negatives=7, sampling=sampling, seed=11)
    want, want_stats = build_candidates(spec, split, None)
    got_df, got_stats = build_candidates_spark(spec, sp)
    assert got_df is not None and want is not None
    got = pd.DataFrame(got_df.toPandas())
    pd.testing.assert_frame_equal(
        sorted_rows(got, ["user", "item"]),
        sorted_rows(want, ["user", "item"]).astype(got.dtypes.to_dict()),
    )
    assert got_stats == want_stats
    # another seed draws other negatives
    other, _ = build_candidates_spark(
        CandidateSpec(kind="sampled", n_negatives=7, sampling=sampling, seed=12), sp
    )
    assert other is not None and sorted(map(tuple, other.collect())) != sorted(
        map(tuple, got_df.collect())
    )


def test_file_candidates_equal_in_process_rows(shared: Any, tmp_path: Path) -> None:
    from harness.spark.candidates import build_candidates_spark

    _, _, sp, split = shared(False)
    rng = np.random.default_rng(5)
    cand = pd.DataFrame(
        {
            "user": rng.choice(pd.unique(split.test["user"]), 300).astype(str),
            "item": [f" {i}.0" if i % 3 == 0 else str(i) for i in rng.integers(0, 35, 300)],
        }
    )
    path = tmp_path / "cands.csv"
    cand.to_csv(path, index=False)  # duplicates, padded and "7.0" ids, items unknown to training
    spec = CandidateSpec(kind="file", path=str(path))
    want, want_stats = build_candidates(spec, split, None)
    got_df, got_stats = build_candidates_spark(spec, sp)
    assert got_df is not None and want is not None
    got = pd.DataFrame(got_df.toPandas())
    assert got["user"].dtype == np.int64 and got["item"].dtype == np.int64
    pd.testing.assert_frame_equal(
        sorted_rows(got, ["user", "item"]), sorted_rows(want, ["user", "item"])
    )
    assert got_stats == want_stats


def bad_files(tmp_path: Path) -> dict[str, Path]:
    """Candidate files the in-process reader refuses, one reason each."""
    out = {}
    out["missing"] = tmp_path / "nowhere.csv"
    out["column"] = tmp_path / "column.csv"
    out["column"].write_text("user,thing\n1,2\n")
    out["empty"] = tmp_path / "empty.csv"
    out["empty"].write_text("user,item\n")
    out["null"] = tmp_path / "null.csv"
    out["null"].write_text("user,item\n1,2\n3,\n")
    out["text"] = tmp_path / "text.csv"
    out["text"].write_text("user,item\n1,abc\n2,3\n")
    return out


def test_file_candidates_errors_are_the_in_process_ones(shared: Any, tmp_path: Path) -> None:
    from harness.spark.candidates import build_candidates_spark

    _, _, sp, split = shared(False)
    for why, path in bad_files(tmp_path).items():
        spec = CandidateSpec(kind="file", path=str(path))
        with pytest.raises(DataError) as want:
            build_candidates(spec, split, None)
        with pytest.raises(DataError) as got:
            build_candidates_spark(spec, sp)
        assert str(got.value) == str(want.value), why
        assert "\n" not in str(got.value)


def models(scores: str) -> dict[str, Any]:
    """Fresh model versions: native on Spark (popularity, precomputed) and a plug-in that
    predicts ratings (BiasRating, scored per group of users)."""
    return {
        "popularity": PopularityModel(),
        "precomputed": PrecomputedScores(scores),
        "bias": BiasRating(),
    }


def both_runs(
    spark: Any, tmp_path: Path, data: Any, spec: CandidateSpec, options: dict | None = None
) -> tuple[Any, Any]:
    """The in-process and the Spark run of the same models, suite (metric ``options``), split
    and candidates (``data``: the events, their Spark frame and both splits, as ``shared``
    gives them)."""
    from harness.spark.candidates import build_candidates_spark
    from harness.spark.pipeline import run_models_spark

    frame, df, sp, split = data
    scores = scores_file(frame, tmp_path / "scores.parquet")
    dataset = Dataset("tiny", frame, "synthetic")
    suite = MetricSuite(k=5, names=NAMES, options=options or {})
    cands, _ = build_candidates(spec, split, None)
    want = run_models(
        dataset, split, models(scores), suite, tmp_path / "numpy", progress=False, candidates=cands
    )
    cands_s, _ = build_candidates_spark(spec, sp)
    got = run_models_spark(
        spark,
        dataset,
        df,
        sp,
        split,
        models(scores),
        suite,
        tmp_path / "spark",
        candidates=cands_s,
        buckets=3,
        batch_users=16,
    )
    return want, got


def assert_same_outcomes(want: Any, got: Any) -> None:
    """Same summaries and per-user values (1e-9), lists, counts and scope as in-process."""
    for name, w in want.outcomes.items():
        g = got.outcomes[name]
        assert w.error is None and g.error is None, (name, w.error, g.error)
        for metric, value in w.evaluation.summary.items():
            other = g.evaluation.summary[metric]
            assert np.isnan(value) == np.isnan(other), (name, metric, value, other)
            if not np.isnan(value):
                assert abs(value - other) <= TOL, (name, metric, value, other)
        pw, pg = w.evaluation.per_user, g.evaluation.per_user
        assert list(pw.index) == list(pg.index), name
        np.testing.assert_allclose(pg.to_numpy(), pw.to_numpy(), atol=TOL, rtol=0)
        ids = {"user": object, "item": object}  # in-process text ids: object or str dtype
        lists_w = w.recommendations.reset_index(drop=True).astype(ids)
        lists_g = g.recommendations.reset_index(drop=True).astype(ids)
        pd.testing.assert_frame_equal(
            lists_g[["user", "rank", "item"]], lists_w[["user", "rank", "item"]], obj=name
        )
        np.testing.assert_allclose(lists_g["score"], lists_w["score"], atol=TOL, rtol=0)
        for key in ("auc_scope", "candidates_unscored", "auc_relevant_unranked"):
            assert g.info.get(key) == w.info.get(key), (name, key)
        assert g.evaluation.counts == w.evaluation.counts, name
        assert g.notes == w.notes, name


@pytest.mark.parametrize("text", [False, True])
def test_sampled_candidates_metrics_equal_in_process(
    spark: Any, shared: Any, tmp_path: Path, text: bool
) -> None:
    spec = CandidateSpec(kind="sampled", n_negatives=8, sampling="popularity", seed=4)
    # ranx's input_order ties: the candidates in (user, item) order on both engines
    want, got = both_runs(spark, tmp_path, shared(text), spec, {"preset": "ranx"} if text else None)
    assert_same_outcomes(want, got)
    # the score and rating metrics have values (not the NaN of a skipped metric)
    for metric in ("auc", "gauc", "global_auc"):
        assert np.isfinite(got.outcomes["bias"].evaluation.summary[metric])
    assert np.isfinite(got.outcomes["bias"].evaluation.summary["rmse"])
    assert np.isnan(got.outcomes["popularity"].evaluation.summary["rmse"])
    if not text:  # the comparison: item buckets only of the metrics the top-k lists hold
        from harness.compare import CompareSpec, compare_models
        from harness.spark.pipeline import compare_result_spark

        for run in (want, got):
            run.candidates = {"candidates.kind": "sampled"}
        spec = CompareSpec(baseline="popularity", n_resamples=50)
        found = compare_result_spark(got, spec)
        assert found is not None
        pairs = {p.candidate: p for p in found[0]}
        for pair in compare_models(want, spec)[0]:
            mine = pairs[pair.candidate]
            rows = mine.table.loc[mine.table["segment"].str.startswith("items:"), "metric"]
            assert set(rows) == {"ndcg@5", "recall@5"}, pair.candidate
            assert mine.notes == pair.notes
            assert mine.notes[0].startswith("item buckets: no rows of map, mrr: with candidates")


def candidates_file(frame: pd.DataFrame, path: Path) -> str:
    """A given candidate list: each user's own items, random catalog items and items unknown
    to training (which no model can score: left out and counted)."""
    rng = np.random.default_rng(9)
    users = pd.unique(frame["user"])
    rows = [frame[["user", "item"]].sample(200, random_state=2)]
    rows.append(pd.DataFrame({"user": rng.choice(users, 400), "item": rng.integers(0, 34, 400)}))
    pd.concat(rows).to_csv(path, index=False)
    return str(path)


def test_file_candidates_metrics_equal_in_process(spark: Any, shared: Any, tmp_path: Path) -> None:
    data = shared(False)
    spec = CandidateSpec(kind="file", path=candidates_file(data[0], tmp_path / "cands.csv"))
    want, got = both_runs(spark, tmp_path, data, spec)
    assert_same_outcomes(want, got)
    assert got.outcomes["popularity"].info["candidates_unscored"] > 0  # items 30..33


@pytest.mark.parametrize("text", [False, True])
def test_full_catalog_score_and_rating_metrics_equal_in_process(
    spark: Any, shared: Any, tmp_path: Path, text: bool
) -> None:
    """Without candidates: AUC over the whole catalog (popularity, the bias plug-in) or over
    each top-k list (precomputed scores), RMSE/MAE of the plug-in, as in-process."""
    want, got = both_runs(spark, tmp_path, shared(text), CandidateSpec())
    assert_same_outcomes(want, got)
    assert got.outcomes["precomputed"].info["auc_scope"] == "topk"
    assert got.outcomes["bias"].info["auc_scope"] == "catalog"


def test_cli_engine_spark_sampled_candidates_equals_numpy(harness_cli: Any, tmp_path: Path) -> None:
    """``python -m harness engine=spark candidates=sampled ...`` end to end: the same summary,
    per-user values, lists and candidate stats as the numpy engine's run of the same config."""
    common = [
        "dataset=synthetic",
        "dataset.n_users=40",
        "dataset.n_items=30",
        "dataset.n_events=600",
        "model=[popularity,bias]",
        "split=leave_one_out",
        "candidates=sampled",
        "candidates.n_negatives=8",
        "candidates.sampling=popularity",
        "metrics.k=10",
        "metrics.names=[ndcg@10,recall@10,mrr,coverage@10,novelty@10,auc,gauc,global_auc,rmse,mae]",
        "progress=false",
        # the comparison and MLflow are checked elsewhere (test_spark_pipeline.py,
        # test_spark_cli_quick.py); here they only cost time
        "compare=none",
        "tracking=none",
    ]
    runs = harness_cli.run_engines(tmp_path, *common, timeout=900)
    for done in runs.values():
        assert "sampled candidates" in done.proc.stderr  # the biased-estimate warning
    dir_n, dir_s = runs["numpy"].folder, runs["spark"].folder
    summary_n = pd.read_csv(dir_n / "summary.csv", index_col=0)
    summary_s = pd.read_csv(dir_s / "summary.csv", index_col=0)
    assert list(summary_s.index) == ["popularity", "bias"]
    assert np.isfinite(summary_n.loc["bias"]).all()  # every metric has a value in-process
    np.testing.assert_allclose(summary_s.to_numpy(), summary_n.to_numpy(), atol=TOL, rtol=0)
    for model in summary_n.index:
        a = pd.read_parquet(dir_n / model / "per_user.parquet")
        b = pd.read_parquet(dir_s / model / "per_user.parquet").set_index("user")
        assert sorted(b.index) == sorted(a.index)
        b = b.reindex(index=a.index, columns=a.columns)
        np.testing.assert_allclose(b.to_numpy(), a.to_numpy(), atol=TOL, rtol=0)
        lists_n, lists_s = (
            pd.read_parquet(d / model / "topk.parquet").sort_values(
                ["user", "rank"], ignore_index=True
            )
            for d in (dir_n, dir_s)
        )
        pd.testing.assert_frame_equal(
            lists_s[["user", "rank", "item"]], lists_n[["user", "rank", "item"]]
        )
    info_n = json.loads((dir_n / "bias" / "result.json").read_text())
    info_s = json.loads((dir_s / "bias" / "result.json").read_text())
    assert info_s["counts"] == info_n["counts"]
    assert info_s["info"]["candidates_unscored"] == info_n["info"]["candidates_unscored"]


def test_mllib_als_ranks_only_within_candidates(spark: Any, shared: Any, tmp_path: Path) -> None:
    """SparkALS (no in-process twin): its lists hold only the user's candidates, best
    predicted first; its metrics equal ``metrics.evaluate`` on the candidate scores it wrote;
    the sampled negatives are the in-process ones."""
    import metrics
    from harness.spark.candidates import build_candidates_spark
    from harness.spark.models import SparkALS
    from harness.spark.pipeline import run_models_spark

    frame, df, sp, split = shared(False)
    spec = CandidateSpec(kind="sampled", n_negatives=6, seed=2)
    cands_s, _ = build_candidates_spark(spec, sp)
    cands, _ = build_candidates(spec, split, None)
    suite = MetricSuite(k=3, names=("ndcg@3", "recall@3", "auc", "global_auc"))
    got = run_models_spark(
        spark,
        Dataset("tiny", frame, "synthetic"),
        df,
        sp,
        split,
        {"als": SparkALS(factors=4, iterations=3, seed=1)},
        suite,
        tmp_path / "spark",
        candidates=cands_s,
        buckets=3,
    )
    outcome = got.outcomes["als"]
    assert outcome.error is None, outcome.error
    assert outcome.info["auc_scope"] == "candidates"
    scored = pd.read_parquet(outcome.info["scores_uri"])
    assert outcome.info["candidates_unscored"] == len(cands) - len(scored)
    allowed = set(zip(cands["user"], cands["item"], strict=True))
    lists = outcome.recommendations
    assert set(zip(lists["user"], lists["item"], strict=True)) <= allowed
    best = scored.sort_values(["user", "score", "item"], ascending=[True, False, True])
    best = best.groupby("user").head(3)
    assert list(zip(lists["user"], lists["item"], strict=True)) == list(
        zip(best["user"], best["item"], strict=True)
    )
    truth = split.test.groupby(["user", "item"], as_index=False).size()
    truth = truth.assign(relevance=1.0)[["user", "item", "relevance"]]
    want = metrics.evaluate(truth, scored, list(suite.names))
    for name in suite.names:
        assert abs(outcome.evaluation.summary[name] - want.summary[name]) <= TOL, name
