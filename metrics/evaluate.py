"""``evaluate``: every requested metric, per user and summarized, from (qrels, run) DataFrames."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from metrics import beyond, ranking, rating, scores
from metrics.engine import Batch, Prepared, batches, prepare
from metrics.options import Options, resolve_options
from metrics.registry import MetricSpec, parse
from metrics.side import SIDE_METRICS, BeyondInputs

__all__ = ["Evaluation", "State", "evaluate", "finish_state", "merge_states"]

_MICRO = {"precision", "recall", "f1"}


@dataclass(frozen=True)
class Evaluation:
    """Result of :func:`evaluate`.

    ``summary`` maps each requested name to its value; ``per_user`` has one row per evaluated user
    (index ``user``) and one column per requested name (NaN where a user's value is undefined or
    the metric is whole-run only); ``options`` are the conventions used; ``counts`` says how many
    users were left out or scored 0, and why.
    """

    summary: dict[str, float]
    per_user: pd.DataFrame
    options: dict[str, Any]
    counts: dict[str, int] = field(default_factory=dict)
    state: State | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        lines = [f"{name:>20s}  {value:.6f}" for name, value in self.summary.items()]
        return "Evaluation(\n" + "\n".join(lines) + f"\n  users={self.counts.get('users')})"


@dataclass
class State:
    """The mergeable aggregates of an evaluation over a set of users: what its summary and
    counts are finished from (:func:`finish_state`), so any engine that splits the users into
    disjoint parts can merge the parts' states (:func:`merge_states`) and finish them once.

    ``sums``: additive floats (per metric: the sum and count of defined per-user values,
    weighted sums, pooled hits / list lengths, rating errors, exposure shares); ``counts``:
    additive ints (``Evaluation.counts``); ``tables``: additive count tables, one row per key
    (index ``item``: how often each item is in a top-k; index ``score``: relevant / irrelevant
    candidates per distinct score, for pooled AUC).
    """

    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


def merge_states(states: Iterable[State]) -> State:
    """One state from the states of disjoint sets of users: sums and counts added, tables added
    key by key."""
    out = State()
    tables: dict[str, list[pd.DataFrame]] = {}
    for st in states:
        for key, value in st.sums.items():
            out.sums[key] = out.sums.get(key, 0.0) + value
        for key, n in st.counts.items():
            out.counts[key] = out.counts.get(key, 0) + int(n)
        for key, table in st.tables.items():
            tables.setdefault(key, []).append(table)
    for key, parts in tables.items():
        merged = parts[0] if len(parts) == 1 else pd.concat(parts).groupby(level=0).sum()
        out.tables[key] = merged
    return out


def _reduction(spec: MetricSpec, opts: Options) -> str:
    """How a metric's per-user values become its summary (the one place that says so)."""
    d = spec.definition
    if d.kind == "ranking" and opts.average == "micro" and spec.metric in _MICRO:
        return "micro"
    if d.aggregation == "sum":
        return "sum"
    if d.kind == "score":
        return {"gauc": "weighted", "global_auc": "pairs"}.get(spec.metric, "mean")
    if d.kind == "rating":
        return "errors"
    if spec.metric == "exposure":
        return "ratio"
    if d.kind == "run" and d.aggregation == "pooled":
        return "items"
    return "mean"


def _top_key(k: int | None) -> str:
    return f"top@{k}" if k is not None else "top"


def _count_keys(named: list[tuple[str, MetricSpec]]) -> list[str]:
    """The keys of ``Evaluation.counts``, in order."""
    keys = [
        "users",
        "users_without_relevant",
        "users_missing_from_run",
        "truth_users_not_evaluated",
        "run_users_not_in_truth",
    ]
    for name, spec in named:
        if spec.metric in SIDE_METRICS:
            keys.append(f"{name}.undefined_users")
        extra = {"score": "auc_undefined_users", "rating": "rating_pairs"}.get(spec.definition.kind)
        if extra and extra not in keys:
            keys.append(extra)
    return keys


def finish_state(
    state: State,
    names: Iterable[str] | str,
    catalog_size: int | Callable[[], int] | None = None,
    **options: Any,
) -> tuple[dict[str, float], dict[str, int]]:
    """(summary, counts) of ``names`` from a (merged) :class:`State`.

    ``catalog_size`` is the denominator of ``coverage`` / ``gini`` (an int, or a function
    called only when one of them is asked);
    ``options`` (with ``preset``) are those the states were computed with.
    """
    opts = resolve_options(options.pop("preset", None), **options)
    named = _specs(names)
    sums, tables = state.sums, state.tables
    summary: dict[str, float] = {}
    for name, spec in named:
        how = _reduction(spec, opts)
        if how == "micro":
            hits = sums.get(f"hits@{spec.k}", 0.0)
            p = hits / max(sums.get(f"nret@{spec.k}", 0.0), 1)
            r = hits / max(sums.get("n_rel", 0.0), 1)
            pooled = {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}
            summary[name] = float(pooled[spec.metric])
        elif how == "sum":
            summary[name] = float(sums.get(f"{name}:sum", 0.0))
        elif how in ("mean", "weighted", "ratio"):
            den = sums.get(f"{name}:n", 0.0)
            summary[name] = float(sums.get(f"{name}:sum", 0.0) / den) if den > 0 else float("nan")
        elif how == "pairs":
            hist = tables.get("scores")
            summary[name] = _pooled_auc(hist) if hist is not None else float("nan")
        elif how == "errors":
            n = sums.get("rating:n", 0.0)
            err = sums.get("rating:sse" if spec.metric == "rmse" else "rating:sae", 0.0)
            value = err / n if n else float("nan")
            summary[name] = float(np.sqrt(value)) if spec.metric == "rmse" else float(value)
        else:  # items: coverage / gini over the catalog
            table = tables.get(_top_key(spec.k))
            freq = np.zeros(0) if table is None else table["n"].to_numpy(dtype=np.float64)
            freq = freq[freq > 0]
            if spec.metric == "distributional_coverage":  # needs no catalog
                summary[name] = beyond.distributional_coverage(freq)
                continue
            if callable(catalog_size):
                catalog_size = int(catalog_size())
            if catalog_size is None:
                raise ValueError(f"metric {name!r} needs the catalog size")
            if len(freq) > catalog_size:
                raise ValueError(
                    f"'catalog' has {catalog_size} items but the run recommends {len(freq)} "
                    "distinct items; pass the full catalog"
                )
            if spec.metric == "coverage":
                summary[name] = beyond.coverage(np.arange(len(freq)), catalog_size)
            else:
                summary[name] = beyond.gini(
                    np.concatenate([freq, np.zeros(catalog_size - len(freq))])
                )
    counts = {key: int(state.counts.get(key, 0)) for key in _count_keys(named)}
    return summary, counts


def _pooled_auc(hist: pd.DataFrame) -> float:
    """AUC over every pooled (relevant, irrelevant) pair from a score histogram (ties 1/2).

    Integer counts: the numerator ``2 · wins`` is exact."""
    hist = hist.sort_index()
    pos = hist["pos"].to_numpy(dtype=np.int64)
    neg = hist["neg"].to_numpy(dtype=np.int64)
    neg_before = np.cumsum(neg) - neg
    wins2 = int((pos * (2 * neg_before + neg)).sum())
    pairs = float(pos.sum()) * float(neg.sum())
    return float(wins2 / 2) / pairs if pairs > 0 else float("nan")


def _specs(names: Iterable[str] | str) -> list[tuple[str, MetricSpec]]:
    items = [names] if isinstance(names, str | MetricSpec) else list(names)
    if not items:
        raise ValueError("no metric requested: pass at least one name, e.g. ['ndcg@10']")
    out: dict[str, MetricSpec] = {}
    for name in items:
        out[str(name)] = parse(name)
    return list(out.items())


def _depth(specs: list[MetricSpec]) -> int | None:
    """Largest cutoff the judged lists must reach (None = whole list)."""
    ks: list[int | None] = [
        s.k
        for s in specs
        if s.definition.kind in ("ranking", "run") and s.metric not in ("r_precision", "num_rel")
    ]
    if any(k is None for k in ks):
        return None
    return max((k for k in ks if k is not None), default=1)


def _kernel_options(metric: str, opts: Options) -> dict[str, str]:
    """The keyword options a ranking kernel takes from the conventions (AP, precision, NDCG)."""
    if metric == "ap":
        return {"denominator": opts.ap_denominator}
    if metric in ("precision", "f1"):
        return {"denominator": opts.precision_denominator}
    if metric in ("ndcg", "idcg"):
        return {"ideal": opts.ideal_dcg}
    return {}


class _Accumulator:
    """Per-user columns and pooled sums filled batch by batch."""

    def __init__(
        self,
        prep: Prepared,
        specs: list[tuple[str, MetricSpec]],
        opts: Options,
        side: BeyondInputs | None = None,
    ):
        n = len(prep.users)
        self.prep, self.specs, self.opts, self.side = prep, specs, opts, side
        self.exposure: dict[str, tuple[np.ndarray, np.ndarray]] = {
            name: (np.zeros(n), np.zeros(n)) for name, s in specs if s.metric == "exposure"
        }
        self.values = {name: np.full(n, np.nan) for name, _ in specs}
        self.hits: dict[int | None, np.ndarray] = {}
        self.nret: dict[int | None, np.ndarray] = {}
        self.auc_wins, self.auc_pos, self.auc_neg = np.zeros(n), np.zeros(n), np.zeros(n)
        self.pooled_scores: list[np.ndarray] = []
        self.pooled_relevant: list[np.ndarray] = []
        self.errors = [np.zeros(n), np.zeros(n), np.zeros(n)]
        self.top: dict[int | None, list[np.ndarray]] = {}

    def add(self, batch: Batch, popularity: pd.Series | None) -> None:
        j, users = batch.judged, batch.users
        thr = self.opts.relevance_threshold
        for name, spec in self.specs:
            d = spec.definition
            if d.kind == "ranking":
                kw = _kernel_options(spec.metric, self.opts)
                self.values[name][users] = d.kernel(j, k=spec.k, **kw)
                if spec.metric in _MICRO:
                    self.hits.setdefault(spec.k, np.zeros(len(self.prep.users)))[users] = (
                        ranking.hits_at(j, k=spec.k)
                    )
                    self.nret.setdefault(spec.k, np.zeros(len(self.prep.users)))[users] = (
                        ranking.num_ret(j, k=spec.k)
                    )
            elif d.kind == "run":
                c = j.cut(spec.k)
                valid = np.arange(c)[None, :] < j.n_ret[:, None]
                top = batch.top_items[:, :c]
                if spec.metric in ("coverage", "gini", "distributional_coverage"):
                    self.top.setdefault(spec.k, []).append(top[valid])
                if spec.metric in SIDE_METRICS and self.side is not None:
                    value = self.side.per_user(
                        spec,
                        self.prep.item_ids(top[valid]),
                        valid,
                        j.hits[:, :c],
                        self.prep.users[users],
                    )
                    if spec.metric == "exposure":
                        num, den = self.exposure[name]
                        num[users], den[users] = value
                        with np.errstate(invalid="ignore", divide="ignore"):
                            value = np.where(value[1] > 0, value[0] / value[1], np.nan)
                    self.values[name][users] = value
                if spec.metric in ("novelty", "popularity") and popularity is not None:
                    count = np.zeros(top.shape)
                    ids = self.prep.item_ids(top[valid])
                    count[valid] = popularity.reindex(ids, fill_value=0).to_numpy()
                    if spec.metric == "popularity":
                        self.values[name][users] = beyond.popularity(count, valid)
                    else:
                        total = float(popularity.sum())
                        share = np.maximum(count, 1) / total
                        self.values[name][users] = beyond.novelty(share, valid)
        if batch.scores is not None and batch.labels is not None:
            cand = np.isfinite(batch.scores)
            local = np.nonzero(cand)[0]
            relevant = np.nan_to_num(batch.labels[cand], nan=0.0) >= thr
            if any(s.definition.kind == "score" for _, s in self.specs):
                part = scores.auc_counts(local, batch.scores[cand], relevant, len(users))
                self.auc_wins[users] = part.wins
                self.auc_pos[users] = part.n_pos
                self.auc_neg[users] = part.n_neg
                if any(s.metric == "global_auc" for _, s in self.specs):
                    self.pooled_scores.append(batch.scores[cand])
                    self.pooled_relevant.append(relevant)
            judged = cand & np.isfinite(batch.labels)
            rows = np.nonzero(judged)[0]
            for acc, errors in zip(
                self.errors,
                rating.user_errors(rows, batch.labels[judged], batch.scores[judged], len(users)),
                strict=True,
            ):
                acc[users] += errors


def _catalog_size(catalog: Any, prep: Prepared, train: pd.DataFrame | None) -> int:
    if catalog is None:
        keys = np.concatenate([np.unique(prep.truth_items), np.unique(prep.run_items)])
        parts = [prep.item_ids(keys)]
        if train is not None:
            parts.append(train["item"].to_numpy())
        return len(pd.unique(np.concatenate([np.asarray(p, dtype=object) for p in parts])))
    if isinstance(catalog, int | np.integer):
        return int(catalog)
    return len(pd.unique(np.asarray(list(catalog), dtype=object)))


def evaluate(
    qrels: pd.DataFrame,
    run: pd.DataFrame,
    names: Iterable[str] | str,
    *,
    train: pd.DataFrame | None = None,
    catalog: Any = None,
    item_features: pd.DataFrame | None = None,
    item_embeddings: pd.DataFrame | None = None,
    item_groups: pd.DataFrame | str | None = None,
    preset: str | None = None,
    batch_cells: int = 1 << 23,
    **options: Any,
) -> Evaluation:
    """Compute ``names`` (``"ndcg@10"``, ``"map"``, ``"auc"`` …) for ``run`` judged by ``qrels``.

    ``qrels`` has columns ``user, item, relevance``; ``run`` has ``user, item, score`` (higher is
    better). Options (``gain``, ``ap_denominator``, ``ideal_dcg``, ``precision_denominator``,
    ``ndcg_ties``, ``tie_break``, ``id_order``, ``user_set``, ``empty_users``, ``average``,
    ``gauc_weight``, ``relevance_threshold`` …, see :data:`metrics.options.CHOICES`) override
    ``preset`` (``default``, ``trec_eval``, ``recbole``, ``ms_recommenders``, ``ranx``,
    ``torchmetrics``, ``rectools``: :data:`metrics.options.PRESETS`). ``train`` (``user, item``)
    gives the
    item popularity that ``novelty`` and ``popularity`` need; ``catalog`` (a size or the item ids)
    is the denominator of ``coverage`` and ``gini`` (default: every item seen in any table).
    Beyond-accuracy side inputs, each a DataFrame with an ``item`` column: ``item_features``
    (categorical columns; a cell may hold a list or ``a|b`` text) for ``diversity`` similarity and
    ``miscalibration`` categories, ``item_embeddings`` (numeric columns, cosine similarity; wins
    over features for similarity), ``item_groups`` (columns ``item, group``, or the name of an
    ``item_features`` column) for ``exposure_<group>``. Without features or embeddings, item
    similarity is co-occurrence in ``train`` (``user, item``).

    >>> qrels = pd.DataFrame({"user": [1, 1], "item": [10, 11], "relevance": [1, 1]})
    >>> run = pd.DataFrame({"user": [1, 1, 1], "item": [12, 10, 11], "score": [0.9, 0.8, 0.1]})
    >>> ev = evaluate(qrels, run, ["precision@2", "map", "ndcg@3"])
    >>> round(ev.summary["precision@2"], 6), round(ev.summary["map"], 6)
    (0.5, 0.583333)
    """
    opts = resolve_options(preset, **options)
    if not isinstance(batch_cells, int) or batch_cells <= 0:
        raise ValueError(f"'batch_cells' must be a positive int (got {batch_cells!r})")
    named = _specs(names)
    specs = [s for _, s in named]
    prep = prepare(qrels, run, opts)
    popularity = None
    if any(s.metric in ("novelty", "popularity") for s in specs):
        if train is None or "item" not in getattr(train, "columns", []):
            bad = next(n for n, s in named if s.metric in ("novelty", "popularity"))
            raise ValueError(
                f"metric {bad!r} needs train= (a DataFrame with an 'item' column) "
                "for item popularity"
            )
        popularity = train["item"].value_counts()
    side = None
    if any(s.metric in SIDE_METRICS for s in specs):
        items_int = pd.api.types.is_integer_dtype(run["item"].dtype)
        side = BeyondInputs(
            named, opts, train, item_features, item_embeddings, item_groups, items_int
        )
    acc = _Accumulator(prep, named, opts, side)
    need_candidates = any(s.definition.kind in ("score", "rating") for s in specs)
    for batch in batches(
        prep,
        opts,
        depth=_depth(specs),
        need_rprec=any(s.metric == "r_precision" for s in specs),
        need_candidates=need_candidates,
        budget=batch_cells,
    ):
        acc.add(batch, popularity)
    return _finish(acc, named, prep, opts, train, catalog)


def _finish(
    acc: _Accumulator,
    named: list[tuple[str, MetricSpec]],
    prep: Prepared,
    opts: Options,
    train: pd.DataFrame | None,
    catalog: Any,
) -> Evaluation:
    """Per-user values finalized, the mergeable :class:`State`, and the summary finished from it."""
    empty = prep.n_rel == 0
    included = ~empty if opts.empty_users == "skip" else np.ones(len(empty), bool)
    auc: scores.AucCounts | None = None
    if any(spec.definition.kind == "score" for _, spec in named):
        auc = scores.AucCounts(acc.auc_wins, acc.auc_pos, acc.auc_neg)
        per_auc = scores.user_auc(auc)
    for name, spec in named:
        d, values = spec.definition, acc.values[name]
        if d.kind in ("ranking", "run") and d.needs_relevant:
            values[~included] = np.nan
            if opts.empty_users == "one":  # torchmetrics' empty_target_action="pos"
                values[empty] = 1.0
        if d.kind == "score":
            values[:] = np.nan if spec.metric == "global_auc" else per_auc
        elif d.kind == "rating":
            sse, sae, n = acc.errors
            with np.errstate(invalid="ignore", divide="ignore"):
                per = (sse if spec.metric == "rmse" else sae) / n
            values[:] = np.where(n > 0, np.sqrt(per) if spec.metric == "rmse" else per, np.nan)
    state = _state(acc, named, prep, opts, included, auc)
    size = partial(_catalog_size, catalog, prep, train)
    summary, counts = finish_state(state, [n for n, _ in named], size, **opts.as_dict())
    per_user = pd.DataFrame(
        {name: acc.values[name] for name, _ in named},
        index=pd.Index(prep.users, name="user"),
    )
    return Evaluation(summary, per_user, opts.as_dict(), counts, state)


def _state(
    acc: _Accumulator,
    named: list[tuple[str, MetricSpec]],
    prep: Prepared,
    opts: Options,
    included: np.ndarray,
    auc: scores.AucCounts | None,
) -> State:
    """The mergeable aggregates of finalized per-user values (see :class:`State`)."""
    st = State(counts=dict(prep.counts))
    if auc is not None:
        st.counts["auc_undefined_users"] = int(np.isnan(scores.user_auc(auc)).sum())
    sums = st.sums
    for name, spec in named:
        values, how = acc.values[name], _reduction(spec, opts)
        if spec.metric in SIDE_METRICS:
            scope = included if spec.definition.needs_relevant else np.ones(len(values), bool)
            st.counts[f"{name}.undefined_users"] = int((scope & np.isnan(values)).sum())
        if how == "micro":
            none = np.zeros(len(prep.users))
            sums[f"hits@{spec.k}"] = float(acc.hits.get(spec.k, none)[included].sum())
            sums[f"nret@{spec.k}"] = float(acc.nret.get(spec.k, none)[included].sum())
            sums["n_rel"] = float(prep.n_rel[included].sum())
        elif how == "sum":
            sums[f"{name}:sum"] = float(np.nansum(values))
        elif how == "mean":
            ok = ~np.isnan(values)
            sums[f"{name}:sum"], sums[f"{name}:n"] = float(values[ok].sum()), float(ok.sum())
        elif how == "weighted" and auc is not None:
            weight = scores.gauc_weights(auc, opts.gauc_weight)
            ok = ~np.isnan(values)
            sums[f"{name}:sum"] = float(np.sum(values[ok] * weight[ok]))
            sums[f"{name}:n"] = float(weight[ok].sum())
        elif how == "pairs" and acc.pooled_scores:
            score = np.concatenate(acc.pooled_scores)
            relevant = np.concatenate(acc.pooled_relevant)
            distinct, inverse = np.unique(score, return_inverse=True)
            st.tables["scores"] = pd.DataFrame(
                {
                    "pos": np.bincount(inverse[relevant], minlength=len(distinct)),
                    "neg": np.bincount(inverse[~relevant], minlength=len(distinct)),
                },
                index=pd.Index(distinct, name="score"),
            ).astype(np.int64)
        elif how == "errors":
            sse, sae, n = acc.errors
            sums["rating:sse"], sums["rating:sae"] = float(sse.sum()), float(sae.sum())
            sums["rating:n"] = float(n.sum())
            st.counts["rating_pairs"] = int(n.sum())
        elif how == "ratio":
            num, den = acc.exposure[name]
            sums[f"{name}:sum"], sums[f"{name}:n"] = float(num.sum()), float(den.sum())
        elif how == "items":
            top = np.concatenate(acc.top.get(spec.k, [np.zeros(0, np.int64)]))
            distinct, freq = np.unique(top, return_counts=True)
            st.tables[_top_key(spec.k)] = pd.DataFrame(
                {"n": freq.astype(np.int64)}, index=pd.Index(prep.item_ids(distinct), name="item")
            )
    return st
