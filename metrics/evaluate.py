"""``evaluate``: every requested metric, per user and summarized, from (qrels, run) DataFrames."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from metrics.engine import Batch, Prepared, _plain, batches, prepare
from metrics.options import Options, resolve_options
from metrics.reduce import BatchView, Finish, State, add_tables, merge_states
from metrics.registry import MetricSpec, get, parse
from metrics.sets import distinct
from metrics.side import BeyondInputs, check_train_ids, item_counts

__all__ = ["Evaluation", "State", "evaluate", "finish_state", "merge_states"]


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


def _count_keys(named: list[tuple[str, MetricSpec]]) -> list[str]:
    """The keys of ``Evaluation.counts``, in order: the users', then those the metrics declare."""
    keys = [
        "users",
        "users_without_relevant",
        "users_missing_from_run",
        "truth_users_not_evaluated",
        "run_users_not_in_truth",
    ]
    for name, spec in named:
        for template, _ in spec.definition.counts:
            key = template.format(name=name)
            if key not in keys:
                keys.append(key)
    return keys


def finish_state(
    state: State,
    names: Iterable[str] | str,
    catalog_size: int | Callable[[], int] | None = None,
    **options: Any,
) -> tuple[dict[str, float], dict[str, int]]:
    """(summary, counts) of ``names`` from a (merged) :class:`State`: each metric's declared
    reduction finishes its value.

    ``catalog_size`` is the denominator of ``coverage`` / ``gini`` (an int, or a function
    called only when one of them is asked);
    ``options`` (with ``preset``) are those the states were computed with.
    """
    opts = resolve_options(options.pop("preset", None), **options)
    named = _specs(names)
    env = Finish(opts, catalog_size)
    summary = {
        name: float(spec.definition.reduction.finish(state, name, spec, env))
        for name, spec in named
    }
    counts = {key: int(state.counts.get(key, 0)) for key in _count_keys(named)}
    return summary, counts


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
    ks = [s.k for s in specs if s.definition.depth == "cutoff"]
    if any(k is None for k in ks):
        return None
    return max((k for k in ks if k is not None), default=1)


def _kernel_options(metric: str, opts: Options) -> dict[str, Any]:
    """The keyword options a metric's kernel takes from the conventions (its definition's
    ``options``)."""
    return get(metric).kernel_options(opts)


def _inputs(specs: list[MetricSpec]) -> set[str]:
    """What the requested metrics' batches need besides the judged lists."""
    return {need for s in specs for need in s.definition.inputs}


class _Accumulator:
    """Per-user values, per-user pieces and count tables of every metric, batch by batch, each
    from its definition's ``compute``."""

    def __init__(
        self,
        prep: Prepared,
        specs: list[tuple[str, MetricSpec]],
        opts: Options,
        popularity: pd.Series | None = None,
        side: BeyondInputs | None = None,
    ):
        self.prep, self.specs, self.opts = prep, specs, opts
        self.popularity, self.side = popularity, side
        self.values = {name: np.full(len(prep.users), np.nan) for name, _ in specs}
        self.pieces: dict[str, dict[str, np.ndarray]] = {name: {} for name, _ in specs}
        self.tables: dict[str, list[pd.DataFrame]] = {}

    def add(self, batch: Batch) -> None:
        view = BatchView(batch, self.prep, self.opts, self.popularity, self.side)
        users, done = batch.users, set()
        for name, spec in self.specs:
            d = spec.definition
            part = d.part(view, spec)
            self.values[name][users] = part.values
            for key, piece in part.pieces.items():
                full = self.pieces[name].setdefault(key, np.zeros(len(self.prep.users)))
                full[users] = piece
            table = d.reduction.table_key(name, spec)
            if table is not None and part.table is not None and table not in done:
                self.tables.setdefault(table, []).append(part.table)
                done.add(table)


def _catalog_size(catalog: Any, prep: Prepared, train: pd.DataFrame | None) -> int:
    if catalog is None:
        parts = [prep.item_ids(distinct(prep.truth_items)), prep.run_item_ids()]
        if train is not None:
            parts.append(train["item"].to_numpy())
        return len(pd.unique(np.concatenate([np.asarray(p, dtype=object) for p in parts])))
    if isinstance(catalog, int | np.integer):
        return int(catalog)
    ids = pd.unique(np.asarray(list(catalog), dtype=object))
    held = np.asarray(prep.run_item_ids(), dtype=object)
    outside = ~pd.Index(held).isin(ids)
    if outside.any():  # counted by coverage and gini, yet not in the catalog they divide by
        raise ValueError(
            f"'catalog' lacks item {_plain(held[outside][0])!r}, which the run holds; pass the "
            "full catalog (its item ids, or its size)"
        )
    return len(ids)


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
    needs = _inputs(specs)
    depth = _depth(specs)
    need_rprec = any(s.definition.depth == "relevant" for s in specs)
    only_top = not need_rprec and "candidates" not in needs and opts.ndcg_ties == "ordered"
    prep = prepare(qrels, run, opts, depth=depth if only_top else None)
    if train is not None:
        check_train_ids(train, run)
    popularity = None
    if "popularity" in needs:
        if train is None or "item" not in getattr(train, "columns", []):
            bad = next(n for n, s in named if "popularity" in s.definition.inputs)
            raise ValueError(
                f"metric {bad!r} needs train= (a DataFrame with an 'item' column) "
                "for item popularity"
            )
        popularity = item_counts(train["item"])
    side = None
    if "side" in needs:
        items_int = pd.api.types.is_integer_dtype(run["item"].dtype)
        side = BeyondInputs(
            named, opts, train, item_features, item_embeddings, item_groups, items_int
        )
    acc = _Accumulator(prep, named, opts, popularity, side)
    for batch in batches(
        prep,
        opts,
        depth=depth,
        need_rprec=need_rprec,
        need_candidates="candidates" in needs,
        budget=batch_cells,
    ):
        acc.add(batch)
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
    for name, spec in named:
        if spec.definition.needs_relevant:
            values = acc.values[name]
            values[~included] = np.nan
            if opts.empty_users == "one":  # torchmetrics' empty_target_action="pos"
                values[empty] = 1.0
    state = _state(acc, named, prep, opts, included)
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
) -> State:
    """The mergeable aggregates of finalized per-user values: each metric's declared counts and
    reduction, over the users in its scope (those the ``empty_users`` policy keeps, for a metric
    that needs a relevant item)."""
    st = State(counts=dict(prep.counts))
    everyone = np.ones(len(prep.users), bool)
    for name, spec in named:
        d, values = spec.definition, acc.values[name]
        scope = included if d.needs_relevant else everyone
        pieces = dict(acc.pieces[name])
        pieces.setdefault("undefined", np.isnan(values))
        for template, piece in d.counts:
            counted = pieces.get(piece, np.zeros(len(values)))
            st.counts[template.format(name=name)] = int(counted[scope].sum())
        d.reduction.state(st, name, values, pieces, scope, opts)
        table = d.reduction.table_key(name, spec)
        if table is not None and table not in st.tables and acc.tables.get(table):
            st.tables[table] = add_tables(acc.tables[table])
    return st
