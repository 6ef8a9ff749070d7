"""MLflow keys of names that clean to the same key stay distinct; ``harness.log`` on a sweep job.

MLflow rejects ``<`` and ``>`` in keys, so ``age<30`` and ``age>30`` both clean to ``age_30``:
each must still land in its own key with its own value (real sqlite stores, real CLI runs).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import QUICK, HarnessCli

from harness.tracking import Tracker, metric_key

CLI = HarnessCli()
MLFLOW_KEY = re.compile(r"[\w\-./ :]+")  # MLflow's rule for metric and param names

pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")


def _hashed(name: str, key: str) -> str:
    """The documented distinct key: the cleaned key, ``_`` and 8 hex digits of sha256(name)."""
    return f"{key}_{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def test_clashing_names_get_distinct_keys_and_others_keep_theirs() -> None:
    """Only names whose cleaned keys clash change; one that is its own key keeps it."""
    from harness.tracking import metric_keys

    names = ["ndcg@10", "g.age<30", "g.age>30", "g.age_30", "split.n users"]
    keys = metric_keys(names)
    assert keys["ndcg@10"] == "ndcg_at_10"
    assert keys["split.n users"] == "split.n users"
    assert keys["g.age_30"] == "g.age_30"  # already a valid key: unchanged
    assert keys["g.age<30"] == _hashed("g.age<30", "g.age_30")
    assert keys["g.age>30"] == _hashed("g.age>30", "g.age_30")
    assert len(set(keys.values())) == len(names)
    assert metric_keys(reversed(names)) == keys  # order of logging does not matter
    long = ["x" * 300 + "<", "x" * 300 + ">"]
    got = metric_keys(long)
    assert len(set(got.values())) == 2
    assert all(len(k) <= 250 and MLFLOW_KEY.fullmatch(k) for k in got.values())


@given(st.lists(st.text(alphabet="ab<>@/ _", min_size=1, max_size=6), max_size=12))
def test_keys_are_valid_distinct_and_unchanged_without_a_clash(names: list[str]) -> None:
    """Every name gets its own valid key; a name whose cleaned key no other shares keeps it."""
    from harness.tracking import metric_keys

    names = [n for n in names if n.strip()]
    keys = metric_keys(names)
    assert len(set(keys.values())) == len(set(names))
    assert all(MLFLOW_KEY.fullmatch(k) and len(k) <= 250 for k in keys.values())
    cleaned = [metric_key(n) for n in set(names)]
    for name in names:
        if cleaned.count(metric_key(name)) == 1:
            assert keys[name] == metric_key(name)


def test_two_labels_differing_only_by_rejected_characters_both_land_in_mlflow(
    store_uri: str,
) -> None:
    """Metrics and params logged by :class:`Tracker` into a real sqlite store: each name keeps
    its own value, and a tag names the source of each changed key."""
    from mlflow import MlflowClient

    tracker = Tracker(store_uri, "keys")
    run = tracker.start("run")
    tracker.log(
        run,
        metrics={"fairness.group.age<30": 0.25, "fairness.group.age>30": 0.75, "ndcg@10": 0.5},
        params={"groups.a<b": "left", "groups.a>b": "right", "k": 10},
    )
    data = MlflowClient(store_uri).get_run(run).data
    lt, gt = "fairness.group.age<30", "fairness.group.age>30"
    assert data.metrics == {
        _hashed(lt, "fairness.group.age_30"): 0.25,
        _hashed(gt, "fairness.group.age_30"): 0.75,
        "ndcg_at_10": 0.5,
    }
    assert data.params == {
        _hashed("groups.a<b", "groups.a_b"): "left",
        _hashed("groups.a>b", "groups.a_b"): "right",
        "k": "10",
    }
    named = {k.removeprefix("harness.key."): v for k, v in data.tags.items() if "key." in k}
    assert named == {
        _hashed(lt, "fairness.group.age_30"): lt,
        _hashed(gt, "fairness.group.age_30"): gt,
        _hashed("groups.a<b", "groups.a_b"): "groups.a<b",
        _hashed("groups.a>b", "groups.a_b"): "groups.a>b",
    }


def test_replay_keeps_clashing_model_names_apart_and_stays_idempotent(
    tmp_path: Path, store_uri: str
) -> None:
    """Two models whose names clash once cleaned (``pop<1``, ``pop>1``): the parent's summary
    holds both models' values, also for names split between the parent's two logging steps; a
    replay of a partly logged parent adds no key."""
    from mlflow import MlflowClient

    from harness.datasets import Dataset
    from harness.experiment import MetricSuite, run_models
    from harness.models.baselines import PopularityModel, RandomModel
    from harness.record import plan, replay, save_plan
    from harness.split import make_split
    from harness.synthetic import generate

    frame = generate(n_users=60, n_items=40, n_events=900, seed=3)
    models = {"pop<1": PopularityModel(), "pop>1": RandomModel(seed=1)}
    result = run_models(
        Dataset("tiny", frame, "synthetic:tiny"),
        make_split(frame, "leave_one_out"),
        models,
        MetricSuite(k=5, names=("ndcg@5",)),
        tmp_path / "results",
        progress=False,
    )
    saved = plan(result, run_name="tiny", config={"seed": 0}, split_key="k" * 64, model_params={})
    saved["parent"]["metrics"]["extra.a<b"] = 1.0  # logged with the parent's first step
    saved["parent"]["summary"]["extra.a>b"] = 2.0  # and its clash with the summary, later
    loaded = json.loads(save_plan(saved, tmp_path / "results").read_text())
    ids = replay(Tracker(store_uri, "replay"), loaded, tmp_path / "results")
    client = MlflowClient(store_uri)

    expected = {
        _hashed(f"{m}.ndcg@5", "pop_1.ndcg_at_5"): result.outcomes[m].evaluation.summary["ndcg@5"]
        for m in models
    }
    expected |= {_hashed("extra.a<b", "extra.a_b"): 1.0, _hashed("extra.a>b", "extra.a_b"): 2.0}
    got = client.get_run(ids["parent"]).data.metrics
    assert {k: got.get(k) for k in expected} == expected
    assert not {"pop_1.ndcg_at_5", "extra.a_b"} & set(got)
    assert expected[_hashed("pop<1.ndcg@5", "pop_1.ndcg_at_5")] != pytest.approx(
        expected[_hashed("pop>1.ndcg@5", "pop_1.ndcg_at_5")]
    )
    for name in models:  # each child run holds its own model's value under the plain key
        child = client.get_run(ids[name]).data
        assert child.tags["model"] == name
        assert child.metrics["ndcg_at_5"] == result.outcomes[name].evaluation.summary["ndcg@5"]

    client.set_tag(ids["parent"], "harness.logged", "partial")  # as a cut-off logging leaves it
    again = replay(Tracker(store_uri, "replay"), loaded, tmp_path / "results")
    assert again == ids
    assert client.get_run(ids["parent"]).data.metrics == got


def test_a_cli_run_logs_every_user_group_of_the_fairness_gap(tmp_path: Path) -> None:
    """``compare.user_groups`` with groups ``a<b`` and ``a>b``: each child run holds both groups'
    means and sizes, computed here from the run's per-user table and the group file."""
    from mlflow import MlflowClient

    users = np.arange(600)
    groups = pd.DataFrame({"user": users, "group": np.where(users % 3 == 0, "a<b", "a>b")})
    groups.to_csv(tmp_path / "groups.csv", index=False)
    proc = CLI.run(
        tmp_path / "work",
        *QUICK,
        f"compare.user_groups={tmp_path / 'groups.csv'}",
        "compare.n_resamples=100",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = tmp_path / "work" / re.search(r"^results: (.+)$", proc.stdout, re.M).group(1)
    parent = re.search(r"parent run ([0-9a-f]{32})", proc.stdout).group(1)
    client = MlflowClient(f"sqlite:///{tmp_path / 'work' / 'runs' / 'mlflow.db'}")
    children = client.search_runs(
        [client.get_run(parent).info.experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{parent}'",
    )
    label = groups.set_index("user")["group"]
    checked = 0
    for child in children:
        model = child.data.tags["model"]
        per_user = pd.read_parquet(folder / model / "per_user.parquet")["ndcg@10"].dropna()
        of = label.reindex(per_user.index)
        got = child.data.metrics
        if not any(k.startswith("fairness.group") for k in got):
            continue  # not a model of a compared pair
        for name in ("a<b", "a>b"):
            mean_key = _hashed(f"fairness.group.{name}", "fairness.group.a_b")
            size_key = _hashed(f"fairness.group_users.{name}", "fairness.group_users.a_b")
            assert got[mean_key] == pytest.approx(per_user[of == name].mean(), rel=1e-12)
            assert got[size_key] == (of == name).sum()
            assert child.data.tags[f"harness.key.{mean_key}"] == f"fairness.group.{name}"
        assert metric_key("fairness.group.a<b") not in got
        checked += 1
    assert checked >= 2


def test_harness_log_on_a_logged_sweep_job_says_already_logged(tmp_path: Path) -> None:
    """A multirun groups its jobs' parent runs under a sweep run (their ``mlflow.parentRunId``):
    ``python -m harness.log JOB`` on a fully logged job finds its parent all the same."""
    work = tmp_path / "work"
    proc = CLI.run(work, "-m", *QUICK, "seed=0", "compare=none", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MLflow sweep run:" in proc.stdout
    job = re.search(r"^results: (.+)$", proc.stdout, re.M).group(1).strip()
    parent = re.search(r"parent run ([0-9a-f]{32})", proc.stdout).group(1)
    logged = CLI.run(work, job, module="harness.log", timeout=300)
    assert logged.returncode == 0, logged.stderr[-3000:]
    assert f"{job}: already logged, nothing to do: " in logged.stdout
    assert logged.stdout.rstrip().endswith(f"parent run {parent}")
