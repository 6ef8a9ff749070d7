"""Candidate sets on Spark: the rows of :func:`harness.candidates.build_candidates`.

:func:`build_candidates_spark` gives ``candidates=sampled`` (:func:`sample_negatives_spark`) and
``candidates=file`` (:func:`read_candidates_spark`: any Spark path, the in-process checks and
one-line errors) as a Spark DataFrame of (user, item) rows, with the in-process stats.

Both engines draw with the same counter-based sampler (:func:`harness.candidates.draw_positions`,
run here in the Python workers by a ``pandas_udf``), the same rounds and the same integer
arithmetic, so the same split and seed give the same candidates. Only the catalog (one row per
training item with its count) reaches the driver: it fixes the item positions and the weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from harness.candidates import (
    MAX_BOOST,
    MAX_ROUNDS,
    CandidateSpec,
    candidate_stats,
    catalog_weights,
)
from metrics.checks import require_choice, require_int

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from harness.spark.split import SparkSplit

__all__ = ["build_candidates_spark", "read_candidates_spark", "sample_negatives_spark"]


def _one(df: DataFrame) -> Any:
    row = df.first()
    if row is None:  # an aggregate always returns one row
        raise RuntimeError("Spark returned no row for an aggregate")
    return row


def sample_negatives_spark(
    train: DataFrame,
    test: DataFrame,
    n_negatives: int,
    sampling: str,
    seed: int,
    valid: DataFrame | None = None,
) -> tuple[DataFrame, int]:
    """:func:`harness.candidates.sample_negatives` on Spark: ``(user, item)`` rows, each test
    user's test items plus up to ``n_negatives`` distinct items of the training catalog the user
    has neither trained, validated (``valid``) nor tested on, uniform or by popularity, frozen by
    ``seed``; and the number of users still short after the last round
    (``candidates.users_short``).

    A few jobs per round of draws (usually one or two rounds); the result is a lazy DataFrame
    over locally checkpointed draws.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as sf
    from pyspark.sql.functions import pandas_udf

    from harness.candidates import draw_positions
    from harness.hashing import hash_ids
    from harness.spark.session import _quiet

    require_int("n_negatives", n_negatives)
    require_choice("sampling", sampling, ("uniform", "popularity"))
    spark = train.sparkSession
    seed = int(seed)

    with _quiet():  # the catalog: one row per training item
        cat = pd.DataFrame(train.groupBy("item").agg(sf.count(sf.lit(1)).alias("n")).toPandas())
    catalog = np.sort(pd.unique(cat["item"]))
    n_items = len(catalog)
    counts = cat.set_index("item")["n"].reindex(catalog).to_numpy(dtype=np.int64)
    weights = catalog_weights(counts, sampling)
    cum = np.cumsum(weights)
    total = int(cum[-1]) if n_items else 0
    item_type = train.schema["item"].dataType
    text_items = item_type.typeName() == "string"
    with _quiet():
        cat_df = spark.createDataFrame(
            pd.DataFrame(
                {
                    "item": pd.Series(catalog, dtype=object if text_items else np.int64),
                    "_pos": np.arange(n_items, dtype=np.int64),
                    "_w": weights,
                }
            ),
            schema=f"item {'string' if text_items else 'long'}, _pos long, _w long",
        ).withColumn("item", sf.col("item").cast(item_type))
    cat_df = sf.broadcast(cat_df)

    @pandas_udf("long")  # type: ignore[call-overload, untyped-decorator, misc]
    def _user_hash(users: pd.Series) -> pd.Series:
        return pd.Series(hash_ids(users).view(np.int64))

    @pandas_udf("long")  # type: ignore[call-overload, untyped-decorator, misc]
    def _draw(user_hash: pd.Series, draw: pd.Series) -> pd.Series:
        uh = user_hash.to_numpy(np.int64).view(np.uint64)
        return pd.Series(draw_positions(seed, uh, draw.to_numpy(np.int64), cum))

    @pandas_udf("long")  # type: ignore[call-overload, untyped-decorator, misc]
    def _weight(pos: pd.Series) -> pd.Series:
        return pd.Series(weights[pos.to_numpy(np.int64)])

    users = test.select("user").distinct()
    pairs = train.select("user", "item").unionByName(test.select("user", "item"))
    if valid is not None:
        pairs = pairs.unionByName(valid.select("user", "item"))
    seen = (
        pairs.join(users, "user", "left_semi")
        .join(cat_df, "item")
        .select("user", "_pos", "_w")
        .distinct()
        .localCheckpoint()
    )
    per_user = seen.groupBy("user").agg(
        sf.count(sf.lit(1)).alias("_seen"), sf.sum("_w").alias("_seen_w")
    )
    seen_n = sf.coalesce(sf.col("_seen"), sf.lit(0))
    target = sf.least(sf.lit(int(n_negatives)), sf.lit(n_items) - seen_n)
    state = (
        users.join(per_user, "user", "left")
        .select(
            "user",
            target.alias("_target"),
            (sf.lit(total) - sf.coalesce(sf.col("_seen_w"), sf.lit(0))).alias("_unseen_w"),
            (target == sf.lit(n_items) - seen_n).alias("_all"),
            _user_hash(sf.col("user")).alias("_uh"),
            sf.lit(0).cast("long").alias("_start"),
            sf.lit(0).cast("long").alias("_have"),
            sf.lit(0).cast("long").alias("_drawn_w"),
        )
        .localCheckpoint()
    )
    tgt, have = sf.col("_target"), sf.col("_have")
    is_short = (tgt > 0) & ~sf.col("_all") & (have < tgt)
    # harness.candidates.draws_per_round, in integer maths: from the weight still undrawn
    base, left = "(2 * (_target - _have) + 4)", "(_unseen_w - _drawn_w)"
    boosted = f"({base} * {total} + {left} - 1) div greatest({left}, 1)"
    n_draws: Column = sf.expr(
        boosted if sampling == "uniform" else f"least({boosted}, {MAX_BOOST} * {base})"
    )
    user_type = test.schema["user"].dataType.simpleString()
    got = spark.createDataFrame([], f"user {user_type}, _pos long, _j long, _target long")
    by_draw = Window.partitionBy("user").orderBy("_j")
    keep = ["_target", "_unseen_w", "_all", "_uh", "_start"]  # a user's state besides its draws
    n_short = 0  # users still short after MAX_ROUNDS (counted only when the rounds ran out)
    # No join in the rounds: Spark estimates a join's size as the product of its sides' and
    # keeps estimates across checkpoints, so joins here made them grow without bound (a driver
    # out of memory after a few dozen rounds); unions add, aggregates keep them.
    for _ in range(MAX_ROUNDS):
        short = state.filter(is_short)
        if short.limit(1).count() == 0:
            break
        draws = short.select(
            "user",
            "_uh",
            "_target",
            sf.explode(sf.sequence(sf.col("_start"), sf.col("_start") + n_draws - 1)).alias("_j"),
        ).withColumn("_pos", _draw(sf.col("_uh"), sf.col("_j")))
        fresh = draws.join(seen.select("user", "_pos"), ["user", "_pos"], "left_anti")
        pool = got.unionByName(fresh.select("user", "_pos", "_j", "_target"))
        got = (
            pool.groupBy("user", "_pos", "_target")  # a user's target is one number
            .agg(sf.min("_j").alias("_j"))
            .withColumn("_rank", sf.row_number().over(by_draw))
            .filter(sf.col("_rank") <= sf.col("_target"))
            .select("user", "_pos", "_j", "_target")
            .localCheckpoint()
        )
        moved = state.withColumn(
            "_start", sf.when(is_short, sf.col("_start") + n_draws).otherwise(sf.col("_start"))
        ).select("user", *keep, sf.lit(0).alias("_n"), sf.lit(0).cast("long").alias("_nw"))
        drawn = got.select(
            "user", sf.lit(1).alias("_n"), _weight(sf.col("_pos")).alias("_nw")
        )  # the state columns null: max() skips them
        state = (
            moved.unionByName(drawn, allowMissingColumns=True)
            .groupBy("user")
            .agg(
                *(sf.max(c).alias(c) for c in keep),
                sf.sum("_n").cast("long").alias("_have"),
                sf.sum("_nw").cast("long").alias("_drawn_w"),
            )
            .localCheckpoint()
        )
    else:
        n_short = state.filter(is_short).count()
    everything = (
        state.filter((tgt > 0) & sf.col("_all"))
        .select("user")
        .crossJoin(cat_df.select("_pos"))
        .join(seen.select("user", "_pos"), ["user", "_pos"], "left_anti")
    )
    negatives = (
        got.select("user", "_pos")
        .unionByName(everything.select("user", "_pos"))
        .join(cat_df, "_pos")
        .select("user", "item")
    )
    return test.select("user", "item").distinct().unionByName(negatives), n_short


# ------------------------------------------------------------------------------ the candidates


def build_candidates_spark(
    spec: CandidateSpec, sp: SparkSplit
) -> tuple[DataFrame | None, dict[str, Any]]:
    """:func:`harness.candidates.build_candidates` on Spark: the (user, item) candidate rows of
    ``spec`` as a persisted Spark DataFrame (None for ``full``) and the same stats, from one
    aggregate job (and one more for a file: the test users it has no row for)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as sf

    from harness.errors import DataError

    if spec.kind == "full":
        return None, {"candidates.kind": "full"}
    if spec.kind == "file":
        if not spec.path:
            raise DataError("candidates=file needs candidates.path=<csv or parquet of user,item>")
        frame = read_candidates_spark(sp.train.sparkSession, spec.path, sp.train, sp.test)
        frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
        row = _one(frame.agg(sf.count(sf.lit(1)).alias("n"), sf.countDistinct("user").alias("u")))
        listed = frame.select("user").distinct().withColumn("_listed", sf.lit(True))
        cover = _one(  # test users, and those the file has no row for
            sp.test.select("user")
            .distinct()
            .join(listed, "user", "left")
            .agg(
                sf.count(sf.lit(1)).alias("t"),
                sf.count(sf.when(sf.col("_listed").isNull(), 1)).alias("m"),
            )
        )
        return frame, candidate_stats(
            spec,
            int(row["n"]),
            int(row["u"]),
            missing=int(cover["m"]),
            test_users=int(cover["t"]),
        )
    frame, short = sample_negatives_spark(
        sp.train, sp.test, spec.n_negatives, spec.sampling, spec.seed, valid=sp.valid
    )
    frame = frame.persist(StorageLevel.MEMORY_AND_DISK)
    row = _one(frame.agg(sf.count(sf.lit(1)).alias("n"), sf.countDistinct("user").alias("u")))
    return frame, candidate_stats(spec, int(row["n"]), int(row["u"]), short)


def read_candidates_spark(
    spark: SparkSession, path: str, train: DataFrame, test: DataFrame
) -> DataFrame:
    """The distinct (user, item) rows of a candidates file (Parquet for ``.parquet``/``.pq``,
    else CSV with a header) from any Spark path, checked as :func:`harness.candidates` checks
    it, with its one-line errors (no row numbers): missing file or column, no rows, missing
    ids, one id type per column (integral text becomes long), ids of the interactions' type."""
    from pyspark.sql import functions as sf
    from pyspark.sql import types as st

    from harness.errors import DataError
    from harness.spark.io import (
        _id_kind,
        _is_integer_type,
        _near_duplicates,
        integral_id,
        read_table,
        stripped,
    )

    parquet = path.lower().rstrip("/").endswith((".parquet", ".pq"))
    df = read_table(spark, path, "parquet" if parquet else "csv", "candidates.path")
    columns = [str(c) for c in df.columns]
    missing = [c for c in ("user", "item") if c not in columns]
    if missing:
        raise DataError(f"{path}: column {missing[0]!r} is missing (found {columns})")
    df = df.select("user", "item")
    typed: dict[str, Any] = {}
    text_checks: dict[str, Any] = {}
    for name in ("user", "item"):
        dtype = df.schema[name].dataType
        col = sf.col(name)
        if isinstance(dtype, st.StringType):
            t = stripped(col)
            integral, as_int = integral_id(t)
            text_checks[name] = ~integral
            typed[name] = (t, as_int)
        elif _is_integer_type(dtype):
            typed[name] = (col.cast("bigint"), None)
        elif isinstance(dtype, st.FloatType | st.DoubleType | st.DecimalType):
            v = col.cast("double")
            integral = ~sf.isnan(v) & (sf.abs(v) != float("inf")) & (v == sf.floor(v))
            text_checks[name] = ~integral
            typed[name] = (col.cast("string"), v.cast("bigint"))
        else:
            raise DataError(
                f"{path}: column '{name}' holds {dtype.simpleString()} values; "
                "ids must be integers or text"
            )
    null = sf.lit(False)
    for name in ("user", "item"):
        c = sf.col(name)
        is_float = isinstance(df.schema[name].dataType, st.FloatType | st.DoubleType)
        null = null | c.isNull() | (sf.isnan(c) if is_float else sf.lit(False))
    aggs = [sf.count(sf.lit(1)).alias("n"), sf.count(sf.when(null, 1)).alias("nulls")]
    aggs += [sf.count(sf.when(bad, 1)).alias(f"text_{n}") for n, bad in text_checks.items()]
    row = _one(df.agg(*aggs))
    if int(row["n"]) == 0:
        raise DataError(f"{path}: the candidates file has no rows")
    if int(row["nulls"]):
        raise DataError(f"{path}: column 'user' or 'item' has missing ids")
    ids: dict[str, Any] = {}
    for name in ("user", "item"):
        as_text, as_int = typed[name]
        if name in text_checks and int(row[f"text_{name}"]):
            if isinstance(df.schema[name].dataType, st.StringType):
                _near_duplicates(df, name, path, f"'{name}'", "")
            ids[name] = (as_text, "string")
        else:
            ids[name] = (as_int if as_int is not None else as_text, "bigint")
    for name, part, whose in (("user", test, "test user"), ("item", train, "training item")):
        column, kind = ids[name]
        want = _id_kind(part, name)
        if kind == want:
            continue
        if want == "string":  # integer ids compared with text ids as their text
            ids[name] = (column.cast("string"), want)
            known = part.select(sf.col(name).alias("_id"))
            hits = df.select(ids[name][0].alias("_id")).join(known, "_id", "left_semi")
            if hits.limit(1).count() == 0:  # they match none: say so here, not later
                example = _one(df.select(column.alias("v")).limit(1))["v"]
                raise DataError(
                    f"{path}: column '{name}' holds integer ids but the interactions have text "
                    f"ids and none is a {whose}'s id, e.g. {int(example)!r}"
                )
            continue
        example = _one(df.select(column.alias("v")).limit(1))["v"]
        raise DataError(
            f"{path}: column '{name}' holds text ids but the interactions have integer ids, "
            f"e.g. {example!r}"
        )
    return df.select(ids["user"][0].alias("user"), ids["item"][0].alias("item")).distinct()
