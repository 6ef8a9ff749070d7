"""The comparison of :mod:`harness.compare` on Spark: per-user tables stay in Spark, the driver
receives sums.

The baseline's and the candidate's per-user tables (``user`` plus one column per metric, as
:func:`harness.spark.evaluate_spark` writes them with ``per_user_path``) are joined on ``user``
in Spark, stacked once per segment (``all``, the user segments of a small ``(user, segment)``
table, the item-popularity buckets) and reduced by two Spark aggregations to a few numbers per
segment × metric: paired count, sums, the differences' extremes, GSB good/bad counts (first
pass), then, for the segments where some metric has ``NORMAL_MIN_N`` pairs, sums of powers of
the values centred on those means (second pass). From them the driver decides, as
:func:`metrics.stats.compare_many` does, between

- the normal / delta-method intervals (``n >= NORMAL_MIN_N`` pairs and :func:`stats.normal_ok`'s
  conditions, checked from the centred moments and the largest squared difference): computed
  from the sums, O(1) on the driver;
- the plain paired bootstrap otherwise: the bootstrapped metrics' two columns of those
  segments (and the GSB metric's differences) are collected in one Spark job, ordered by user
  on the driver (the order of the in-process per-user tables), and passed to ``compare_many``
  itself, so both engines give the same numbers at every size.

The item-bucket tables of all compared models come from one :func:`evaluate_spark` call per
run (:func:`bucket_tables_spark`), each pair taking its two models' slices. The quick
experiment's comparison runs 15 Spark jobs (66 with one evaluation per model and bucket and one
collection per segment; counted from Spark's event log), most of them broadcasts of small join
sides; their number no longer grows with the number of bootstrapped segments.

The result is the :class:`harness.compare.PairComparison` the gate, the report and MLflow
logging consume; ``differences`` holds the GSB metric's per-user differences only (what the
report plots), all of them up to ``max_differences`` users, else a hashed sample of that size.

``compare.human_labels`` (a small file of GSB judgements) is read on the driver and adds the
``human_labels`` row as in-process. ``compare.user_groups`` becomes a ``(user, group)`` Spark
table (:func:`user_groups_spark`: ``activity`` from the cold segment of :func:`segments_spark`,
or a CSV/Parquet file of any size read by Spark), joined with both per-user tables in Spark; the
gap note (:func:`harness.compare.group_gap_note`) resamples users within their group, so the GSB
metric's two values and the group of each grouped user are collected in user order (about 30
bytes per user) and resampled exactly as in-process.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

import metrics
from harness.compare import (
    CompareSpec,
    PairComparison,
    add_labels_rows,
    bucket_metrics,
    compared_metrics,
    comparison_table,
    dropped_notes,
    group_gap_note,
    paired_note,
    pooled_metrics,
    segment_definitions,
    share,
)
from metrics import stats
from metrics.checks import require_columns, require_int
from metrics.gsb import VALUE_ROUNDING, gsb_margin

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    "SparkSegments",
    "bucket_tables_spark",
    "compare_models_spark",
    "compare_spark",
    "group_gap_inputs_spark",
    "segments_spark",
    "user_groups_spark",
]

_BUCKETS = ("head", "mid", "tail")  # harness.compare's item buckets, in its row order
_SEG = "_segment"


@dataclass(frozen=True)
class SparkSegments:
    """:class:`harness.compare.SegmentData` as Spark tables: ``users`` has one ``(user,
    segment)`` row per user and user segment (segments in ``names`` order; any small table of
    user groups will do), ``item_bucket`` one ``(item, bucket)`` row per training item (head /
    mid / tail)."""

    users: DataFrame
    names: tuple[str, ...]
    definitions: dict[str, str]
    item_bucket: DataFrame | None = None


# ---------------------------------------------------------------------------------------------
# Segments
# ---------------------------------------------------------------------------------------------
def _linear_quantile(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """``np.quantile(np.repeat(values, counts), q)`` (linear) from the sorted distinct values
    and their counts: the two order statistics around ``q·(n − 1)``, interpolated."""
    n = int(counts.sum())
    position = q * (n - 1)
    lo = math.floor(position)
    ends = np.cumsum(counts)
    x_lo = float(values[np.searchsorted(ends, lo, side="right")])
    x_hi = float(values[np.searchsorted(ends, min(lo + 1, n - 1), side="right")])
    return x_lo + (x_hi - x_lo) * (position - lo)


def segments_spark(train: DataFrame, test_users: DataFrame, spec: CompareSpec) -> SparkSegments:
    """:func:`harness.compare.segment_data` on Spark: cold and heavy users among ``test_users``
    (a table with a ``user`` column) by their ``train`` activity, and the head / mid / tail
    buckets of the training items by popularity (ties: item id ascending). Only the histogram
    of activity counts and the number of items reach the driver."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    require_columns(train.columns, ("user", "item"), "train")
    require_columns(test_users.columns, ("user",), "test users")
    counts = train.groupBy("user").agg(sf.count(sf.lit(1)).alias("_activity"))
    activity = (
        test_users.select("user")
        .distinct()
        .join(counts, "user", "left")
        .select("user", sf.coalesce("_activity", sf.lit(0)).cast("bigint").alias("_activity"))
    )
    hist = pd.DataFrame(activity.groupBy("_activity").count().toPandas())
    hist = hist.sort_values("_activity")
    heavy_min = (
        _linear_quantile(
            hist["_activity"].to_numpy(np.float64), hist["count"].to_numpy(np.int64),
            spec.heavy_quantile,
        )
        if len(hist)
        else 0.0
    )  # fmt: skip
    act = sf.col("_activity")
    users = (
        activity.filter(act <= spec.cold_max_events)
        .select("user", sf.lit("cold").alias("segment"))
        .unionByName(
            activity.filter(act >= max(heavy_min, 1)).select(
                "user", sf.lit("heavy").alias("segment")
            )
        )
    )
    popularity = train.groupBy("item").agg(sf.count(sf.lit(1)).alias("_n"))
    # one global order of the items (a single partition: one row per training item), and
    # their number over the same window (no separate counting job)
    order = Window.orderBy(sf.col("_n").desc(), sf.col("item").asc())
    pos = sf.row_number().over(order) - 1
    everyone = order.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    n_items = sf.count(sf.lit(1)).over(everyone)
    # exact decimal products, as in-process (:func:`harness.compare.share`): 7 of 100 items
    # for 0.07, not the 8 of the double 7.000000000000001
    exact = n_items.cast("decimal(20,0)")
    n_head = sf.ceil(exact * sf.lit(share(spec.head_share)))
    n_tail = sf.floor(exact * sf.lit(share(spec.tail_share)))
    # in-process the tail is written after the head: an item in both is tail
    bucket = (
        sf.when((n_tail > 0) & (pos >= n_items - n_tail), "tail")
        .when(pos < n_head, "head")
        .otherwise("mid")
    )
    item_bucket = popularity.select("item", bucket.alias("bucket"))
    definitions = segment_definitions(spec, heavy_min)
    return SparkSegments(users, ("cold", "heavy"), definitions, item_bucket)


def bucket_tables_spark(
    qrels: DataFrame,
    recs: Sequence[DataFrame],
    names: Sequence[str],
    item_bucket: DataFrame,
    folder: str | os.PathLike[str],
    options: Mapping[str, Any] | None = None,
) -> dict[str, tuple[DataFrame, ...]]:
    """Per item bucket, each model's per-user metrics judged only against each user's test items
    in that bucket (items unseen in training count as tail), as ``harness.compare`` defines
    them, from one :func:`evaluate_spark` call for all the models of ``recs`` and all buckets.

    Its user key is ``model + bucket + user`` as text (the model's index in ``recs``
    zero-padded to a fixed width, ``h``/``m``/``t``, then the id): a key's truth is the user's
    test items in the bucket, its list the model's list of the user (``user, item, rank``;
    score ``−rank``), for each (bucket, user) the truth has. A key's values depend only on its
    own rows and the options, so they are those of one evaluation per model and bucket.
    ``options["buckets"]`` means what it means to ``evaluate_spark`` (the user groups of one
    evaluation; default its default) and is multiplied by ``3 × len(recs)``: as many groups as
    one call per model and bucket would make, each holding as many rows. The per-key table is
    written under ``folder`` as Parquet (``folder/items``); each returned table is one (model,
    bucket) slice of it read back, with the user ids of their original type, in ``recs``
    order. A bucket without test items gets empty tables (:func:`compare_spark` writes no row
    for it)."""
    from pyspark.sql import functions as sf

    from harness.spark.io import _common_kind
    from harness.spark.metrics import evaluate_spark

    if not names or not recs:
        return {}
    spark = qrels.sparkSession
    require_columns(qrels.columns, ("user", "item", "relevance"), "qrels")
    kinds = []
    for r in recs:  # the one-line errors of evaluate_spark
        require_columns(r.columns, ("user", "item", "rank"), "recommendations")
        kinds.append(_common_kind(qrels, r, "user"))
        _common_kind(qrels, r, "item")
    kind = kinds[0]
    width = len(str(len(recs) - 1))
    tags = [str(m).zfill(width) for m in range(len(recs))]  # a fixed width: "0".."9", "00"..
    bucket = sf.coalesce(sf.col("bucket"), sf.lit("tail"))
    code = sf.when(bucket == "head", "h").when(bucket == "mid", "m").otherwise("t")
    judged = qrels.join(item_bucket.select("item", "bucket"), "item", "left").select(
        "user", "item", "relevance", code.alias("_code")
    )
    key = sf.concat("_tag", "_code", sf.col("user").cast("string")).alias("user")
    every = sf.explode(sf.array(*[sf.lit(t) for t in tags])).alias("_tag")
    truth = judged.select(every, "user", "item", "relevance", "_code").select(
        key, "item", "relevance"
    )
    listed = [
        r.select(
            sf.lit(t).alias("_tag"),
            "user",
            "item",
            (-sf.col("rank")).cast("double").alias("score"),
        )
        for t, r in zip(tags, recs, strict=True)
    ]
    stacked = listed[0]
    for part in listed[1:]:
        stacked = stacked.unionByName(part)
    pairs = judged.select("user", "_code").distinct()
    lists = stacked.join(pairs, "user").select(key, "item", "score")
    opts = dict(options or {})
    per_call = opts.pop("buckets", None)  # one evaluation's groups, as evaluate_spark's
    if per_call is None:
        per_call = 2 * int(spark.conf.get("spark.sql.shuffle.partitions") or 200)
    groups = 3 * len(recs) * require_int("buckets", per_call)
    path = os.path.join(os.fspath(folder), "items")
    evaluate_spark(
        truth, lists, list(names), spark=spark, buckets=groups, per_user_path=path,
        collect_per_user=False, **opts,
    )  # fmt: skip
    table = spark.read.parquet(path)
    values = [sf.col(f"`{c}`") for c in table.columns if c != "user"]
    start = sf.lit(width + 2)  # 1-based: after the tag and the bucket code
    user = sf.col("user").substr(start, sf.length("user")).cast(kind).alias("user")
    return {
        name: tuple(
            table.filter(sf.col("user").startswith(t + name[0])).select(user, *values) for t in tags
        )
        for name in _BUCKETS
    }


# ---------------------------------------------------------------------------------------------
# The paired table, its sums and the comparison rows
# ---------------------------------------------------------------------------------------------
def _values(per_user: DataFrame, names: Sequence[str], side: str, what: str) -> DataFrame:
    """``user`` and the metric columns renamed ``a0, a1, …`` (or ``b…``) as doubles."""
    require_columns(per_user.columns, ("user",), what)
    cols = [f"CAST({_quoted(n)} AS DOUBLE) AS `{side}{i}`" for i, n in enumerate(names)]
    return per_user.selectExpr("`user`", *cols)


def _quoted(name: str) -> str:
    """A column name as an SQL identifier (``ndcg@10`` → ```ndcg@10```)."""
    return "`" + name.replace("`", "``") + "`"


def _stacked(
    a: DataFrame,
    b: DataFrame,
    names: Sequence[str],
    segments: SparkSegments | None,
    buckets: Mapping[str, Sequence[DataFrame]],
    ranked: Sequence[str],
) -> DataFrame:
    """One row per (segment, user): ``all`` (``_only`` = 1 for a user of the baseline's table
    only, 2 of the candidate's only, with every metric null: nothing pairs it), each user
    segment and each item bucket (their users in both tables; a bucket's ranking metrics, the
    others null)."""
    from pyspark.sql import functions as sf

    va = _values(a, names, "a", "baseline per-user table").withColumn("_in_a", sf.lit(1))
    vb = _values(b, names, "b", "candidate per-user table").withColumn("_in_b", sf.lit(1))
    both = va.join(vb, "user", "full_outer")
    only = (
        sf.when(sf.col("_in_b").isNull(), 1).when(sf.col("_in_a").isNull(), 2).otherwise(0)
    ).alias("_only")
    metric_cols = [f"{s}{i}" for s in "ab" for i in range(len(names))]
    paired = both.filter(sf.col("_in_a").isNotNull() & sf.col("_in_b").isNotNull())
    paired = paired.select("user", *metric_cols)
    in_both = sf.col("_in_a").isNotNull() & sf.col("_in_b").isNotNull()
    values = [sf.when(in_both, sf.col(c)).alias(c) for c in metric_cols]
    parts = [both.select(sf.lit("all").alias(_SEG), "user", *values, only)]
    if segments is not None:
        seg = segments.users.select("user", sf.col("segment").alias(_SEG))
        parts.append(
            paired.join(seg, "user").select(_SEG, "user", *metric_cols, sf.lit(0).alias("_only"))
        )
    for bucket, (pa, pb) in buckets.items():
        at = [names.index(n) for n in ranked]
        xa = _values(pa, ranked, "a", f"items:{bucket} per-user table")
        xb = _values(pb, ranked, "b", f"items:{bucket} per-user table")
        joined = xa.join(xb, "user")  # harness.compare: b reindexed on a, NaN pairs dropped
        cols = [
            f"`{s}{ranked.index(names[i])}`" if i in at else "CAST(NULL AS DOUBLE)"
            for s in "ab"
            for i in range(len(names))
        ]
        parts.append(
            joined.selectExpr(
                f"'items:{bucket}' AS `{_SEG}`",
                "`user`",
                *[f"{c} AS `{m}`" for c, m in zip(cols, metric_cols, strict=True)],
                "0 AS `_only`",
            )
        )
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out


def _pair(i: int) -> tuple[Column, Column, Column, Column]:
    """Metric ``i``'s columns: a, b, d = b − a, and whether both are defined (not null/NaN)."""
    from pyspark.sql import functions as sf

    a, b = sf.col(f"a{i}"), sf.col(f"b{i}")
    return a, b, b - a, a.isNotNull() & ~sf.isnan(a) & b.isNotNull() & ~sf.isnan(b)


def _double(x: float) -> str:
    """``x`` as an SQL double: its shortest repr, which Spark parses back to the same double."""
    return f"CAST('{float(x)!r}' AS DOUBLE)"


def _terms(i: int, hib: bool, spec: CompareSpec) -> dict[str, str]:
    """Metric ``i``'s terms as SQL text: a, b, d = b − a, whether a / b / both are defined (not
    null/NaN), and the GSB good / bad conditions (the rule of :func:`metrics.gsb`). The
    expressions of :func:`_pair` written as text, so that each aggregate costs one call to the
    JVM when the query is built (not dozens: about 1 s of the quick experiment)."""
    a, b = f"`a{i}`", f"`b{i}`"
    d = f"({b} - {a})"
    va, vb = (f"(isnotnull({x}) AND NOT isnan({x}))" for x in (a, b))
    ok = f"({va} AND {vb})"
    signed = f"({d} * {_double(1.0 if hib else -1.0)})"
    tolerance = _double(gsb_margin(spec.tolerance))
    base = f"({tolerance} * abs({a}))" if spec.relative_tolerance else tolerance
    # metrics.gsb.gsb_margins: rounding of the values is no difference
    margin = f"greatest({base}, {_double(VALUE_ROUNDING)} * greatest(abs({a}), abs({b})))"
    good, bad = f"({ok} AND {signed} > {margin})", f"({ok} AND {signed} < -{margin})"
    return {"a": a, "b": b, "d": d, "va": va, "vb": vb, "ok": ok, "good": good, "bad": bad}


def _first_pass(rows: DataFrame, hibs: Sequence[bool], spec: CompareSpec) -> pd.DataFrame:
    """Per segment and metric: defined values per side, pairs, sums of a, b and d, the
    extremes of d and the GSB counts; per segment the users of one table only."""
    from pyspark.sql import functions as sf

    aggs = [
        "count(*) AS `users`",
        "count(CASE WHEN `_only` > 0 THEN 1 END) AS `only`",
        "count(CASE WHEN `_only` = 1 THEN 1 END) AS `only_a`",
        "count(CASE WHEN `_only` = 2 THEN 1 END) AS `only_b`",
        "min(CASE WHEN `_only` > 0 THEN `user` END) AS `only_user`",
    ]
    for i, hib in enumerate(hibs):
        t = _terms(i, hib, spec)
        ok = t["ok"]
        aggs += [
            f"count(CASE WHEN {t['va']} THEN 1 END) AS `na{i}`",
            f"count(CASE WHEN {t['vb']} THEN 1 END) AS `nb{i}`",
            f"count(CASE WHEN {ok} THEN 1 END) AS `n{i}`",
            f"sum(CASE WHEN {ok} THEN {t['a']} END) AS `sa{i}`",
            f"sum(CASE WHEN {ok} THEN {t['b']} END) AS `sb{i}`",
            f"sum(CASE WHEN {ok} THEN {t['d']} END) AS `sd{i}`",
            f"min(CASE WHEN {ok} THEN {t['d']} END) AS `dmin{i}`",
            f"max(CASE WHEN {ok} THEN {t['d']} END) AS `dmax{i}`",
            f"count(CASE WHEN {t['good']} THEN 1 END) AS `good{i}`",
            f"count(CASE WHEN {t['bad']} THEN 1 END) AS `bad{i}`",
        ]
    summed = rows.groupBy(_SEG).agg(*[sf.expr(x) for x in aggs])
    return pd.DataFrame(summed.toPandas()).set_index(_SEG)


_CENTRED = ("aa", "dd", "ad", "aaa", "ddd", "dda", "daa")  # PairMoments.sum_<name>


def _second_pass(
    rows: DataFrame, first: pd.DataFrame, hibs: Sequence[bool], spec: CompareSpec
) -> pd.DataFrame:
    """Per segment of ``first`` and metric: sums of powers of ``a − mean a`` and ``d − mean d``
    (the means of the first pass, written into the query as constants), for the variances
    and skewness the normal intervals need. The caller passes only the segments where some
    metric has ``NORMAL_MIN_N`` pairs: nothing else reads these sums."""
    from pyspark.sql import functions as sf

    means: dict[str, Any] = {_SEG: list(first.index)}
    for i in range(len(hibs)):
        n = first[f"n{i}"].to_numpy(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            means[f"ma{i}"] = np.where(n > 0, first[f"sa{i}"].to_numpy(np.float64) / n, 0.0)
            means[f"md{i}"] = np.where(n > 0, first[f"sd{i}"].to_numpy(np.float64) / n, 0.0)
    frame = pd.DataFrame(means)
    seg = sf.col(_SEG)

    def mean(column: str) -> Column:
        """The segment's mean as a ``CASE`` of constants (one per segment)."""
        pairs = list(zip(frame[_SEG], frame[column].to_numpy(np.float64), strict=True))
        out = sf.when(seg == pairs[0][0], sf.lit(float(pairs[0][1])))
        for name, value in pairs[1:]:
            out = out.when(seg == name, sf.lit(float(value)))
        return out

    aggs = []
    for i, hib in enumerate(hibs):
        t = _terms(i, hib, spec)
        ac, dc = f"({t['a']} - `_ma{i}`)", f"({t['d']} - `_md{i}`)"
        powers = (
            f"{ac} * {ac}", f"{dc} * {dc}", f"{ac} * {dc}", f"{ac} * {ac} * {ac}",
            f"{dc} * {dc} * {dc}", f"{dc} * {dc} * {ac}", f"{dc} * {ac} * {ac}",
        )  # fmt: skip
        aggs += [
            f"sum(CASE WHEN {t['ok']} THEN {p} END) AS `{name}{i}`"
            for name, p in zip(_CENTRED, powers, strict=True)
        ]
    centres = [mean(f"{m}{i}").alias(f"_{m}{i}") for i in range(len(hibs)) for m in ("ma", "md")]
    mine = rows.filter(seg.isin(list(frame[_SEG]))).select("*", *centres)
    out = pd.DataFrame(mine.groupBy(_SEG).agg(*[sf.expr(x) for x in aggs]).toPandas())
    out = out.set_index(_SEG)
    return out.join(frame.set_index(_SEG))


def _moments(first: pd.Series, second: pd.Series, i: int) -> stats.PairMoments:
    """Metric ``i`` of one segment as :class:`metrics.stats.PairMoments` (centred on the first
    pass's means)."""
    return stats.PairMoments(
        n=int(first[f"n{i}"]), sum_a=float(first[f"sa{i}"]), sum_b=float(first[f"sb{i}"]),
        sum_d=float(first[f"sd{i}"]), min_d=float(first[f"dmin{i}"]),
        max_d=float(first[f"dmax{i}"]), good=int(first[f"good{i}"]), bad=int(first[f"bad{i}"]),
        center_a=float(second[f"ma{i}"]), center_d=float(second[f"md{i}"]),
        sum_aa=float(second[f"aa{i}"]), sum_dd=float(second[f"dd{i}"]),
        sum_ad=float(second[f"ad{i}"]), sum_aaa=float(second[f"aaa{i}"]),
        sum_ddd=float(second[f"ddd{i}"]), sum_dda=float(second[f"dda{i}"]),
        sum_daa=float(second[f"daa{i}"]),
    )  # fmt: skip


@dataclass
class _SegmentPlan:
    """One segment's rows before its bootstrap: the run-level rows and empty placeholders (in
    ``rows_of``), the normal intervals computed from the sums (``results``), and the metrics
    whose pairs must be collected for the plain bootstrap (``collect``)."""

    rows_of: dict[int, dict[str, Any]]
    results: dict[int, stats.PairedComparison]
    collect: list[int]
    dropped: dict[int, int]  # users of both tables without a value on a side, per metric


def _segment_plan(
    segment: str,
    first: pd.Series,
    second: pd.Series | None,
    names: Sequence[str],
    hibs: Sequence[bool],
    spec: CompareSpec,
    summaries: tuple[Mapping[str, float], Mapping[str, float]] | None,
    pooled: frozenset[str] = frozenset(),
) -> _SegmentPlan:
    """Which rows ``harness.compare`` writes for one segment, and how each is computed: a
    run-level row (no per-user values, or ``pooled``), a normal interval from the two passes'
    sums, or the plain bootstrap."""
    plan = _SegmentPlan({}, {}, [], {})
    for i, name in enumerate(names):
        if name in pooled or int(first[f"na{i}"]) == 0 or int(first[f"nb{i}"]) == 0:
            if summaries is None:
                continue
            base, cand = summaries[0].get(name, np.nan), summaries[1].get(name, np.nan)
            plan.rows_of[i] = {
                "segment": segment, "metric": name, "kind": "run-level",
                "higher_is_better": hibs[i], "mean_a": base, "mean_b": cand,
                "diff": cand - base, "lift": (cand - base) / base if base else np.nan, "n": np.nan,
            }  # fmt: skip
            continue
        if int(first[f"n{i}"]) < 2:
            continue
        plan.rows_of[i] = {}
        plan.dropped[i] = int(first["users"]) - int(first["only"]) - int(first[f"n{i}"])
        if second is not None and int(first[f"n{i}"]) >= stats.NORMAL_MIN_N:
            m = _moments(first, second, i)
            if stats.normal_ok_from_moments(m):
                plan.results[i] = stats.compare_from_moments(
                    m, confidence=spec.confidence, alpha=spec.alpha, power=spec.power
                )
                continue
        plan.collect.append(i)
    return plan


def _collected(
    rows: DataFrame,
    wanted: Mapping[str, Sequence[int]],
    gsb: tuple[int, int, int] | None,
) -> tuple[dict[str, pd.DataFrame], pd.DataFrame | None]:
    """In one Spark job, the pairs the driver needs: for each segment of ``wanted`` its users'
    values of the metrics it bootstraps (``a{i}``, ``b{i}``), and with ``gsb`` = (metric,
    defined pairs, ``max_differences``) the ``all`` segment's per-user differences ``_d`` of
    that metric (both values defined; all of them up to ``max_differences`` users, else a
    hashed sample of about that many). Each frame is ordered by user (the order of the
    in-process per-user tables; a segment has a user once), so the bootstrap resamples the
    same pairs as in-process.

    What reaches the driver: the rows of the bootstrapped segments (those under
    ``NORMAL_MIN_N`` pairs or failing the normal checks; one row per user and segment, as each
    per-segment collection would have sent), with the union of their metric columns, plus at
    most about ``max_differences`` rows of differences."""
    from pyspark.sql import functions as sf

    seg = sf.col(_SEG)
    cols = sorted({f"{s}{i}" for w in wanted.values() for i in w for s in "ab"})
    keep = seg.isin(list(wanted))
    extra = []
    if gsb is not None:
        i, n, max_differences = gsb
        _, _, d, ok = _pair(i)
        take = (seg == "all") & ok
        if n > max_differences:
            share = int(max_differences / n * 2**31)
            take = take & (sf.pmod(sf.xxhash64("user"), sf.lit(2**31)) < share)
        take = sf.coalesce(take, sf.lit(False))
        keep = keep | take
        extra = [take.alias("_take"), sf.when(take, d).alias("_d")]
    frame = pd.DataFrame(rows.filter(keep).select(_SEG, "user", *cols, *extra).toPandas())

    def by_user(part: pd.DataFrame) -> pd.DataFrame:
        order = np.argsort(part["user"].to_numpy(), kind="stable")
        return part.iloc[order].reset_index(drop=True)

    frames = {s: by_user(frame[frame[_SEG] == s]) for s in wanted}
    diffs = by_user(frame[frame["_take"].to_numpy(bool)]) if gsb is not None else None
    return frames, diffs


def _bootstrapped(
    frame: pd.DataFrame, wanted: Sequence[int], names: Sequence[str], hibs: Sequence[bool],
    spec: CompareSpec,
) -> dict[int, stats.PairedComparison]:  # fmt: skip
    """``compare_many`` (as ``harness.compare`` calls it) of metrics ``wanted`` of one segment,
    on its collected pairs in user order."""
    columns: dict[str, tuple[np.ndarray, np.ndarray, bool]] = {}
    for i in wanted:
        va = frame[f"a{i}"].to_numpy(np.float64)
        vb = frame[f"b{i}"].to_numpy(np.float64)
        ok = ~(np.isnan(va) | np.isnan(vb))
        columns[names[i]] = (va[ok], vb[ok], hibs[i])
    results = stats.compare_many(
        columns, tolerance=spec.tolerance, relative=spec.relative_tolerance,
        n_resamples=spec.n_resamples, seed=spec.seed, confidence=spec.confidence,
        alpha=spec.alpha, power=spec.power,
    )  # fmt: skip
    return {i: results[names[i]] for i in wanted}


def _segment_rows(
    segment: str, plan: _SegmentPlan, names: Sequence[str], hibs: Sequence[bool]
) -> list[dict[str, Any]]:
    """The rows ``harness.compare`` writes for one segment, in its metric order."""
    rows_of = dict(plan.rows_of)
    for i, res in plan.results.items():
        d = plan.dropped[i]  # as compare_many counts it in process
        res = replace(res, dropped=d, gsb=replace(res.gsb, excluded=d))
        rows_of[i] = {
            "segment": segment,
            "metric": names[i],
            "kind": "per-user",
            "higher_is_better": hibs[i],
            **res.as_dict(),
            "method": res.method,
        }
    return [rows_of[i] for i in sorted(rows_of)]


def compare_spark(
    per_user_a: DataFrame,
    per_user_b: DataFrame,
    names: Sequence[str],
    spec: CompareSpec,
    *,
    baseline: str = "baseline",
    candidate: str = "candidate",
    summaries: tuple[Mapping[str, float], Mapping[str, float]] | None = None,
    segments: SparkSegments | None = None,
    buckets: Mapping[str, Sequence[DataFrame]] | None = None,
    max_differences: int = 200_000,
    options: Mapping[str, Any] | None = None,
    candidates: str = "full",
) -> PairComparison:
    """:func:`harness.compare.compare_pair` of two per-user Spark tables (``user`` plus one
    column per metric): the same rows, numbers and notes, from two aggregations.

    ``summaries`` (the two evaluations' summaries) give the run-level rows of whole-run metrics
    (coverage, gini, global AUC) and pooled ones (rmse, gauc, micro averages), ``segments``
    the user segments, ``buckets`` the item-bucket per-user tables
    (:func:`bucket_tables_spark`). Users in only one table: under
    ``user_set="intersection"`` (``options``) the pair is compared on the users both hold,
    with :func:`harness.compare.paired_note`; otherwise a ``ValueError`` naming one (as
    :func:`harness.compare.paired_users`). ``differences`` holds the GSB metric only (see the
    module docstring).
    """
    from pyspark import StorageLevel

    names = [n for n in names if n in per_user_a.columns and n in per_user_b.columns]
    pooled = pooled_metrics(names, options)
    hibs = [metrics.parse(n).definition.higher_is_better for n in names]
    ranked, left = bucket_metrics(names, candidates)
    rows = _stacked(per_user_a, per_user_b, names, segments, buckets or {}, ranked)
    rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        first = _first_pass(rows, hibs, spec)
        notes: list[str] = []
        if "all" in first.index and int(first.loc["all", "only"]) > 0:
            only = int(first.loc["all", "only"])
            user_set = metrics.resolve_options(**dict(options or {})).user_set
            if user_set != "intersection":
                raise ValueError(
                    f"{baseline!r} and {candidate!r} were evaluated on different users "
                    f"({only} differ, e.g. {first.loc['all', 'only_user']!r}); "
                    "compare models on the same split"
                )
            n_both = int(first.loc["all", "users"]) - only
            n_a, n_b = (n_both + int(first.loc["all", f"only_{s}"]) for s in "ab")
            notes.append(paired_note(baseline, candidate, n_both, n_a, n_b))
        if buckets and left:
            notes.append(left)
        large = [
            seg
            for seg in first.index
            if any(int(first.loc[seg, f"n{i}"]) >= stats.NORMAL_MIN_N for i in range(len(names)))
        ]
        second = _second_pass(rows, first.loc[large], hibs, spec) if large else pd.DataFrame()
        order = ["all", *(segments.names if segments else ()), *(f"items:{b}" for b in _BUCKETS)]
        plans: dict[str, _SegmentPlan] = {}
        for seg in order:
            if seg in first.index:
                plans[seg] = _segment_plan(
                    seg, first.loc[seg], second.loc[seg] if seg in second.index else None,
                    names, hibs, spec, summaries if seg == "all" else None, pooled,
                )  # fmt: skip
        gsb = None
        if spec.gsb_metric in names and "all" in first.index:
            i = names.index(spec.gsb_metric)
            if int(first.loc["all", f"nb{i}"]) > 0:
                gsb = (i, int(first.loc["all", f"n{i}"]), max_differences)
        wanted = {seg: plan.collect for seg, plan in plans.items() if plan.collect}
        differences: dict[str, pd.Series] = {}
        if wanted or gsb is not None:
            frames, diffs = _collected(rows, wanted, gsb)
            for seg, frame in frames.items():
                plans[seg].results.update(_bootstrapped(frame, wanted[seg], names, hibs, spec))
            if diffs is not None:
                index = pd.Index(diffs["user"].to_numpy(), name="user")
                differences[spec.gsb_metric] = pd.Series(
                    diffs["_d"].to_numpy(np.float64), index=index, name=spec.gsb_metric
                )
        table_rows: list[dict[str, Any]] = []
        for seg, plan in plans.items():
            table_rows += _segment_rows(seg, plan, names, hibs)
    finally:
        rows.unpersist()
    table = comparison_table(table_rows, spec)
    notes += dropped_notes(table)
    if spec.gsb_metric not in names:
        notes.append(f"GSB metric {spec.gsb_metric!r} is not in the compared metrics")
    definitions = dict(segments.definitions) if segments is not None else {}
    return PairComparison(
        baseline, candidate, table, spec.gsb_metric, differences, notes, definitions
    )


def compare_models_spark(
    per_user: Mapping[str, DataFrame],
    summaries: Mapping[str, Mapping[str, float]],
    suite: Sequence[str],
    spec: CompareSpec,
    *,
    train: DataFrame | None = None,
    qrels: DataFrame | None = None,
    recs: Mapping[str, DataFrame] | None = None,
    options: Mapping[str, Any] | None = None,
    folder: str | os.PathLike[str] | None = None,
    candidates: str = "full",
) -> tuple[list[PairComparison], list[str]]:
    """:func:`harness.compare.compare_models` on Spark: every model of ``per_user`` against
    ``spec.baseline``. With ``spec.segments``, ``train``, ``qrels`` (``user, item,
    relevance``), each model's top-k lists ``recs`` (``user, item, rank``) and a ``folder``
    for the item-bucket per-user tables (one table of all compared models, ``folder/items``)
    give the user and item-bucket segments.
    ``spec.human_labels`` adds the ``human_labels`` row, ``spec.user_groups`` the user-group gap
    note (``activity`` needs ``train`` and ``qrels``), as :func:`harness.compare.compare_models`."""
    notes: list[str] = []
    if not spec.baseline:
        return [], notes
    if spec.baseline not in per_user:
        notes.append(
            f"no comparison: the baseline {spec.baseline!r} was not run or failed "
            "(choose one with compare.baseline=NAME)"
        )
        return [], notes
    names = compared_metrics(list(suite), spec.metrics)
    segments = None
    if spec.segments and train is not None and qrels is not None:
        segments = segments_spark(train, qrels.select("user").distinct(), spec)
    ranked = bucket_metrics(names, candidates)[0]
    others = [name for name in per_user if name != spec.baseline]
    compared = [spec.baseline, *others]  # bucket_tables_spark's order: baseline first
    per_bucket: dict[str, tuple[DataFrame, ...]] = {}
    if segments is not None and segments.item_bucket is not None and recs is not None:
        for name in others:  # the checks of one call per pair, in its order
            if spec.baseline not in recs or name not in recs:
                raise RuntimeError(
                    f"{spec.baseline} or {name} was evaluated without its top-k lists"
                )
            if folder is None or qrels is None:
                raise ValueError("item-bucket segments need qrels= and folder=")
        if others and folder is not None and qrels is not None:
            # every compared model's lists judged once, per bucket, in one evaluation
            per_bucket = bucket_tables_spark(
                qrels, [recs[n] for n in compared], ranked, segments.item_bucket, folder, options
            )
    pairs = []
    for m, name in enumerate(compared[1:], start=1):
        table = per_user[name]
        buckets = {b: (t[0], t[m]) for b, t in per_bucket.items()}  # (baseline, candidate)
        pairs.append(
            compare_spark(
                per_user[spec.baseline],
                table,
                names,
                spec,
                baseline=spec.baseline,
                candidate=name,
                summaries=(summaries[spec.baseline], summaries[name]),
                segments=segments,
                buckets=buckets,
                options=options,
                candidates=candidates,
            )
        )
    if spec.human_labels and pairs:
        add_labels_rows(pairs, spec)
    if spec.user_groups and pairs:
        users = None if qrels is None else qrels.select("user").distinct()
        first = next(iter(per_user.values()))
        groups = user_groups_spark(spec, first, train=train, users=users, segments=segments)
        for pair in pairs:
            tables = (per_user[pair.baseline], per_user[pair.candidate])
            pair.notes.append(_gap_note(pair, tables, groups, spec))
    return pairs, notes


# ---------------------------------------------------------------------------------------------
# Human labels and user groups
# ---------------------------------------------------------------------------------------------
def user_groups_spark(
    spec: CompareSpec,
    per_user: DataFrame,
    *,
    train: DataFrame | None = None,
    users: DataFrame | None = None,
    segments: SparkSegments | None = None,
) -> DataFrame:
    """:func:`harness.compare.user_groups_of` as a Spark ``(user, group)`` table.

    ``activity``: ``cold`` for the test ``users`` with at most ``cold_max_events`` training
    events (the ``cold`` segment of ``segments`` or of :func:`segments_spark`), ``warm`` for the
    others. Otherwise a CSV/TSV/Parquet path (local or any Spark path) with columns ``user,
    group``, read by Spark; its user ids are cast to ``per_user``'s id type (integer or text)
    and groups compared as text, as in-process. A missing file or column: one-line DataError.
    """
    from pyspark.sql import functions as sf

    from harness.errors import DataError
    from harness.spark.io import _id_kind, stripped

    if spec.user_groups == "activity":
        if train is None or users is None:
            raise ValueError("compare.user_groups=activity needs the training events and users")
        seg = segments if segments is not None else segments_spark(train, users, spec)
        cold = seg.users.filter(sf.col("segment") == "cold").select("user", sf.lit(1).alias("_c"))
        label = sf.when(sf.col("_c").isNotNull(), "cold").otherwise("warm")
        return users.select("user").join(cold, "user", "left").select("user", label.alias("group"))
    path = str(spec.user_groups)
    if "://" not in path and not os.path.isfile(path):
        raise DataError(f"{path}: user group file not found (compare.user_groups)")
    spark = per_user.sparkSession
    try:
        if path.endswith((".parquet", ".pq")) or os.path.isdir(path):
            frame = spark.read.parquet(path)
        else:
            sep = "\t" if path.endswith(".tsv") else ","
            frame = spark.read.option("header", True).option("sep", sep).csv(path)
    except Exception as err:  # AnalysisException: not found on a cluster path, not Parquet
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise DataError(f"{path}: not readable ({first}) (compare.user_groups)") from None
    for column in ("user", "group"):
        if column not in frame.columns:
            raise DataError(f"{path}: column {column!r} is missing (compare.user_groups)")
    user = sf.col("user")
    if _id_kind(per_user, "user") == "bigint":
        user = stripped(user.cast("string")).cast("bigint")
    else:
        user = stripped(user.cast("string"))
    return frame.select(user.alias("user"), sf.col("group").cast("string").alias("group"))


def group_gap_inputs_spark(
    per_user_a: DataFrame, per_user_b: DataFrame, groups: DataFrame, metric: str
) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    """What :func:`metrics.beyond.group_gap` needs of both models, joined in Spark: ``metric``
    of the users of both tables that have a group, and their group, in user order (the order
    of the in-process per-user tables, so the within-group resamples are the same). Users
    without a group only count in ``dropped``; a user with two groups: ValueError, as
    ``group_gap`` says it."""
    from pyspark.sql import functions as sf

    for table in (per_user_a, per_user_b):
        if metric not in table.columns:
            raise ValueError(
                f"per_user has no column {metric!r}; it has "
                f"{[c for c in table.columns if c != 'user']}"
            )
    twice = (
        groups.groupBy("user").count().filter(sf.col("count") > 1).orderBy("user").limit(1)
    ).collect()
    if twice:
        raise ValueError(f"user_groups has user {twice[0]['user']!r} twice")
    a = per_user_a.select("user", sf.col(f"`{metric}`").cast("double").alias("_a"))
    b = per_user_b.select("user", sf.col(f"`{metric}`").cast("double").alias("_b"))
    joined = a.join(b, "user").join(groups.filter(sf.col("user").isNotNull()), "user")
    frame = pd.DataFrame(joined.orderBy("user").select("group", "_a", "_b").toPandas())
    index = pd.RangeIndex(len(frame))
    return (
        pd.DataFrame({metric: frame["_a"].to_numpy(np.float64)}, index=index),
        pd.DataFrame({metric: frame["_b"].to_numpy(np.float64)}, index=index),
        pd.Series(frame["group"].astype(object).to_numpy(), index=index),
    )


def _gap_note(
    pair: PairComparison, tables: tuple[DataFrame, DataFrame], groups: DataFrame, spec: CompareSpec
) -> str:
    """:func:`harness.compare.group_gap_note` from the two Spark per-user tables."""
    try:
        a, b, by_user = group_gap_inputs_spark(tables[0], tables[1], groups, pair.gsb_metric)
    except ValueError as err:
        return f"user-group gap of {pair.gsb_metric}: not computed ({err})"
    return group_gap_note(pair, (a, b), by_user, spec)
