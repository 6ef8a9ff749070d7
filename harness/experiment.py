"""One offline evaluation: split → fit → recommend → metrics, per model, results saved locally.

Typed inputs only (no Hydra here). Each model runs in isolation: a model that fails to fit or
recommend is recorded as failed and the others carry on. Results are written to a local folder
before anything is sent to MLflow, so a tracking failure never loses them.
"""

from __future__ import annotations

import json
import numbers
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from tqdm.auto import tqdm

import metrics
from harness import progress as stage_log
from harness.data import ITEM, id_codes, known_codes, plain
from harness.datasets import Dataset
from harness.folders import checkpoint
from harness.models import (
    PAD_ITEM_INT,
    PAD_ITEM_OBJECT,
    Recommender,
    checked_lists,
    padding_mask,
)
from harness.split import Split
from metrics.checks import require_choice, require_int

#: A metric engine: ``metrics.evaluate`` or one with the same signature and results.
Evaluator = Callable[..., metrics.Evaluation]

__all__ = [
    "ExperimentResult",
    "MetricSuite",
    "ModelOutcome",
    "load_model",
    "qrels_from_test",
    "run_models",
    "save_model",
]


@dataclass(frozen=True)
class MetricSuite:
    """What to compute: list length ``k``, metric names, relevance rule and conventions."""

    k: int
    names: tuple[str, ...]
    relevance: str = "binary"
    relevance_threshold: float = 1.0
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require_int("metrics.k", self.k)
        require_choice("metrics.relevance", self.relevance, ("binary", "rating"))
        for name in self.names:  # fail before any model runs
            try:
                spec = metrics.parse(name)
            except ValueError as err:
                raise ValueError(f"metrics.names: {err}") from None
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
    #: CPU seconds and the process's peak MB after each part (the run's stage table only)
    cpu: dict[str, float] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    saved: bool = False  # its files are in the results folder (save_model)
    reused_from: str | None = None  # when resumed: the start of the run that computed it

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
    candidates: dict[str, Any] = field(default_factory=lambda: {"candidates.kind": "full"})

    def table(self) -> pd.DataFrame:
        """Model × metric summary (failed models as a row of NaN)."""
        failed = dict.fromkeys(self.suite.names, float("nan"))
        rows = {
            name: (o.evaluation.summary if o.evaluation else failed)
            for name, o in self.outcomes.items()
        }
        return pd.DataFrame.from_dict(rows, orient="index", columns=list(self.suite.names))

    @property
    def failed(self) -> list[str]:
        """Names of models that failed."""
        return [n for n, o in self.outcomes.items() if not o.ok]


def qrels_from_test(test: pd.DataFrame, relevance: str) -> pd.DataFrame:
    """Truth table from test events: relevance 1 per (user, item), or the (max) rating
    (``relevance``: ``metrics.relevance``, binary or rating)."""
    if relevance == "rating":
        if "rating" not in test.columns:
            raise ValueError("metrics.relevance=rating needs a 'rating' column in the data")
        values = test["rating"].astype("float64")
    else:
        values = pd.Series(1.0, index=test.index)
    if known_codes(test["user"]) is None or known_codes(test["item"]) is None:
        frame = pd.DataFrame({"user": test["user"], "item": test["item"], "relevance": values})
        return frame.groupby(["user", "item"], as_index=False, sort=True)["relevance"].max()
    # text ids the split already coded: group on codes into sorted ids (no string hashed)
    ucodes, users = id_codes(test["user"])
    icodes, items = id_codes(test["item"])
    key = ucodes * len(items) + icodes
    order = np.argsort(key, kind="stable")
    key = key[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else key
    best = np.fmax.reduceat(values.to_numpy()[order], starts) if len(key) else np.zeros(0)
    return pd.DataFrame(
        {
            "user": users.array.take(key[starts] // len(items)),
            "item": items.array.take(key[starts] % len(items)),
            "relevance": best.astype(np.float64),
        }
    )


def _recommendations(
    users: np.ndarray, ids: np.ndarray, scores: np.ndarray, catalog: np.ndarray | None = None
) -> pd.DataFrame:
    """Long table (user, rank, item, score) of the model's lists, padding removed; with
    ``catalog``, ``ids`` are positions in it (:meth:`BaseRecommender.rank_positions`)."""
    n, k = ids.shape
    keep = ~padding_mask(scores).ravel()
    at = ids.ravel()[keep]
    return pd.DataFrame(
        {
            "user": _take(users, np.repeat(np.arange(n), k)[keep]),
            "rank": np.tile(np.arange(1, k + 1), n)[keep],
            "item": at if catalog is None else _take(catalog, at),
            "score": scores.ravel()[keep],
        }
    )


def _take(values: np.ndarray, at: np.ndarray) -> Any:
    """``values[at]``; Python strings as pandas' ``str`` column taken from one Arrow copy of
    ``values`` (pandas would otherwise encode each of the ``len(at)`` copies: 10M list rows
    of 1M users, 3.5 -> 0.4 s CPU, measured)."""
    if values.dtype == object and len(values):
        try:
            text = pa.array(values, type=pa.large_string())
        except (pa.ArrowException, TypeError, ValueError):  # not all str: pandas decides
            return values[at]
        if text.null_count == 0:
            return pd.array(text.take(at), dtype=pd.StringDtype(na_value=np.nan))
    return values[at]


def _candidate_run(
    model: Recommender, candidates: pd.DataFrame, users: np.ndarray
) -> tuple[pd.DataFrame, int]:
    """Model scores of each user's candidates as a run (user, item, score); rows the model cannot
    score (NaN) are left out and counted."""
    score_items = getattr(model, "score_items", None)
    if score_items is None:
        raise TypeError(
            f"{type(model).__name__} cannot score given candidates: it has no score_items method"
        )
    cand = candidates[candidates["user"].isin(users)].sort_values(["user", "item"], kind="stable")
    codes = pd.Index(users).get_indexer(cand["user"])
    width = int(np.bincount(codes, minlength=len(users)).max()) if len(cand) else 0
    col = cand.groupby("user", sort=False).cumcount().to_numpy()
    text = not pd.api.types.is_integer_dtype(cand["item"].dtype)  # pandas 3 ``str`` too
    items = np.empty((len(users), width), dtype=object if text else np.int64)
    items[:] = PAD_ITEM_OBJECT if items.dtype == object else PAD_ITEM_INT
    items[codes, col] = cand["item"].to_numpy(dtype=object if text else np.int64)
    scores = np.asarray(score_items(users, items), dtype=np.float64)
    real = np.zeros(items.shape, dtype=bool)
    real[codes, col] = True
    ok = real & np.isfinite(scores)
    rows, cols = np.nonzero(ok)
    run = pd.DataFrame(
        {"user": users[rows], "item": items[rows, cols], "score": scores[rows, cols]}
    )
    return run, int(real.sum() - ok.sum())


def _top_of(
    run: pd.DataFrame, k: int, options: metrics.Options, ids: pd.Series | None = None
) -> pd.DataFrame:
    """The k best rows per user as a long table, in the metric library's order: score
    descending, ties by ``options.tie_break`` (ids compared as ``options.id_order`` says;
    ``input_order``: the rows' order). ``ids``: the rows' item ids as the metrics will read
    them (the truth's type, :func:`_in_truth_ids`) when they differ from ``run``'s."""
    ordered = run.reset_index(drop=True)
    item = ordered["item"] if ids is None else ids.reset_index(drop=True)
    if options.id_order == "string" and pd.api.types.is_integer_dtype(item.dtype):
        item = item.astype(str)
    tie = np.arange(len(ordered)) if options.tie_break == "input_order" else item
    ordered = ordered.assign(_tie=tie).sort_values(
        ["user", "score", "_tie"],
        ascending=[True, False, options.tie_break != "item_desc"],
        kind="stable",
    )
    ordered = ordered.assign(rank=ordered.groupby("user").cumcount().to_numpy() + 1)
    return ordered[ordered["rank"] <= k][["user", "rank", "item", "score"]].reset_index(drop=True)


def model_order_holds(
    options: metrics.Options, integer_ids: bool, integer_list: bool | None = None
) -> bool:
    """True when a model's top-k list (score descending, ties by ascending item id) is already
    the top-k the metric conventions ask for: ``tie_break`` ``item_asc`` with ids in the order
    the model sorts them, or ``input_order`` (the model's list is the input), and ``ndcg_ties``
    ``ordered``. Otherwise ties at the k-th score decide which items are in the list.
    ``integer_ids``: the truth's ids are integers; ``integer_list``: the list's are (default:
    the same kind). Lists of text ids against integer truth (a score file with one non-integer
    id) sort ties as text ("10" before "9"), which ``item_asc`` does not ask for."""
    if options.ndcg_ties != "ordered" or options.tie_break == "item_desc":
        return False
    if options.tie_break == "input_order":
        return True
    if integer_list is not None and integer_list != integer_ids:
        return False
    return not (options.id_order == "string" and integer_ids)


def _rating_metrics(
    model: Recommender, split: Split, names: list[str], suite: MetricSuite, evaluate: Evaluator
) -> tuple[metrics.Evaluation | None, str | None]:
    """RMSE/MAE of the model's predicted ratings on the test pairs, or why they are skipped."""
    predict = getattr(model, "predict_ratings", None)
    if predict is None:
        return None, f"{', '.join(names)} skipped: {type(model).__name__} does not predict ratings"
    if "rating" not in split.test.columns:
        return None, f"{', '.join(names)} skipped: the test data has no ratings"
    pairs = split.test.groupby(["user", "item"], as_index=False, sort=True)["rating"].mean()
    predicted = np.asarray(predict(pairs["user"].to_numpy(), pairs["item"].to_numpy()), float)
    truth = pairs.rename(columns={"rating": "relevance"})
    run = pairs[["user", "item"]].assign(score=predicted)
    return evaluate(truth, run, names, **suite.evaluate_options()), None


def _evaluate(
    model: Recommender,
    outcome: ModelOutcome,
    qrels: pd.DataFrame,
    split: Split,
    suite: MetricSuite,
    catalog: int,
    candidates: pd.DataFrame | None,
    evaluate: Evaluator,
) -> None:
    """Rank (full catalog or candidates) and compute every metric of the suite for one model.

    Score metrics (AUC family) are computed over every candidate the model scored: with
    ``candidates`` over those; with the full catalog over every ranked item when the model scores
    the catalog (``recommend_with_auc``), else over its top-k lists and their scores only (said
    in ``outcome.notes``); ties count 1/2 in every case. ``outcome.info["auc_scope"]`` is
    ``candidates``, ``catalog`` or ``topk``.
    """
    users = np.sort(qrels["user"].unique())
    score_names = [n for n in suite.names if metrics.parse(n).definition.kind == "score"]
    auc_counts = None
    t0, c0 = time.perf_counter(), time.process_time()
    options = metrics.resolve_options(**suite.evaluate_options())
    tied = None  # lists with every item tied with the k-th, when the conventions need them
    if candidates is None:
        outcome.recommendations, auc_counts = _rank_catalog(
            model, users, qrels, suite, score_names, outcome
        )
        recs = outcome.recommendations
        scored = recs[["user", "item", "score"]]  # the model's scores: AUC counts ties as 1/2
        integer_ids = pd.api.types.is_integer_dtype(qrels["item"].dtype)
        integer_list = pd.api.types.is_integer_dtype(recs["item"].dtype)
        if model_order_holds(options, integer_ids, integer_list):
            # The model's order is the ranking: score by rank so no tie rule can reorder it.
            run = pd.DataFrame({"user": recs["user"], "item": recs["item"], "score": -recs["rank"]})
        else:
            tied = _with_ties(model, recs, suite.k)
            # ties ordered by the ids the metrics read (the truth's type); the lists keep the
            # model's own ids
            ids = None if integer_list == integer_ids else _in_truth_ids(tied, qrels, split)
            outcome.recommendations = _top_of(
                tied, suite.k, options, None if ids is None else ids["item"]
            )
            run = scored = outcome.recommendations[["user", "item", "score"]]
    else:
        run, unscored = _candidate_run(model, candidates, users)
        outcome.recommendations = _top_of(run, suite.k, options)
        outcome.info["candidates_unscored"] = unscored
        if score_names:
            outcome.info["auc_scope"] = "candidates"
    if candidates is None and not _scores_catalog(model):  # lists from elsewhere: items outside?
        listed = (outcome.recommendations if tied is None else tied)["item"]
        catalog = _catalog_with(listed, split, catalog, outcome)
    t1, c1 = time.perf_counter(), time.process_time()
    outcome.peaks["rank"] = stage_log.peak_mb()
    if len(run) == 0:  # metrics.evaluate would say only "run is empty"
        raise ValueError(
            f"the model recommended no item to any of the {len(users):,} test users (every list "
            f"was empty or padding): nothing to evaluate"
        )
    run = _in_truth_ids(run, qrels, split)
    rating = [n for n in suite.names if metrics.parse(n).definition.kind == "rating"]
    ranking = [n for n in suite.names if n not in rating]
    asked = [n for n in ranking if candidates is not None or n not in score_names] or ranking
    ev = evaluate(qrels, run, asked, train=split.train, catalog=catalog, **suite.evaluate_options())
    if tied is not None and options.ndcg_ties == "average":
        # tie groups averaged over their whole extent, past the k-th item (as torchmetrics and
        # scikit-learn do); metrics without a cutoff keep the k-item lists
        cut = [n for n in asked if metrics.parse(n).k is not None]
        if cut:
            tied = _in_truth_ids(tied, qrels, split)
            whole = evaluate(
                qrels, tied, cut, train=split.train, catalog=catalog, **suite.evaluate_options()
            )
            ev = _joined(ev, whole, ranking)
    if auc_counts is not None:
        ev = _with_scores(ev, _catalog_scores(auc_counts, users, score_names, ev.options), ranking)
    elif candidates is None and score_names:
        scored = _in_truth_ids(scored, qrels, split)
        top = evaluate(qrels, scored, score_names, **suite.evaluate_options())
        ev = _with_scores(ev, top, ranking)
    if rating:
        rated, note = _rating_metrics(model, split, rating, suite, evaluate)
        if note:
            outcome.notes.append(note)
        extra = rated.per_user if rated else pd.DataFrame(columns=rating, dtype=float)
        ev = metrics.Evaluation(
            summary={
                n: ev.summary[n] if n in ranking else rated.summary[n] if rated else float("nan")
                for n in suite.names
            },
            per_user=ev.per_user.join(extra, how="left")[list(suite.names)],
            options=ev.options,
            counts=ev.counts | (rated.counts if rated else {}),
        )
    outcome.evaluation = ev
    outcome.seconds |= {"rank": t1 - t0, "metrics": time.perf_counter() - t1}
    outcome.cpu |= {"rank": c1 - c0, "metrics": time.process_time() - c1}
    outcome.peaks["metrics"] = stage_log.peak_mb()


_SPLIT_ITEMS: weakref.WeakKeyDictionary[Split, pd.Index] = weakref.WeakKeyDictionary()


def _split_items(split: Split) -> pd.Index:
    """The distinct item ids of the split's parts (training, validation, test), found once
    per split (every model whose lists come from elsewhere asks)."""
    items = _SPLIT_ITEMS.get(split)
    if items is None:
        parts = [p["item"] for p in (split.train, split.valid, split.test) if p is not None]
        items = _SPLIT_ITEMS[split] = pd.Index(pd.unique(pd.concat(parts, ignore_index=True)))
    return items


def _as_text(index: pd.Index) -> pd.Index:
    """Ids as ``str`` (an integer id as its decimal text): how ids of two types compare."""
    return pd.Index(index.astype(str).to_numpy(dtype=object))


def outside_note(n_outside: int, example: object, size: int, catalog: int) -> str:
    """The run's note on listed items in no part of the split (both engines say the same)."""
    if size > catalog:
        how = (
            f"counted into the catalog of coverage and gini ({size:,} items instead of the "
            f"dataset's {catalog:,})"
        )
    else:
        how = (
            f"the catalog of coverage and gini stays the dataset's {catalog:,} items (which "
            "holds items of events the split dropped or filtered: they may be among them)"
        )
    return (
        f"{n_outside:,} recommended item(s) are in no part of the split (training, validation, "
        f"test), e.g. {example!r}: ranked as misses; {how}"
    )


def _catalog_with(items: pd.Series, split: Split, catalog: int, outcome: ModelOutcome) -> int:
    """The catalog of ``coverage@k``/``gini@k`` for lists of ``items``: the dataset's
    ``catalog`` items, joined by the listed items that no part of the split holds (a score
    file's or a registry model's items outside the data: ranked as misses, never dropped). The
    dataset's items outside the split's parts (only in dropped or filtered events) are known by
    their count only and may be among them, so the size is ``max(catalog, |parts' items ∪
    listed items|)``. Counted in ``outcome.info`` (``items_outside_data``, ``catalog_items``)
    with a note; ids of two types (text and integers) compare as text."""
    listed = pd.Index(pd.unique(items))
    known = _split_items(split)
    if pd.api.types.is_integer_dtype(known.dtype) != pd.api.types.is_integer_dtype(listed.dtype):
        known, listed = _as_text(known), _as_text(listed)
    outside = listed[known.get_indexer(listed) < 0]
    if not len(outside):
        return catalog
    size = max(catalog, len(known) + len(outside))
    outcome.info |= {"items_outside_data": len(outside), "catalog_items": size}
    example = plain(outside.min())  # the smallest: the Spark engine names the same one
    outcome.notes.append(outside_note(len(outside), example, size, catalog))
    return size


def _in_truth_ids(run: pd.DataFrame, qrels: pd.DataFrame, split: Split) -> pd.DataFrame:
    """``run`` with the truth's id dtypes. Text item ids against integer truth ids (a score
    file with a non-integer id compares its ids as text, ``PrecomputedScores``): an id whose
    text is that of an item of the split's parts becomes that item, any other (outside the
    data) a distinct integer above every id of those parts: a miss, counted as one item."""
    dtype = qrels["item"].dtype
    item = run["item"]
    if not pd.api.types.is_integer_dtype(dtype) or pd.api.types.is_integer_dtype(item.dtype):
        return run.astype({"item": dtype, "user": qrels["user"].dtype})
    codes, uniques = pd.factorize(item)
    known = _split_items(split)
    at = _as_text(known).get_indexer(_as_text(pd.Index(uniques)))
    above = max(int(known.max()) if len(known) else 0, 0) + np.cumsum(at < 0)
    ids = np.where(at >= 0, known.to_numpy(dtype=np.int64)[np.maximum(at, 0)], above)
    return run.assign(item=ids[codes]).astype({"item": dtype, "user": qrels["user"].dtype})


def _rank_catalog(
    model: Recommender,
    users: np.ndarray,
    qrels: pd.DataFrame,
    suite: MetricSuite,
    score_names: list[str],
    outcome: ModelOutcome,
) -> tuple[pd.DataFrame, metrics.scores.AucCounts | None]:
    """Top-k over the full catalog as a long table (:func:`_recommendations`), with
    catalog-wide AUC counts when score metrics are asked and the model can count them while
    ranking; the AUC scope is recorded in ``outcome``. Models with positions (a
    ``position_ids_`` that is not ``None``: those scoring the catalog, ``PrecomputedScores``)
    give their lists as positions in those ids, so text ids are not copied per list entry."""
    rank_positions = getattr(model, "rank_positions", None)  # duck-typed, as in harness.models
    catalog = None if rank_positions is None else getattr(model, "position_ids_", None)
    if not score_names or not _scores_catalog(model):
        if score_names:
            outcome.info["auc_scope"] = "topk"
            outcome.notes.append(
                f"{', '.join(score_names)} over each user's top-{suite.k} list only: "
                f"{type(model).__name__} does not score the whole catalog (a user whose list "
                "is all hits or has none gets NaN)"
            )
        return _lists(model, users, suite.k), None
    relevant = _relevant_pairs(qrels, suite)
    at, scores, counts = model.recommend_with_auc(  # type: ignore[attr-defined]
        users,
        suite.k,
        relevant["user"].to_numpy(),
        relevant["item"].to_numpy(),
        pooled=any(metrics.parse(n).metric == "global_auc" for n in score_names),
        **({} if catalog is None else {"positions": True}),
    )
    outcome.info["auc_scope"] = "catalog"
    outcome.info["auc_relevant_unranked"] = len(relevant) - int(counts.n_pos.sum())
    return _recommendations(users, at, scores, catalog), counts


def _lists(model: Recommender, users: np.ndarray, k: int) -> pd.DataFrame:
    """The model's top-``k`` lists of ``users`` as a long table (:func:`_recommendations`), from
    positions when the model has them (text ids not copied per entry)."""
    rank_positions = getattr(model, "rank_positions", None)  # duck-typed, as in harness.models
    catalog = None if rank_positions is None else getattr(model, "position_ids_", None)
    if rank_positions is not None and catalog is not None:
        at, scores = rank_positions(users, k)
    else:
        at, scores = model.recommend(users, k)
    return _recommendations(users, *checked_lists(model, users, k, at, scores), catalog)


def _with_ties(model: Recommender, recs: pd.DataFrame, k: int) -> pd.DataFrame:
    """Rows (user, item, score) of each user's top-``k`` and of every item tied with its k-th
    score, so a tie rule other than the model's can choose among them: lists of users with
    ``k`` entries are fetched again twice as deep until the last score falls below the k-th
    or the catalog runs out."""
    rows = recs[["user", "item", "score"]]
    kth = recs.loc[recs["rank"] == k, ["user", "score"]]
    done, depth = [rows[~rows["user"].isin(kth["user"])]], 2 * k
    stats = getattr(model, "stats_", None)
    counts = dict(stats) if isinstance(stats, dict) else None  # of the ranking of every user
    while len(kth):
        deeper = _lists(model, kth["user"].to_numpy(), depth)
        bound = deeper["user"].map(pd.Series(kth["score"].to_numpy(), index=kth["user"]))
        deeper = deeper[deeper["score"] >= bound]
        last = deeper.groupby("user", sort=False)["rank"].max()
        open_ = last[last == depth].index  # ties may go on past this depth
        done.append(deeper.loc[~deeper["user"].isin(open_), ["user", "item", "score"]])
        kth, depth = kth[kth["user"].isin(open_)], 2 * depth
    if counts is not None:  # a model's counts describe the lists, not the deeper fetches
        model.stats_ = counts  # type: ignore[attr-defined]
    return pd.concat(done, ignore_index=True)


def _scores_catalog(model: Recommender) -> bool:
    """True when the model ranks the whole catalog and can count AUC over it while ranking."""
    return bool(getattr(model, "scores_catalog", False)) and hasattr(model, "recommend_with_auc")


def _relevant_pairs(qrels: pd.DataFrame, suite: MetricSuite) -> pd.DataFrame:
    """The (user, item) pairs of ``qrels`` relevant under the suite's threshold."""
    threshold = metrics.resolve_options(**suite.evaluate_options()).relevance_threshold
    return qrels.loc[qrels["relevance"] >= threshold, ["user", "item"]]


def _catalog_scores(
    counts: metrics.scores.AucCounts, users: np.ndarray, names: list[str], options: dict[str, Any]
) -> metrics.Evaluation:
    """The score metrics ``names`` of ``users`` from their catalog-wide AUC ``counts``."""
    weight = options.get("gauc_weight", "candidates")  # the same convention as evaluate's
    summary, per_user = {}, {}
    for name in names:
        metric = metrics.parse(name).metric
        per_user[name], summary[name] = metrics.scores.score_metric(
            metric, counts, gauc_weight=weight
        )
    undefined = int(np.isnan(metrics.scores.user_auc(counts)).sum())
    frame = pd.DataFrame(per_user, index=pd.Index(users, name="user"))
    return metrics.Evaluation(summary, frame, options, {"auc_undefined_users": undefined})


def _joined(
    ev: metrics.Evaluation, other: metrics.Evaluation, order: list[str]
) -> metrics.Evaluation:
    """``ev`` with the metrics of ``other`` (summary, per-user columns) taken from it; keys and
    columns in ``order``."""
    names = list(other.summary)
    summary = ev.summary | other.summary
    per_user = ev.per_user.drop(columns=[n for n in names if n in ev.per_user.columns])
    per_user = per_user.join(other.per_user[names], how="left")
    present = [n for n in order if n in summary]  # score metrics may join later
    return replace(ev, summary={n: summary[n] for n in present}, per_user=per_user[present])


def _with_scores(
    ev: metrics.Evaluation, scores: metrics.Evaluation, order: list[str]
) -> metrics.Evaluation:
    """``ev`` with its score metrics (summary, per-user columns, undefined count) taken from
    ``scores``; keys and columns in ``order``."""
    joined = _joined(ev, scores, order)
    counts = {"auc_undefined_users": scores.counts["auc_undefined_users"]}
    return replace(joined, counts=joined.counts | counts)


def run_models(
    dataset: Dataset,
    split: Split,
    models: Mapping[str, Recommender],
    suite: MetricSuite,
    folder: Path,
    *,
    progress: bool = True,
    candidates: pd.DataFrame | None = None,
    load_errors: Mapping[str, str] | None = None,
    evaluate: Evaluator = metrics.evaluate,
    reused: Mapping[str, ModelOutcome] | None = None,
) -> ExperimentResult:
    """Fit, rank and evaluate every model on ``split``; write results under ``folder``, each
    model's as soon as it is done.

    ``candidates`` (user, item) restricts ranking to given items per user (default: the full
    catalog); ``load_errors`` names models that could not even be built, recorded as failed;
    ``evaluate`` is the metric engine (``metrics.evaluate``, or the Spark engine's equivalent);
    ``reused``: outcomes of models an interrupted run finished (:func:`load_model`), not rerun.
    """
    qrels = qrels_from_test(split.test, suite.relevance)
    catalog = dataset.distinct(ITEM, split.stats) or 0
    side = dataset.side_inputs()  # item features / embeddings / groups of beyond-accuracy metrics
    if side:
        evaluate = partial(evaluate, **side)
    skipped = _needs_features(suite, dataset)
    if skipped:
        evaluate = _without(evaluate, skipped)
    outcomes: dict[str, ModelOutcome] = {
        name: ModelOutcome(name, error=error) for name, error in (load_errors or {}).items()
    }
    bar = tqdm(models.items(), desc="models", unit="model", disable=not progress)
    for name, model in bar:
        bar.set_postfix_str(name)
        kept = (reused or {}).get(name)  # finished by the interrupted run this one resumes
        if kept is not None:
            outcomes[name] = kept
            stage_log.stages.reused(name)
            continue
        outcome = ModelOutcome(name)
        checkpoint(f"model {name}")  # the stage an interruption names
        try:
            t0, c0 = time.perf_counter(), time.process_time()
            model.fit(split.train)
            outcome.seconds["fit"] = time.perf_counter() - t0
            outcome.cpu["fit"] = time.process_time() - c0
            outcome.peaks["fit"] = stage_log.peak_mb()
            caught: list[warnings.WarningMessage] = []
            try:
                with warnings.catch_warnings(record=True) as caught:
                    _evaluate(model, outcome, qrels, split, suite, catalog, candidates, evaluate)
            finally:  # a model that failed still shows its warnings
                _notes_of_warnings(caught, outcome, suite.evaluate_options())
        except Exception as err:
            outcome.error = f"{type(err).__name__}: {err}"
            (folder / name).mkdir(parents=True, exist_ok=True)
            (folder / name / "error.txt").write_text(traceback.format_exc())
        outcome.info |= _model_info(model)
        extra = other_users_note(getattr(model, "stats_", None))
        if extra and outcome.ok:
            outcome.notes.append(extra)
        if skipped and outcome.ok:
            outcome.notes.append(
                f"{', '.join(sorted(skipped))} skipped: the dataset has no item categories "
                "(set dataset.item_features)"
            )
        outcomes[name] = outcome
        save_model(folder, outcome)  # now: an interruption keeps the models already run
        # a status line and the stage table
        stage_log.stages.add_model(name, outcome.seconds, outcome.cpu, outcome.peaks)
    options = metrics.resolve_options(**suite.evaluate_options()).as_dict()
    result = ExperimentResult(dataset, split, suite, outcomes, folder, options)
    save(result)
    return result


def missing_users_note(missing: int, requested: int, example: str, options: Any = None) -> str:
    """The run's note on test users a score file has no list for (D1: counted, now said): how
    the metric ``options`` (a preset included) treat them."""
    head = (
        f"{missing:,} of {requested:,} test user(s) have no list in the score file, e.g. {example}"
    )
    if metrics.resolve_options(**dict(options or {})).user_set == "intersection":
        return f"{head}: they are left out of this model's metrics (user_set=intersection)"
    return f"{head}: they are evaluated on an empty list (every relevant item a miss)"


def other_users_note(stats: Mapping[str, Any] | None) -> str | None:
    """The note on a score file's users that are not this split's test users (their lists are
    read and never evaluated: a file for another split or period shows here), from its
    ``stats_`` (both engines count ``users_in_file``, ``users_requested`` and
    ``users_without_list``)."""
    needed = ("users_in_file", "users_requested", "users_without_list")
    if not stats or not all(isinstance(stats.get(k), numbers.Integral) for k in needed):
        return None  # not a score file's counts (a registry model's, say)
    in_file = int(stats["users_in_file"])
    other = in_file - (int(stats["users_requested"]) - int(stats["users_without_list"]))
    if other <= 0:
        return None
    return (
        f"{other:,} of the score file's {in_file:,} users are not test users of this split: "
        "their lists are not evaluated"
    )


def _notes_of_warnings(
    caught: list[warnings.WarningMessage], outcome: ModelOutcome, options: Any = None
) -> None:
    """A score file's missing users (:class:`MissingUsersWarning`) become one model note, not a
    raw warning; any other warning caught while evaluating is shown again as it would have been."""
    from harness.models.precomputed import MissingUsersWarning

    said = False
    for w in caught:
        if isinstance(w.message, MissingUsersWarning):
            if not said:  # ranked more than once (ties, AUC): one note
                m = w.message
                note = missing_users_note(m.missing, m.requested, m.example, options)
                outcome.notes.append(note)
                said = True
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def _needs_features(suite: MetricSuite, dataset: Dataset) -> set[str]:
    """Metrics of the suite that need item categories the dataset does not have."""
    if dataset.item_features is not None:
        return set()
    jaccard = suite.options.get("diversity_similarity") == "jaccard"
    return {
        n
        for n in suite.names
        if metrics.parse(n).metric == "miscalibration"
        or (jaccard and dataset.item_embeddings is None and metrics.parse(n).metric == "diversity")
    }


def _without(evaluate: Evaluator, skipped: set[str]) -> Evaluator:
    """``evaluate`` leaving out ``skipped`` names: NaN in the summary and per-user columns."""

    def call(qrels: pd.DataFrame, run: pd.DataFrame, names: list[str], **kw: Any) -> Any:
        names = list(names)
        keep = [n for n in names if n not in skipped] or ["num_rel"]
        ev = evaluate(qrels, run, keep, **kw)
        return metrics.Evaluation(
            {n: ev.summary.get(n, float("nan")) for n in names},
            ev.per_user.reindex(columns=names),
            ev.options,
            ev.counts,
        )

    return call


def _model_info(model: Recommender) -> dict[str, Any]:
    """What a model reports about itself (``info_``: version, source; ``stats_``: coverage)."""
    info: dict[str, Any] = {}
    for attr in ("info_", "stats_"):
        value = getattr(model, attr, None)
        if isinstance(value, Mapping):
            info |= {f"{attr.rstrip('_')}.{k}": v for k, v in value.items()}
    return info


def save_model(folder: Path, outcome: ModelOutcome) -> None:
    """Write one model's per-user metrics, top-k lists and ``result.json`` (last, atomically:
    its presence says the others are whole), so a run interrupted later keeps them."""
    sub = folder / outcome.name
    sub.mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {
        "model": outcome.name,
        "ok": outcome.ok,
        "error": outcome.error,
        "seconds": outcome.seconds,
        "cpu": outcome.cpu,
        "peaks": outcome.peaks,
        "info": outcome.info,
        "notes": outcome.notes,
    }
    written = "per_user_uri" in outcome.info  # engine=spark: Spark wrote both tables
    if outcome.evaluation is not None:
        if not written:
            outcome.evaluation.per_user.to_parquet(sub / "per_user.parquet")
        info["summary"] = outcome.evaluation.summary
        info["counts"] = outcome.evaluation.counts
        info["options"] = outcome.evaluation.options
    if outcome.recommendations is not None and not written:
        outcome.recommendations.to_parquet(sub / "topk.parquet", index=False)
    tmp = sub / ".result.json.tmp"
    tmp.write_text(json.dumps(info, indent=2, default=str))
    tmp.replace(sub / "result.json")
    outcome.saved = True


def load_model(folder: Path, name: str) -> ModelOutcome | None:
    """The outcome :func:`save_model` wrote for ``name`` in ``folder``, or None when the model
    did not finish there (no ``result.json``, or failed). Tables Spark wrote (``per_user_uri``
    in its info) are not read here: an empty per-user table and no lists, for
    :func:`harness.spark.pipeline.run_models_spark` to read back from their URIs."""
    sub = folder / name
    try:
        info = json.loads((sub / "result.json").read_text())
    except (OSError, ValueError):
        return None
    if not info.get("ok") or "summary" not in info:
        return None
    by_spark = "per_user_uri" in info.get("info", {})
    evaluation = metrics.Evaluation(
        {k: float(v) for k, v in info["summary"].items()},
        pd.DataFrame() if by_spark else pd.read_parquet(sub / "per_user.parquet"),
        dict(info.get("options") or {}),
        dict(info.get("counts") or {}),
    )
    topk = sub / "topk.parquet"
    recs = pd.read_parquet(topk) if topk.exists() and not by_spark else None
    return ModelOutcome(
        name,
        evaluation,
        recs,
        seconds=dict(info.get("seconds") or {}),
        cpu=dict(info.get("cpu") or {}),
        peaks=dict(info.get("peaks") or {}),
        info=dict(info.get("info") or {}),
        notes=list(info.get("notes") or []),
        saved=True,
    )


def save(result: ExperimentResult) -> None:
    """Write the summary, split stats, metric options and each model not yet saved."""
    folder = result.folder
    folder.mkdir(parents=True, exist_ok=True)
    result.table().to_csv(folder / "summary.csv", index_label="model")
    (folder / "split_stats.json").write_text(json.dumps(result.split.stats, indent=2, default=str))
    (folder / "metric_options.json").write_text(json.dumps(result.options, indent=2))
    for outcome in result.outcomes.values():
        if not outcome.saved:
            save_model(folder, outcome)
