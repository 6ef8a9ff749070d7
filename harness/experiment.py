"""One offline evaluation: split → fit → recommend → metrics, per model, results saved locally.

Typed inputs only (no Hydra here). Each model runs in isolation: a model that fails to fit or
recommend is recorded as failed and the others carry on. Results are written to a local folder
before anything is sent to MLflow, so a tracking failure never loses them.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

import metrics
from harness.datasets import Dataset
from harness.models import Recommender, padding_mask
from harness.split import Split

__all__ = ["ExperimentResult", "MetricSuite", "ModelOutcome", "qrels_from_test", "run_models"]


@dataclass(frozen=True)
class MetricSuite:
    """What to compute: list length ``k``, metric names, relevance rule and conventions."""

    k: int
    names: tuple[str, ...]
    relevance: str = "binary"
    relevance_threshold: float = 1.0
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k <= 0:
            raise ValueError(f"'metrics.k' must be a positive int (got {self.k!r})")
        if self.relevance not in ("binary", "rating"):
            raise ValueError(
                f"'metrics.relevance' must be 'binary' or 'rating' (got {self.relevance!r})"
            )
        for name in self.names:  # fail before any model runs
            spec = metrics.parse(name)
            if spec.k is not None and spec.k > self.k:
                raise ValueError(
                    f"metric {name!r} needs lists of {spec.k} items but 'metrics.k' is {self.k}; "
                    f"raise metrics.k or lower the cutoff"
                )
        metrics.resolve_options(**self.evaluate_options())

    def evaluate_options(self) -> dict[str, Any]:
        """Keyword options for :func:`metrics.evaluate`."""
        threshold = self.relevance_threshold if self.relevance == "rating" else 1.0
        return {**self.options, "relevance_threshold": threshold}


@dataclass
class ModelOutcome:
    """One model's result, or its failure."""

    name: str
    evaluation: metrics.Evaluation | None = None
    recommendations: pd.DataFrame | None = None
    error: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the model was fitted, ranked and evaluated."""
        return self.error is None


@dataclass
class ExperimentResult:
    """Everything one run produced; ``folder`` holds the same on disk."""

    dataset: Dataset
    split: Split
    suite: MetricSuite
    outcomes: dict[str, ModelOutcome]
    folder: Path
    options: dict[str, Any] = field(default_factory=dict)

    def table(self) -> pd.DataFrame:
        """Model × metric summary (failed models as a row of NaN)."""
        rows = {
            name: (o.evaluation.summary if o.evaluation else dict.fromkeys(self.suite.names))
            for name, o in self.outcomes.items()
        }
        return pd.DataFrame.from_dict(rows, orient="index", columns=list(self.suite.names))

    @property
    def failed(self) -> list[str]:
        """Names of models that failed."""
        return [n for n, o in self.outcomes.items() if not o.ok]


def qrels_from_test(test: pd.DataFrame, suite: MetricSuite) -> pd.DataFrame:
    """Truth table from test events: relevance 1 per (user, item), or the (max) rating."""
    if suite.relevance == "rating":
        if "rating" not in test.columns:
            raise ValueError("metrics.relevance=rating needs a 'rating' column in the data")
        values = test["rating"].astype("float64")
    else:
        values = pd.Series(1.0, index=test.index)
    frame = pd.DataFrame({"user": test["user"], "item": test["item"], "relevance": values})
    return frame.groupby(["user", "item"], as_index=False, sort=True)["relevance"].max()


def _recommendations(users: np.ndarray, ids: np.ndarray, scores: np.ndarray) -> pd.DataFrame:
    """Long table (user, rank, item, score) of the model's lists, padding removed."""
    n, k = ids.shape
    keep = ~padding_mask(scores).ravel()
    return pd.DataFrame(
        {
            "user": np.repeat(users, k)[keep],
            "rank": np.tile(np.arange(1, k + 1), n)[keep],
            "item": ids.ravel()[keep],
            "score": scores.ravel()[keep],
        }
    )


def _evaluate(
    recs: pd.DataFrame, qrels: pd.DataFrame, split: Split, suite: MetricSuite, catalog: np.ndarray
) -> metrics.Evaluation:
    # The model's order is the ranking: score by rank so no tie rule can reorder its list.
    run = pd.DataFrame({"user": recs["user"], "item": recs["item"], "score": -recs["rank"]})
    run = run.astype({"item": qrels["item"].dtype, "user": qrels["user"].dtype})
    return metrics.evaluate(
        qrels,
        run,
        list(suite.names),
        train=split.train,
        catalog=catalog,
        **suite.evaluate_options(),
    )


def run_models(
    dataset: Dataset,
    split: Split,
    models: Mapping[str, Recommender],
    suite: MetricSuite,
    folder: Path,
    *,
    progress: bool = True,
) -> ExperimentResult:
    """Fit, rank and evaluate every model on ``split``; write results under ``folder``."""
    qrels = qrels_from_test(split.test, suite)
    users = np.sort(qrels["user"].unique())
    catalog = pd.unique(dataset.frame["item"])
    outcomes: dict[str, ModelOutcome] = {}
    bar = tqdm(models.items(), desc="models", unit="model", disable=not progress)
    for name, model in bar:
        bar.set_postfix_str(name)
        outcome = ModelOutcome(name)
        try:
            t0 = time.perf_counter()
            model.fit(split.train)
            t1 = time.perf_counter()
            ids, scores = model.recommend(users, suite.k)
            t2 = time.perf_counter()
            outcome.recommendations = _recommendations(users, np.asarray(ids), np.asarray(scores))
            outcome.evaluation = _evaluate(outcome.recommendations, qrels, split, suite, catalog)
            outcome.seconds = {"fit": t1 - t0, "rank": t2 - t1, "metrics": time.perf_counter() - t2}
        except Exception as err:
            outcome.error = f"{type(err).__name__}: {err}"
            (folder / name).mkdir(parents=True, exist_ok=True)
            (folder / name / "error.txt").write_text(traceback.format_exc())
        outcomes[name] = outcome
    options = metrics.resolve_options(**suite.evaluate_options()).as_dict()
    result = ExperimentResult(dataset, split, suite, outcomes, folder, options)
    save(result)
    return result


def save(result: ExperimentResult) -> None:
    """Write the summary, split stats and each model's per-user metrics and top-k lists."""
    folder = result.folder
    folder.mkdir(parents=True, exist_ok=True)
    result.table().to_csv(folder / "summary.csv", index_label="model")
    (folder / "split_stats.json").write_text(json.dumps(result.split.stats, indent=2, default=str))
    (folder / "metric_options.json").write_text(json.dumps(result.options, indent=2))
    for name, outcome in result.outcomes.items():
        sub = folder / name
        sub.mkdir(parents=True, exist_ok=True)
        info: dict[str, Any] = {
            "model": name,
            "ok": outcome.ok,
            "error": outcome.error,
            "seconds": outcome.seconds,
        }
        if outcome.evaluation is not None:
            outcome.evaluation.per_user.to_parquet(sub / "per_user.parquet")
            info["summary"] = outcome.evaluation.summary
            info["counts"] = outcome.evaluation.counts
        if outcome.recommendations is not None:
            outcome.recommendations.to_parquet(sub / "topk.parquet", index=False)
        (sub / "result.json").write_text(json.dumps(info, indent=2, default=str))
