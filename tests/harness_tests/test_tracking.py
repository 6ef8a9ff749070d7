"""The MLflow adapter: safe keys, flattening, batched logging, and one run against a real server."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import HarnessCli, MlflowServer

import metrics
from harness.tracking import Tracker, check_store_uri, configure_http, flatten, metric_key

# MLflow's rule for metric and param names (mlflow.utils.validation, non-Windows), anchored.
MLFLOW_KEY = re.compile(r"[\w\-./ :]+")

pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")


# ------------------------------------------------------------------------------ metric_key


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ndcg@10", "ndcg_at_10"),
        ("recall@20", "recall_at_20"),
        ("precision@5", "precision_at_5"),
        ("map", "map"),
        ("r_precision", "r_precision"),
        ("P_5", "P_5"),
        ("ndcg_cut_10", "ndcg_cut_10"),
        ("recip_rank", "recip_rank"),
        ("ndcg@k", "ndcg_at_k"),
        ("ndcg@", "ndcg_at_"),
        ("  ndcg@10 ", "ndcg_at_10"),
        ("item_knn.ndcg@10", "item_knn.ndcg_at_10"),
        ("split.n_test_events", "split.n_test_events"),
        ("time.fit_seconds", "time.fit_seconds"),
        ("gsb.delta(ndcg@10)", "gsb.delta_ndcg_at_10_"),
        ("hit-rate@5", "hit-rate_at_5"),
        ("a b/c:d", "a b_c:d"),
        ("ndcg@10%", "ndcg_at_10_"),
        ("mrr#1!", "mrr_1_"),
        ("x" * 300, "x" * 250),
    ],
)
def test_metric_key_table(name: str, expected: str) -> None:
    assert metric_key(name) == expected
    assert MLFLOW_KEY.fullmatch(metric_key(name))


@given(st.text(min_size=1, max_size=400).filter(lambda s: s.strip()))
def test_metric_key_is_always_an_allowed_mlflow_key(name: str) -> None:
    key = metric_key(name)
    assert MLFLOW_KEY.fullmatch(key), (name, key)
    assert len(key) <= 250


def test_registry_metric_names_map_to_distinct_keys() -> None:
    names = [f"{m}@10" for m in metrics.list_metrics()]
    assert len(names) == len(set(names)) > 10
    keys = [metric_key(n) for n in names]
    assert all(MLFLOW_KEY.fullmatch(k) for k in keys)
    assert all("@" not in k for k in keys)
    assert len(set(keys)) == len(keys)
    # plain names (no cutoff) do not collide with the @10 ones either
    plain = [metric_key(m) for m in metrics.list_metrics()]
    assert len(set(plain) | set(keys)) == len(plain) + len(keys)


# --------------------------------------------------------------------------------- flatten


def test_flatten_nested_config() -> None:
    tree = {
        "split": {"method": "loo", "valid": False, "filters": {"kcore": 5}},
        "metrics": {"names": ["ndcg@10", "map@10"], "k": 10},
        "seed": 0,
        "tracking": {"uri": None},
    }
    assert flatten(tree) == {
        "split.method": "loo",
        "split.valid": False,
        "split.filters.kcore": 5,
        "metrics.names": ["ndcg@10", "map@10"],
        "metrics.k": 10,
        "seed": 0,
        "tracking.uri": None,
    }


def test_flatten_prefix_and_empty_mapping() -> None:
    assert flatten({"k_neighbors": 7, "opts": {}}, "model.") == {
        "model.k_neighbors": 7,
        "model.opts": {},
    }
    assert flatten({}) == {}


@given(
    st.recursive(
        st.integers() | st.text(max_size=3) | st.none(),
        lambda kids: st.dictionaries(st.text("abc", min_size=1, max_size=3), kids, max_size=3),
        max_leaves=12,
    ).filter(lambda t: isinstance(t, dict))
)
def test_flatten_keeps_every_leaf_once(tree: dict) -> None:
    def leaves(node: object, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], object]]:
        if isinstance(node, dict) and node:
            return [x for k, v in node.items() for x in leaves(v, (*path, k))]
        return [(path, node)]

    flat = flatten(tree)
    expected = leaves(tree, ()) if tree else []
    # keys made of "abc" contain no dot, so the joined path is unambiguous
    assert flat == {".".join(p): v for p, v in expected}


# ------------------------------------------------------------------- Tracker on sqlite store


def test_tracker_batches_more_than_1000_metrics(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path}/store/t.db"
    tracker = Tracker(uri, "batching", tmp_path / "art")
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("batching")
    assert exp.artifact_location == (tmp_path / "art").resolve().as_uri()

    parent = tracker.start("parent", {"kind": "test"})
    run = tracker.start("child", {"kind": "test"}, parent=parent)

    values: dict[str, float | None] = {f"m@{i}": i / 7 for i in range(2500)}
    values["skipped_nan@1"] = float("nan")
    values["skipped_none@1"] = None
    params = {f"p.{i}": i for i in range(250)}
    params["long"] = "x" * 7000
    tags = {f"t.{i}": f"v{i}" for i in range(150)}
    tracker.log(run, metrics=values, params=params, tags=tags)
    tracker.finish(run, "FINISHED")
    tracker.finish(parent, "FAILED")

    got = client.get_run(run)
    assert len(got.data.metrics) == 2500
    assert got.data.metrics["m_at_1234"] == pytest.approx(1234 / 7)
    assert "skipped_nan_at_1" not in got.data.metrics
    assert "skipped_none_at_1" not in got.data.metrics
    assert len(got.data.params) == 251
    assert got.data.params["p.249"] == "249"
    assert len(got.data.params["long"]) == 6000
    assert all(got.data.tags[f"t.{i}"] == f"v{i}" for i in range(150))
    assert got.data.tags["mlflow.parentRunId"] == parent
    assert got.data.tags["kind"] == "test"
    assert got.info.status == "FINISHED"
    assert client.get_run(parent).info.status == "FAILED"
    assert "mlflow.parentRunId" not in client.get_run(parent).data.tags

    # A second Tracker finds the existing experiment instead of creating another.
    again = Tracker(uri, "batching", tmp_path / "elsewhere")
    assert again.experiment_id == exp.experiment_id


def test_tracker_logs_dataset_input_and_artifacts(tmp_path: Path, store_uri: str) -> None:
    from mlflow import MlflowClient

    uri = store_uri
    tracker = Tracker(uri, "inputs", tmp_path / "art")
    run = tracker.start("r")
    frame = pd.DataFrame({"user": [1, 2, 2], "item": [5, 6, 7], "timestamp": [1, 2, 3]})
    tracker.log_input(
        run,
        frame,
        name="tiny-training",
        context="training",
        digest="d" * 64,
        source="synthetic:{'n_users': 2}",
    )
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.txt").write_text("hello")
    tracker.log_artifacts(run, tmp_path / "out")
    tracker.finish(run)
    client = MlflowClient(uri)
    (inp,) = client.get_run(run).inputs.dataset_inputs
    assert inp.dataset.name == "tiny-training"
    assert inp.dataset.digest == "d" * 36
    assert [(t.key, t.value) for t in inp.tags] == [("mlflow.data.context", "training")]
    assert '"num_rows": 3' in inp.dataset.profile
    assert [f.path for f in client.list_artifacts(run)] == ["a.txt"]


def test_metric_key_output_is_accepted_by_mlflow_for_path_like_names(store_uri: str) -> None:
    tracker = Tracker(store_uri, "paths")
    run = tracker.start("r")
    tracker.log(run, metrics={"gsb/ndcg@10/": 1.0, "a//b": 2.0})


# ------------------------------------------------- retries, ending open runs, replaying a plan


def test_configure_http_sets_mlflow_env_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)
    configure_http(1, 2.5)
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "1"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "2"
    from mlflow.environment_variables import (
        MLFLOW_HTTP_REQUEST_MAX_RETRIES,
        MLFLOW_HTTP_REQUEST_TIMEOUT,
    )

    assert (MLFLOW_HTTP_REQUEST_MAX_RETRIES.get(), MLFLOW_HTTP_REQUEST_TIMEOUT.get()) == (1, 2)
    configure_http(None, None)  # None: left as it is
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "1"
    for bad in (-1, True, "3"):
        with pytest.raises(ValueError, match=r"tracking\.retries"):
            configure_http(bad, None)  # type: ignore[arg-type]


def test_abort_ends_open_runs_killed_and_find_by_tag(store_uri: str) -> None:
    from mlflow import MlflowClient

    uri = store_uri
    tracker = Tracker(uri, "abort")
    parent = tracker.start("p", {"harness.folder_id": "abc"})
    done = tracker.start("a", {"harness.folder_id": "abc", "model": "a"}, parent=parent)
    tracker.finish(done)
    open_child = tracker.start("b", {"harness.folder_id": "abc", "model": "b"}, parent=parent)
    other = Tracker(uri, "abort").start("q", {"harness.folder_id": "it's other"})
    assert tracker.open_runs == [parent, open_child]
    assert tracker.abort("KILLED") == []
    assert tracker.open_runs == []
    client = MlflowClient(uri)
    status = {r: client.get_run(r).info.status for r in (parent, done, open_child, other)}
    assert status == {parent: "KILLED", done: "FINISHED", open_child: "KILLED", other: "RUNNING"}
    found = tracker.find({"harness.folder_id": "abc"})
    assert {r.info.run_id for r in found} == {parent, done, open_child}
    kids = tracker.find({"harness.folder_id": "abc", "model": "b"}, parent=parent)
    assert [r.info.run_id for r in kids] == [open_child]
    assert [r.info.run_id for r in tracker.find({"harness.folder_id": "it's other"})] == [other]


def test_replay_from_the_saved_plan_is_idempotent_and_completes(
    tmp_path: Path, store_uri: str
) -> None:
    """A plan saved as JSON and read back logs the same numbers; a second replay adds nothing;
    a replay after a child run was lost (deleted) creates only that child again."""
    import json

    from mlflow import MlflowClient

    from harness.datasets import Dataset
    from harness.experiment import MetricSuite, run_models
    from harness.models.baselines import PopularityModel, RandomModel
    from harness.record import plan, replay, save_plan
    from harness.split import make_split
    from harness.synthetic import generate

    frame = generate(n_users=60, n_items=40, n_events=900, seed=3)
    split = make_split(frame, "leave_one_out")
    folder = tmp_path / "results"
    result = run_models(
        Dataset("tiny", frame, "synthetic:tiny"),
        split,
        {"pop": PopularityModel(), "rnd": RandomModel(seed=1)},
        MetricSuite(k=5, names=("ndcg@5", "recall@5")),
        folder,
        progress=False,
    )
    saved = plan(
        result,
        run_name="tiny-run",
        config={"seed": 0, "split": {"method": "leave_one_out"}},
        split_key="k" * 64,
        model_params={"pop": {"_target_": "x.Pop"}},
        folder_id="folder-1",
    )
    loaded = json.loads(save_plan(saved, folder).read_text())
    uri = store_uri
    ids = replay(Tracker(uri, "replay"), loaded, folder)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("replay").experiment_id

    def snapshot() -> dict[str, tuple]:
        return {
            r.data.tags.get("model", "tiny-run"): (
                r.info.status,
                dict(r.data.metrics),
                len(r.inputs.dataset_inputs),
            )
            for r in client.search_runs([exp])
        }

    first = snapshot()
    assert set(first) == {"tiny-run", "pop", "rnd"}
    names = {r.info.run_name for r in client.search_runs([exp])}
    assert names == {
        "tiny · leave_one_out · 2 models",
        *(f"{m} · leave_one_out · tiny" for m in ("pop", "rnd")),
    }
    assert all(status == "FINISHED" for status, _, _ in first.values())
    for name in ("pop", "rnd"):
        summary = result.outcomes[name].evaluation.summary
        assert first[name][1]["ndcg_at_5"] == summary["ndcg@5"]
        assert first["tiny-run"][1][f"{name}.recall_at_5"] == summary["recall@5"]
    assert first["tiny-run"][2] == 2  # training and test inputs
    again = replay(Tracker(uri, "replay"), loaded, folder)
    assert again == ids and snapshot() == first
    client.delete_run(ids["rnd"])
    third = replay(Tracker(uri, "replay"), loaded, folder)
    # the parent is complete: nothing is logged again (a deleted run stays deleted)
    assert third == {k: v for k, v in ids.items() if k != "rnd"}
    client.set_tag(ids["parent"], "harness.logged", "partial")
    fourth = replay(Tracker(uri, "replay"), loaded, folder)
    assert fourth["parent"] == ids["parent"] and fourth["pop"] == ids["pop"]
    assert fourth["rnd"] != ids["rnd"]
    assert snapshot() == first
    params = client.get_run(fourth["pop"]).data.params
    assert params["model._target_"] == "x.Pop"


# --------------------------------------------------------------- a real MLflow tracking server


@pytest.mark.slow
def test_cli_logs_to_a_real_tracking_server(
    harness_cli: HarnessCli, mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    from mlflow import MlflowClient

    url = mlflow_server.url
    work = tmp_path / "work"
    proc = harness_cli.run(
        work,
        "dataset.n_users=300",
        "dataset.n_items=200",
        "dataset.n_events=6000",
        "progress=false",
        "model=[random,popularity]",
        "tracking=server",
        f"tracking.uri={url}",
        timeout=240,
        env={"MLFLOW_HTTP_REQUEST_TIMEOUT": "60"},
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert not (work / "runs" / "mlflow.db").exists()  # nothing logged locally
    folder = work / re.search(r"^results: (.+)$", proc.stdout, re.MULTILINE).group(1).strip()
    local = pd.read_csv(folder / "summary.csv", index_col="model")

    client = MlflowClient(tracking_uri=url)
    exp = client.get_experiment_by_name("offline-eval")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.info.run_id in proc.stdout
    assert parent.data.params["split.method"] == "global_time"
    assert parent.data.tags["dataset.name"] == "synthetic"
    children = {r.data.tags["model"]: r for r in runs if r is not parent}
    assert set(children) == {"random", "popularity"}
    for name, child in children.items():
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.info.status == "FINISHED"
        for metric in ("ndcg@10", "recall@10", "map@10"):
            got = child.data.metrics[metric.replace("@", "_at_")]
            assert math.isclose(got, local.loc[name, metric], rel_tol=1e-12), (name, metric)

    child = children["popularity"]
    dst = tmp_path / "download"
    dst.mkdir()
    path = client.download_artifacts(child.info.run_id, "per_user.parquet", str(dst))
    per_user = pd.read_parquet(path)
    assert "ndcg@10" in per_user.columns
    assert len(per_user) > 0
    saved = pd.read_parquet(folder / "popularity" / "per_user.parquet")
    pd.testing.assert_frame_equal(per_user, saved)
    # the server stored the artifacts under its --artifacts-destination
    assert list((tmp_path / "server" / "art").rglob("per_user.parquet"))


@pytest.mark.parametrize(
    "uri", ["file:///tmp/x/mlruns", "./mlruns", "mlruns", "/abs/mlruns", "C:/m"]
)
def test_a_filesystem_store_is_refused_before_the_run_as_mlflow_would_after_it(
    uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The installed MLflow refuses to write a filesystem store unless MLFLOW_ALLOW_FILE_STORE
    is set; the harness says so in one line before any work, and follows the same variable."""
    import mlflow

    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(ValueError, match=r"filesystem store.*sqlite:///"):
        check_store_uri(uri)
    real = (tmp_path / "mlruns").as_uri()
    with pytest.raises(Exception, match="filesystem tracking backend"):  # MLflow itself
        mlflow.MlflowClient(real).search_experiments()
    for ok in ("sqlite:///runs/mlflow.db", "http://127.0.0.1:5000", "databricks"):
        check_store_uri(ok)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    check_store_uri(uri)


def test_the_cli_refuses_a_filesystem_store_before_any_work(
    harness_cli: HarnessCli, tmp_path: Path
) -> None:
    proc = harness_cli.run(tmp_path, "tracking.uri=file:///tmp/mlruns", quick=True)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "filesystem store" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs" / "results").exists()


def test_comparison_rows_keep_full_precision_and_null_non_finite() -> None:
    """record.json / comparison.json rows: a tiny p-value stays itself (pandas' to_json kept 10
    decimals, so 9.79e-14 read 0.0); NaN and infinities are null."""
    import json

    import numpy as np

    from harness.record import _json_rows

    table = pd.DataFrame(
        {"metric": ["a", "b"], "p_t": [9.79e-14, np.nan], "n": [3, 4], "lift": [np.inf, 0.1]}
    )
    rows = json.loads(json.dumps(_json_rows(table)))
    assert rows == [
        {"metric": "a", "p_t": 9.79e-14, "n": 3, "lift": None},
        {"metric": "b", "p_t": None, "n": 4, "lift": 0.1},
    ]
