"""``engine=spark`` end to end (harness.spark.pipeline): the same lists, metrics and gate as the
numpy engine on a user's Parquet file with string ids; per-user and top-k tables written by
Spark and referenced from the MLflow run; large tables kept off the driver.

The reference is the numpy engine's run of the same config (its own code path: pandas loading,
in-process split, models and ``metrics.evaluate``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
import pytest

from harness import synthetic

TOL = 1e-9


def text_events(path: Path) -> pd.DataFrame:
    """Synthetic events with string ids (``u12``, ``i7``) written as Parquet."""
    frame = synthetic.generate(n_users=200, n_items=120, n_events=3000, seed=4)
    frame = frame.assign(user="u" + frame["user"].astype(str), item="i" + frame["item"].astype(str))
    frame = frame.astype({"user": object, "item": object})
    frame.to_parquet(path, index=False)
    return frame


def scores_file(events: pd.DataFrame, path: Path) -> None:
    """A precomputed model version: tied integer scores for (user, item) pairs."""
    rng = np.random.default_rng(0)
    users = pd.unique(events["user"])
    items = pd.unique(events["item"])[:60]
    grid = pd.MultiIndex.from_product([users, items], names=["user", "item"]).to_frame(index=False)
    grid["score"] = rng.integers(0, 5, len(grid)).astype(float)
    grid.to_parquet(path, index=False)


def spark_lists(folder: Path) -> pd.DataFrame:
    frame = pd.read_parquet(folder / "topk.parquet")
    return frame.sort_values(["user", "rank"]).reset_index(drop=True)


#: the AUC family over the whole catalog (test_spark_catalog_auc.py has its components)
SCORES = ("auc", "gauc", "global_auc")


@pytest.fixture(scope="module")
def file_runs(harness_cli: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One config run by both engines, shared by the tests below: a user's Parquet file with
    string ids, popularity (``exclude_seen`` off), precomputed scores (integers 0-4: many ties)
    and item_knn (a plug-in), the top-k metrics and the AUC family over the whole catalog, the
    comparison; ties ordered by descending item id (``tie_break=item_desc``), so each engine
    fetches the items tied with a list's k-th score and chooses among them."""
    tmp_path = tmp_path_factory.mktemp("file_runs")
    data = tmp_path / "events.parquet"
    events = text_events(data)
    scores_file(events, tmp_path / "scores.parquet")
    names = "ndcg@10,map@10,precision@10,recall@10,hit_rate@10,mrr@10,coverage@10,novelty@10"
    common = [
        "dataset=file",
        f"dataset.path={data}",
        "dataset.columns.rating=null",
        "model=[popularity,precomputed,item_knn]",
        f"model.precomputed.path={tmp_path / 'scores.parquet'}",
        "+model.popularity.exclude_seen=false",
        "split=leave_one_out",
        "metrics.k=10",
        f"metrics.names=[{names},{','.join(SCORES)}]",
        "progress=false",
        "compare.n_resamples=200",
        "metrics.options.tie_break=item_desc",
    ]
    return dict(harness_cli.run_engines(tmp_path, *common, timeout=900))


def test_engine_spark_file_dataset_equals_numpy_and_logs_table_uris(
    file_runs: dict[str, Any],
) -> None:
    runs = file_runs
    out_n, dir_n = runs["numpy"].proc.stdout, runs["numpy"].folder
    out_s, dir_s, cwd_s = runs["spark"].proc.stdout, runs["spark"].folder, runs["spark"].cwd
    summary_n = pd.read_csv(dir_n / "summary.csv", index_col=0)
    summary_s = pd.read_csv(dir_s / "summary.csv", index_col=0)
    assert list(summary_n.index) == ["popularity", "precomputed", "item_knn"]
    assert list(summary_s.columns) == list(summary_n.columns)
    assert np.allclose(summary_n.to_numpy(), summary_s.to_numpy(), atol=TOL, rtol=0)
    for model in summary_n.index:
        # Spark wrote both tables (a folder of part files), never pandas on the driver
        assert (dir_s / model / "per_user.parquet").is_dir()
        assert (dir_s / model / "topk.parquet").is_dir()
        lists_n = pd.read_parquet(dir_n / model / "topk.parquet")
        lists_n = lists_n.sort_values(["user", "rank"]).reset_index(drop=True)
        lists_s = spark_lists(dir_s / model)
        assert lists_n[["user", "rank", "item"]].equals(lists_s[["user", "rank", "item"]])
        assert np.array_equal(lists_n["score"].to_numpy(), lists_s["score"].to_numpy())
        a = pd.read_parquet(dir_n / model / "per_user.parquet")
        b = pd.read_parquet(dir_s / model / "per_user.parquet").set_index("user")
        b = b.reindex(index=a.index, columns=a.columns)
        assert np.allclose(a.to_numpy(), b.to_numpy(), atol=TOL, rtol=0, equal_nan=True)
    verdict = [x for x in out_n.splitlines() if "gate" in x or "ΔGSB" in x]
    assert verdict and verdict == [x for x in out_s.splitlines() if "gate" in x or "ΔGSB" in x]
    # the score file's counts (model.stats.*) and notes as in process (they were missing)
    results = [json.loads((d / "precomputed" / "result.json").read_text()) for d in (dir_n, dir_s)]
    stats = [{k: v for k, v in r["info"].items() if k.startswith("stats.")} for r in results]
    assert stats[0]["stats.rows"] > 0 and stats[0] == stats[1]
    assert results[0]["notes"] == results[1]["notes"]

    # the MLflow run of each model names its per-user table and holds it as an artifact
    client = mlflow.MlflowClient(f"sqlite:///{cwd_s / 'runs' / 'mlflow.db'}")
    found = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], "tags.model != ''"
    )
    by_model = {r.data.tags["model"]: r for r in found}
    assert set(by_model) == {"popularity", "precomputed", "item_knn"}
    engines = {"popularity": "spark", "precomputed": "spark", "item_knn": "plugin"}
    for model, run in by_model.items():
        assert run.data.tags["model.engine"] == engines[model]
        assert run.data.tags["model.per_user_uri"] == str(
            dir_s.resolve() / model / "per_user.parquet"
        )
        logged = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert "per_user.parquet" in logged


def test_cli_engine_spark_catalog_auc_equals_numpy(file_runs: dict[str, Any]) -> None:
    """``python -m harness engine=spark`` with the AUC family over the whole catalog: popularity
    (counted in Spark, ``exclude_seen`` off) and item_knn (a plug-in, lists and counts from one
    pass) give the numpy engine's summary and per-user values; precomputed scores rank only
    their top-k lists (AUC over each list), on both engines."""
    dir_n, dir_s = file_runs["numpy"].folder, file_runs["spark"].folder
    summary_n = pd.read_csv(dir_n / "summary.csv", index_col=0)
    summary_s = pd.read_csv(dir_s / "summary.csv", index_col=0)
    catalog = ["popularity", "item_knn"]
    assert np.isfinite(summary_n.loc[catalog, list(SCORES)].to_numpy()).all()
    np.testing.assert_allclose(
        summary_s.loc[catalog, list(SCORES)].to_numpy(),
        summary_n.loc[catalog, list(SCORES)].to_numpy(),
        atol=TOL,
        rtol=0,
    )
    for model in summary_n.index:
        a = pd.read_parquet(dir_n / model / "per_user.parquet")[list(SCORES)]
        b = pd.read_parquet(dir_s / model / "per_user.parquet").set_index("user")
        b = b.reindex(index=a.index, columns=a.columns)
        np.testing.assert_allclose(b.to_numpy(), a.to_numpy(), atol=TOL, rtol=0)
        info_n = json.loads((dir_n / model / "result.json").read_text())["info"]
        info_s = json.loads((dir_s / model / "result.json").read_text())["info"]
        scope = "topk" if model == "precomputed" else "catalog"
        assert info_n.get("auc_scope") == info_s.get("auc_scope") == scope, model


def test_large_tables_stay_off_the_driver(spark: Any, tmp_path: Path) -> None:
    """Above ``driver_rows`` the split, lists and per-user tables are not copied to the driver;
    the summary is the same as with copies, and the Spark tables are there for the comparison."""
    from harness.experiment import MetricSuite
    from harness.models import PopularityModel
    from harness.spark.pipeline import load_spark, run_models_spark, split_spark

    spec = {"kind": "synthetic", "n_users": 80, "n_items": 40, "n_events": 900, "seed": 1}
    suite = MetricSuite(k=5, names=("ndcg@5", "recall@5", "coverage@5", "novelty@5", "auc"))
    summaries = {}
    for rows in (10**6, 10):
        events, dataset = load_spark(spark, spec, rows)
        sp, split = split_spark(events, "global_time", {"cut": 0.8}, rows)
        folder = tmp_path / f"rows{rows}"
        result = run_models_spark(
            spark, dataset, events, sp, split, {"pop": PopularityModel()}, suite, folder,
            driver_rows=rows,
        )  # fmt: skip
        outcome = result.outcomes["pop"]
        assert outcome.ok, outcome.error
        assert result.tables is not None and "pop" in result.tables.per_user
        summaries[rows] = outcome.evaluation.summary
        if rows == 10:
            assert len(split.train) == 0 and len(split.test) == 0
            assert outcome.recommendations is None
            assert len(outcome.evaluation.per_user) == 0
            assert split.stats["n_train_events"] > 0  # the stats come from Spark
        else:
            assert len(outcome.recommendations) == result.tables.lists["pop"].count()
        # AUC over the whole catalog, as in-process (test_spark_pipeline_candidates.py)
        assert np.isfinite(outcome.evaluation.summary["auc"])
        assert outcome.info["auc_scope"] == "catalog"
    big, small = summaries[10**6], summaries[10]
    assert big.keys() == small.keys()
    for name in big:
        assert np.isclose(big[name], small[name], atol=TOL, rtol=0, equal_nan=True)


def test_file_options_reach_the_spark_reader(spark: Any, tmp_path: Path) -> None:
    """Renamed columns, a duplicates policy and a timestamp format: ``engine=spark`` loads the
    same events as the in-process loader (they were refused, and duplicates failed, before)."""
    from harness.datasets import load_dataset
    from harness.spark.pipeline import load_spark

    path = tmp_path / "events.csv"
    pd.DataFrame(
        {
            "customer": ["a", "a", "b", "b", "c", "c"],
            "sku": ["x", "x", "y", "x", "y", "z"],
            "when": ["03/01/2024", "03/01/2024", "04/01/2024", "05/01/2024", "06/01/2024",
                     "07/01/2024"],
            "stars": [1.0, 5.0, 3.0, 4.0, 2.0, 5.0],
        }
    ).to_csv(path, index=False)  # fmt: skip
    spec = {
        "kind": "file",
        "name": "shop",
        "path": str(path),
        "columns": {"user": "customer", "item": "sku", "timestamp": "when", "rating": "stars"},
        "duplicates": "keep_last",
        "timestamp_format": "%d/%m/%Y",
    }
    expected = load_dataset(dict(spec)).frame
    df, _ = load_spark(spark, spec, driver_rows=0)
    got = df.toPandas()
    order = ["user", "item", "timestamp"]
    expected = expected.sort_values(order).reset_index(drop=True)
    got = got[list(expected.columns)].sort_values(order).reset_index(drop=True)
    assert len(got) == 5  # the repeated (a, x, 3 Jan) event kept once, its last rating
    assert got["rating"].tolist() == expected["rating"].tolist()
    assert got[order].astype(str).equals(expected[order].astype(str))
    assert got["timestamp"].tolist() == expected["timestamp"].tolist()
