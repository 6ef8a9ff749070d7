"""Tuning on validation (``harness.tune``): the search-space grammar, test isolation, nested MLflow
runs, the final test run and resuming a killed sweep. Real Optuna studies in sqlite, a real MLflow
sqlite store and real Hydra composition."""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
import subprocess
import time
from collections import Counter
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
from hydra_plugins.hydra_optuna_sweeper._impl import create_params_from_overrides
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
from harness.trial import score_on_validation
from harness.tune import (
    EXIT_INTERRUPTED,
    EXIT_TUNING_FAILED,
    Dimension,
    TuneOutcome,
    TuneSpec,
    parse_dimension,
    search_space_of,
    spec_of,
    sweeper_params,
    tune,
    tuning_record,
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


def test_search_spaces_become_the_sweepers_params() -> None:
    space = {
        "factors": parse_dimension("factors", "int(8, 256, log)"),
        "k": parse_dimension("k", "int(1, 9)"),
        "reg": parse_dimension("reg", "float(0.001, 10, log)"),
        "alpha": parse_dimension("alpha", "float(1, 10)"),  # whole numbers, still floats
        "sim": parse_dimension("sim", "choice(cosine, bm25)"),
        "flag": parse_dimension("flag", "choice(true, false)"),
        "odd": parse_dimension("odd", "choice('10', 'it''s', 20)"),
    }
    params = sweeper_params("m", space)
    assert params == {
        "model.m.factors": "tag(log, int(interval(8, 256)))",
        "model.m.k": "int(interval(1, 9))",
        "model.m.reg": "tag(log, interval(0.001, 10.0))",
        "model.m.alpha": "interval(1.0, 10.0)",
        "model.m.sim": "choice(cosine, bm25)",
        "model.m.flag": "choice(true, false)",
        "model.m.odd": "choice('10', 'it\\'s', 20)",
    }
    # ... and the sweeper reads them as these Optuna distributions (its own parser)
    dists, fixed = create_params_from_overrides([f"{k}={v}" for k, v in params.items()])
    assert fixed == {}
    assert dists == {
        "model.m.factors": optuna.distributions.IntLogUniformDistribution(8, 256),
        "model.m.k": optuna.distributions.IntUniformDistribution(1, 9),
        "model.m.reg": optuna.distributions.LogUniformDistribution(0.001, 10.0),
        "model.m.alpha": optuna.distributions.UniformDistribution(1.0, 10.0),
        "model.m.sim": optuna.distributions.CategoricalDistribution(("cosine", "bm25")),
        "model.m.flag": optuna.distributions.CategoricalDistribution((True, False)),
        "model.m.odd": optuna.distributions.CategoricalDistribution(("10", "it's", 20)),
    }


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
        ("tune.trials=-1", "'tune.trials' must be a positive int or null"),  # the config's word
    ],
)
def test_bad_tune_config_is_one_line(tmp_path: Path, override: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment) as err:
        spec_of(cfg_of(tmp_path, override))
    assert "\n" not in str(err.value)


def test_no_budget_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="set a budget"):
        spec_of(cfg_of(tmp_path, "tune.trials=null", "tune.timeout=null"))


def test_nothing_to_tune_is_the_error_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No selected model has a search space, or no validation part: one error, no note."""
    with pytest.raises(ValueError, match=r"^no selected model has a search_space to tune"):
        tune(cfg_of(tmp_path, "model=[popularity]", "split.valid_cut=0.6", "tracking=none"))
    assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match=r"set split\.valid_cut="):  # a split without validation
        tune(cfg_of(tmp_path, "model=[popularity,item_knn]", "tracking=none"))
    assert capsys.readouterr().out == ""


def test_an_objective_cutoff_above_metrics_k_is_refused(tmp_path: Path) -> None:
    """Trials score lists of metrics.k items, as the test run does: recall@20 over 10-item lists
    would need longer lists, which would also change every other logged validation metric."""
    with pytest.raises(ValueError, match=r"^tune\.objective recall@20 needs lists of 20 items"):
        tune(cfg_of(tmp_path, "tune.objective=recall@20", "metrics.k=10", "tracking=none"))


def test_choices_are_read_as_hydra_reads_the_trials_overrides() -> None:
    """A choice is the value a trial's override gives (Hydra's grammar): 1e-3 is the float
    0.001 (YAML 1.1 reads it as text, which the final run then got), a quoted '1' stays text,
    and each choice's override reads back as itself."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from harness.tune import _override_value, parse_dimension

    dim = parse_dimension("r", "choice(1e-3, 1e-1, 3, '1', true, cosine)")
    assert dim.choices == (0.001, 0.1, 3, "1", True, "cosine")
    parser = OverridesParser.create()
    for choice in dim.choices:
        back = parser.parse_override(f"k={_override_value(choice)}").value()
        assert back == choice and type(back) is type(choice)
    assert parse_dimension("r", "float(1e-4, 1e-1, log)").low == 1e-4


def test_direction_comes_from_the_metric() -> None:
    assert TuneSpec(objective="ndcg@10").maximize
    assert not TuneSpec(objective="rmse").maximize
    with pytest.raises(ValueError, match=r"^tune\.objective: unknown metric 'ndgc@10'"):
        TuneSpec(objective="ndgc@10")


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
    """What every trial of the sweep runs (``harness.trial.score_on_validation``), with the test
    events and the full frame replaced by objects that fail on any use."""
    frame = generate(n_users=200, n_items=100, n_events=4000, seed=1)
    split = make_split(frame, "global_time", cut=0.8, valid_cut=0.6)
    assert len(split.test) and len(split.valid)
    poisoned = replace(split, test=Poison())
    dataset = Dataset("synthetic", Poison(), "synthetic")  # the full frame holds the test too
    suite = MetricSuite(k=10, names=("ndcg@10", "recall@10", "coverage@10"))
    Recording.fitted.clear()
    Recording.asked.clear()
    for weight in (0.5, 1.0, 2.0):
        value, summary, _ = score_on_validation(
            dataset, poisoned, "rec", Recording(weight=weight), suite, "ndcg@10"
        )
        assert value == summary["ndcg@10"] and 0 < value <= 1
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


def params_of(trial: Any, model: str) -> dict[str, Any]:
    """A trial's parameters by the model's own names (the sweeper's are ``model.<name>.<p>``)."""
    prefix = f"model.{model}."
    assert all(k.startswith(prefix) for k in trial.params), trial.params
    return {k.removeprefix(prefix): v for k, v in trial.params.items()}


def runs_of(client: MlflowClient, experiment: str) -> list[Any]:
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, experiment
    return client.search_runs([exp.experiment_id], max_results=1000)


@pytest.mark.slow
def test_tune_logs_nested_trials_and_tests_the_best_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"sqlite:///{tmp_path}/runs/mlflow.db"
    overrides = ("model=[popularity,item_knn]", "split.valid_cut=0.6", "tune.trials=3")
    cfg = cfg_of(tmp_path, *overrides, f"tracking.uri={uri}")
    assert tune(cfg) == 0

    # the study: three trials in sqlite under runs/tuning
    (db,) = (tmp_path / "runs" / "tuning").glob("item_knn-*.db")
    study = optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    # run by Hydra's Optuna sweeper: its result file is in the sweep's folder
    (result_file,) = (db.parent / f"{db.stem}-hydra").glob("*/optimization_results.yaml")
    result = OmegaConf.load(result_file)
    assert result.name == "optuna" and result.best_value == pytest.approx(study.best_value)

    # MLflow: one tuning parent, three trial runs nested under it, validation metrics on each
    client = MlflowClient(uri)
    tuning = runs_of(client, "offline-eval-tuning")
    parents = [r for r in tuning if r.data.tags.get("harness.kind") == "tuning"]
    trials = [r for r in tuning if r.data.tags.get("harness.kind") == "tuning-trial"]
    assert len(parents) == 1 and len(trials) == 3 and len(tuning) == 4
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["budget.trials"] == "3" and parent.data.tags["budget.timeout"] == "None"
    assert {r.data.tags["mlflow.parentRunId"] for r in trials} == {parent.info.run_id}
    by_number = {int(r.data.tags["tune.trial"]): r for r in trials}
    for t in study.trials:
        run_ = by_number[t.number]
        assert run_.data.metrics["valid.ndcg_at_10"] == pytest.approx(t.value)
        assert run_.data.params == {k: str(v) for k, v in params_of(t, "item_knn").items()}
    curve = client.get_metric_history(parent.info.run_id, "valid.ndcg_at_10")
    assert [(m.step, m.value) for m in sorted(curve, key=lambda m: m.step)] == [
        (t.number, pytest.approx(t.value)) for t in study.trials
    ]
    best = max(study.trials, key=lambda t: t.value)
    assert parent.data.metrics["best.valid.ndcg_at_10"] == pytest.approx(best.value)

    # the best value is the validation score, recomputed here without the harness's runner
    frame = generate(n_users=300, n_items=200, n_events=6000, seed=0)
    split = make_split(frame, "global_time", cut=0.8, valid_cut=0.6)
    chosen = params_of(best, "item_knn")
    model = ImplicitItemCosine(**chosen).fit(split.train)
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
    for k, v in chosen.items():
        assert final_cfg.model.item_knn[k] == v
    assert final_cfg.tune.result.item_knn.best_value == pytest.approx(best.value)
    assert final_cfg.tune.result.item_knn.mlflow_run == parent.info.run_id
    # the chosen trial's own run: an immutable record of the parameters and validation value
    assert final_cfg.tune.result.item_knn.best_trial == best.number
    assert final_cfg.tune.result.item_knn.best_run == by_number[best.number].info.run_id
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
        *[f"model.item_knn.{k}={v}" for k, v in chosen.items()],
    )
    assert run(plain) == 0
    expected = pd.read_csv(next((plain_dir / "runs").rglob("summary.csv")), index_col=0)
    got = pd.read_csv(folder / "summary.csv", index_col=0)
    pd.testing.assert_frame_equal(got, expected)

    # a smaller budget later: the study's first trials only, so every model has the same budget
    assert best.number > 0  # (seeded: the best is not the first trial, so the cap shows)
    capsys.readouterr()
    again = cfg_of(tmp_path, *overrides, f"tune.trials={best.number}", "tune.refit=false")
    assert tune(again) == 0
    out = capsys.readouterr().out
    first = max(study.trials[: best.number], key=lambda t: t.value)
    budget = client.get_run(parent.info.run_id).data.tags["budget.trials"]
    assert budget == str(best.number)  # the parent run says the budget of its latest invocation
    # ... and stays the study's record: its best is over every trial, not the smaller budget's
    tags = client.get_run(parent.info.run_id).data.tags
    assert {k: v for k, v in tags.items() if k.startswith("best.")} == {
        **{f"best.{k}": str(v) for k, v in chosen.items()},
        "best.trial": str(best.number),
        "best.run": by_number[best.number].info.run_id,
    }
    assert first.params != best.params  # (seeded: so a tag overwritten by the budget shows)
    history = client.get_metric_history(parent.info.run_id, "best.valid.ndcg_at_10")
    assert {m.step for m in history} == {3}  # logged at the trials the study counted
    assert all(m.value == pytest.approx(best.value) for m in history)
    assert f"best validation ndcg@10 {first.value:.4f} with " in out
    assert (
        f"note: the study of item_knn holds 3 trials from earlier runs; the best of its first "
        f"{best.number} (tune.trials={best.number}) is used, so every model has the same budget"
    ) in out

    # another tune.seed is another study: its own trials, not the first seed's answer reused
    reseeded = cfg_of(tmp_path, *overrides, "tune.trials=1", "tune.refit=false", "tune.seed=7")
    assert tune(reseeded) == 0
    other = [p for p in (tmp_path / "runs" / "tuning").glob("item_knn-*.db") if p != db]
    assert len(other) == 1
    fresh = optuna.load_study(study_name=other[0].stem, storage=f"sqlite:///{other[0]}")
    assert len(fresh.trials) == 1
    assert len(optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}").trials) == 3


def test_a_plain_run_with_a_validation_part_says_where_those_events_went(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by an audit: a plain run with split.valid_cut left the validation events out of
    training and test without a word."""
    cfg = cfg_of(tmp_path, "model=[popularity]", "split.valid_cut=0.6", "tracking=none")
    assert run(cfg) == 0
    n_valid = int(
        pd.read_json(next((tmp_path / "runs").rglob("split_stats.json")), typ="series")[
            "n_valid_events"
        ]
    )
    assert n_valid > 0
    assert (
        f"note: the split's {n_valid:,} validation events are neither trained on nor tested in "
        "this run" in capsys.readouterr().out
    )


def tune_process(cwd: Path, env: dict[str, str], *overrides: str) -> subprocess.CompletedProcess:
    return HarnessCli().run(cwd, *overrides, quick=True, env=env, module="harness.tune")


RECORDING = (
    "model=[popularity]",
    "+model.rec._target_=plugins.recording.Recording",
    "+model.rec.search_space.weight='float(0.5, 2)'",
    "split.valid_cut=0.6",
    "tune.refit=false",
)


def study_of(tmp_path: Path, model: str) -> Any:
    (db,) = (tmp_path / "runs" / "tuning").glob(f"{model}-*.db")
    return optuna.load_study(study_name=db.stem, storage=f"sqlite:///{db}")


def weights_in(log: Path) -> list[float]:
    return [float(line.split()[1]) for line in log.read_text().splitlines()]


@pytest.mark.slow
def test_a_sweep_that_dies_mid_trial_resumes_where_it_stopped(tmp_path: Path) -> None:
    log = tmp_path / "fits.log"
    overrides = (*RECORDING, "tune.trials=4")
    # the sweep process exits (code 9, as a crash or kill -9 would) in its third trial's fit
    first = tune_process(tmp_path, {"RECORDING_LOG": str(log), "RECORDING_DIE_AT": "3"}, *overrides)
    assert first.returncode == EXIT_INTERRUPTED, first.stderr
    assert "error: the sweep of rec stopped (exit code 9) after 2 of 4 trials" in first.stderr
    assert "rerun the same command to resume" in first.stderr
    weights = weights_in(log)
    assert len(weights) == 3
    study = study_of(tmp_path, "rec")
    # the cut-short trial: failed as interrupted, and queued again with its parameters
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE", "FAIL", "WAITING"]

    second = tune_process(tmp_path, {"RECORDING_LOG": str(log)}, *overrides)
    assert second.returncode == 0, second.stderr
    assert "4 trials complete, 0 failed, 1 interrupted (study " in second.stdout
    # the harness's own line per trial, none of Hydra's launcher logs ("[HYDRA] Launching ...")
    assert "[HYDRA]" not in first.stdout + second.stdout, second.stdout
    weights_after = weights_in(log)
    # two more fits, not four: the cut-short trial again with its parameters, then one new one
    assert len(weights_after) == 5
    assert weights_after[3] == pytest.approx(weights[2])
    study = study_of(tmp_path, "rec")
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]
    assert study.trials[2].user_attrs["interrupted"] is True
    assert study.trials[3].user_attrs["retry_of"] == 2
    assert study.trials[3].params == study.trials[2].params
    assert [t.params["model.rec.weight"] for t in study.trials] == pytest.approx(weights_after)

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


@pytest.mark.slow
def test_a_killed_command_resumes_to_exactly_its_budget(tmp_path: Path) -> None:
    """The whole command (tune and its sweep) killed with SIGKILL once the first trial's MLflow
    run has ended; the rerun ends with exactly the budget of finished trials."""
    log = tmp_path / "fits.log"
    stderr_file = tmp_path / "stderr.txt"
    overrides = (*RECORDING, "tune.trials=3")
    cli = HarnessCli()
    proc = subprocess.Popen(
        cli.command(overrides, True, "harness.tune"),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=stderr_file.open("w"),
        env=cli.env(RECORDING_LOG=str(log)),
        start_new_session=True,  # its own process group: the sweep subprocess is killed too
    )
    try:
        while proc.poll() is None:  # trial 0's run ends before trial 1's fit starts
            if log.exists() and len(weights_in(log)) >= 2:
                break
            time.sleep(0.02)
        assert proc.poll() is None, f"ended before it was killed:\n{stderr_file.read_text()}"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    # the client only now: opening the store while the command creates it races on its schema
    client = MlflowClient(f"sqlite:///{tmp_path}/runs/mlflow.db")
    trial_runs = [
        r
        for r in runs_of(client, "offline-eval-tuning")
        if r.data.tags.get("harness.kind") == "tuning-trial"
    ]
    assert any(r.data.tags["tune.trial"] == "0" and r.info.status == "FINISHED" for r in trial_runs)
    fits_before = len(weights_in(log))

    second = tune_process(tmp_path, {"RECORDING_LOG": str(log)}, *overrides)
    assert second.returncode == 0, second.stderr
    assert "3 trials complete" in second.stdout
    study = study_of(tmp_path, "rec")
    interrupted = [t for t in study.trials if t.user_attrs.get("interrupted")]
    finished = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(finished) == 3 and len(study.trials) == 3 + len(interrupted)
    for t in interrupted:  # each cut-short trial ran again with its parameters
        (retry,) = [r for r in study.trials if r.user_attrs.get("retry_of") == t.number]
        assert retry.params == t.params and retry.state.name == "COMPLETE"
    # every fit was one trial of the study, none beyond it (a trial killed before its fit has none)
    fitted = weights_in(log)
    assert fits_before <= len(fitted) <= len(study.trials)
    weights = [t.params["model.rec.weight"] for t in study.trials]
    assert not Counter(fitted) - Counter(weights)
    runs = runs_of(client, "offline-eval-tuning")
    assert not [r for r in runs if r.info.status == "RUNNING"]
    statuses = sorted(r.info.status for r in runs if r.data.tags.get("harness.kind") != "tuning")
    assert statuses == sorted(["FINISHED"] * 3 + ["KILLED"] * len(interrupted))


def test_sigterm_to_the_command_stops_its_sweep_too(tmp_path: Path) -> None:
    """``kill PID`` (SIGTERM to the tune command alone, not its process group) once a trial
    has run: the command ends with 143 and one line, and its sweep subprocess is gone with it
    (it used to live on, orphaned, racing a rerun for the same study)."""
    log = tmp_path / "fits.log"
    stderr_file = tmp_path / "stderr.txt"
    cli = HarnessCli()
    proc = subprocess.Popen(
        cli.command((*RECORDING, "tune.trials=20"), True, "harness.tune"),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=stderr_file.open("w"),
        env=cli.env(RECORDING_LOG=str(log)),
        start_new_session=True,  # its own process group, to see what is left of it
    )
    try:
        while proc.poll() is None and not (log.exists() and len(weights_in(log)) >= 2):
            time.sleep(0.02)
        assert proc.poll() is None, f"ended before it was stopped:\n{stderr_file.read_text()}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 143, stderr_file.read_text()
        time.sleep(1)
        with pytest.raises(ProcessLookupError):  # no process of the group is left
            os.killpg(proc.pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert stderr_file.read_text().strip().splitlines()[-1] == (
        "error: interrupted by SIGTERM; finished trials are stored: rerun the same command to "
        "resume"
    )


def test_all_trials_failing_is_one_line_and_exit_code_1(tmp_path: Path) -> None:
    # num_threads=-1: the model refuses to be built, in every trial
    result = tune_process(
        tmp_path,
        {},
        "model=[item_knn]",
        "model.item_knn.num_threads=-1",
        "split.valid_cut=0.6",
        "tune.trials=2",
        "tune.refit=false",
        "tracking=none",
    )
    assert result.returncode == EXIT_TUNING_FAILED == 1, result.stderr
    assert "WARNING: tuning failed for item_knn: not refitted" in result.stderr
    lines = [ln for ln in result.stdout.splitlines() if "no trial of item_knn completed" in ln]
    assert len(lines) == 1 and "num_threads" in lines[0], result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    study = study_of(tmp_path, "item_knn")
    assert [t.state.name for t in study.trials] == ["FAIL", "FAIL"]  # the second still ran
    assert all("num_threads" in t.user_attrs["error"] for t in study.trials)


def test_a_config_the_test_run_would_reject_fails_before_any_trial(tmp_path: Path) -> None:
    cfg = cfg_of(tmp_path, "model=[item_knn]", "split.valid_cut=0.6", "tracking=none")
    with pytest.raises(ValueError, match="not among the selected models"):
        tune(cfg)
    assert not (tmp_path / "runs" / "tuning").exists()


def test_a_study_file_of_another_optuna_version_is_one_line(tmp_path: Path) -> None:
    import sqlite3

    from harness.tune import _storage

    db = tmp_path / "study.db"
    optuna.storages.RDBStorage(f"sqlite:///{db}")  # the schema of the installed Optuna
    with sqlite3.connect(db) as con:  # as a newer Optuna (3.2) leaves it
        con.execute("update alembic_version set version_num = 'v3.2.0.a'")
    with pytest.raises(ValueError, match="another Optuna version") as err:
        _storage(optuna, db)
    assert str(db) in str(err.value) and "\n" not in str(err.value)


def test_every_interrupted_trial_ends_with_a_killed_run(tmp_path: Path) -> None:
    """A trial killed while its run was open: that run ends KILLED; one killed before its run
    started gets a KILLED run with its parameters (no duplicate for the first)."""
    from harness.tracking import Tracker
    from harness.trial import trial_tags
    from harness.tune import _end_killed_trial_runs, _Sweep

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="st")
    for _ in range(2):  # two trials left running, as a killed sweep leaves them
        study.ask().suggest_int("model.knn.k", 5, 50)
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "tuning", tmp_path / "artifacts")
    parent = tracker.start("tune knn")
    open_run = tracker.start("knn trial 0", trial_tags("knn", "st", 0), parent)
    sweep = _Sweep("knn", "st", tmp_path / "s.db", {}, parent)
    _end_killed_trial_runs(tracker, sweep, study, [0, 1])
    runs = tracker.client.search_runs([tracker.experiment_id], "tags.`tune.study` = 'st'")
    by_trial = {r.data.tags["tune.trial"]: r for r in runs}
    assert sorted(by_trial) == ["0", "1"] and len(runs) == 2
    assert by_trial["0"].info.run_id == open_run
    assert {r.info.status for r in runs} == {"KILLED"}
    started_late = by_trial["1"]
    assert started_late.data.params == {"k": str(study.trials[1].params["model.knn.k"])}
    assert started_late.data.tags["mlflow.parentRunId"] == parent
    assert started_late.data.tags["harness.kind"] == "tuning-trial"


def test_trials_beyond_the_budget_are_not_this_runs_record() -> None:
    """A study grown by an earlier budget of 4, tuned again with tune.trials=2: the counts, the
    final run's record and its report count the first two trials and the one interrupted trial
    the sweep will run again, not trials 2 and 3 (which took no part in the choice)."""
    frame = pd.DataFrame(
        {
            "number": [0, 1, 2, 3, 4],
            "state": ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE", "FAIL"],
            "value": [0.1, None, 0.3, 0.2, None],
            "interrupted": [False, False, False, False, True],
            "counts": [True, True, True, True, False],
            "used": [True, True, False, False, False],
        }
    )
    outcome = TuneOutcome("m", "s", "db", {"k": 1}, 0.1, 0, None, frame)
    summary = outcome.summary()
    assert (summary["trials_complete"], summary["trials_failed"]) == (1, 1)
    assert (summary["trials_interrupted"], summary["trials_used"]) == (1, 2)
    record = tuning_record({"m": outcome}, TuneSpec(trials=2), "global_time")["models"]["m"]
    assert [t["number"] for t in record["trials"]] == [0, 1, 4]
    assert (record["best_trial"], record["best_value"]) == (0, 0.1)
