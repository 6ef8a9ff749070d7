"""``engine=spark`` runs resume too: an interrupted Spark run keeps every model it finished, and
``resume=last`` finishes it, reading those models' tables back instead of running them again; the
results (summary, record, comparison, tables) equal those of a Spark run never interrupted.

References: the same command run by the CLI without interruption (its own folder); for a table
that cannot be read back, the rows written by hand. Real components: the CLI in subprocesses
interrupted by a real SIGINT (Ctrl-C), real PySpark in local mode.
"""

from __future__ import annotations

import difflib
import json
import signal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from support import SPARK_SMALL, HarnessCli

import metrics
from harness.experiment import MetricSuite, ModelOutcome
from harness.folders import COMPLETE, INCOMPLETE, run_info

pytestmark = pytest.mark.spark

SPARK = ("engine=spark", "engine.master='local[2]'", *SPARK_SMALL)
RUN = ("experiment=quick", "progress=false", "model=[popularity,item_knn]", *SPARK)
MODELS = ("popularity", "item_knn")


#: tags that name the run itself (its folder, start, commit, notes), not its results
_PER_RUN = {
    "harness.folder_id",
    "harness.git.commit",
    "harness.run",
    "mlflow.source.git.commit",
    "model.per_user_uri",
    "model.topk_uri",
    "notes",
    "results.folder",
}


def _timeless(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if not k.startswith("time.")}


def _rows(path: Path) -> pd.DataFrame:
    """A Spark-written table in a fixed row order (Spark's part files have none)."""
    frame = pd.read_parquet(path)
    return frame.sort_values(list(frame.columns), kind="stable").reset_index(drop=True)


@pytest.mark.slow
def test_interrupted_spark_run_resumes_to_the_uninterrupted_results(
    spark: Any, harness_cli: HarnessCli, tmp_path: Path
) -> None:
    # ``spark``: skipped (failed under CI=true) without PySpark or Java
    plain = harness_cli.run(tmp_path / "plain", *RUN, "tracking=none", timeout=600)
    assert plain.returncode == 0, plain.stderr[-3000:]
    (reference,) = (tmp_path / "plain" / "runs" / "results" / "offline-eval").iterdir()

    cwd = tmp_path / "cut"
    # Ctrl-C: PySpark installs its own SIGINT handler, which the harness puts back its own
    # over (else a traceback and exit -2 instead of the one-line stop below)
    stopped = harness_cli.stopped_at(cwd, "model item_knn", signal.SIGINT, *RUN, "tracking=none")
    err = stopped.stderr
    assert stopped.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    (folder,) = (cwd / "runs" / "results" / "offline-eval").iterdir()
    line = next(x for x in err.splitlines() if x.startswith("error:"))
    assert "interrupted by SIGINT during model item_knn" in line
    assert "1 finished model(s) kept (popularity); finish it with the same command and " in line
    assert (folder / INCOMPLETE).read_text() == (
        "stage: model item_knn\nreason: interrupted by SIGINT\n"
    )
    kept = _rows(folder / "popularity" / "per_user.parquet")
    assert not (folder / "item_knn").exists()

    done = harness_cli.run(cwd, *RUN, "tracking=none", "resume=last", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "note (popularity): results reused from the run started" in done.stdout
    assert "note (item_knn)" not in done.stdout
    assert (folder / COMPLETE).exists() and not (folder / INCOMPLETE).exists()
    assert run_info(folder)["resumed"][0]["reused"] == ["popularity"]
    assert run_info(folder)["resumed"][0]["rerun"] == ["item_knn"]
    pd.testing.assert_frame_equal(_rows(folder / "popularity" / "per_user.parquet"), kept)

    pd.testing.assert_frame_equal(
        pd.read_csv(folder / "summary.csv", index_col="model"),
        pd.read_csv(reference / "summary.csv", index_col="model"),
        check_exact=True,
    )
    got, want = (json.loads((f / "record.json").read_text()) for f in (folder, reference))
    assert [c["name"] for c in got["children"]] == [c["name"] for c in want["children"]]
    runs = ([r["parent"], *r["children"]] for r in (got, want))
    for a, b in zip(*runs, strict=True):
        assert _timeless(a["metrics"]) == _timeless(b["metrics"])
        assert a.get("comparison") == b.get("comparison")
        assert a["params"] | {"resume": None} == b["params"] | {"resume": None}
        tags = {k: v for k, v in a["tags"].items() if k not in _PER_RUN}
        assert tags == {k: v for k, v in b["tags"].items() if k not in _PER_RUN}
    assert got["children"][1]["comparison"]  # item_knn against the reused baseline
    for child in got["children"]:  # the reused model's tables: those of the interrupted run
        assert child["tags"]["model.topk_uri"] == str(folder / child["name"] / "topk.parquet")
    report = [(f / "report.md").read_text().splitlines() for f in (reference, folder)]
    changed = [x for x in difflib.ndiff(*report) if x[:2] in ("- ", "+ ")]
    expected = ["- **Experiment:** ", "+ **Experiment:** ", "- resume: null", "+ resume: last"]
    expected.append("+ - popularity: results reused from the run started ")
    assert len(changed) == len(expected), changed
    assert all(x.startswith(e) for x, e in zip(changed, expected, strict=True)), changed
    verdict = [x for x in plain.stdout.splitlines() if "gate" in x or "ΔGSB" in x]
    assert verdict and verdict == [
        x for x in done.stdout.splitlines() if "gate" in x or "ΔGSB" in x
    ]
    for model in MODELS:
        for table in ("per_user.parquet", "topk.parquet"):
            pd.testing.assert_frame_equal(
                _rows(folder / model / table), _rows(reference / model / table)
            )


def test_a_model_whose_tables_cannot_be_read_is_not_reused(spark: Any, tmp_path: Path) -> None:
    """:func:`_restored` gives the tables and driver copies of a model as written, and None
    (the model runs again) once its table files are gone or its URI names nothing."""
    from harness.spark.pipeline import _restored
    from harness.spark.split import SparkSplit

    lists = pd.DataFrame(
        {"user": [1, 1, 2], "rank": [1, 2, 1], "item": [10, 11, 10], "score": [3.0, 2.0, 3.0]}
    )
    per_user = pd.DataFrame({"user": [1, 2], "ndcg@2": [0.5, 1.0]})
    uris = {"topk_uri": str(tmp_path / "topk.parquet"), "per_user_uri": str(tmp_path / "pu")}
    spark.createDataFrame(lists).write.parquet(uris["topk_uri"])
    spark.createDataFrame(per_user).write.parquet(uris["per_user_uri"])
    truth = spark.createDataFrame(pd.DataFrame({"user": [1, 2], "item": [10, 11], "x": [1.0, 1.0]}))
    sp = SparkSplit(truth, truth, None, {}, "random", {})
    qrels = truth.withColumnRenamed("x", "relevance")
    suite = MetricSuite(k=2, names=("ndcg@2",))
    summary = {"ndcg@2": 0.75}
    kept = ModelOutcome(
        "m", metrics.Evaluation(summary, pd.DataFrame(), {}, {"n": 2}), info=dict(uris)
    )

    restored = _restored(spark, kept, sp, qrels, suite, small=True)
    assert restored is not None
    outcome, judged, table = restored
    assert outcome.evaluation is not None and outcome.recommendations is not None
    assert outcome.evaluation.summary == summary and outcome.evaluation.counts == {"n": 2}
    pd.testing.assert_frame_equal(outcome.recommendations, lists)
    pd.testing.assert_frame_equal(
        outcome.evaluation.per_user, per_user.set_index("user"), check_names=False
    )
    assert judged.count() == 3 and table.count() == 2
    large = _restored(spark, kept, sp, qrels, suite, small=False)  # no driver copies
    assert large is not None and large[0].recommendations is None

    for part in (tmp_path / "pu").iterdir():
        part.unlink()  # the table's files are gone, its folder is left
    assert _restored(spark, kept, sp, qrels, suite, small=True) is None
    missing = ModelOutcome(kept.name, kept.evaluation, info={**uris, "topk_uri": "/nowhere"})
    assert _restored(spark, missing, sp, qrels, suite, small=True) is None
