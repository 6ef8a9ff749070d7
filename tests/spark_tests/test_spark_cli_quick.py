"""``python -m harness engine=spark`` on the quick experiment gives the numpy run's metrics,
comparison and gate; ``python -m harness.compare`` then compares two model runs of that
``engine=spark`` run from the Parquet tables their MLflow tags name, with the table the run itself
logged. One config, run once by each engine (a module fixture), serves both tests.

References: the numpy engine's run of the same config (its own code path); the in-process
comparison (:func:`harness.compare.compare_pair`, pandas) of the run's per-user tables; the
comparison table logged by the run (``comparison.json``); the split made in-process from the
run's resolved config.
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
from test_spark_compare_extras import assert_same_table

pytestmark = pytest.mark.spark

TOL = 1e-9
LABELS = pd.DataFrame({"unit": range(6), "label": ["good", "good", "bad", "same", "good", "bad"]})


@pytest.fixture(scope="module")
def quick_runs(
    spark: Any, harness_cli: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """``experiment=quick`` (popularity, item_knn) with human labels, by both engines.

    The summaries, per-user tables and output are read here, before any test runs:
    test_harness_compare_reads_spark_runs_tables deletes tables of the Spark run. (``spark``:
    skipped, or failed under ``CI=true``, without PySpark or Java.)"""
    where = tmp_path_factory.mktemp("quick")
    LABELS.to_csv(where / "labels.csv", index=False)
    opts = [
        "compare.n_resamples=200",
        f"compare.human_labels={where / 'labels.csv'}",
        "compare.daily_users=1000",
    ]
    models = "model=[popularity,item_knn]"  # one candidate: labels without a candidate column
    runs = harness_cli.run_engines(where, models, *opts, quick=True, timeout=900)
    read = {}
    for engine, done in runs.items():
        summary = pd.read_csv(done.folder / "summary.csv", index_col=0)
        per_user = {m: pd.read_parquet(done.folder / m / "per_user.parquet") for m in summary.index}
        read[engine] = (done.proc.stdout, summary, per_user)
    return {"runs": runs, "read": read, "opts": opts}


def test_harness_engine_spark_equals_numpy_end_to_end(quick_runs: dict[str, Any]) -> None:
    """`python -m harness engine=spark` gives the numpy run's metrics, comparison and gate."""
    out_n, summary_n, per_user_n = quick_runs["read"]["numpy"]
    out_s, summary_s, per_user_s = quick_runs["read"]["spark"]
    assert list(summary_n.index) == ["popularity", "item_knn"]
    assert list(summary_s.index) == list(summary_n.index)
    assert list(summary_s.columns) == list(summary_n.columns)
    assert np.allclose(summary_n.to_numpy(), summary_s.to_numpy(), atol=TOL, rtol=0)
    for model in summary_n.index:
        a = per_user_n[model]
        b = per_user_s[model].set_index("user").reindex(a.index)  # Spark's: a user column
        assert np.allclose(a.to_numpy(), b.to_numpy(), atol=TOL, rtol=0, equal_nan=True)
    verdict = [x for x in out_n.splitlines() if "gate" in x or "ΔGSB" in x]
    assert verdict and verdict == [x for x in out_s.splitlines() if "gate" in x or "ΔGSB" in x]
    # the online A/B test sizing: Spark's from its comparison's sums, the same lines
    assert sizing_lines(out_n) and sizing_lines(out_s) == sizing_lines(out_n)


def sizing_lines(out: str) -> list[str]:
    """The A/B test sizing block a run prints: its heading and one line per candidate."""
    lines = out.splitlines()
    start = next((i for i, x in enumerate(lines) if x.startswith("online A/B test sizing")), None)
    if start is None:
        return []
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        block.append(line)
    return block


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


def test_harness_compare_reads_spark_runs_tables(
    harness_cli: Any, quick_runs: dict[str, Any], tmp_path: Path
) -> None:
    from harness.compare import CompareSpec, compare_pair, labels_row, segment_data

    spark_run = quick_runs["runs"]["spark"]
    cwd, folder, opts = spark_run.cwd, spark_run.folder, quick_runs["opts"]
    labels = LABELS
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

    # 2. with the split, the tables kept in Spark (--driver-rows 1): the whole table the run
    # logged (on the driver, as the rule picks for small tables: 4. below)
    on_spark = compare_cli(
        harness_cli, cwd, *ids, *opts, "--out", "c3", "--driver-rows", "1",
        "--spark-master", "local[2]",
    )  # fmt: skip
    assert on_spark.returncode == 0, on_spark.stderr[-3000:]
    assert "comparing in Spark (--engine auto" in on_spark.stdout
    assert_same_table(table("c3"), logged)
    # tables only Spark reads are sized as the run sized them (they were not sized, with a note)
    main_sizing = sizing_lines(quick_runs["read"]["spark"][0])
    assert main_sizing and sizing_lines(on_spark.stdout) == main_sizing

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

    # 4. the results folder's table gone: the run's artifact copy is read, with the split, on
    # the driver (the rule for small tables): the whole table the run logged (the tables at the
    # tags' URIs were read on the driver in 1., in Spark in 2.); gone from both: one error line
    # naming the folder
    gone = Path(base.data.tags["model.per_user_uri"])
    shutil.rmtree(gone)
    copy = compare_cli(harness_cli, cwd, *ids, *opts, "--out", "c4")
    assert copy.returncode == 0, copy.stderr[-3000:]
    assert "comparing in Spark" not in copy.stdout
    assert_same_table(table("c4"), logged)
    assert sizing_lines(copy.stdout) == main_sizing
    artifacts = Path(client.get_run(base.info.run_id).info.artifact_uri.removeprefix("file://"))
    shutil.rmtree(artifacts / "per_user.parquet")
    failed = compare_cli(harness_cli, cwd, *ids, *opts, "--out", "c5")
    assert failed.returncode == 2
    errors = [x for x in failed.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and str(gone) in errors[0] and "is gone" in errors[0], failed.stderr
