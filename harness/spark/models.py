"""Model versions on Spark: each user's top-k list as a Spark DataFrame, never collected.

Every function returns ``(user, item, score, rank)`` rows (``rank`` 1-based, best first) of the
requested ``users`` (a one-column Spark DataFrame), with the conventions of the in-process models
(:mod:`harness.models.base`): ties by ascending item id (:func:`harness.spark.topk_spark`),
training items of a user excluded where the in-process model excludes them, no padding rows.

- :func:`precomputed_topk`: a score table (Parquet or CSV, any Spark path), as
  :class:`harness.models.PrecomputedScores` (ids normalized the same way, duplicates and
  non-finite scores refused with one line, ``exclude_seen`` off by default). Each
  ``precomputed_*`` function reads and checks the table itself, or takes the table
  :func:`checked_scores` read and checked once for a run's several uses.
- :func:`popularity_topk`: distinct training users per item, as
  :class:`harness.models.PopularityModel`. Each user is joined with only the ``k + seen`` most
  popular items, so the work is ``users × k + training pairs``, not ``users × items``.
- :class:`SparkALS` / :func:`als_topk`: Spark MLlib's ALS (implicit preferences) on the distinct
  training pairs; ids are mapped to dense integers in Spark (``zipWithIndex``), not on the driver.
- :func:`plugin_topk`: any harness ``Recommender`` fitted on the driver (:func:`fit_plugin`, on
  the training rows or a sample of them) and scored per partition with ``mapInPandas``: the
  fitted model is broadcast and each partition calls its batched ``recommend``. The model's own
  order is the ranking (as in-process, where the harness scores a list by its rank).

Given candidates (``candidates=sampled`` or ``file``: (user, item) rows), the ``*_candidates``
functions score each user's candidates instead, as the in-process ``score_items`` does: no
seen-item exclusion (the candidate set is the caller's choice), and a candidate the model cannot
score (an item absent from training; for precomputed scores a pair not in the file; for ALS a
user or item absent from training) is left out, returning ``(user, item, score)`` rows of the
scored candidates only. :func:`plugin_ratings` gives a plug-in's ``predict_ratings`` on Spark.

AUC counts over the whole catalog (``auc_scope=catalog``): :func:`popularity_auc_counts` in
Spark from the integer popularity histogram; :func:`plugin_auc_counts` from a fitted plug-in's
score rows, per group of users.

What reaches the driver: one aggregate row per check (precomputed), one number (ALS: the
largest seen count), for popularity's catalog AUC one row per distinct popularity value, and
for plug-ins the training rows they are fitted on (and, for ``global_auc`` over the catalog, one
score per relevant test pair, broadcast back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from harness.spark.io import _id_kind, _is_integer_type
from harness.spark.session import _quiet
from harness.spark.topk import topk_spark
from metrics.checks import require_int, require_positive
from metrics.sets import distinct, member

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from harness.models import Recommender

__all__ = [
    "SparkALS",
    "als_candidates",
    "als_topk",
    "checked_scores",
    "fit_plugin",
    "plugin_candidates",
    "plugin_catalog",
    "plugin_ratings",
    "plugin_topk",
    "popularity_auc_counts",
    "popularity_candidates",
    "popularity_tied",
    "popularity_topk",
    "precomputed_candidates",
    "precomputed_tied",
    "precomputed_topk",
    "seen_pairs",
]

#: The output columns of every function here.
COLUMNS = ("user", "item", "score", "rank")


def seen_pairs(train: DataFrame) -> DataFrame:
    """The distinct (user, item) pairs of the training events."""
    return train.select("user", "item").distinct()


def _lists(scores: DataFrame, users: DataFrame, train: DataFrame | None, k: int) -> DataFrame:
    """Top-``k`` of ``scores`` (user, item, score) for ``users``, ``train`` pairs excluded."""
    mine = scores.join(users.select("user").distinct(), "user", "left_semi")
    if train is not None:
        mine = mine.join(seen_pairs(train), ["user", "item"], "left_anti")
    return topk_spark(mine, k, "item_asc").select(*COLUMNS)


# ------------------------------------------------------------------------------ precomputed


def _normalized_id(df: DataFrame, name: str, source: str) -> tuple[Any, str]:
    """An id column normalized as :func:`harness.data.normalize_ids` does (text that is all
    canonical integers becomes ``bigint``) and its kind; the integer test is one aggregate."""
    from pyspark.sql import functions as sf
    from pyspark.sql import types as st

    from harness.errors import DataError
    from harness.spark.io import integral_id, stripped

    dtype = df.schema[name].dataType
    col = sf.col(name)
    if _is_integer_type(dtype):
        return col.cast("bigint"), "bigint"
    if isinstance(dtype, st.FloatType | st.DoubleType):
        frac = df.filter(sf.isnan(col) | (col != sf.floor(col))).limit(1).count()
        return (col.cast("string"), "string") if frac else (col.cast("bigint"), "bigint")
    if not isinstance(dtype, st.StringType):
        raise DataError(
            f"{source}: column {name!r} holds {dtype.simpleString()} values; "
            "ids must be integers or text"
        )
    text = stripped(col)
    integral, as_int = integral_id(text)  # "007" and "+7" are text, as in process
    not_int = df.filter(~integral).limit(1).count()
    return (text, "string") if not_int else (as_int, "bigint")


@dataclass(frozen=True)
class CheckedScores:
    """A score table read and checked once (:func:`checked_scores`) and persisted: the
    functions here take it in place of a path, so a run reads and checks a file once."""

    table: DataFrame


def checked_scores(
    spark: SparkSession,
    scores: Any,
    train: DataFrame,
    *,
    columns: dict[str, str] | None = None,
    fmt: str | None = None,
) -> CheckedScores:
    """The score table of ``scores`` (as :func:`precomputed_topk` reads it) checked once and
    persisted (memory and disk) for the run's stats, lists, ties or candidates; unpersist
    ``.table`` when done. 10M rows: each read and check took 13-26 s on ``local[2]``."""
    from pyspark import StorageLevel

    kinds = (_id_kind(train, "user"), _id_kind(train, "item"))
    table = _score_table(spark, scores, columns, fmt, kinds)
    return CheckedScores(table.persist(StorageLevel.MEMORY_AND_DISK))


def _score_table(
    spark: SparkSession,
    scores: Any,
    columns: dict[str, str] | None,
    fmt: str | None,
    train_kinds: tuple[str, str],
) -> DataFrame:
    """A score table (user, item, score) read and checked as ``PrecomputedScores.fit`` does:
    missing columns, null ids, non-finite scores and duplicate pairs are one-line errors.
    :class:`CheckedScores` were checked already (with the same training ids' kinds)."""
    from pyspark.sql import functions as sf

    from harness.errors import DataError
    from harness.spark.io import _spark_format, read_table

    if isinstance(scores, CheckedScores):
        return scores.table
    if isinstance(scores, str) or hasattr(scores, "__fspath__"):
        source = str(scores)
        kind = fmt or _spark_format(source, None)
        if kind == "csv" and source.lower().endswith(".tsv"):
            kind = "tsv"
        if kind not in ("csv", "tsv", "parquet"):
            raise DataError(f"{source}: format {kind!r} is not read on Spark (parquet, csv, tsv)")
        df = read_table(spark, source, kind, "PrecomputedScores path")  # as in process
    else:
        source, df = "scores", scores
    wanted = {n: (columns or {}).get(n, n) for n in ("user", "item", "score")}
    for ours, theirs in wanted.items():
        if theirs not in df.columns:
            label = f"'{ours}'" if ours == theirs else f"'{ours}' (file column '{theirs}')"
            raise DataError(f"{source}: missing column {label}; columns found: {df.columns}")
    df = df.select(*[sf.col(f"`{wanted[n]}`").alias(n) for n in ("user", "item", "score")])
    score = sf.expr("try_cast(`score` as double)")
    nulls = (sf.col("user").isNull() | sf.col("item").isNull()).cast("int")
    bad = (score.isNull() | sf.isnan(score) | (sf.abs(score) == float("inf"))).cast("int")
    row = df.agg(
        sf.count(sf.lit(1)).alias("n"),
        sf.sum(nulls).alias("nulls"),
        sf.sum(bad).alias("bad"),
        sf.first(sf.when(bad == 1, sf.col("score").cast("string")), True).alias("example"),
    ).first()
    if row is None or int(row["n"]) == 0:
        raise DataError(f"{source}: no rows (0 data rows)")
    if row["nulls"]:
        raise DataError(f"{source}: columns 'user'/'item' have {row['nulls']} null id(s)")
    if row["bad"]:
        raise DataError(
            f"{source}: column 'score' has {row['bad']} missing, non-numeric or non-finite "
            f"score(s), e.g. {row['example']!r}"
        )
    user, user_kind = _normalized_id(df, "user", source)
    item, item_kind = _normalized_id(df, "item", source)
    # ints when the file's and the training ids are both integers, else both compared as text
    user_kind = "bigint" if (user_kind, train_kinds[0]) == ("bigint", "bigint") else "string"
    item_kind = "bigint" if (item_kind, train_kinds[1]) == ("bigint", "bigint") else "string"
    table = df.select(
        user.cast(user_kind).alias("user"),
        item.cast(item_kind).alias("item"),
        score.alias("score"),
    )
    dup = table.groupBy("user", "item").count().filter(sf.col("count") > 1)
    first = dup.agg(sf.count(sf.lit(1)).alias("n"), sf.first(sf.struct("user", "item"))).first()
    if first is not None and int(first[0]):
        pair = first[1]
        raise DataError(
            f"{source}: columns 'user' and 'item' have {int(first[0])} duplicate (user, item) "
            f"pair(s), e.g. user={pair['user']!r} item={pair['item']!r}"
        )
    return table


def precomputed_topk(
    spark: SparkSession,
    scores: Any,
    train: DataFrame,
    users: DataFrame,
    k: int,
    *,
    exclude_seen: bool = False,
    columns: dict[str, str] | None = None,
    fmt: str | None = None,
) -> DataFrame:
    """Each user's top-``k`` rows of a score table (a Parquet/CSV path or a Spark DataFrame of
    user, item, score), as :class:`harness.models.PrecomputedScores` ranks them.

    Users without a row in the table get no list; items unknown to training stay (the table
    decides); ``exclude_seen`` drops the user's training items first. Ids compare as integers
    when the table's and the training ids are both integers, else as text.
    """
    require_int("k", k)
    kinds = (_id_kind(train, "user"), _id_kind(train, "item"))
    table = _score_table(spark, scores, columns, fmt, kinds)
    from pyspark.sql import functions as sf

    wanted = users.select(sf.col("user").cast(table.schema["user"].dataType).alias("user"))
    seen = None
    if exclude_seen:
        seen = train.select(
            sf.col("user").cast(table.schema["user"].dataType).alias("user"),
            sf.col("item").cast(table.schema["item"].dataType).alias("item"),
        )
    return _lists(table, wanted, seen, k)


def precomputed_stats(
    spark: SparkSession,
    scores: Any,
    train: DataFrame,
    users: DataFrame | None,
    *,
    columns: dict[str, str] | None = None,
    fmt: str | None = None,
) -> tuple[dict[str, int], object]:
    """``PrecomputedScores.stats_`` of a score table on Spark: after ``fit`` (rows, users and
    items in the file, those absent from training, rows that are training pairs) and, with
    ``users`` (the users ranked), after ``recommend`` (users requested, users without a list);
    and the smallest user without a list (None: none), as the in-process note names it."""
    from pyspark.sql import functions as sf

    kinds = (_id_kind(train, "user"), _id_kind(train, "item"))
    table = _score_table(spark, scores, columns, fmt, kinds)
    own = not isinstance(scores, CheckedScores)  # cached here, for this function's counts
    if own:
        table = table.cache()
    utype, itype = table.schema["user"].dataType, table.schema["item"].dataType
    known = train.select(
        sf.col("user").cast(utype).alias("user"), sf.col("item").cast(itype).alias("item")
    ).distinct()
    file_users = table.select("user").distinct()
    file_items = table.select("item").distinct()
    stats = {
        "rows": table.count(),
        "users_in_file": file_users.count(),
        "items_in_file": file_items.count(),
        "users_not_in_train": file_users.join(known.select("user"), "user", "left_anti")
        .distinct()
        .count(),
        "items_unknown": file_items.join(known.select("item"), "item", "left_anti")
        .distinct()
        .count(),
        "rows_seen": table.join(known, ["user", "item"], "left_semi").count(),
        "users_without_list": 0,
    }
    example = None
    if users is not None:
        wanted = users.select("user", sf.col("user").cast(utype).alias("_u")).distinct()
        missing = wanted.join(file_users.withColumnRenamed("user", "_u"), "_u", "left_anti")
        row = missing.agg(sf.count(sf.lit(1)).alias("n"), sf.min("user").alias("first")).first()
        stats["users_requested"] = wanted.count()
        stats["users_without_list"] = int(row["n"]) if row is not None else 0
        example = row["first"] if row is not None and stats["users_without_list"] else None
    if own:
        table.unpersist()
    return {k: int(v) for k, v in stats.items()}, example


def _tied_of(rows: DataFrame, seen: DataFrame | None) -> DataFrame:
    """The ``rows`` (user, item, score, ``_kth``: the user's k-th score) scoring at least
    ``_kth``, ``seen`` pairs excluded, as (user, item, score, rank); ``rank`` is the model's
    order (score descending, ties by ascending item id)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    rows = rows.filter(sf.col("score") >= sf.col("_kth"))
    if seen is not None:
        rows = rows.join(seen_pairs(seen), ["user", "item"], "left_anti")
    order = Window.partitionBy("user").orderBy(sf.col("score").desc(), sf.col("item").asc())
    return rows.select("user", "item", "score", sf.row_number().over(order).alias("rank"))


def precomputed_tied(
    spark: SparkSession,
    scores: Any,
    train: DataFrame,
    kth: DataFrame,
    *,
    exclude_seen: bool = False,
    columns: dict[str, str] | None = None,
    fmt: str | None = None,
) -> DataFrame:
    """Each ``kth`` user's rows of a score table (as :func:`precomputed_topk` reads it) scoring
    at least the user's k-th score ``_kth`` (user, item, score, rank: the model's order), in
    one pass: every item tied with the k-th, for a tie rule other than the model's."""
    from pyspark.sql import functions as sf

    kinds = (_id_kind(train, "user"), _id_kind(train, "item"))
    table = _score_table(spark, scores, columns, fmt, kinds)
    user_type, item_type = table.schema["user"].dataType, table.schema["item"].dataType
    kth = kth.select(sf.col("user").cast(user_type).alias("user"), "_kth")
    seen = None
    if exclude_seen:
        seen = train.select(
            sf.col("user").cast(user_type).alias("user"),
            sf.col("item").cast(item_type).alias("item"),
        )
    return _tied_of(table.join(kth, "user"), seen)


def precomputed_candidates(
    spark: SparkSession,
    scores: Any,
    train: DataFrame,
    candidates: DataFrame,
    *,
    columns: dict[str, str] | None = None,
    fmt: str | None = None,
) -> DataFrame:
    """The score table's score of each candidate (``PrecomputedScores.score_items``): a pair
    not in the table is left out; ids compare as in :func:`precomputed_topk`."""
    from pyspark.sql import functions as sf

    kinds = (_id_kind(train, "user"), _id_kind(train, "item"))
    table = _score_table(spark, scores, columns, fmt, kinds)
    keyed = candidates.select(
        "user",
        "item",
        sf.col("user").cast(table.schema["user"].dataType).alias("_u"),
        sf.col("item").cast(table.schema["item"].dataType).alias("_i"),
    )
    found = table.select(sf.col("user").alias("_u"), sf.col("item").alias("_i"), "score")
    return keyed.join(found, ["_u", "_i"]).select("user", "item", "score")


# ------------------------------------------------------------------------------- popularity


def popularity_topk(
    train: DataFrame, users: DataFrame, k: int, *, exclude_seen: bool = True
) -> DataFrame:
    """Most popular first (distinct training users per item, ties by item id), as
    :class:`harness.models.PopularityModel`; a user's training items excluded.

    A user with ``s`` seen items needs at most the ``k + s`` most popular items, so each user is
    joined with that prefix of the item ranking only (a broadcast range join on the rank).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    require_int("k", k)
    pairs = seen_pairs(train)
    popularity = pairs.groupBy("item").agg(sf.count(sf.lit(1)).cast("double").alias("score"))
    by_rank = Window.orderBy(sf.col("score").desc(), sf.col("item").asc())
    ranked = popularity.withColumn("_pop_rank", sf.row_number().over(by_rank))
    wanted = users.select("user").distinct()
    if exclude_seen:
        counts = pairs.groupBy("user").agg(sf.count(sf.lit(1)).alias("_seen"))
        wanted = wanted.join(counts, "user", "left").fillna(0, subset=["_seen"])
    else:
        wanted = wanted.withColumn("_seen", sf.lit(0))
    prefix = wanted.join(
        sf.broadcast(ranked), sf.col("_pop_rank") <= sf.col("_seen") + sf.lit(int(k))
    ).select("user", "item", "score")
    return _lists(prefix, wanted, train if exclude_seen else None, k)


def popularity_tied(train: DataFrame, kth: DataFrame, *, exclude_seen: bool = True) -> DataFrame:
    """Each ``kth`` user's items (as :func:`popularity_topk` ranks them) scoring at least the
    user's k-th score ``_kth`` (user, item, score, rank: the model's order), in one pass:
    every item tied with the k-th, for a tie rule other than the model's. The popularity table
    (one row per item) is broadcast."""
    from pyspark.sql import functions as sf

    pairs = seen_pairs(train)
    popularity = pairs.groupBy("item").agg(sf.count(sf.lit(1)).cast("double").alias("score"))
    rows = kth.join(sf.broadcast(popularity), sf.col("score") >= sf.col("_kth"))
    return _tied_of(rows, pairs if exclude_seen else None)


def popularity_candidates(train: DataFrame, candidates: DataFrame) -> DataFrame:
    """Each candidate's popularity (distinct training users of the item), as
    ``PopularityModel.score_items``: the same score for every user, nothing excluded; an item
    absent from training is left out."""
    from pyspark.sql import functions as sf

    popularity = (
        seen_pairs(train).groupBy("item").agg(sf.count(sf.lit(1)).cast("double").alias("score"))
    )
    return (
        candidates.select("user", "item").join(popularity, "item").select("user", "item", "score")
    )


# ---------------------------------------------------------------------------------- MLlib ALS


def _dense_ids(values: DataFrame, name: str) -> DataFrame:
    """Distinct ids of column ``name`` with a dense ``int`` index (``zipWithIndex``, in Spark)."""
    from pyspark.sql import types as st

    distinct = values.select(name).distinct()
    schema = st.StructType(
        [distinct.schema[name], st.StructField(f"{name}_idx", st.IntegerType(), False)]
    )
    with _quiet():
        indexed = distinct.rdd.zipWithIndex().map(lambda pair: (pair[0][0], int(pair[1])))
        return indexed.toDF(schema)


@dataclass(frozen=True)
class SparkALS:
    """Spark MLlib's ALS with implicit preferences (``pyspark.ml.recommendation.ALS``): the
    existing distributed implementation, ``engine=spark`` only. Parameters are MLlib's
    (``rank``, ``regParam``, ``alpha``, ``maxIter``); every distinct training pair counts 1."""

    factors: int = 64
    regularization: float = 0.05
    alpha: float = 20.0
    iterations: int = 15
    seed: int = 0
    exclude_seen: bool = True
    block_size: int = 4096

    def __post_init__(self) -> None:
        require_int("factors", self.factors)
        require_int("iterations", self.iterations)
        require_int("block_size", self.block_size)
        require_positive("regularization", self.regularization)
        require_positive("alpha", self.alpha)

    def fit(self, train: Any) -> SparkALS:
        """Refused in-process: this model runs on Spark only."""
        raise ValueError("SparkALS (Spark MLlib's ALS) runs only with engine=spark")

    def topk(self, train: DataFrame, users: DataFrame, k: int) -> DataFrame:
        """Fit on ``train`` and return each requested user's top-``k`` (see :func:`als_topk`)."""
        return als_topk(self, train, users, k)


def als_topk(
    model: SparkALS, train: DataFrame, users: DataFrame, k: int, fit: Any = None
) -> DataFrame:
    """MLlib ALS fitted on the distinct training pairs; each user's top-``k`` unseen items.

    ``recommendForUserSubset`` gives ``k + s`` items per user (``s``: the largest seen count
    among the requested users, capped by the catalog) so that ``k`` remain after excluding seen
    items. Users absent from training get no list (ALS has no factors for them). ``fit``: a
    fit of ``model`` on ``train`` already made (:func:`_als_fit`), reused (deeper lists).
    """
    from pyspark.sql import functions as sf

    require_int("k", k)
    fitted, pairs, user_idx, item_idx = fit if fit is not None else _als_fit(model, train)
    wanted = users.select("user").distinct().join(user_idx, "user")
    depth = k
    if model.exclude_seen:
        seen = pairs.join(wanted.select("user"), "user", "left_semi").groupBy("user").count()
        most = seen.agg(sf.max("count")).first()
        depth = k + int(most[0] or 0) if most is not None else k
    n_items = item_idx.count()
    recs = fitted.recommendForUserSubset(wanted.select("user_idx"), min(depth, n_items))
    flat = recs.select("user_idx", sf.explode("recommendations").alias("r")).select(
        "user_idx",
        sf.col("r.item_idx").alias("item_idx"),
        sf.col("r.rating").cast("double").alias("score"),
    )
    scores = flat.join(user_idx, "user_idx").join(item_idx, "item_idx")
    return _lists(
        scores.select("user", "item", "score"), wanted, train if model.exclude_seen else None, k
    )


def als_candidates(model: SparkALS, train: DataFrame, candidates: DataFrame) -> DataFrame:
    """MLlib ALS fitted as in :func:`als_topk`; its predicted preference of each candidate
    (``ALSModel.transform``), nothing excluded. A candidate whose user or item is absent from
    training has no factors and is left out."""
    from pyspark.sql import functions as sf

    fitted, _, user_idx, item_idx = _als_fit(model, train)
    indexed = candidates.select("user", "item").join(user_idx, "user").join(item_idx, "item")
    predicted = fitted.transform(indexed)
    return predicted.select(
        "user", "item", sf.col("prediction").cast("double").alias("score")
    ).filter(~sf.isnan("score"))


def _als_fit(model: SparkALS, train: DataFrame) -> tuple[Any, DataFrame, DataFrame, DataFrame]:
    """MLlib ALS fitted on the distinct training pairs: (fitted model, the pairs, the user and
    item id maps)."""
    from pyspark.ml.recommendation import ALS
    from pyspark.sql import functions as sf

    pairs = seen_pairs(train).withColumn("rating", sf.lit(1.0)).cache()
    user_idx = _dense_ids(pairs, "user").cache()
    item_idx = _dense_ids(pairs, "item").cache()
    for table, what in ((user_idx, "users"), (item_idx, "items")):
        if table.count() >= 2**31 - 1:
            raise ValueError(f"SparkALS: more than 2**31 - 1 training {what} (MLlib needs int ids)")
    indexed = pairs.join(user_idx, "user").join(item_idx, "item")
    als = ALS(
        rank=model.factors,
        maxIter=model.iterations,
        regParam=float(model.regularization),
        alpha=float(model.alpha),
        implicitPrefs=True,
        userCol="user_idx",
        itemCol="item_idx",
        ratingCol="rating",
        seed=model.seed,
        coldStartStrategy="drop",
        blockSize=model.block_size,
    )
    return als.fit(indexed), pairs, user_idx, item_idx


# ----------------------------------------------------------------------------- plug-in models


def fit_plugin(
    model: Recommender, train: DataFrame, *, sample: float | None = None, seed: int = 0
) -> Recommender:
    """Fit a harness ``Recommender`` on the driver, on the training rows or a ``sample``
    fraction of them (``DataFrame.sample``, seeded): those rows are collected."""
    if sample is not None:
        require_positive("sample", sample)
        if sample < 1:
            train = train.sample(fraction=float(sample), seed=seed)
    with _quiet():
        frame = pd.DataFrame(train.toPandas())
    for c in ("user", "item"):
        if frame[c].dtype != np.int64:
            frame[c] = frame[c].astype(object)
    model.fit(frame)
    return model


def _recommend_partition(model: Any, k: int, batch: int, item_kind: str, frames: Any) -> Any:
    """``mapInPandas`` body: each batch of users → the fitted model's lists, padding dropped.
    Rows with a ``_seen`` list of ``_n`` items (a model fitted on a sample): the top ``k + _n``
    less the seen items, cut to ``k`` (users in batches of similar ``_n``)."""
    from harness.models import checked_lists, padding_mask

    for frame in frames:
        users = frame["user"].to_numpy()
        if users.dtype != np.int64:
            users = users.astype(object)
        seen = n_seen = None
        if "_seen" in frame.columns:
            n_seen = frame["_n"].to_numpy(dtype=np.int64)
            by = np.argsort(n_seen, kind="stable")
            users, seen, n_seen = users[by], frame["_seen"].to_numpy()[by], n_seen[by]
        for start in range(0, users.size, batch):
            part = users[start : start + batch]
            extra = 0 if n_seen is None else int(n_seen[start : start + batch].max(initial=0))
            ids, scores = checked_lists(model, part, k + extra, *model.recommend(part, k + extra))
            width = ids.shape[1]
            keep = ~padding_mask(scores)
            if extra and seen is not None and n_seen is not None:
                stop = start + part.size
                keep &= ~_seen_cells(ids, seen[start:stop], n_seen[start:stop])
                keep &= np.cumsum(keep, axis=1) <= k
            rank = np.cumsum(keep, axis=1, dtype=np.int32)[keep]
            keep = keep.ravel()
            items = ids.ravel()[keep]
            yield pd.DataFrame(
                {
                    "user": np.repeat(part, width)[keep],
                    "item": items.astype(np.int64) if item_kind == "bigint" else items,
                    "score": scores.ravel()[keep],
                    "rank": rank,
                }
            )


def _seen_cells(ids: np.ndarray, seen: np.ndarray, n_seen: np.ndarray) -> np.ndarray:
    """``bool[n, w]``: whether ``ids[r, c]`` is among row ``r``'s ``seen`` items (``n_seen[r]``
    of them; a list, or None when 0), by one factorization of both and int keys."""
    n, w = ids.shape
    flat = ids.ravel()
    if n_seen.any():
        flat = np.concatenate([flat, *seen[n_seen > 0].tolist()])
    codes, uniques = pd.factorize(flat if flat.dtype == np.int64 else flat.astype(object))
    span = max(len(uniques), 1)
    cells = np.repeat(np.arange(n, dtype=np.int64), w) * span + codes[: n * w]
    mine = np.repeat(np.arange(n, dtype=np.int64), n_seen) * span + codes[n * w :]
    return member(cells, mine).reshape(n, w)


def plugin_topk(
    spark: SparkSession,
    model: Recommender,
    users: DataFrame,
    k: int,
    *,
    item_kind: str,
    batch_users: int = 4096,
    seen: DataFrame | None = None,
) -> DataFrame:
    """Each user's top-``k`` from a fitted harness ``Recommender``, scored per partition with
    ``mapInPandas``: the model is broadcast once, each partition calls its ``recommend`` on
    batches of ``batch_users`` users. Ranks are the model's own order. ``seen`` (user, item):
    items left out of the lists as well (a model fitted on a sample of the training rows
    excludes only those; see :func:`history`)."""
    from pyspark.sql import functions as sf

    require_int("k", k)
    require_int("batch_users", batch_users)
    user_kind = _id_kind(users, "user")
    shared = spark.sparkContext.broadcast(model)
    schema = f"user {user_kind}, item {item_kind}, score double, rank int"

    def run(frames: Any) -> Any:
        return _recommend_partition(shared.value, k, batch_users, item_kind, frames)

    mine = users.select("user").distinct()
    if seen is not None:
        lists = seen_pairs(seen).groupBy("user").agg(sf.collect_list("item").alias("_seen"))
        n = sf.greatest(sf.coalesce(sf.size("_seen"), sf.lit(0)), sf.lit(0))  # no list: 0
        mine = mine.join(lists, "user", "left").select("user", "_seen", n.alias("_n"))
    return mine.mapInPandas(run, schema)


def history(model: Any, train: DataFrame, sample: float | None) -> DataFrame | None:
    """The training rows whose items a plug-in must leave out of its lists beyond those it was
    fitted on: every row when it is fitted on a ``sample`` (< 1) and excludes seen items (as
    the in-process model, fitted on every row, does), else None."""
    if sample is None or sample >= 1 or not getattr(model, "exclude_seen", False):
        return None
    return train.select("user", "item")


def _id_dtype(column: pd.Series) -> Any:
    """``int64`` for integer ids, else ``object`` (the in-process id types; Arrow hands text as
    pandas' ``str`` dtype)."""
    return np.int64 if pd.api.types.is_integer_dtype(column.dtype) else object


def _score_group(model: Any, frame: pd.DataFrame) -> pd.DataFrame:
    """``applyInPandas`` body: one group's candidates scored by the fitted model's
    ``score_items`` (:func:`harness.experiment._candidate_run`: unscorable rows left out)."""
    from harness.experiment import _candidate_run

    cand = pd.DataFrame(
        {c: pd.Series(frame[c].to_numpy(), dtype=_id_dtype(frame[c])) for c in ("user", "item")}
    )
    users = np.sort(pd.unique(cand["user"]))
    run, _ = _candidate_run(model, cand, users)
    return pd.DataFrame(
        {
            "user": pd.Series(run["user"].to_numpy(), dtype=cand["user"].dtype),
            "item": pd.Series(run["item"].to_numpy(), dtype=cand["item"].dtype),
            "score": run["score"].to_numpy(dtype=np.float64),
        }
    )


def plugin_candidates(
    spark: SparkSession,
    model: Recommender,
    candidates: DataFrame,
    *,
    batch_users: int = 4096,
) -> DataFrame:
    """Each candidate's score from a fitted harness ``Recommender`` (its ``score_items``, as
    in-process): the model is broadcast once and the candidates are scored in groups of about
    ``batch_users`` users (``applyInPandas``); rows it cannot score (NaN) are left out."""
    from pyspark.sql import functions as sf

    require_int("batch_users", batch_users)
    if getattr(model, "score_items", None) is None:
        raise TypeError(
            f"{type(model).__name__} cannot score given candidates: it has no score_items method"
        )
    users = candidates.select("user").distinct().count()
    groups = max(1, -(-users // batch_users))
    shared = spark.sparkContext.broadcast(model)
    kinds = (_id_kind(candidates, "user"), _id_kind(candidates, "item"))
    schema = f"user {kinds[0]}, item {kinds[1]}, score double"

    def run(frame: pd.DataFrame) -> pd.DataFrame:
        return _score_group(shared.value, frame)

    keyed = candidates.select(
        "user", "item", sf.pmod(sf.xxhash64("user"), sf.lit(groups)).alias("_g")
    )
    return keyed.groupBy("_g").applyInPandas(run, schema)


def _predict_partition(model: Any, frames: Any) -> Any:
    """``mapInPandas`` body: the fitted model's ``predict_ratings`` of each (user, item) row."""
    for frame in frames:
        users, items = frame["user"].to_numpy(), frame["item"].to_numpy()
        if users.dtype != np.int64:
            users = users.astype(object)
        if items.dtype != np.int64:
            items = items.astype(object)
        predicted = np.asarray(model.predict_ratings(users, items), dtype=np.float64)
        yield frame.assign(score=predicted)


def plugin_ratings(spark: SparkSession, model: Any, pairs: DataFrame) -> DataFrame:
    """The fitted model's predicted rating of each (user, item, ...) row, as a ``score``
    column added per partition (``mapInPandas``; the model broadcast once)."""
    shared = spark.sparkContext.broadcast(model)
    fields = [f"`{f.name}` {f.dataType.simpleString()}" for f in pairs.schema.fields]
    schema = ", ".join([*fields, "score double"])

    def run(frames: Any) -> Any:
        return _predict_partition(shared.value, frames)

    return pairs.mapInPandas(run, schema)


# ------------------------------------------------------------- AUC counts over the catalog


def _relevant_codes(model: Any, users: np.ndarray, frame: pd.DataFrame) -> np.ndarray:
    """The (row, item code) pairs of ``frame``'s relevant (``_u``, ``_i``) rows among ``users``
    (:meth:`harness.models.BaseRecommender.recommend_with_auc`'s ``pairs``)."""
    ru = pd.Series(frame["_u"].to_numpy(), dtype=_id_dtype(frame["_u"])).to_numpy()
    ri = pd.Series(frame["_i"].to_numpy(), dtype=_id_dtype(frame["_i"])).to_numpy()
    rows, cols = pd.Index(users).get_indexer(ru), model._item_index.get_indexer(ri)
    return np.unique(np.stack([rows, cols])[:, (rows >= 0) & (cols >= 0)], axis=1)


def _pair_codes(model: Any, users: np.ndarray, frame: pd.DataFrame) -> tuple[np.ndarray, Any]:
    """A group's relevant pairs (:func:`_relevant_codes`) and, when ``frame`` also holds seen
    rows (``_s == 1``, see :func:`plugin_catalog`), their items as a CSR matrix (one row per
    user, the model's item codes) for ``_rank``'s ``seen``; else None."""
    if "_s" not in frame.columns:
        return _relevant_codes(model, users, frame), None
    is_seen = frame["_s"].to_numpy() == 1
    rows, cols = _relevant_codes(model, users, frame[is_seen])
    seen = sp.csr_matrix(
        (np.ones(rows.size), (rows, cols)), shape=(users.size, model.item_ids_.size)
    )
    return _relevant_codes(model, users, frame[~is_seen]), seen


def _group_users(frame: pd.DataFrame) -> np.ndarray:
    """A group's distinct users, sorted, with the in-process id type."""
    return np.sort(pd.unique(pd.Series(frame["user"].to_numpy(), dtype=_id_dtype(frame["user"]))))


def _auc_group(
    model: Any, k: int, item_kind: str, users: pd.DataFrame, relevant: pd.DataFrame
) -> pd.DataFrame:
    """``applyInPandas`` body: one group's AUC counts over the catalog (the model's score rows,
    seen items excluded as it excludes them), the scores of its relevant candidates and, with
    ``k > 0``, each user's top-``k`` list ranked from the same score rows (padding dropped)."""
    from harness.models import padding_mask

    ids = _group_users(users)
    pairs, seen = _pair_codes(model, ids, relevant)
    at, scores, counts, scored = model._rank(ids, max(k, 1), model.exclude_seen, pairs, seen)
    items = model._ids_at(at)
    n, m = ids.size, scored.size
    if k > 0:
        scores = np.asarray(scores, dtype=np.float64)
        keep = ~padding_mask(scores).ravel()
        width = scores.shape[1]
        listed = np.asarray(items).ravel()[keep]
        list_users = np.repeat(ids, width)[keep]
        list_scores = scores.ravel()[keep]
        ranks = np.tile(np.arange(1, width + 1, dtype=np.int32), n)[keep]
    else:
        listed = np.zeros(0, dtype=np.int64 if item_kind == "bigint" else object)
        list_users, list_scores, ranks = ids[:0], np.zeros(0), np.zeros(0, np.int32)
    r = listed.size
    # count and score rows carry a placeholder item (filtered out by _kind)
    filler = np.zeros(n + m, dtype=np.int64) if item_kind == "bigint" else np.full(n + m, "")
    return pd.DataFrame(
        {
            "_kind": np.r_[np.zeros(n, np.int32), np.ones(m, np.int32), np.full(r, 2, np.int32)],
            # score rows: any user of the group
            "user": pd.Series(np.r_[ids, np.repeat(ids[:1], m), list_users], dtype=ids.dtype),
            "wins": np.r_[counts.wins, np.zeros(m + r)],
            "n_pos": np.r_[np.asarray(counts.n_pos, np.float64), np.zeros(m + r)],
            "n_neg": np.r_[np.asarray(counts.n_neg, np.float64), np.zeros(m + r)],
            "score": np.r_[np.full(n, np.nan), scored, list_scores],
            "item": pd.Series(
                np.r_[filler, listed.astype(np.int64) if item_kind == "bigint" else listed],
                dtype=np.int64 if item_kind == "bigint" else object,
            ),
            "rank": np.r_[np.zeros(n + m, np.int32), ranks],
        }
    )


def _pooled_group(
    model: Any, relevant_scores: Any, users: pd.DataFrame, relevant: pd.DataFrame
) -> pd.DataFrame:
    """``applyInPandas`` body: the wins of every relevant candidate (``relevant_scores``, all
    users') over this group's irrelevant candidates (``BaseRecommender._pooled_wins``)."""
    ids = _group_users(users)
    pairs, seen = _pair_codes(model, ids, relevant)
    wins = model._pooled_wins(ids, model.exclude_seen, pairs, relevant_scores.value, seen)
    return pd.DataFrame({"wins": [float(wins)]})


def plugin_auc_counts(
    spark: SparkSession,
    model: Any,
    users: DataFrame,
    relevant: DataFrame,
    *,
    pooled: bool,
    batch_users: int = 4096,
    seen: DataFrame | None = None,
) -> tuple[DataFrame, float]:
    """Each user's AUC counts over the whole catalog from a fitted model that scores it
    (``recommend_with_auc``'s, from the same score rows, per group of about ``batch_users``
    users): a Spark table (user, wins, n_pos, n_neg), and with ``pooled`` the wins of every
    relevant candidate over every user's irrelevant ones (``global_auc``'s numerator; NaN
    otherwise). As in-process, the pooled pass compares each group's score rows with the
    relevant candidates' scores of all users, which are collected and broadcast (one float per
    relevant pair). ``seen``: as :func:`plugin_catalog`'s."""
    _, table, wins = plugin_catalog(
        spark, model, users, relevant, 0, pooled=pooled, batch_users=batch_users, seen=seen
    )
    return table, wins


def plugin_catalog(
    spark: SparkSession,
    model: Any,
    users: DataFrame,
    relevant: DataFrame,
    k: int,
    *,
    pooled: bool,
    item_kind: str = "bigint",
    batch_users: int = 4096,
    seen: DataFrame | None = None,
) -> tuple[DataFrame, DataFrame, float]:
    """:func:`plugin_auc_counts` and, from the same pass over the catalog (the in-process
    ``recommend_with_auc``), each user's top-``k`` list (user, item, score, rank; the lists
    :func:`plugin_topk` gives; none with ``k=0``): ``(lists, counts, pooled wins)``. The pass is
    persisted (memory and disk), so the catalog is scored once for both (twice with
    ``pooled``, as in-process). ``item_kind``: the lists' item type (the training ids').
    ``seen`` (user, item): items excluded from the lists and the candidates as well, sent to
    each group with its relevant pairs (see :func:`history`)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as sf

    require_int("k", k, minimum=0)
    require_int("batch_users", batch_users)
    n_users = users.select("user").distinct().count()
    groups = max(1, -(-n_users // batch_users))
    mine = users.select("user").distinct()
    mine = mine.select("user", sf.pmod(sf.xxhash64("user"), sf.lit(groups)).alias("_g"))
    # the relevant pairs under new column names: both sides may come from one table (the
    # truth), and Spark refuses a cogroup whose sides share column references
    theirs = relevant.select(sf.col("user").alias("_u"), sf.col("item").alias("_i"))
    if seen is not None:  # flagged _s = 1, the relevant pairs _s = 0
        rows = seen_pairs(seen).join(mine.select("user"), "user", "left_semi")
        rows = rows.select(sf.col("user").alias("_u"), sf.col("item").alias("_i"), sf.lit(1))
        theirs = theirs.select("_u", "_i", sf.lit(0)).union(rows).toDF("_u", "_i", "_s")
    theirs = theirs.select("*", sf.pmod(sf.xxhash64("_u"), sf.lit(groups)).alias("_g"))
    by_user, by_pair = mine.groupBy("_g"), theirs.groupBy("_g")
    shared = spark.sparkContext.broadcast(model)
    user_kind = _id_kind(users, "user")
    schema = (
        f"_kind int, user {user_kind}, wins double, n_pos double, n_neg double, score double, "
        f"item {item_kind}, rank int"
    )

    def counts(u: pd.DataFrame, r: pd.DataFrame) -> pd.DataFrame:
        return _auc_group(shared.value, k, item_kind, u, r)

    with _quiet():
        out = by_user.cogroup(by_pair).applyInPandas(counts, schema)
        out = out.persist(StorageLevel.MEMORY_AND_DISK)
    table = out.filter(sf.col("_kind") == 0).select("user", "wins", "n_pos", "n_neg")
    lists = out.filter(sf.col("_kind") == 2).select(*COLUMNS)
    if not pooled:
        return lists, table, float("nan")
    with _quiet():
        scored = pd.DataFrame(out.filter(sf.col("_kind") == 1).select("score").toPandas())
    relevant_scores = spark.sparkContext.broadcast(scored["score"].to_numpy(dtype=np.float64))

    def wins(u: pd.DataFrame, r: pd.DataFrame) -> pd.DataFrame:
        return _pooled_group(shared.value, relevant_scores, u, r)

    with _quiet():
        parts = by_user.cogroup(by_pair).applyInPandas(wins, "wins double").collect()
    return lists, table, float(sum(row["wins"] for row in parts))


def _catalog_below(hist: pd.DataFrame) -> pd.DataFrame:
    """Per popularity value ``s`` of a histogram (``s``, ``n``: items with that score): twice
    the items scored below it plus the items scored equal (``lt2``), i.e. twice one relevant
    candidate's wins over the whole catalog, ties counting 1/2."""
    hist = hist.sort_values("s", kind="stable").reset_index(drop=True)
    n = hist["n"].to_numpy(dtype=np.int64)
    below = np.cumsum(n) - n
    return pd.DataFrame({"s": hist["s"].to_numpy(dtype=np.int64), "lt2": 2 * below + n})


def _pooled_popularity_wins(hist: pd.DataFrame, n_users: int, mine: pd.DataFrame) -> float:
    """``global_auc``'s pooled wins of popularity from integer histograms, exact: every user's
    negatives are the catalog (``hist``: items per score ``s``, ``n_users`` copies) minus the
    user's relevant and (when excluded) seen items (``mine``: per score ``s``, ``pos`` relevant
    and ``taken`` relevant-or-seen candidate rows of all users); ties count 1/2."""
    from harness.models.baselines import pooled_popularity_wins

    values = distinct(np.concatenate([hist["s"].to_numpy(np.int64), mine["s"].to_numpy(np.int64)]))
    catalog = hist.set_index("s")["n"].reindex(values, fill_value=0).to_numpy(np.int64)
    by_s = mine.set_index("s")
    pos = by_s["pos"].reindex(values, fill_value=0).to_numpy(np.int64)
    taken = by_s["taken"].reindex(values, fill_value=0).to_numpy(np.int64)
    return pooled_popularity_wins(catalog, pos, taken, n_users)


def popularity_auc_counts(
    spark: SparkSession,
    train: DataFrame,
    users: DataFrame,
    relevant: DataFrame,
    *,
    exclude_seen: bool = True,
    pooled: bool,
) -> tuple[DataFrame, float]:
    """Each user's AUC counts over the whole catalog for :class:`harness.models.PopularityModel`
    computed in Spark, with no training row on the driver: a table (user, wins, n_pos, n_neg)
    as :func:`plugin_auc_counts` gives it, and with ``pooled`` ``global_auc``'s pooled wins.

    The score of an item is its number of distinct training users (an integer); a user's
    candidates are the training items minus their seen items when ``exclude_seen``; relevant
    candidates are the user's ``relevant`` pairs among them, the rest negatives; ties count
    1/2, as ``BaseRecommender.recommend_with_auc`` counts them. With ``C`` the catalog's score
    histogram and ``X`` a user's relevant and excluded rows, twice a user's wins are
    ``sum over relevant p of (2·C(<s_p) + C(=s_p) - 2·X(<s_p) - X(=s_p))``: the histogram is
    broadcast (one row per distinct score), ``X`` is counted per (user, score) in Spark.
    Reaching the driver: the histogram and, with ``pooled``, a per-score count of the relevant
    and excluded rows (both at most one row per distinct popularity value).
    """
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    disk = StorageLevel.MEMORY_AND_DISK
    pairs = seen_pairs(train).persist(disk)
    score = pairs.groupBy("item").agg(sf.count(sf.lit(1)).alias("s")).persist(disk)
    with _quiet():
        hist = pd.DataFrame(score.groupBy("s").agg(sf.count(sf.lit(1)).alias("n")).toPandas())
    n_items = int(hist["n"].sum())
    below = spark.createDataFrame(_catalog_below(hist), "s bigint, lt2 bigint")
    mine = users.select("user").distinct()
    pos = relevant.select("user", "item").distinct().join(mine, "user", "left_semi")
    pos = pos.join(score, "item")  # items unknown to training are not candidates
    if exclude_seen:
        pos = pos.join(pairs, ["user", "item"], "left_anti")
        seen = pairs.join(mine, "user", "left_semi").join(score, "item")
        rows = pos.select("user", "s", sf.lit(1).alias("p")).unionByName(
            seen.select("user", "s", sf.lit(0).alias("p"))
        )
    else:
        rows = pos.select("user", "s", sf.lit(1).alias("p"))
    # per (user, score): relevant rows and all rows taken from the negatives; partitioned by
    # user once, so the aggregations and the window below need no further shuffle
    at = (
        rows.repartition("user")
        .groupBy("user", "s")
        .agg(sf.sum("p").cast("bigint").alias("pos"), sf.count(sf.lit(1)).alias("taken"))
    )
    at = at.persist(disk)
    earlier = Window.partitionBy("user").orderBy("s").rowsBetween(Window.unboundedPreceding, -1)
    x_lt = sf.coalesce(sf.sum("taken").over(earlier), sf.lit(0))
    twice = sf.col("pos") * (sf.col("lt2") - 2 * sf.col("x_lt") - sf.col("taken"))
    per_user = (
        at.withColumn("x_lt", x_lt)
        .join(sf.broadcast(below), "s")
        .groupBy("user")
        .agg(sf.sum(twice).alias("w2"), sf.sum("pos").alias("n_pos"), sf.sum("taken").alias("t"))
    )
    table = (
        mine.join(per_user, "user", "left")
        .fillna(0, subset=["w2", "n_pos", "t"])
        .select(
            "user",
            (sf.col("w2") / 2).cast("double").alias("wins"),
            sf.col("n_pos").cast("double").alias("n_pos"),
            (sf.lit(n_items) - sf.col("t")).cast("double").alias("n_neg"),
        )
        .persist(disk)
    )
    n_users = table.count()  # materialized: the intermediate tables can go
    wins = float("nan")
    if pooled:
        with _quiet():
            counted = pd.DataFrame(
                at.groupBy("s")
                .agg(sf.sum("pos").alias("pos"), sf.sum("taken").alias("taken"))
                .toPandas()
            )
        wins = _pooled_popularity_wins(hist, n_users, counted)
    for done in (at, score, pairs):
        done.unpersist()
    return table, wins
