"""Compare model versions on the same split: paired statistics per metric and per segment.

Inputs are per-user metric tables (``Evaluation.per_user``) of a baseline and a candidate, plus
what segments need (training activity, item popularity, recommendations). Output is a tidy
table, one row per (segment, metric), with the effect, its confidence interval, p-values
(corrected across the metric family of each segment) and GSB.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd

import metrics
from harness.compare.buckets import bucket_tables as _bucket_tables
from harness.data import known_codes, plain
from harness.experiment import ExperimentResult
from metrics import stats
from metrics.beyond import GroupGap
from metrics.checks import require_choice, require_range
from metrics.sets import member

__all__ = [
    "CompareSpec",
    "PairComparison",
    "SegmentData",
    "add_labels_rows",
    "bucket_metrics",
    "compare_models",
    "compare_pair",
    "compared_metrics",
    "dropped_notes",
    "paired_note",
    "paired_users",
    "pooled_metrics",
    "segment_data",
]


@dataclass(frozen=True)
class CompareSpec:
    """The ``compare/`` config."""

    baseline: str | None = "popularity"
    metrics: tuple[str, ...] | None = None  # default: every metric of the suite
    gsb_metric: str = "ndcg@10"
    tolerance: float = 0.0
    relative_tolerance: bool = False
    n_resamples: int = 1000
    confidence: float = 0.95
    correction: str = "holm"
    seed: int = 0
    cold_max_events: int = 5
    heavy_quantile: float = 0.9
    head_share: float = 0.1
    tail_share: float = 0.5
    segments: bool = True
    human_labels: str | None = None  # CSV/Parquet of unit, label (good/same/bad)[, candidate]
    user_groups: str | None = None  # fairness gap: 'activity' or a CSV/Parquet of user,group
    daily_users: float | None = None  # online A/B test sizing: users entering the test per day
    alpha: float = 0.05  # online A/B test sizing: significance level
    power: float = 0.8  # online A/B test sizing: power

    def __post_init__(self) -> None:
        require_choice("compare.correction", self.correction, stats.P_ADJUSTMENTS)
        require_range("compare.head_share", self.head_share, 0, 1, closed="neither")
        require_range("compare.tail_share", self.tail_share, 0, 1, closed="neither")
        if self.head_share + self.tail_share > 1:
            raise ValueError("'compare.head_share' + 'compare.tail_share' must be <= 1")
        if not 0 < self.alpha < 1 or not 0 < self.power < 1:
            raise ValueError("'compare.alpha' and 'compare.power' must lie in (0, 1)")
        if self.daily_users is not None and not self.daily_users > 0:
            raise ValueError(f"'compare.daily_users' must be > 0 (got {self.daily_users!r})")


@dataclass(frozen=True)
class SegmentData:
    """Training activity per user and popularity bucket per item, shared by all pairs."""

    users: dict[str, np.ndarray]  # segment name -> user ids
    item_bucket: pd.Series  # item id -> head / mid / tail
    definitions: dict[str, str]


@dataclass
class PairComparison:
    """A candidate against the baseline: one row per (segment, metric) plus GSB details."""

    baseline: str
    candidate: str
    table: pd.DataFrame
    gsb_metric: str
    differences: dict[str, pd.Series] = field(default_factory=dict)  # metric -> per-user b − a
    notes: list[str] = field(default_factory=list)
    segments: dict[str, str] = field(default_factory=dict)  # segment -> definition
    #: model -> the user-group gap of ``gsb_metric`` (compare.user_groups), as its note says
    group_gaps: dict[str, GroupGap] = field(default_factory=dict)

    def row(self, metric: str, segment: str = "all") -> pd.Series | None:
        """The comparison row of ``metric`` in ``segment`` (None when absent)."""
        hit = self.table[(self.table["metric"] == metric) & (self.table["segment"] == segment)]
        return None if hit.empty else hit.iloc[0]

    def metrics_dict(self) -> dict[str, float]:
        """Every number, flat, for logging (``compare.<segment>.<metric>.<stat>``)."""
        out: dict[str, float] = {}
        for _, r in self.table.iterrows():
            prefix = f"compare.{r['segment']}.{r['metric']}."
            for key, value in r.items():
                if key not in ("segment", "metric", "kind") and isinstance(value, int | float):
                    out[prefix + str(key)] = float(value)
        return out


def _counts(values: pd.Series, keys: np.ndarray | None = None) -> pd.Series:
    """How often each value occurs: for ``keys`` (0 when absent), or for every value that does.
    A bincount for non-negative integer ids in a compact range or text ids the split coded (no
    hashing), else value_counts."""
    if pd.api.types.is_integer_dtype(values.dtype) and len(values):
        v = values.to_numpy(dtype=np.int64)
        lo, hi = int(v.min()), int(v.max())
        wanted = None if keys is None else np.asarray(keys)
        if lo >= 0 and hi < 4 * len(v) + 1024 and (wanted is None or wanted.dtype.kind in "iu"):
            count = np.bincount(v, minlength=hi + 1)
            if wanted is None:
                seen = np.flatnonzero(count)
                return pd.Series(count[seen], index=pd.Index(seen, dtype=values.dtype))
            inside = (wanted >= 0) & (wanted <= hi)
            out = np.zeros(len(wanted), dtype=np.int64)
            out[inside] = count[wanted[inside]]
            return pd.Series(out, index=pd.Index(wanted))
    known = known_codes(values) if len(values) else None  # text ids the split coded
    if known is not None:
        codes, categories = known
        count = np.bincount(codes, minlength=len(categories))
        if keys is None:
            seen = np.flatnonzero(count)
            return pd.Series(count[seen], index=categories[seen])
        at = categories.get_indexer(np.asarray(keys))
        return pd.Series(np.where(at >= 0, count[np.maximum(at, 0)], 0), index=pd.Index(keys))
    counts = values.value_counts()
    return counts if keys is None else counts.reindex(keys, fill_value=0)


def share(value: float) -> Decimal:
    """A share as the decimal it is written as (``0.07``, not the double just above it): the
    number of items ``share · n`` is then exact, as the config means it (7 of 100 items, not
    8), in both engines."""
    return Decimal(repr(float(value)))


def segment_data(train: pd.DataFrame, test_users: np.ndarray, spec: CompareSpec) -> SegmentData:
    """Cold users (at most ``cold_max_events`` training events), heavy users (activity at or
    above the ``heavy_quantile`` of test users) and item popularity buckets (head: the most
    popular ``head_share`` of training items, tail: the least popular ``tail_share``)."""
    activity = _counts(train["user"], test_users)
    heavy_min = float(np.quantile(activity.to_numpy(), spec.heavy_quantile)) if len(activity) else 0
    popularity = _counts(train["item"])
    order = np.lexsort((popularity.index.to_numpy(), -popularity.to_numpy()))
    ranked = popularity.index.to_numpy()[order]
    n = len(ranked)
    n_head, n_tail = math.ceil(share(spec.head_share) * n), math.floor(share(spec.tail_share) * n)
    bucket = np.full(n, "mid", dtype=object)
    bucket[:n_head] = "head"
    if n_tail:
        bucket[n - n_tail :] = "tail"
    return SegmentData(
        users={
            "cold": activity.index[activity <= spec.cold_max_events].to_numpy(),
            "heavy": activity.index[activity >= max(heavy_min, 1)].to_numpy(),
        },
        item_bucket=pd.Series(bucket, index=ranked),
        definitions=segment_definitions(spec, heavy_min),
    )


def segment_definitions(spec: CompareSpec, heavy_min: float) -> dict[str, str]:
    """What each segment holds, in words (the report's and MLflow's segment notes)."""
    return {
        "cold": f"users with <= {spec.cold_max_events} training events",
        "heavy": f"users with >= {heavy_min:g} training events "
        f"(the {spec.heavy_quantile:g} quantile of the test users' training events)",
        "items:head": f"test items among the {spec.head_share:.0%} most popular training items",
        "items:tail": f"test items among the {spec.tail_share:.0%} least popular, and test items "
        "unseen in training",
        "items:mid": "the other test items",
    }


def comparison_table(rows: Sequence[Mapping[str, Any]], spec: CompareSpec) -> pd.DataFrame:
    """The comparison's rows as a table, p-values adjusted (``spec.correction``) within each
    segment over its per-user metrics."""
    table = pd.DataFrame(rows)
    if not table.empty:
        table["p_adjusted"] = np.nan
        per_user = table["kind"] == "per-user"
        for _, idx in table[per_user].groupby("segment").groups.items():
            table.loc[idx, "p_adjusted"] = stats.adjust(
                table.loc[idx, "p_randomization"].to_numpy(), spec.correction
            )
    return table


def _rows(
    a: pd.DataFrame,
    b: pd.DataFrame,
    names: Sequence[str],
    segment: str,
    spec: CompareSpec,
    summaries: tuple[Mapping[str, float], Mapping[str, float]] | None,
    pooled: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """One row per metric of one segment; the per-user metrics compared together
    (:func:`metrics.stats.compare_many`: resamples shared, normal intervals at scale). Metrics
    without per-user values, and ``pooled`` ones (whose summary is not the mean of their
    per-user values: :func:`pooled_metrics`), get a run-level row from ``summaries`` (segment
    ``all``) and no row elsewhere."""
    rows: dict[str, dict[str, Any]] = {}
    columns: dict[str, tuple[np.ndarray, np.ndarray, bool]] = {}
    for name in names:
        hib = metrics.parse(name).definition.higher_is_better
        va, vb = a[name], b[name]
        if name in pooled or va.notna().sum() == 0 or vb.notna().sum() == 0:
            if summaries is None:
                continue
            base, cand = summaries[0].get(name, np.nan), summaries[1].get(name, np.nan)
            rows[name] = {
                "segment": segment,
                "metric": name,
                "kind": "run-level",
                "higher_is_better": hib,
                "mean_a": base,
                "mean_b": cand,
                "diff": cand - base,
                "lift": (cand - base) / base if base else np.nan,
                "n": np.nan,
            }
            continue
        ok = va.notna() & vb.notna()
        if ok.sum() < 2:
            continue
        rows[name] = {}  # keeps the metric order
        # a and b share their index (compare_pair): plain arrays; compare_many leaves out the
        # users without a value on a side and counts them (``dropped``)
        columns[name] = (va.to_numpy(np.float64), vb.to_numpy(np.float64), hib)
    results = stats.compare_many(
        columns,
        tolerance=spec.tolerance,
        relative=spec.relative_tolerance,
        n_resamples=spec.n_resamples,
        seed=spec.seed,
        confidence=spec.confidence,
        alpha=spec.alpha,  # the MDE at the online test's level and power
        power=spec.power,
    )
    for name, res in results.items():
        rows[name] = {
            "segment": segment,
            "metric": name,
            "kind": "per-user",
            "higher_is_better": columns[name][2],
            **res.as_dict(),
            "method": res.method,  # bootstrap | normal (metrics.stats.compare_many)
        }
    return list(rows.values())


def pooled_metrics(names: Sequence[str], options: Mapping[str, Any] | None) -> frozenset[str]:
    """The ``names`` whose summary under ``options`` is pooled over the run rather than the mean
    of their per-user values (RMSE/MAE over pairs, weighted gauc, micro averages): a paired
    comparison of per-user values would compare another number, so both engines compare them
    on their summaries, as whole-run metrics."""
    opts = metrics.resolve_options(**dict(options or {}))
    return frozenset(n for n in names if not metrics.parse(n).per_user_mean(opts))


def paired_users(
    baseline: str,
    candidate: str,
    per_user: tuple[pd.DataFrame, pd.DataFrame],
    options: Mapping[str, Any] | None,
) -> tuple[pd.DataFrame, pd.DataFrame, str | None]:
    """The two per-user tables on the users both hold (in the baseline's order), and a note
    counting the users left out when there are some.

    Users may differ only under ``user_set="intersection"`` (resolved from ``options``, a
    preset such as ``trec_eval`` included): there a model is evaluated on the test users it gave
    a list, so two models differ by the users one of them has no list for. Under ``truth``
    every model is evaluated on every test user: different users mean different splits, a
    ``ValueError`` naming an example user."""
    a, b = per_user
    if a.index.equals(b.index):
        return a, b, None
    user_set = metrics.resolve_options(**dict(options or {})).user_set
    if user_set != "intersection":
        only = a.index.symmetric_difference(b.index)
        example = plain(only[0]) if len(only) else "(same users, different order)"
        raise ValueError(
            f"{baseline!r} and {candidate!r} were evaluated on different users "
            f"({len(only)} differ, e.g. {example!r}); compare models on the same split"
        )
    both = a.index[a.index.isin(b.index)]
    note = paired_note(baseline, candidate, len(both), len(a), len(b))
    return a.loc[both], b.loc[both], note


def paired_note(baseline: str, candidate: str, n_both: int, n_a: int, n_b: int) -> str:
    """The note of a pair compared on the ``n_both`` users its two tables (of ``n_a`` and
    ``n_b`` users) share (``user_set="intersection"``); the Spark comparison writes it too."""
    return (
        f"compared on the {n_both:,} users both models were evaluated on, leaving out "
        f"{n_a - n_both:,} of the {n_a:,} users of {baseline!r} and {n_b - n_both:,} of the "
        f"{n_b:,} users of {candidate!r} (user_set=intersection evaluates a model only on the "
        "test users it gave a list)"
    )


def dropped_notes(table: pd.DataFrame) -> list[str]:
    """A note per group of metrics whose paired rows (segment ``all``) left users out because a
    model has no value for them (e.g. novelty of an empty list): those rows' means are then over
    fewer users than the summary's, which averages each model over its own users. Both engines
    write it from the comparison table."""
    if "dropped" not in table:  # no per-user row (only whole-run or pooled metrics)
        return []
    rows = table[(table["segment"] == "all") & (table["kind"] == "per-user")]
    rows = rows[rows["dropped"].fillna(0) > 0]
    notes = []
    for (n, dropped), group in rows.groupby(["n", "dropped"], sort=False):
        names = ", ".join(group["metric"])
        total = int(n) + int(dropped)
        notes.append(
            f"{names}: compared on the {int(n):,} of {total:,} users with a value for both "
            f"models; {int(dropped):,} have none for one or both (no relevant test item, or no "
            "list) and are left out, so these rows' means can differ from the summary table's"
        )
    return notes


def bucket_metrics(names: Sequence[str], candidates: str = "full") -> tuple[list[str], str | None]:
    """The metrics compared on item buckets, and a note naming those left out. Buckets judge
    the saved top-k lists: over the full catalog those are what every ranking metric read; with
    ``candidates`` ``sampled`` or ``file`` a metric without a cutoff (``mrr``, ``map``,
    ``r_precision``) read each user's whole ranked candidate list, which is not kept, so it
    has no bucket rows rather than other numbers than its ``all`` row."""
    ranked = [n for n in names if metrics.parse(n).definition.kind == "ranking"]
    if candidates == "full":
        return ranked, None
    specs = {n: metrics.parse(n) for n in ranked}
    cut = [n for n, s in specs.items() if s.k is not None and s.definition.depth == "cutoff"]
    left = [n for n in ranked if n not in cut]
    if not left:
        return cut, None
    return cut, (
        f"item buckets: no rows of {', '.join(left)}: with candidates={candidates} they read each "
        "user's whole ranked candidate list, and the buckets judge the top-k lists"
    )


def compare_pair(
    baseline: str,
    candidate: str,
    per_user: tuple[pd.DataFrame, pd.DataFrame],
    names: Sequence[str],
    spec: CompareSpec,
    *,
    summaries: tuple[Mapping[str, float], Mapping[str, float]] | None = None,
    segments: SegmentData | None = None,
    qrels: pd.DataFrame | None = None,
    recs: tuple[pd.DataFrame, pd.DataFrame] | None = None,
    options: Mapping[str, Any] | None = None,
    evaluate: Callable[..., metrics.Evaluation] = metrics.evaluate,
    candidates: str = "full",
) -> PairComparison:
    """Compare ``candidate`` with ``baseline`` on every metric, overall and per segment.

    The two per-user tables cover the same users (same split), except under
    ``user_set="intersection"`` (``options``), where each model is evaluated only on the test
    users it gave a list: the pair is then compared on the users both tables hold, and a note
    counts those left out (:func:`paired_users`). Other differences are a ``ValueError``
    naming an example user. Whole-run metrics (coverage, gini) have no per-user values, and
    pooled ones (rmse, gauc, micro averages: :func:`pooled_metrics`) summarise otherwise than
    by their mean: their row carries the two summary values and the difference, without a
    confidence interval, on segment ``all`` only.
    """
    a, b, note = paired_users(baseline, candidate, per_user, options)
    names = [n for n in names if n in a.columns and n in b.columns]
    pooled = pooled_metrics(names, options)
    rows = _rows(a, b, names, "all", spec, summaries, pooled)
    notes: list[str] = [note] if note else []
    if segments is not None:
        for seg, users in segments.users.items():
            keep = a.index.isin(users)
            rows += _rows(a[keep], b[keep], names, seg, spec, None, pooled)
        if qrels is not None and recs is not None:
            ranked, left = bucket_metrics(names, candidates)
            buckets = _bucket_tables(
                qrels, recs, ranked, segments.item_bucket, options or {}, evaluate
            )
            notes += [left] if left and buckets else []
            for bucket, (pa, pb) in buckets.items():
                rows += _rows(pa, pb, ranked, f"items:{bucket}", spec, None, pooled)
    table = comparison_table(rows, spec)
    differences = {n: (b[n] - a[n]).dropna() for n in names if b[n].notna().any()}
    notes += dropped_notes(table)
    if spec.gsb_metric not in names:
        notes.append(f"GSB metric {spec.gsb_metric!r} is not in the compared metrics")
    definitions = segments.definitions if segments is not None else {}
    return PairComparison(
        baseline, candidate, table, spec.gsb_metric, differences, notes, definitions
    )


def read_labels(path: str) -> pd.DataFrame:
    """Human side-by-side labels: columns ``unit``, ``label`` (good / same / bad) and optionally
    ``candidate`` (which candidate the rater compared with the baseline)."""
    from pathlib import Path

    from harness.data import read_text_table
    from harness.errors import DataError

    file = Path(path)
    if not file.is_file():
        raise DataError(f"{path}: human label file not found")
    if file.suffix in (".parquet", ".pq"):
        try:
            frame = pd.read_parquet(file)
        except Exception as err:  # pyarrow's errors: not Parquet, truncated, unreadable
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise DataError(f"{path}: not a readable Parquet file ({first})") from None
    else:  # CSV/TSV text: a binary or non-UTF-8 file is refused, naming the file
        frame = read_text_table(file, "tsv" if file.suffix == ".tsv" else "csv", str(path))
    missing = [c for c in ("unit", "label") if c not in frame.columns]
    if missing:
        raise DataError(
            f"{path}: column {missing[0]!r} is missing (found {[str(c) for c in frame.columns]})"
        )
    try:
        metrics.gsb_from_labels(frame["label"])
    except ValueError as err:
        raise DataError(f"{path}: column 'label': {err}") from None
    return frame


def add_labels_rows(pairs: Sequence[PairComparison], spec: CompareSpec) -> None:
    """Append the ``human_labels`` row to each pair judged in ``spec.human_labels`` (rows of
    its candidate when the file has a ``candidate`` column; required for several pairs)."""
    labels = read_labels(str(spec.human_labels))
    if "candidate" not in labels.columns and len(pairs) > 1:
        raise ValueError(
            f"{spec.human_labels}: several candidates are compared, so the labels need a "
            "'candidate' column naming the model each row judges"
        )
    for pair in pairs:
        mine = labels
        if "candidate" in labels.columns:
            mine = labels[labels["candidate"].astype(str) == pair.candidate]
        if len(mine):
            row = pd.DataFrame([labels_row(mine["label"], spec)])
            pair.table = pd.concat([pair.table, row], ignore_index=True)


def labels_row(labels: pd.Series, spec: CompareSpec) -> dict[str, Any]:
    """The GSB row of human labels: counts, ΔGSB and its bootstrap CI (units resampled)."""
    signs = labels.astype(str).str.strip().str.lower().map({"good": 1.0, "same": 0.0, "bad": -1.0})
    res = stats.gsb_bootstrap(
        np.zeros(len(signs)),
        signs.to_numpy(),
        n_resamples=spec.n_resamples,
        seed=spec.seed,
        confidence=spec.confidence,
    )
    return {
        "segment": "all",
        "metric": "human_labels",
        "kind": "labels",
        "higher_is_better": True,
        "n": len(signs),
        "gsb_good": res.gsb.good,
        "gsb_same": res.gsb.same,
        "gsb_bad": res.gsb.bad,
        "gsb_delta": res.delta,
        "gsb_ci_low": res.ci[0],
        "gsb_ci_high": res.ci[1],
    }


def compared_metrics(suite: Sequence[str], chosen: Sequence[str] | None) -> list[str]:
    """The metrics a comparison covers: ``compare.metrics`` (each must be in ``metrics.names``),
    or the whole suite; checked before any model runs."""
    names = [str(n) for n in (chosen or suite)]
    unknown = [n for n in names if n not in suite]
    if unknown:
        raise ValueError(f"compare.metrics has {unknown[0]!r}, which is not in metrics.names")
    return names


def compare_models(
    result: ExperimentResult,
    spec: CompareSpec,
    evaluate: Callable[..., metrics.Evaluation] = metrics.evaluate,
) -> tuple[list[PairComparison], list[str]]:
    """Every successful model against ``spec.baseline`` on the run's split (with segments);
    ``evaluate`` is the run's metric engine: another engine than ``metrics.evaluate`` evaluates
    the item-bucket segments; the in-process one's are judged in one pass per model
    (:func:`harness.compare.buckets.bucket_tables`, the same numbers)."""
    notes: list[str] = []
    if not spec.baseline:
        return [], notes
    base = result.outcomes.get(spec.baseline)
    if base is None or base.evaluation is None:
        why = "was not run" if base is None else "failed"
        notes.append(
            f"no comparison: the baseline {spec.baseline!r} {why} "
            "(choose one with compare.baseline=NAME)"
        )
        return [], notes
    names = compared_metrics(result.suite.names, spec.metrics)
    segments = qrels = None
    if spec.segments:
        from harness.experiment import qrels_from_test

        qrels = qrels_from_test(result.split.test, result.suite.relevance)
        segments = segment_data(result.split.train, np.sort(qrels["user"].unique()), spec)
    pairs = []
    for name, outcome in result.outcomes.items():
        if name == spec.baseline or outcome.evaluation is None:
            continue
        if base.recommendations is None or outcome.recommendations is None:
            raise RuntimeError(f"{spec.baseline} or {name} was evaluated without its top-k lists")
        pairs.append(
            compare_pair(
                spec.baseline,
                name,
                (base.evaluation.per_user, outcome.evaluation.per_user),
                names,
                spec,
                summaries=(base.evaluation.summary, outcome.evaluation.summary),
                segments=segments,
                qrels=qrels,
                recs=(base.recommendations, outcome.recommendations),
                options=result.suite.evaluate_options(),
                evaluate=evaluate,
                candidates=str(result.candidates.get("candidates.kind", "full")),
            )
        )
    if spec.human_labels and pairs:
        add_labels_rows(pairs, spec)
    if spec.user_groups and pairs:
        groups = user_groups_of(spec, result)
        tables = {n: o.evaluation.per_user for n, o in result.outcomes.items() if o.evaluation}
        for pair in pairs:
            pair.notes.append(
                group_gap_note(pair, (tables[pair.baseline], tables[pair.candidate]), groups, spec)
            )
    return pairs, notes


def user_groups_of(spec: CompareSpec, result: ExperimentResult) -> pd.Series:
    """User → group for the fairness gap: ``activity`` (cold users, at most ``cold_max_events``
    training events, against the others) or a CSV/Parquet file with columns ``user, group``."""
    if spec.user_groups == "activity":
        test_users = np.sort(result.split.test["user"].unique())
        cold = segment_data(result.split.train, test_users, spec).users["cold"]
        return pd.Series(np.where(member(test_users, cold), "cold", "warm"), index=test_users)
    from pathlib import Path

    from harness.data import normalize_ids, read_text_table
    from harness.errors import DataError

    path = str(spec.user_groups)
    file = Path(path)
    if not file.is_file():
        raise DataError(f"{path}: user group file not found (compare.user_groups)")
    frame = (
        pd.read_parquet(file)
        if file.suffix in (".parquet", ".pq")
        else read_text_table(file, "tsv" if file.suffix == ".tsv" else "csv", path)
    )
    for column in ("user", "group"):
        if column not in frame.columns:
            raise DataError(f"{path}: column {column!r} is missing (compare.user_groups)")
    users = normalize_ids(frame["user"], path, "user")
    return pd.Series(frame["group"].astype(str).to_numpy(), index=pd.Index(users))


def group_gap_note(
    pair: PairComparison,
    per_user: tuple[pd.DataFrame, pd.DataFrame],
    groups: pd.Series,
    spec: CompareSpec,
) -> str:
    """One line: the gap of the GSB metric between user groups for the baseline and the
    candidate, each with its bootstrap CI (users resampled within their group); the gaps are
    kept in ``pair.group_gaps`` (logged as ``fairness.*`` metrics)."""
    from metrics.beyond import group_gap

    metric = pair.gsb_metric
    parts = []
    for model, table in zip((pair.baseline, pair.candidate), per_user, strict=True):
        try:
            gap = group_gap(
                table,
                groups,
                metric,
                n_resamples=spec.n_resamples,
                confidence=spec.confidence,
                seed=spec.seed,
            )
        except ValueError as err:
            return f"user-group gap of {metric}: not computed ({err})"
        pair.group_gaps[model] = gap
        means = ", ".join(f"{g} {m:.4f}" for g, m in gap.means.items())
        parts.append(f"{model} {gap.gap:.4f} [{gap.ci[0]:.4f}, {gap.ci[1]:.4f}] ({means})")
    return (
        f"user-group gap of {metric} (max − min group mean, {spec.confidence:.0%} CI): "
        + "; ".join(parts)
    )
