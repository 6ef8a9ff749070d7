"""``engine=spark`` end to end: read, split, model lists, top-k and metrics on Spark.

:func:`load_spark` reads the events (a file from any Spark path, checked by
:func:`harness.spark.io.read_interactions`; the synthetic generator's frame), :func:`split_spark`
runs the split with its filters (:func:`harness.spark.split.make_split_spark`) and
:func:`run_models_spark` builds each model's top-k lists (:mod:`harness.spark.models`), writes
them and the per-user metrics (:func:`harness.spark.evaluate_spark`) as Parquet from Spark, and
returns an :class:`~harness.experiment.ExperimentResult` whose outcomes carry the summaries and
counts, plus the Spark tables (:class:`SparkTables`) for a comparison on Spark.

What reaches the driver (bounded by ``driver_rows``):

- always: aggregate rows (split stats, checks, each bucket's metric state, count tables keyed
  by item), the training rows a plug-in model is fitted on (or its ``fit_sample``), the
  per-item training counts novelty/popularity need; for a plug-in's ``global_auc`` over the
  whole catalog, the score of each relevant test pair (broadcast back, as the numpy engine
  holds them); for popularity's AUC over the catalog, one row per distinct popularity value
  (the score histogram; no training row);
- only when the table has at most ``driver_rows`` rows: a copy of the events, of the split
  parts, of each model's top-k lists and per-user table, for the stages still run in-process
  (the report's counts, MLflow's dataset digests). Above it those copies are empty frames; A/B
  sizing and ``gate.promote``'s record read the comparison's aggregates instead.

With ``candidates=sampled`` / ``file`` (:func:`build_candidates_spark`, built in Spark), each
test user's candidates are scored on Spark (:func:`model_candidates`) and ranked among
themselves; score metrics (AUC family) and rating metrics (RMSE/MAE) are computed as in-process
(see :func:`run_models_spark`).

The comparison (:func:`compare_result_spark`) runs on the Spark tables
(:attr:`SparkExperimentResult.tables`) at every size.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

import metrics
from harness import progress as stage_log
from harness.compare import CompareSpec, PairComparison
from harness.datasets import Dataset, load_dataset
from harness.errors import DataError
from harness.experiment import (
    ExperimentResult,
    MetricSuite,
    ModelOutcome,
    _model_info,
    _needs_features,
    model_order_holds,
    outside_note,
    save,
    save_model,
)
from harness.folders import checkpoint
from harness.spark.candidates import build_candidates_spark
from harness.spark.io import _frame, _id_kind, _is_integer_type, write_read
from harness.spark.session import _python_errors, _quiet
from harness.split import Split

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from harness.spark.split import SparkSplit

__all__ = [
    "SparkExperimentResult",
    "SparkTables",
    "build_candidates_spark",
    "compare_result_spark",
    "load_spark",
    "model_candidates",
    "model_lists",
    "run_models_spark",
    "split_spark",
]


@dataclass
class SparkTables:
    """What a Spark run keeps in Spark: the split parts, the truth (user, item, relevance), and
    per model its top-k lists (user, rank, item, score) and per-user table (user, one column per
    metric), both read back from the Parquet written under ``base``, with their URIs."""

    train: DataFrame
    test: DataFrame
    qrels: DataFrame
    base: str
    lists: dict[str, DataFrame] = field(default_factory=dict)
    per_user: dict[str, DataFrame] = field(default_factory=dict)
    uris: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass
class SparkExperimentResult(ExperimentResult):
    """An :class:`ExperimentResult` of ``engine=spark``, plus its Spark tables."""

    tables: SparkTables | None = None


# ----------------------------------------------------------------------------------- loading


def load_spark(
    spark: SparkSession, spec: Mapping[str, Any], driver_rows: int
) -> tuple[DataFrame, Dataset]:
    """The events of a ``dataset/`` config as a Spark DataFrame, and the run's ``Dataset``
    (its frame a driver copy when at most ``driver_rows`` events, else empty).

    ``dataset=file`` is read and checked in Spark from any Spark path (Parquet or CSV);
    ``dataset=synthetic`` and ``dataset=movielens`` are loaded in-process (small by design: the
    generator, a 100,004-rating sample) and handed to Spark.
    """
    kind = spec.get("kind")
    if kind in ("synthetic", "movielens"):
        dataset = load_dataset(dict(spec))
        return _frame(spark, dataset.frame, "dataset").cache(), dataset
    if kind != "file":
        raise DataError(f"engine=spark reads dataset=file, synthetic or movielens (got {kind!r})")
    from harness.spark.io import read_interactions

    path = str(spec["path"])
    rating_range = spec.get("rating_range")
    df = read_interactions(
        spark,
        path,
        fmt=spec.get("format"),
        rating_range=None if rating_range is None else (rating_range[0], rating_range[1]),
        columns=spec.get("columns"),  # as in-process: a null column is not in the file
        duplicates=spec.get("duplicates", "error"),
        timestamp_format=spec.get("timestamp_format"),
    ).cache()
    name = str(spec.get("name", kind))
    return df, _dataset_of(df, name, path, spec, driver_rows)


def _dataset_of(
    df: DataFrame, name: str, source: str, spec: Mapping[str, Any], driver_rows: int
) -> Dataset:
    """The run's ``Dataset``: a driver copy of the events when small, else an empty frame whose
    ``sha256`` is computed in Spark: the in-process content hash (:func:`harness.hashing.
    content_hash`), its row hashes summed per partition by the same numpy code."""
    from harness.hashing import combine_partials, content_partials

    features = spec.get("item_features")
    side: dict[str, Any] = {}
    if features is not None:
        from harness.data import load_item_table

        side = {
            "item_features": load_item_table(features, "item_features"),
            "item_groups": spec.get("item_groups"),
        }
    n = df.count()
    if n <= driver_rows:
        with _quiet():
            return Dataset(name, _driver_copy(df), source, **side)
    dataset = Dataset(name, _empty(df), source, **side)
    partials = df.mapInPandas(content_partials, "rows long, s1 long, s2 long, kinds string")
    # the cached_property, from Spark: the digest data_hash gives the same rows in-process
    dataset.__dict__["sha256"] = combine_partials(tuple(r) for r in partials.collect())
    return dataset


def _driver_copy(df: DataFrame) -> pd.DataFrame:
    """A Spark table as pandas, with the in-process id types (``int64`` or ``object`` text)."""
    frame = pd.DataFrame(df.toPandas())
    for column in ("user", "item"):
        if column in frame.columns and frame[column].dtype != np.int64:
            frame[column] = frame[column].astype(object)
    return frame


def _empty(df: DataFrame) -> pd.DataFrame:
    """An empty pandas frame with ``df``'s columns and id types."""
    kinds: dict[str, Any] = {
        c: (np.int64 if _id_kind(df, c) == "bigint" else object)
        for c in ("user", "item")
        if c in df.columns
    }
    columns = {c: pd.Series(dtype=kinds.get(c, np.float64)) for c in df.columns}
    if "timestamp" in columns:  # bigint seconds, or double ones with sub-second times
        whole = _is_integer_type(df.schema["timestamp"].dataType)
        columns["timestamp"] = pd.Series(dtype=np.int64 if whole else np.float64)
    return pd.DataFrame(columns)


# ----------------------------------------------------------------------------------- splitting


def split_spark(
    df: DataFrame, method: str, params: Mapping[str, Any], driver_rows: int
) -> tuple[SparkSplit, Split]:
    """The split with its filters on Spark, and the run's ``Split`` (same stats; its parts a
    driver copy when the split has at most ``driver_rows`` events, else empty frames)."""
    from harness.spark.split import make_split_spark

    # its parts filter persisted frames: these events (cached by load_spark) or the split's own
    sp = make_split_spark(df, method, **params)
    n = int(sp.stats.get("n_train_events", 0)) + int(sp.stats.get("n_test_events", 0))
    if n <= driver_rows:
        with _quiet():
            train, test = _driver_copy(sp.train), _driver_copy(sp.test)
            valid = None if sp.valid is None else _driver_copy(sp.valid)
    else:
        train, test, valid = _empty(sp.train), _empty(sp.test), None
    return sp, Split(train, test, valid, dict(sp.stats), sp.name, dict(sp.params))


# ------------------------------------------------------------------------------------- models


def model_lists(
    spark: SparkSession,
    model: Any,
    train: DataFrame,
    users: DataFrame,
    k: int,
    *,
    batch_users: int = 4096,
    fit_sample: float | None = None,
    seed: int = 0,
) -> tuple[DataFrame, str]:
    """Each user's top-``k`` of a model on Spark, and how it was computed: popularity,
    precomputed scores (Parquet/CSV) and MLlib ALS natively; any other harness model fitted on
    the driver and scored per partition (:func:`harness.spark.models.plugin_topk`)."""
    lists, how, _ = _model_ranking(
        spark,
        model,
        train,
        users,
        k,
        batch_users=batch_users,
        fit_sample=fit_sample,
        seed=seed,
    )
    return lists, how


#: Rows (user, item, score, rank: the model's order) of the users of a (user, ``_kth``) table
#: scoring at least their list's k-th score ``_kth`` (:func:`_tied_rows`).
Ties = Callable[["DataFrame"], "DataFrame"]


def _checked_scores(spark: SparkSession, model: Any, train: DataFrame) -> Any:
    """A score file's table read and checked once for the run's stats, lists, ties and
    candidates (:func:`harness.spark.models.checked_scores`); None for any other model."""
    from harness.models import PrecomputedScores
    from harness.spark.models import checked_scores

    if type(model) is not PrecomputedScores or model._kind() == "trec":
        return None
    columns = dict(model.columns) or None
    return checked_scores(spark, model.path, train, columns=columns, fmt=model._kind())


def _score_file_stats(
    spark: SparkSession,
    model: Any,
    scores: Any,
    train: DataFrame,
    users: DataFrame | None,
    options: Mapping[str, Any],
) -> list[str]:
    """A score file's counts as in process (``model.stats_``, logged as ``model.stats.*``) and
    its notes, on test users it has no list for (``users``: the users ranked over the catalog)
    and on users of the file outside the test, which follow the evaluation's notes as in
    process. ``scores``: the file's table from :func:`_checked_scores` (None: the model is no
    score file)."""
    from harness.experiment import missing_users_note, other_users_note
    from harness.models.precomputed import _show
    from harness.spark.models import precomputed_stats

    if scores is None:
        return []
    stats, example = precomputed_stats(spark, scores, train, users)
    model.stats_ = stats
    notes = []
    if example is not None:
        missing, requested = stats["users_without_list"], stats["users_requested"]
        notes.append(missing_users_note(missing, requested, _show(example), options))
    other = other_users_note(stats)
    return notes + ([other] if other else [])


def _model_ranking(
    spark: SparkSession,
    model: Any,
    train: DataFrame,
    users: DataFrame,
    k: int,
    *,
    batch_users: int = 4096,
    fit_sample: float | None = None,
    seed: int = 0,
    scores: Any = None,
) -> tuple[DataFrame, str, Ties]:
    """:func:`model_lists`, and how to fetch the items tied with each list's k-th score from
    the same fit (a plug-in or ALS is fitted once): one pass over the scores for popularity
    and a score table, deeper lists for the others (:func:`_deepened`). ``scores``: a score
    file's :func:`harness.spark.models.checked_scores` (None: read where used)."""
    from harness.models import PopularityModel, PrecomputedScores
    from harness.spark.models import (
        SparkALS,
        _als_fit,
        als_topk,
        fit_plugin,
        popularity_tied,
        popularity_topk,
        precomputed_tied,
        precomputed_topk,
    )

    if type(model) is PopularityModel:
        lists = popularity_topk(train, users, k, exclude_seen=model.exclude_seen)
        ties = partial(popularity_tied, train, exclude_seen=model.exclude_seen)
        return lists, "spark", ties
    if isinstance(model, SparkALS):
        fit = _als_fit(model, train)
        als = partial(als_topk, model, train, fit=fit)
        return als_topk(model, train, users, k, fit), "spark_mllib", partial(_deepened, als, k)
    # a score file in Spark; ties in file order need the rows' order: fitted on the driver
    if type(model) is PrecomputedScores and model._kind() != "trec" and model.ties == "item":
        how: dict[str, Any] = {
            "exclude_seen": model.exclude_seen,
            "columns": dict(model.columns) or None,
            "fmt": model._kind(),
        }
        source = scores or model.path
        lists = precomputed_topk(spark, source, train, users, k, **how)
        return lists, "spark", lambda kth: precomputed_tied(spark, source, train, kth, **how)
    fitted = fit_plugin(model, train, sample=fit_sample, seed=seed)
    deeper = _plugin_deeper(spark, fitted, train, batch_users=batch_users, fit_sample=fit_sample)
    return deeper(users, k), "plugin", partial(_deepened, deeper, k)


def _plugin_deeper(
    spark: SparkSession,
    fitted: Any,
    train: DataFrame,
    *,
    batch_users: int,
    fit_sample: float | None,
) -> Callable[[DataFrame, int], DataFrame]:
    """A fitted plug-in's top-``n`` lists of given users (:func:`harness.spark.models.
    plugin_topk`, seen items as :func:`harness.spark.models.history` says), any ``n``."""
    from harness.spark.models import history, plugin_topk

    return partial(
        plugin_topk,
        spark,
        fitted,
        item_kind=_id_kind(train, "item"),
        batch_users=batch_users,
        seen=history(fitted, train, fit_sample),
    )


def _deepened(
    deeper: Callable[[DataFrame, int], DataFrame],
    k: int,
    kth: DataFrame,
) -> DataFrame:
    """The in-process ``_with_ties`` for the users of ``kth`` (user, ``_kth``): their lists
    fetched again ``2k``, ``4k``, ... deep (``deeper(users, depth)``, the fitted model's),
    only for the users whose list is still full and tied at its end, rows scoring at least
    ``_kth`` kept (user, item, score, rank). Each round's rows and the users left are
    checkpointed on the executors (``localCheckpoint``: the model scores each round once and
    the plans stay one round deep; Spark's cleaner drops them once unreferenced)."""
    from pyspark.sql import functions as sf

    kept: list[DataFrame] = []
    open_ = kth.select("user", "_kth").localCheckpoint()
    depth = 2 * k
    while open_.count():
        rows = deeper(open_.select("user"), depth).join(open_, "user")
        rows = rows.filter(sf.col("score") >= sf.col("_kth")).localCheckpoint()
        full = rows.groupBy("user").agg(sf.max("rank").alias("_last"))
        full = full.filter(sf.col("_last") == depth).select("user")
        kept.append(rows.join(full, "user", "left_anti").select("user", "item", "score", "rank"))
        open_ = open_.join(full, "user", "left_semi").localCheckpoint()
        depth *= 2
    tied = deeper(open_.select("user"), k).select("user", "item", "score", "rank")  # no rows
    for more in kept:
        tied = tied.unionByName(more)
    return tied


def qrels_spark(test: DataFrame, relevance: str) -> DataFrame:
    """:func:`harness.experiment.qrels_from_test` on Spark: relevance 1 or the (max) rating."""
    from pyspark.sql import functions as sf

    if relevance == "rating":
        if "rating" not in test.columns:
            raise ValueError("metrics.relevance=rating needs a 'rating' column in the data")
        value = sf.col("rating").cast("double")
    else:
        value = sf.lit(1.0)
    return test.groupBy("user", "item").agg(sf.max(value).alias("relevance"))


def _uri(base: str, *parts: str) -> str:
    """``base/part/...`` for a local folder or a URI such as ``s3a://bucket/prefix``."""
    return "/".join([base.rstrip("/"), *parts])


def model_candidates(
    spark: SparkSession,
    model: Any,
    train: DataFrame,
    candidates: DataFrame,
    *,
    batch_users: int = 4096,
    fit_sample: float | None = None,
    seed: int = 0,
    scores: Any = None,
) -> tuple[DataFrame, str]:
    """Each candidate's score (user, item, score) from a model on Spark, as in-process
    ``score_items`` gives it (no seen-item exclusion; unscorable candidates left out), and how
    it was computed: popularity, precomputed scores and MLlib ALS natively; any other harness
    model fitted on the driver and scored in groups of users (``applyInPandas``). ``scores``:
    a score file's :func:`harness.spark.models.checked_scores` (None: read here)."""
    from harness.models import PopularityModel, PrecomputedScores
    from harness.spark.models import (
        SparkALS,
        als_candidates,
        fit_plugin,
        plugin_candidates,
        popularity_candidates,
        precomputed_candidates,
    )

    if type(model) is PopularityModel:
        return popularity_candidates(train, candidates), "spark"
    if isinstance(model, SparkALS):
        return als_candidates(model, train, candidates), "spark_mllib"
    if type(model) is PrecomputedScores and model._kind() != "trec":
        scored = precomputed_candidates(
            spark,
            scores or model.path,
            train,
            candidates,
            columns=dict(model.columns) or None,
            fmt=model._kind(),
        )
        return scored, "spark"
    fitted = fit_plugin(model, train, sample=fit_sample, seed=seed)
    return plugin_candidates(spark, fitted, candidates, batch_users=batch_users), "plugin"


def _scores_catalog_spark(model: Any) -> bool:
    """True when the in-process run counts AUC over the whole catalog for this model
    (:func:`harness.experiment._scores_catalog`); SparkALS ranks its top-k only."""
    from harness.experiment import _scores_catalog
    from harness.spark.models import SparkALS

    return not isinstance(model, SparkALS) and _scores_catalog(model)


def _rating_pairs(test: DataFrame) -> DataFrame:
    """The test (user, item) pairs with their mean rating as ``relevance`` (the in-process
    ``_rating_metrics`` truth)."""
    from pyspark.sql import functions as sf

    rating = sf.avg(sf.col("rating").cast("double")).alias("relevance")
    return test.groupBy("user", "item").agg(rating)


def run_models_spark(
    spark: SparkSession,
    dataset: Dataset,
    events: DataFrame,
    sp: SparkSplit,
    split: Split,
    models: Mapping[str, Any],
    suite: MetricSuite,
    folder: Path,
    *,
    candidates: DataFrame | None = None,
    load_errors: Mapping[str, str] | None = None,
    buckets: int | None = None,
    batch_users: int = 4096,
    fit_sample: float | None = None,
    seed: int = 0,
    tables_uri: str | None = None,
    driver_rows: int = 2_000_000,
    reused: Mapping[str, ModelOutcome] | None = None,
) -> SparkExperimentResult:
    """Every model's lists, top-k and metrics on Spark; results written under ``folder``.

    Per model, ``topk.parquet`` (user, rank, item, score) and ``per_user.parquet`` (user, one
    column per metric) are written by Spark under ``tables_uri/<folder name>/<model>/`` (default:
    the results folder itself; set it to a shared ``s3a://`` / ``hdfs://`` location on a
    cluster) and recorded in ``outcome.info`` (``topk_uri``, ``per_user_uri``: MLflow tags of the
    model's run). Driver copies: see the module docstring.

    As in-process (:func:`harness.experiment._evaluate`): over the full catalog, lists are
    ranked by the model's order (metrics score by rank) unless the metric conventions order
    ties otherwise (``model_order_holds``): then every item tied with each list's k-th score is
    fetched (:func:`_tied_rows`), the k rows the rule puts first are the lists, evaluated with
    their real scores (``ndcg_ties=average``: cutoff metrics over the whole tied rows; listed
    items outside the data counted from the tied rows); score metrics (AUC family) are
    computed over every unseen catalog item for a model that scores the catalog
    (``auc_scope=catalog``: popularity, plug-ins built on ``BaseRecommender._score``; see
    :func:`_catalog_auc`), else over each user's top-k list and its scores
    (``auc_scope=topk``, with the in-process note); with ``candidates`` (user, item),
    each test user's candidates are scored (``candidate_scores.parquet``; unscorable ones left
    out and counted in ``candidates_unscored``), the top-k is the best-scored candidates (ties
    by item id) and every ranking and score metric is computed from those scores
    (``auc_scope=candidates``). Rating metrics (RMSE/MAE) come from a plug-in's
    ``predict_ratings`` on the test pairs (mean rating per pair), else NaN with the in-process
    note. Metrics that need item categories the dataset lacks are NaN with the in-process note.

    ``reused``: outcomes of models an interrupted run finished
    (:func:`harness.experiment.load_model`), not rerun when their tables read back
    (:func:`_restored`); a model whose tables cannot be read runs again.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as sf

    from harness.spark.topk import topk_spark

    base = tables_uri.rstrip("/") + "/" + folder.name if tables_uri else str(folder.resolve())
    qrels = qrels_spark(sp.test, suite.relevance).cache()
    users = qrels.select("user").distinct().cache()
    n_users = users.count()
    kinds = {m: metrics.parse(m).definition.kind for m in suite.names}
    rating = [n for n in suite.names if kinds[n] == "rating"]
    score_names = [n for n in suite.names if kinds[n] == "score"]
    no_features = _needs_features(suite, dataset)
    side = dataset.side_inputs()
    catalog = int(sp.stats.get("n_input_items") or events.select("item").distinct().count())
    tables = SparkTables(sp.train, sp.test, qrels, base)
    opts = suite.evaluate_options()
    mine = None  # the candidates of the evaluated users (in-process: the qrels users)
    n_cand = 0
    if candidates is not None:
        mine = candidates.join(users, "user", "left_semi").persist(StorageLevel.MEMORY_AND_DISK)
        n_cand = mine.count()
    outcomes: dict[str, ModelOutcome] = {
        name: ModelOutcome(name, error=error) for name, error in (load_errors or {}).items()
    }
    options = metrics.resolve_options(**opts)
    # as in-process: a tie rule other than the models' needs the items tied with the k-th
    truth_kind = _id_kind(qrels, "item")
    small = n_users * suite.k <= driver_rows  # bounds the lists' and per-user rows
    for name, model in models.items():
        kept = (reused or {}).get(name)  # finished by the interrupted run this one resumes
        restored = None if kept is None else _restored(spark, kept, sp, qrels, suite, small)
        if restored is not None:
            outcomes[name], tables.lists[name], tables.per_user[name] = restored
            info = restored[0].info
            tables.uris[name] = {"topk": info["topk_uri"], "per_user": info["per_user_uri"]}
            stage_log.stages.reused(name)
            continue
        if kept is not None:
            stage_log.stages.say(f"  model {name}: its saved tables cannot be read, run again")
            (folder / name / "result.json").unlink(missing_ok=True)
        outcome = ModelOutcome(name)
        checkpoint(f"model {name}")  # the stage an interruption names
        topk_uri = _uri(base, name, "topk.parquet")
        per_user_uri = _uri(base, name, "per_user.parquet")
        where = _uri(base, name, "parts")
        scores = None  # a score file read and checked once for all its uses below
        try:
            t0 = time.perf_counter()
            with _python_errors(), _quiet():
                scores = _checked_scores(spark, model, sp.train)
                counted = None  # a plug-in's catalog AUC counts, from its ranking pass
                tied = None  # lists with every item tied with the k-th, when the rule needs them
                if mine is None and score_names and _plugin_scores_catalog(model):
                    lists, counted = _plugin_catalog_pass(
                        spark,
                        model,
                        sp.train,
                        qrels,
                        users,
                        suite,
                        score_names,
                        batch_users=batch_users,
                        fit_sample=fit_sample,
                        seed=seed,
                    )
                    how = "plugin"
                    deeper = _plugin_deeper(
                        spark, model, sp.train, batch_users=batch_users, fit_sample=fit_sample
                    )
                    ties: Ties = partial(_deepened, deeper, suite.k)
                elif mine is None:
                    lists, how, ties = _model_ranking(
                        spark,
                        model,
                        sp.train,
                        users,
                        suite.k,
                        batch_users=batch_users,
                        fit_sample=fit_sample,
                        seed=seed,
                        scores=scores,
                    )
                else:
                    scored_uri = _uri(base, name, "candidate_scores.parquet")
                    scored, how = model_candidates(
                        spark,
                        model,
                        sp.train,
                        mine,
                        batch_users=batch_users,
                        fit_sample=fit_sample,
                        seed=seed,
                        scores=scores,
                    )
                    # in-process order: by user, then item (metrics' input-order ties)
                    scored = write_read(spark, scored.orderBy("user", "item"), scored_uri)
                    # ties as the metrics order them (candidates sit in item order: input
                    # order is item order, as in-process)
                    tie = options.tie_break
                    lists = topk_spark(
                        scored,
                        suite.k,
                        "item_desc" if tie == "item_desc" else "item_asc",
                        options.id_order if tie != "input_order" else "natural",
                    )
                    outcome.info["candidates_unscored"] = n_cand - scored.count()
                    outcome.info["scores_uri"] = scored_uri
                by_file = users if mine is None else None  # over the catalog: the users ranked
                file_notes = _score_file_stats(spark, model, scores, sp.train, by_file, opts)
                list_kind = _id_kind(lists, "item")
                holds = model_order_holds(options, truth_kind == "bigint", list_kind == "bigint")
                if mine is None and not holds:
                    tied_uri = _uri(where, "tied_rows.parquet")
                    tied = _tied_rows(spark, lists, suite.k, ties, tied_uri)
                    ids = _truth_item_ids(tied, sp, qrels) if list_kind != truth_kind else None
                    lists = _top_spark(tied, suite.k, options, ids)
                ranked = lists.select(
                    "user", sf.col("rank").cast("bigint").alias("rank"), "item", "score"
                )
                lists = write_read(spark, ranked, topk_uri)
            judged = _in_truth_items(lists, sp, qrels)  # the lists in the truth's id type
            t1 = time.perf_counter()
            ranking = [n for n in suite.names if n not in rating and n not in no_features]
            parts: list[tuple[str, list[str]]] = []  # per-user tables to join: (uri, names)

            evaluate = partial(_evaluate_part, spark, where, parts, buckets, opts)
            notes: list[str] = []
            by_score: metrics.Evaluation | None = None
            if mine is None and tied is None:
                # the model's order is the ranking: scored by rank so no tie rule can reorder it
                run = judged.select("user", "item", (-sf.col("rank")).cast("double").alias("score"))
            elif mine is None:  # the k rows the rule chose, their real scores (and in its order)
                run = _in_order(judged, options).select("user", "item", "score")
            if mine is None:
                asked = [n for n in ranking if n not in score_names] or ["num_rel"]
                if score_names and _scores_catalog_spark(model):
                    outcome.info["auc_scope"] = "catalog"
                elif score_names:
                    outcome.info["auc_scope"] = "topk"
                    notes.append(
                        f"{', '.join(score_names)} over each user's top-{suite.k} list only: "
                        f"{type(model).__name__} does not score the whole catalog (a user whose "
                        "list is all hits or has none gets NaN)"
                    )
            else:
                run = scored.select("user", "item", "score")
                if options.tie_break == "input_order":  # in-process order: by user, then item
                    run = run.orderBy("user", "item")  # (Parquet parts read back in any order)
                asked = ranking or ["num_rel"]
                if score_names:
                    outcome.info["auc_scope"] = "candidates"
            listed = catalog  # coverage's and gini's catalog for these lists
            if mine is None and not _scores_catalog_spark(model):  # lists from elsewhere
                listed = _catalog_with_spark(lists if tied is None else tied, sp, catalog, outcome)
            ev = evaluate(qrels, run, asked, "ranking", train=sp.train, catalog=listed, **side)
            summary = {n: ev.summary[n] for n in asked if n in suite.names}
            cut = [n for n in asked if metrics.parse(n).k is not None]
            if tied is not None and options.ndcg_ties == "average" and cut:
                # tie groups averaged over their whole extent, past the k-th item (as
                # torchmetrics and scikit-learn do); metrics without a cutoff keep the k rows
                whole = _in_order(_in_truth_items(tied, sp, qrels), options)
                whole = whole.select("user", "item", "score")
                ev_whole = evaluate(
                    qrels, whole, cut, "whole", train=sp.train, catalog=listed, **side
                )
                summary |= {n: ev_whole.summary[n] for n in cut if n in suite.names}
            counts = dict(ev.counts)
            if outcome.info.get("auc_scope") == "catalog":
                by_score = _catalog_auc(
                    spark,
                    model,
                    sp.train,
                    qrels,
                    users,
                    suite,
                    score_names,
                    parts,
                    where,
                    buckets=buckets,
                    batch_users=batch_users,
                    fit_sample=fit_sample,
                    seed=seed,
                    info=outcome.info,
                    counted=counted,
                )
                summary |= by_score.summary
                counts["auc_undefined_users"] = by_score.counts["auc_undefined_users"]
            elif outcome.info.get("auc_scope") == "topk":
                by_score = evaluate(
                    qrels, judged.select("user", "item", "score"), score_names, "scores"
                )
                summary |= by_score.summary
                counts["auc_undefined_users"] = by_score.counts["auc_undefined_users"]
            if rating:
                rated, note = _rating_spark(spark, model, sp.test, rating, evaluate)
                if note:
                    notes.append(note)
                if rated is not None:
                    summary |= rated.summary
                    counts |= rated.counts
            per_user = write_read(spark, _join_parts(spark, parts), per_user_uri)
            outcome.seconds |= {"rank": t1 - t0, "metrics": time.perf_counter() - t1}
            outcome.info |= {"engine": how, "topk_uri": topk_uri, "per_user_uri": per_user_uri}
            full = {n: summary.get(n, float("nan")) for n in suite.names}
            outcome.evaluation = _evaluation(full, counts, ev.options, per_user, suite, small)
            if small:
                with _quiet():
                    outcome.recommendations = _recs_copy(lists)
            tables.lists[name] = judged
            tables.per_user[name] = per_user
            tables.uris[name] = {"topk": topk_uri, "per_user": per_user_uri}
            outcome.notes += notes + file_notes
            if no_features:
                outcome.notes.append(
                    f"{', '.join(n for n in suite.names if n in no_features)} skipped: the "
                    "dataset has no item categories (set dataset.item_features)"
                )
        except Exception as err:
            outcome.error = f"{type(err).__name__}: {str(err).strip().splitlines()[0]}"
            (folder / name).mkdir(parents=True, exist_ok=True)
            (folder / name / "error.txt").write_text(traceback.format_exc())
        finally:
            if scores is not None:
                scores.table.unpersist()
        outcome.info |= _model_info(model)
        outcomes[name] = outcome
        save_model(folder, outcome)  # now: an interruption keeps the models already run
        stage_log.stages.add_model(name, outcome.seconds)
    if mine is not None:
        mine.unpersist()
    result = SparkExperimentResult(
        dataset, split, suite, outcomes, folder, options.as_dict(), tables=tables
    )
    save(result)
    return result


def _restored(
    spark: SparkSession,
    kept: ModelOutcome,
    sp: SparkSplit,
    qrels: DataFrame,
    suite: MetricSuite,
    small: bool,
) -> tuple[ModelOutcome, DataFrame, DataFrame] | None:
    """A model an interrupted run finished, as :func:`run_models_spark` holds it after running
    it: the outcome with its driver copies (when ``small``), its lists in the truth's ids (what
    the comparison reads) and its per-user table, read back from the Parquet at its
    ``topk_uri`` / ``per_user_uri``; None when a table cannot be read (missing, torn)."""
    if kept.evaluation is None or "per_user_uri" not in kept.info:
        return None
    ev = kept.evaluation
    try:
        with _python_errors(), _quiet():
            lists = spark.read.parquet(str(kept.info["topk_uri"]))
            per_user = spark.read.parquet(str(kept.info["per_user_uri"]))
            lists.count(), per_user.count()  # every file opened: a missing part fails here
            evaluation = _evaluation(ev.summary, ev.counts, ev.options, per_user, suite, small)
            recs = _recs_copy(lists) if small else None
    except Exception:  # any failure to read: the model runs again
        return None
    outcome = replace(kept, evaluation=evaluation, recommendations=recs)
    return outcome, _in_truth_items(lists, sp, qrels), per_user


def _tied_rows(spark: SparkSession, lists: DataFrame, k: int, ties: Ties, uri: str) -> DataFrame:
    """The in-process ``_with_ties`` on Spark: rows (user, item, score, rank: the model's
    order) of each user's list and, for a user whose list reaches ``k`` items, of every item
    scoring at least its k-th score (``ties``), written to ``uri`` and read back."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as sf

    columns = ("user", "item", "score", sf.col("rank").cast("int").alias("rank"))
    lists = lists.select(*columns).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        kth = lists.filter(sf.col("rank") == k).select("user", sf.col("score").alias("_kth"))
        rest = lists.join(kth, "user", "left_anti")
        found = ties(kth).select(*columns)
        return write_read(spark, rest.unionByName(found), uri)
    finally:
        lists.unpersist()


def _top_spark(
    tied: DataFrame, k: int, options: metrics.Options, ids: DataFrame | None = None
) -> DataFrame:
    """The in-process ``_top_of`` on Spark: each user's ``k`` rows of ``tied`` the metric
    conventions put first (score descending, ties by ``tie_break`` with ids compared as
    ``id_order`` says; ``input_order``: the model's order, the rows' order in-process), as
    (user, rank, item, score). ``ids`` (item, _id): the ids the metrics read, when they differ
    from the listed ones (:func:`_truth_item_ids`); ties go by those, the lists keep their own."""
    from pyspark.sql import functions as sf

    from harness.spark.topk import topk_spark

    rows = tied.select("user", "item", "score", sf.col("rank").alias("_model_rank"))
    if ids is not None:
        rows = rows.join(sf.broadcast(ids), "item", "left")
    rows = _in_order(rows, options, "_model_rank")
    top = topk_spark(rows, k, options.tie_break, options.id_order, "item" if ids is None else "_id")
    return top.select("user", "rank", "item", "score")


def _in_order(rows: DataFrame, options: metrics.Options, rank: str = "rank") -> DataFrame:
    """``rows`` sorted by user and ``rank`` when the tie rule is the rows' order
    (``input_order``: the metrics then follow that order, as in-process), else as they are."""
    if options.tie_break != "input_order":
        return rows
    return rows.orderBy("user", rank)


def _truth_item_ids(lists: DataFrame, sp: SparkSplit, qrels: DataFrame) -> DataFrame | None:
    """(item, _id): each listed item's id as the truth's type, as the in-process
    ``harness.experiment._in_truth_ids`` gives it; None when the types agree. Text ids against
    integer truth ids (a score file with a non-integer id compares its ids as text): the item of
    the split's parts with that text, any other (outside the data) a distinct integer above
    every id of those parts (a miss, counted as one item). Integer ids against text truth ids:
    their decimal text."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    truth, listed = _id_kind(qrels, "item"), _id_kind(lists, "item")
    if truth == listed:
        return None
    if truth != "bigint":
        items = lists.select("item").distinct()
        return items.select("item", sf.col("item").cast("string").alias("_id"))
    known = _split_items_spark(sp, "bigint").select(
        sf.col("item").cast("string").alias("item"), sf.col("item").alias("_id")
    )
    row = known.agg(sf.max("_id")).first()
    top = max(int(row[0]) if row is not None and row[0] is not None else 0, 0)
    outside = lists.select("item").distinct().join(known, "item", "left_anti")
    number = sf.row_number().over(Window.orderBy("item"))  # the few items outside the data
    numbered = outside.select("item", (sf.lit(top) + number).cast("bigint").alias("_id"))
    return known.unionByName(numbered)


def _in_truth_items(lists: DataFrame, sp: SparkSplit, qrels: DataFrame) -> DataFrame:
    """``lists`` with item ids of the truth's type (:func:`_truth_item_ids`); unchanged when
    the types agree."""
    from pyspark.sql import functions as sf

    ids = _truth_item_ids(lists, sp, qrels)
    if ids is None or _id_kind(qrels, "item") != "bigint":
        return lists
    return lists.join(sf.broadcast(ids), "item", "left").select(
        "user", "rank", sf.col("_id").alias("item"), "score"
    )


def _split_items_spark(sp: SparkSplit, kind: str) -> DataFrame:
    """The distinct item ids of the split's parts (training, validation, test) as a column
    ``item`` cast to ``kind``."""
    from pyspark.sql import functions as sf

    item = sf.col("item").cast(kind).alias("item")
    parts = [p.select(item) for p in (sp.train, sp.valid, sp.test) if p is not None]
    known = parts[0]
    for part in parts[1:]:
        known = known.union(part)
    return known.distinct()


def _catalog_with_spark(lists: DataFrame, sp: SparkSplit, catalog: int, outcome: Any) -> int:
    """The in-process ``harness.experiment._catalog_with`` on Spark: the catalog of
    ``coverage@k``/``gini@k`` for ``lists`` is ``max(catalog, |parts' items ∪ listed
    items|)``, the parts being the split's training, validation and test events; the listed
    items in no part are counted in ``outcome.info`` (``items_outside_data``,
    ``catalog_items``) with the same note. Ids of two types (text and integers) compare as
    text. Two small jobs: the parts' distinct items, and the listed ones outside them."""
    from pyspark.sql import functions as sf

    parts = [p for p in (sp.train, sp.valid, sp.test) if p is not None]
    kinds = {_id_kind(p, "item") for p in [*parts, lists]}
    kind = "string" if "string" in kinds else "bigint"
    known = _split_items_spark(sp, kind)
    outside = lists.select(sf.col("item").cast(kind).alias("item")).distinct()
    outside = outside.join(known, "item", "left_anti")
    row = outside.agg(sf.count(sf.lit(1)).alias("n"), sf.min("item").alias("example")).first()
    n_outside, example = (int(row["n"]), row["example"]) if row is not None else (0, None)
    if not n_outside:
        return catalog
    size = max(catalog, known.count() + n_outside)
    outcome.info |= {"items_outside_data": n_outside, "catalog_items": size}
    outcome.notes.append(outside_note(n_outside, example, size, catalog))
    return size


def _catalog_auc(
    spark: SparkSession,
    model: Any,
    train: DataFrame,
    qrels: DataFrame,
    users: DataFrame,
    suite: MetricSuite,
    names: list[str],
    parts: list[tuple[str, list[str]]],
    where: str,
    *,
    buckets: int | None,
    batch_users: int,
    fit_sample: float | None,
    seed: int,
    info: dict[str, Any],
    counted: tuple[DataFrame, float] | None = None,
) -> metrics.Evaluation:
    """Score metrics over the whole catalog, as the in-process ``_rank_catalog`` and
    ``_catalog_scores`` compute them: every user's AUC counts from the model's score rows
    (:func:`harness.spark.models.plugin_auc_counts`), finished by the metrics' definitions on
    Spark (:func:`harness.spark.metrics.evaluate_auc_counts_spark`). Popularity, ranked natively
    on Spark, counts in Spark from its integer score histogram
    (:func:`harness.spark.models.popularity_auc_counts`: no training row on the driver).
    ``counted``: a plug-in's (counts, pooled wins) from its ranking pass
    (:func:`_plugin_catalog_pass`), used as they are."""
    from pyspark.sql import functions as sf

    from harness.models import PopularityModel
    from harness.spark.metrics import evaluate_auc_counts_spark
    from harness.spark.models import (
        fit_plugin,
        history,
        plugin_auc_counts,
        popularity_auc_counts,
    )

    native = type(model) is PopularityModel
    if counted is None and not native and not hasattr(model, "item_ids_"):
        fit_plugin(model, train, sample=fit_sample, seed=seed)
    opts = suite.evaluate_options()
    relevant = _relevant_spark(qrels, suite)
    pooled = any(metrics.parse(n).metric == "global_auc" for n in names)
    with _python_errors(), _quiet():
        if counted is not None:
            table, wins = counted
        elif native:
            table, wins = popularity_auc_counts(
                spark, train, users, relevant, exclude_seen=model.exclude_seen, pooled=pooled
            )
        else:
            table, wins = plugin_auc_counts(
                spark,
                model,
                users,
                relevant,
                pooled=pooled,
                batch_users=batch_users,
                seen=history(model, train, fit_sample),
            )
        uri = _uri(where, "scores.parquet")
        parts.append((uri, names))
        ev = evaluate_auc_counts_spark(
            table, names, pooled_wins=wins, buckets=buckets or 16, per_user_path=uri, **opts
        )
        ranked = table.agg(sf.sum("n_pos")).first()
        info["auc_relevant_unranked"] = relevant.count() - int((ranked[0] or 0) if ranked else 0)
    return ev


def _relevant_spark(qrels: DataFrame, suite: MetricSuite) -> DataFrame:
    """The (user, item) pairs of ``qrels`` relevant under the suite's threshold (the in-process
    ``_relevant_pairs``)."""
    from pyspark.sql import functions as sf

    threshold = metrics.resolve_options(**suite.evaluate_options()).relevance_threshold
    return qrels.filter(sf.col("relevance") >= threshold).select("user", "item")


def _plugin_scores_catalog(model: Any) -> bool:
    """True for a plug-in (fitted on the driver, not ranked natively) whose AUC counts over the
    whole catalog come from its ranking pass."""
    from harness.models import PopularityModel

    return type(model) is not PopularityModel and _scores_catalog_spark(model)


def _plugin_catalog_pass(
    spark: SparkSession,
    model: Any,
    train: DataFrame,
    qrels: DataFrame,
    users: DataFrame,
    suite: MetricSuite,
    names: list[str],
    *,
    batch_users: int,
    fit_sample: float | None,
    seed: int,
) -> tuple[DataFrame, tuple[DataFrame, float]]:
    """A catalog-scoring plug-in's top-k lists and its AUC counts over the catalog from one
    pass over its score rows (:func:`harness.spark.models.plugin_catalog`, the in-process
    ``recommend_with_auc``): ``(lists, (counts, pooled wins))``."""
    from harness.spark.models import fit_plugin, history, plugin_catalog

    fitted = fit_plugin(model, train, sample=fit_sample, seed=seed)
    pooled = any(metrics.parse(n).metric == "global_auc" for n in names)
    lists, table, wins = plugin_catalog(
        spark,
        fitted,
        users,
        _relevant_spark(qrels, suite),
        suite.k,
        pooled=pooled,
        item_kind=_id_kind(train, "item"),
        batch_users=batch_users,
        seen=history(fitted, train, fit_sample),
    )
    return lists, (table, wins)


def _evaluate_part(
    spark: SparkSession,
    where: str,
    parts: list[tuple[str, list[str]]],
    buckets: int | None,
    options: dict[str, Any],
    truth: DataFrame,
    run: DataFrame,
    names: list[str],
    part: str,
    **kw: Any,
) -> metrics.Evaluation:
    """:func:`harness.spark.evaluate_spark` of one part of a model's metrics, its per-user
    table written as ``where/<part>.parquet`` and recorded in ``parts``."""
    from harness.spark.metrics import evaluate_spark

    uri = _uri(where, f"{part}.parquet")
    parts.append((uri, names))
    return evaluate_spark(
        truth,
        run,
        names,
        spark=spark,
        buckets=buckets,
        per_user_path=uri,
        collect_per_user=False,
        **kw,
        **options,
    )


def _rating_spark(
    spark: SparkSession,
    model: Any,
    test: DataFrame,
    names: list[str],
    evaluate: Any,
) -> tuple[metrics.Evaluation | None, str | None]:
    """RMSE/MAE of a (fitted) model's predicted ratings on the test pairs, or why they are
    skipped: :func:`harness.experiment._rating_metrics` with the pairs and predictions in
    Spark (:func:`harness.spark.models.plugin_ratings`)."""
    from pyspark import StorageLevel

    from harness.spark.models import plugin_ratings

    if getattr(model, "predict_ratings", None) is None:
        return None, f"{', '.join(names)} skipped: {type(model).__name__} does not predict ratings"
    if "rating" not in test.columns:
        return None, f"{', '.join(names)} skipped: the test data has no ratings"
    pairs = _rating_pairs(test)
    # in-process order: pairs sorted by user, then item (the summation order of a user's errors)
    rated = plugin_ratings(spark, model, pairs).orderBy("user", "item")
    rated = rated.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        truth = rated.select("user", "item", "relevance")
        return evaluate(truth, rated.select("user", "item", "score"), names, "ratings"), None
    finally:
        rated.unpersist()


def _join_parts(spark: SparkSession, parts: list[tuple[str, list[str]]]) -> DataFrame:
    """The first per-user table with the others' columns joined by user (left: the in-process
    ``per_user.join(..., how="left")``)."""
    first_uri, _ = parts[0]
    table = spark.read.parquet(first_uri)
    for uri, names in parts[1:]:
        extra = spark.read.parquet(uri).select("user", *[f"`{n}`" for n in names])
        table = table.drop(*[n for n in names if n in table.columns]).join(extra, "user", "left")
    return table


def _evaluation(
    summary: dict[str, float],
    counts: dict[str, int],
    options: dict[str, Any],
    per_user: DataFrame,
    suite: MetricSuite,
    small: bool,
) -> metrics.Evaluation:
    """The run's ``Evaluation``: the suite's names in order (those not computed NaN), the
    per-user table read back when small (else empty, with the table's columns)."""
    names = list(suite.names)
    if small:
        with _quiet():
            table = _driver_copy(per_user).set_index("user").sort_index()
    else:
        columns = [c for c in per_user.columns if c != "user" and c in names]
        table = pd.DataFrame(columns=columns, dtype=float)
        table.index.name = "user"
    return metrics.Evaluation(summary, table.reindex(columns=names), options, counts)


def _recs_copy(lists: DataFrame) -> pd.DataFrame:
    """A model's top-k lists on the driver, as the in-process run keeps them."""
    frame = _driver_copy(lists).sort_values(["user", "rank"], kind="stable")
    return cast(pd.DataFrame, frame.reset_index(drop=True)[["user", "rank", "item", "score"]])


def compare_result_spark(
    result: ExperimentResult, spec: CompareSpec
) -> tuple[list[PairComparison], list[str]] | None:
    """Every model against the baseline from the run's Spark tables
    (:func:`harness.spark.compare.compare_models_spark`: per-user tables, segments, item
    buckets and user groups stay in Spark; human labels are read on the driver); None for a
    run not made on Spark."""
    from harness.spark.compare import compare_models_spark

    tables = getattr(result, "tables", None)
    if not isinstance(tables, SparkTables):
        return None
    ok = [n for n, o in result.outcomes.items() if o.evaluation is not None and n in tables.lists]
    pairs, notes = compare_models_spark(
        {n: tables.per_user[n] for n in ok},
        {n: result.outcomes[n].evaluation.summary for n in ok},  # type: ignore[union-attr]
        list(result.suite.names),
        spec,
        train=tables.train,
        qrels=tables.qrels,
        recs={n: tables.lists[n] for n in ok},
        options=result.suite.evaluate_options(),
        folder=_uri(tables.base, "comparison"),
        candidates=str(result.candidates.get("candidates.kind", "full")),
    )
    return pairs, notes
