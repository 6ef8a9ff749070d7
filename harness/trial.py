"""``python -m harness.trial``: one tuning trial, a Hydra job launched by Hydra's Optuna sweeper.

``python -m harness.tune`` writes the composed experiment config of one model's study (the
``trial`` node says which model, study, objective and MLflow parent run; the ``hydra`` node
configures the sweeper) and runs ``python -m harness.trial --config-dir D --config-name S -m``.
The sweeper asks Optuna for parameters, overrides ``model.<name>.<param>`` with them and calls
:func:`task` once per trial: it fits the model on the split's **train** part, scores it on the
**validation** part only (:func:`score_on_validation`; the test part is never read) and returns
the objective (a failed trial raises: the sweeper records it as failed and goes on). Each trial
is an MLflow run nested under the model's tuning parent run, with its parameters and validation
metrics; the parent gets the objective at step = trial number (the validation curve).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import metrics
from harness.datasets import Dataset
from harness.experiment import Evaluator, MetricSuite, run_models
from harness.models import Recommender
from harness.split import Split

__all__ = ["remember_trial", "score_on_validation", "task", "trial_tags"]

#: The Optuna trial of the job about to run (set by :func:`remember_trial`, in this process).
_TRIAL: dict[str, Any] = {}
#: Dataset, split and tracker, loaded once per sweep process (every trial runs in it).
_CACHE: dict[str, Any] = {}


def remember_trial(cfg: DictConfig, trial: Any) -> None:
    """The sweeper's ``custom_search_space`` hook, called just before each job: keep the trial
    (its number names the MLflow run and the curve step; a failure is recorded on it)."""
    _TRIAL["trial"] = trial


def score_on_validation(
    dataset: Dataset,
    split: Split,
    name: str,
    model: Recommender,
    suite: MetricSuite,
    objective: str,
    evaluate: Evaluator = metrics.evaluate,
) -> tuple[float, dict[str, float], dict[str, float]]:
    """Fit ``model`` on ``split.train``, score it on ``split.valid``; return the objective, every
    validation metric and the seconds per step.

    Reads only ``split.train`` and ``split.valid``: neither ``split.test`` nor ``dataset.frame``
    is touched (the validation catalog is the items of train and validation).
    """
    from harness.tune import validation_view

    vsplit = validation_view(split)
    frame = pd_concat(vsplit.train, vsplit.test)
    vdataset = replace(dataset, name=f"{dataset.name}:validation", frame=frame)  # side inputs kept
    names = tuple(suite.names) + (() if objective in suite.names else (objective,))
    vsuite = replace(suite, names=names)  # lists of metrics.k, as in the test run
    with tempfile.TemporaryDirectory(prefix="tune-trial-") as tmp:
        result = run_models(
            vdataset, vsplit, {name: model}, vsuite, Path(tmp), progress=False, evaluate=evaluate
        )
    outcome = result.outcomes[name]
    if not outcome.ok or outcome.evaluation is None:
        raise RuntimeError(outcome.error or "the model failed")
    summary = {k: float(v) for k, v in outcome.evaluation.summary.items()}
    value = summary[objective]
    if not math.isfinite(value):
        raise ValueError(f"objective {objective} is {value} on validation")
    return value, summary, dict(outcome.seconds)


def pd_concat(*frames: Any) -> Any:
    """Rows of ``frames`` one after the other (a fresh index)."""
    import pandas as pd

    return pd.concat(frames, ignore_index=True)


def _data(cfg: DictConfig) -> tuple[Dataset, Split]:
    """The dataset and its split (split cache under ``runs_dir``), loaded once per process."""
    from harness.datasets import load_dataset
    from harness.split import load_or_make_split

    dataset_node = OmegaConf.to_container(cfg.dataset, resolve=True)
    split_node = OmegaConf.to_container(cfg.split, resolve=True)
    key = json.dumps([dataset_node, split_node], sort_keys=True, default=str)
    if _CACHE.get("data_key") != key:
        assert isinstance(dataset_node, dict) and isinstance(split_node, dict)
        dataset = load_dataset({str(k): v for k, v in dataset_node.items()})
        params = {str(k): v for k, v in split_node.items()}
        method = params.pop("method")
        split = load_or_make_split(
            dataset.frame, method, params, Path(cfg.runs_dir) / "splits", digest=dataset.sha256
        )
        _CACHE.update(data_key=key, data=(dataset, split))
    data: tuple[Dataset, Split] = _CACHE["data"]
    return data


def _tracker(job: Mapping[str, Any]) -> Any:
    """The tuning experiment's tracker (None without tracking), one per process."""
    if not job.get("tracking_uri") or not job.get("parent_run"):
        return None
    key = (job["tracking_uri"], job["experiment"])
    if _CACHE.get("tracker_key") != key:
        from harness.tracking import Tracker

        tracker = Tracker(str(job["tracking_uri"]), str(job["experiment"]), job.get("artifacts"))
        _CACHE.update(tracker_key=key, tracker=tracker)
    return _CACHE["tracker"]


def _build(cfg: DictConfig, name: str) -> Recommender:
    """Model ``name`` as configured (the sweeper has put this trial's parameters in)."""
    from harness.cli import build_models

    node = OmegaConf.to_container(cfg.model[name], resolve=True)
    engine = OmegaConf.to_container(cfg.engine, resolve=True) if cfg.get("engine") else {}
    # debug: a build error fails the trial with its own message
    sub = OmegaConf.create({"model": {name: node}, "engine": engine, "debug": True})
    models, _ = build_models(sub, progress=False)
    return models[name]


def _one_line(err: BaseException) -> str:
    """``Type: first line`` of the innermost cause (Hydra wraps a constructor's own error)."""
    while err.__cause__ is not None:
        err = err.__cause__
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


class TrialError(RuntimeError):
    """A trial's model failed; the sweeper records the trial as failed and goes on."""


def trial_tags(model: str, study: str, number: int) -> dict[str, str]:
    """The tags of a trial's MLflow run (what :mod:`harness.tune` finds it by)."""
    return {
        "harness.kind": "tuning-trial",
        "tune.model": model,
        "tune.study": study,
        "tune.trial": str(number),
    }


def task(cfg: DictConfig) -> float:
    """One trial: build, fit on train, score on validation, log the MLflow run; return the
    objective. A failed trial raises :class:`TrialError` (the sweeper records it as failed);
    its one-line error is printed, on the Optuna trial (user attribute ``error``) and on the
    MLflow run (tag ``error``)."""
    from harness.cli import engine_of, suite_of

    plain = OmegaConf.to_container(cfg.trial, resolve=True)
    assert isinstance(plain, dict)
    job = {str(k): v for k, v in plain.items()}
    name, objective = str(job["model"]), str(job["objective"])
    trial = _TRIAL.pop("trial", None)
    number = trial.number if trial is not None else -1
    params = {
        str(k): v
        for k, v in (OmegaConf.to_container(cfg.model[name], resolve=True) or {}).items()  # type: ignore[union-attr]
        if str(k) in set(job.get("tuned", []))
    }
    tracker = _tracker(job)
    run_id = None
    if tracker is not None:
        run_id = tracker.start(
            f"{name} trial {number}",
            tags=trial_tags(name, str(job["study"]), number),
            parent=str(job["parent_run"]),
        )
        tracker.log(run_id, params=params)
        if trial is not None:  # the tuning parent's best.run and the report link to it
            trial.set_user_attr("mlflow_run", run_id)
    status = "FAILED"
    try:
        dataset, split = _data(cfg)
        with engine_of(cfg) as evaluate:
            value, summary, seconds = score_on_validation(
                dataset, split, name, _build(cfg, name), suite_of(cfg), objective, evaluate
            )
        status = "FINISHED"
    except Exception as err:
        message = _one_line(err)
        print(f"trial {number} of {name} failed: {message}", flush=True)
        if trial is not None:
            trial.set_user_attr("error", message)
        if run_id is not None:
            tracker.log(run_id, tags={"error": message})
        raise TrialError(message) from None
    except BaseException:
        status = "KILLED"
        raise
    finally:
        if run_id is not None and status != "FINISHED":
            tracker.finish(run_id, status)
    if run_id is not None:
        tracker.log(
            run_id,
            metrics={
                **{f"valid.{k}": v for k, v in summary.items()},
                **{f"seconds.{k}": v for k, v in seconds.items()},
            },
        )
        tracker.finish(run_id)
        _log_curve(tracker, str(job["parent_run"]), objective, number, value)
    print(f"trial {number} of {name}: validation {objective} {value:.4f}", flush=True)
    return value


def _log_curve(tracker: Any, parent: str, objective: str, step: int, value: float) -> None:
    """The objective of trial ``step`` on the parent run: MLflow draws the validation curve."""
    from mlflow.entities import Metric

    from harness.tracking import metric_key

    now = int(time.time() * 1000)
    tracker.client.log_batch(
        parent, metrics=[Metric(metric_key(f"valid.{objective}"), value, now, step)]
    )


def main() -> None:
    """Hydra entry point; ``--config-dir``/``--config-name`` name the study's config file."""
    import logging

    import hydra

    from harness.progress import NOISY_LOGGERS, quiet

    # the module, not __main__: the sweeper's hook (remember_trial) fills harness.trial._TRIAL
    from harness.trial import task as trial_task

    quiet()  # MLflow's and alembic's set-up lines (the sweep's own are printed by Hydra)
    for name in (*NOISY_LOGGERS, "alembic.runtime.plugins"):
        logging.getLogger(name).setLevel(logging.WARNING)
    hydra.main(version_base=None, config_path=None, config_name=None)(trial_task)()


if __name__ == "__main__":
    main()
