"""Tuning on validation (``harness.tune``): the search-space grammar, test isolation, nested MLflow
runs, the final test run and resuming a killed sweep. Real Optuna studies in sqlite, a real MLflow
sqlite store and real Hydra composition."""

from __future__ import annotations

import inspect
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd
import pytest
import yaml
from hydra import compose, initialize_config_module
from hydra.utils import get_class
from mlflow import MlflowClient
from omegaconf import DictConfig, OmegaConf
from plugins.recording import Recording
from support import HarnessCli

import harness.configs
import metrics
from harness.cli import run, suite_of
from harness.datasets import Dataset
from harness.experiment import MetricSuite
from harness.models import ImplicitItemCosine
from harness.split import make_split
from harness.synthetic import generate
from harness.tune import (
    Dimension,
    TuneSpec,
    parse_dimension,
    search_space_of,
    spec_of,
    tune,
    tune_models,
    validation_view,
)

MODEL_DIR = Path(harness.configs.__file__).parent / "model"


def cfg_of(tmp_path: Path, *overrides: str) -> DictConfig:
    """The composed config of ``python -m harness.tune`` (the tune group selected)."""
    with initialize_config_module(config_module="harness.configs", version_base=None):
        return compose(
            config_name="config",
            overrides=[
                "tune=default",
                "experiment=quick",
                "progress=false",
                f"runs_dir={tmp_path}/runs",
                *overrides,
            ],
        )


# ------------------------------------------------------------------------------ the grammar


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("int(10, 200, log)", Dimension("k", "int", 10, 200, True)),
        ("int(1,5)", Dimension("k", "int", 1, 5, False)),
        ("float(0.001, 10, log)", Dimension("k", "float", 0.001, 10, True)),
        ("float(0, 1)", Dimension("k", "float", 0, 1, False)),
        ("choice(cosine, jaccard)", Dimension("k", "choice", choices=("cosine", "jaccard"))),
        ("choice(8, 16, 32)", Dimension("k", "choice", choices=(8, 16, 32))),
        ("choice(true, false)", Dimension("k", "choice", choices=(True, False))),
    ],
)
def test_search_space_grammar(text: str, expected: Dimension) -> None:
    dim = parse_dimension("k", text)
    assert dim == expected
    assert [type(c) for c in dim.choices] == [type(c) for c in expected.choices]
    assert parse_dimension("k", dim.text()) == dim  # the printed form parses back


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("int(5)", "is not a search space"),
        ("int(1.5, 3)", "must be ints"),
        ("float(0, 1, lg)", "is not a search space"),
        ("float(0, 1, log)", "low must be > 0"),
        ("int(5, 5)", "low < high"),
        ("uniform(0, 1)", "is not a search space"),
        ("choice()", "is not a search space"),
        ("choice(a, a)", "repeats a choice"),
        (5, "is not a search space"),
        ("float(a, b)", "must be floats"),
    ],
)
def test_bad_search_space_is_one_line_naming_the_key(text: Any, fragment: str) -> None:
    with pytest.raises(ValueError, match=r"model\.m\.search_space\.k: ") as err:
        search_space_of("m", {"_target_": "x.Y", "search_space": {"k": text}})
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_misspelled_parameter_in_a_search_space_is_named() -> None:
    node = {
        "_target_": "harness.models.ImplicitItemCosine",
        "search_space": {"k_neighbours": "int(1, 9)"},
    }
    accepted = inspect.signature(ImplicitItemCosine).parameters
    with pytest.raises(ValueError, match=r"'k_neighbours' is not a parameter of harness\.models"):
        search_space_of("item_knn", node, accepted)


def model_configs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(MODEL_DIR.glob("*.yaml")):
        for name, node in (yaml.safe_load(path.read_text()) or {}).items():
            out.append((name, node))
    return out


@pytest.mark.parametrize(("name", "node"), model_configs(), ids=[n for n, _ in model_configs()])
def test_model_search_spaces_parse_and_contain_the_defaults(name: str, node: dict) -> None:
    params = inspect.signature(get_class(node["_target_"])).parameters
    space = search_space_of(name, node, params)
    if name in ("als", "item_knn", "bias") or name.startswith("implicit_"):
        assert space, f"{name} should declare a search_space"
    for key, dim in space.items():
        default = node.get(key, params[key].default)
        if dim.kind == "choice":
            assert default in dim.choices, (name, key)
        else:
            assert dim.low <= default <= dim.high, (name, key, default)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("tune.objective=ndgc@10", "ndgc"),
        ("tune.trials=0", "'tune.trials' must be a positive int"),
        ("tune.sampler=grid", "'tune.sampler' must be one of"),
        ("+tune.trails=5", "unknown key 'tune.trails'"),
    ],
)
def test_bad_tune_config_is_one_line(tmp_path: Path, override: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment) as err:
        spec_of(cfg_of(tmp_path, override))
    assert "\n" not in str(err.value)


def test_no_budget_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="set a budget"):
        spec_of(cfg_of(tmp_path, "tune.trials=null", "tune.timeout=null"))


def test_direction_comes_from_the_metric() -> None:
    assert TuneSpec(objective="ndcg@10").maximize
    assert not TuneSpec(objective="rmse").maximize


def test_a_split_without_validation_is_refused_with_the_key_to_set() -> None:
    frame = generate(n_users=50, n_items=30, n_events=600, seed=2)
    with pytest.raises(ValueError, match=r"set split\.valid_cut="):
        validation_view(make_split(frame, "global_time", cut=0.8))
    with pytest.raises(ValueError, match=r"set split\.valid=true"):
        validation_view(make_split(frame, "leave_one_out"))


# ------------------------------------------------------------------------- test isolation


class Poison:
    """Stands in for the test events: any use at all fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"test data touched during tuning (.{name})")

    def __getitem__(self, key: Any) -> Any:
        raise AssertionError("test data touched during tuning ([])")

    def __len__(self) -> int:
        raise AssertionError("test data touched during tuning (len)")

    def __iter__(self) -> Any:
        raise AssertionError("test data touched during tuning (iter)")


def test_tuning_never_reads_the_test_events(tmp_path: Path) -> None:
    frame = generate(n_users=200, n_items=100, n_events=4000, seed=1)
    split = make_split(frame, "global_time", cut=0.8, valid_cut=0.6)
    assert len(split.test) and len(split.valid)
    poisoned = replace(split, test=Poison())
    dataset = Dataset("synthetic", Poison(), "synthetic")  # the full frame holds the test too
    suite = MetricSuite(k=10, names=("ndcg@10", "recall@10", "coverage@10"))
    Recording.fitted.clear()
    Recording.asked.clear()
    outcomes = tune_models(
        dataset,
        poisoned,
        {"rec": lambda params: Recording(**params)},
        {"rec": {"weight": parse_dimension("weight", "float(0.5, 2)")}},
        suite,
        TuneSpec(trials=3, storage=str(tmp_path / "tuning")),
        {"rec": "rec-isolation"},
        progress=False,
    )
    trials = outcomes["rec"].trials
    assert outcomes["rec"].error is None, trials
    assert list(trials["state"]) == ["COMPLETE"] * 3
    assert len(Recording.fitted) == 3
    key = ["user", "item", "timestamp"]
    train = split.train.sort_values(key).reset_index(drop=True)[key]
    for seen in Recording.fitted:  # fitted on exactly the training events, none of the test
        pd.testing.assert_frame_equal(seen.sort_values(key).reset_index(drop=True)[key], train)
        assert seen.merge(split.test[key], on=key).empty
    valid_users = np.unique(split.valid["user"])
    for users in Recording.asked:  # asked about validation users only
        np.testing.assert_array_equal(np.sort(users), valid_users)


# ----------------------------------------------------------------------------- end to end


def runs_of(client: MlflowClient, experiment: str) -> list[Any]:
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, experiment
    return client.search_runs([exp.experiment_id], max_results=1000)


@pytest.mark.slow
def test_tune_logs_nested_trials_and_tests_the_best_once(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/runs/mlflow.db"
    overrides = ("model=[popularity,item_knn]", "split.valid_cut=0.6", "tune.trials=3")
    cfg = cfg_of(tmp_path, *overrides, f"tracking.uri={uri}")
    assert tune(cfg) == 0

    # the study: three trials in sqlite under runs/tuning
    (db,) = (tmp_path / "runs" / "tuning").glob("item_knn-*.db")
    study = optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3

    # MLflow: one tuning parent, three trial runs nested under it, validation metrics on each
    client = MlflowClient(uri)
    tuning = runs_of(client, "offline-eval-tuning")
    parents = [r for r in tuning if r.data.tags.get("harness.kind") == "tuning"]
    trials = [r for r in tuning if r.data.tags.get("harness.kind") == "tuning-trial"]
    assert len(parents) == 1 and len(trials) == 3 and len(tuning) == 4
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert {r.data.tags["mlflow.parentRunId"] for r in trials} == {parent.info.run_id}
    by_number = {int(r.data.tags["tune.trial"]): r for r in trials}
    for t in study.trials:
        run_ = by_number[t.number]
        assert run_.data.metrics["valid.ndcg_at_10"] == pytest.approx(t.value)
        assert {k: run_.data.params[k] for k in t.params} == {
            k: str(v) for k, v in t.params.items()
        }
    curve = client.get_metric_history(parent.info.run_id, "valid.ndcg_at_10")
    assert [(m.step, m.value) for m in sorted(curve, key=lambda m: m.step)] == [
        (t.number, pytest.approx(t.value)) for t in study.trials
    ]
    best = max(study.trials, key=lambda t: t.value)
    assert parent.data.metrics["best.valid.ndcg_at_10"] == pytest.approx(best.value)

    # the best value is the validation score, recomputed here without the harness's runner
    frame = generate(n_users=300, n_items=200, n_events=6000, seed=0)
    split = make_split(frame, "global_time", cut=0.8, valid_cut=0.6)
    model = ImplicitItemCosine(**best.params).fit(split.train)
    users = np.sort(split.valid["user"].unique())
    ids, _ = model.recommend(users, 10)
    run_frame = pd.DataFrame(
        {
            "user": np.repeat(users, 10),
            "item": ids.ravel(),
            "score": -np.tile(np.arange(10), len(users)),
        }
    )
    qrels = split.valid[["user", "item"]].drop_duplicates().assign(relevance=1.0)
    suite = suite_of(cfg)
    by_hand = metrics.evaluate(qrels, run_frame, ["ndcg@10"], **suite.evaluate_options())
    assert by_hand.summary["ndcg@10"] == pytest.approx(best.value)

    # the final run: best parameters, train + validation, test once, in the normal experiment
    finals = runs_of(client, "offline-eval")
    final_parents = [r for r in finals if "mlflow.parentRunId" not in r.data.tags]
    assert len(final_parents) == 1
    (folder,) = [p.parent for p in (tmp_path / "runs" / "results").rglob("summary.csv")]
    final_cfg = OmegaConf.load(folder / "config.yaml")
    assert final_cfg.split.valid_cut is None
    for k, v in best.params.items():
        assert final_cfg.model.item_knn[k] == v
    assert final_cfg.tune.result.item_knn.best_value == pytest.approx(best.value)
    assert final_cfg.tune.result.item_knn.mlflow_run == parent.info.run_id
    stats = pd.read_json(folder / "split_stats.json", typ="series")
    # training = every event before the test cut: train + validation (also validation events of
    # users the tuning train did not have, which the validation split dropped)
    assert stats["n_train_events"] == int((frame["timestamp"] < split.stats["cut"]).sum())
    assert stats["n_train_events"] > len(split.train) + len(split.valid)

    # ... and it is the same as a plain run configured with those parameters by hand
    plain_dir = tmp_path / "plain"
    plain = cfg_of(
        plain_dir,
        "model=[popularity,item_knn]",
        "tracking=none",
        *[f"model.item_knn.{k}={v}" for k, v in best.params.items()],
    )
    assert run(plain) == 0
    expected = pd.read_csv(next((plain_dir / "runs").rglob("summary.csv")), index_col=0)
    got = pd.read_csv(folder / "summary.csv", index_col=0)
    pd.testing.assert_frame_equal(got, expected)


def tune_process(cwd: Path, env: dict[str, str], *overrides: str) -> subprocess.CompletedProcess:
    return HarnessCli().run(cwd, *overrides, quick=True, env=env, module="harness.tune")


@pytest.mark.slow
def test_a_killed_sweep_resumes_where_it_stopped(tmp_path: Path) -> None:
    log = tmp_path / "fits.log"
    overrides = (
        "model=[popularity]",
        "+model.rec._target_=plugins.recording.Recording",
        "+model.rec.search_space.weight='float(0.5, 2)'",
        "split.valid_cut=0.6",
        "tune.trials=4",
        "tune.refit=false",
    )
    first = tune_process(tmp_path, {"RECORDING_LOG": str(log), "RECORDING_DIE_AT": "3"}, *overrides)
    assert first.returncode == 9, first.stderr  # killed in the middle of its third trial
    weights = [float(line.split()[1]) for line in log.read_text().splitlines()]
    assert len(weights) == 3

    (db,) = (tmp_path / "runs" / "tuning").glob("rec-*.db")
    study = optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE", "RUNNING"]

    second = tune_process(tmp_path, {"RECORDING_LOG": str(log)}, *overrides)
    assert second.returncode == 0, second.stderr
    assert "4 trials complete" in second.stdout
    weights_after = [float(line.split()[1]) for line in log.read_text().splitlines()]
    # two more fits, not four: the cut-short trial again with its parameters, then one new one
    assert len(weights_after) == 5
    assert weights_after[3] == pytest.approx(weights[2])
    study = optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}")
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    assert study.trials[2].user_attrs["interrupted"] is True
    assert study.trials[3].user_attrs["retry_of"] == 2
    assert study.trials[3].params == study.trials[2].params

    # one tuning parent across both processes; the killed trial's run ended as KILLED
    client = MlflowClient(f"sqlite:///{tmp_path}/runs/mlflow.db")
    tuning = runs_of(client, "offline-eval-tuning")
    parents = [r for r in tuning if r.data.tags.get("harness.kind") == "tuning"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    parent_id = parents[0].info.run_id
    children = [r for r in tuning if r.info.run_id != parent_id]
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent_id}
    assert {r.data.tags["tune.trial"]: r.info.status for r in children} == {
        "0": "FINISHED",
        "1": "FINISHED",
        "2": "KILLED",
        "3": "FINISHED",
        "4": "FINISHED",
    }


def test_failing_trials_are_recorded_and_the_others_go_on(tmp_path: Path) -> None:
    frame = generate(n_users=120, n_items=60, n_events=2400, seed=4)
    split = make_split(frame, "global_time", cut=0.8, valid_cut=0.6)
    dataset = Dataset("synthetic", frame, "synthetic")
    suite = MetricSuite(k=10, names=("ndcg@10",))
    space = {"weight": parse_dimension("weight", "float(0.5, 2)")}

    def picky(params: dict[str, Any]) -> Recording:
        if params["weight"] > 1.25:
            raise ValueError(f"weight {params['weight']} is too heavy")
        return Recording(**params)

    def never(params: dict[str, Any]) -> Recording:
        raise ValueError("cannot build")

    spec = TuneSpec(trials=6, sampler="random", storage=str(tmp_path / "tuning"))
    outcomes = tune_models(
        dataset,
        split,
        {"picky": picky, "never": never},
        {"picky": space, "never": space},
        suite,
        spec,
        {"picky": "picky-study", "never": "never-study"},
        progress=False,
    )
    trials = outcomes["picky"].trials
    heavy = trials["param.weight"] > 1.25
    assert heavy.any() and (~heavy).any()  # both kinds occur with this seed
    assert (trials.loc[heavy, "state"] == "FAIL").all()
    assert (trials.loc[~heavy, "state"] == "COMPLETE").all()
    assert trials.loc[heavy, "error"].str.startswith("ValueError: weight").all()
    assert outcomes["picky"].error is None and outcomes["picky"].best_params["weight"] <= 1.25
    assert list(outcomes["never"].trials["state"]) == ["FAIL"] * 6
    assert outcomes["never"].error == (
        "no trial of never completed (last error: ValueError: cannot build)"
    )
    assert outcomes["never"].best_params == {}


def test_a_config_the_test_run_would_reject_fails_before_any_trial(tmp_path: Path) -> None:
    cfg = cfg_of(tmp_path, "model=[item_knn]", "split.valid_cut=0.6", "tracking=none")
    with pytest.raises(ValueError, match="not among the selected models"):
        tune(cfg)
    assert not (tmp_path / "runs" / "tuning").exists()
