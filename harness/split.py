"""Train/validation/test splits of an Interactions frame, training-side filters and a split cache.

Every split keeps the input's rows unchanged (same columns, same index labels, input order), so
``train``, ``valid`` and ``test`` are disjoint subsets of the input and can be traced back to it.
The method functions (``global_time``, ``leave_one_out``, ``user_time``, ``random_split``) return
the raw split: no filter applied and test/validation events of users or items unseen in training
kept (and counted). ``make_split`` runs a method and then ``apply_filters``, whose defaults drop
unseen test/validation events.

Stats (a flat, JSON-serializable dict) always hold:

- ``method``; ``n_input_events`` / ``n_input_users`` / ``n_input_items``;
- ``n_{train,test,valid}_{events,users,items}`` and ``{train,test,valid}_time_{min,max}`` (epoch
  seconds, ``None`` when the part is empty; ``valid`` counts are 0 when there is no validation);
- leakage of future information into training (``None`` when train or test is empty):
  ``leakage_user_train_after_test``: share of training events later than the (earliest) test
  event of their own user; ``leakage_mean_train_after_test``: mean over test events of the share
  of training events later than that test event (the future, from any user, seen in training);
  ``leakage_global_train_after_first_test``: share of training events later than the earliest
  test event overall;
- ``train_filtered_{events,users,items}``: removed from train by the filters;
- ``{test,valid}_unseen_{events,user_events,item_events,users,items}``: events whose user or item
  is absent from the (filtered) training data, counted under either policy, and
  ``{test,valid}_dropped_{events,users,items}``: events removed by ``unseen="drop"``, users and
  items no longer present in that part afterwards; ``unseen_policy``.

Method-specific entries: ``cut``, ``cut_iso``, ``valid_cut``, ``valid_cut_iso`` (global_time);
``loo_eligible_users``, ``loo_train_only_users``, ``loo_valid_users`` (leave_one_out).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import inspect
import json
import os
import shutil
import uuid
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from harness.data import (
    ITEM,
    TIMESTAMP,
    USER,
    IdCodes,
    _iso_utc,
    empty_like,
    known_codes,
    remember_codes,
    time_value,
    timed,
)
from harness.errors import DataError
from harness.hashing import column_hash, content_hash, mix, row_hashes, time_words
from metrics.checks import require_choice, require_columns, require_int, require_range
from metrics.sets import distinct, member

__all__ = [
    "FILTER_PARAMS",
    "METHODS",
    "UNSEEN_POLICIES",
    "Split",
    "apply_filters",
    "check_usable",
    "data_hash",
    "global_time",
    "leave_one_out",
    "load_or_make_split",
    "make_split",
    "occurrence",
    "part_digest",
    "random_order",
    "random_split",
    "save_split",
    "split_cache_key",
    "user_time",
]

UNSEEN_POLICIES: tuple[str, ...] = ("drop", "keep")
_CACHE_VERSION = 5  # 2: random splits by a counter-based hash; 3: order-free data hash;
# 4: test and validation pairs already in training counted; 5: ratios round half up exactly
# methods whose ties (equal user, timestamp, item) go by input row: their key keeps that order
_INPUT_ORDER_METHODS = frozenset({"leave_one_out", "user_time"})


@dataclass(frozen=True, eq=False)
class Split:
    """A train/test (and optional validation) split with its stats, method name and params."""

    train: pd.DataFrame
    test: pd.DataFrame
    valid: pd.DataFrame | None
    stats: dict[str, Any]
    name: str
    params: dict[str, Any]

    def released(self) -> Split:
        """This split with empty parts (same columns and dtypes) and the same stats: for the
        steps after the report, which read only the stats, so the parts' memory goes back."""
        valid = None if self.valid is None else empty_like(self.valid)
        return replace(self, train=empty_like(self.train), test=empty_like(self.test), valid=valid)


# ------------------------------------------------------------------------------ the methods


def global_time(
    df: pd.DataFrame,
    *,
    cut: str | float | dt.datetime,
    valid_cut: str | float | dt.datetime | None = None,
) -> Split:
    """Split at one moment for everyone: test = events at or after ``cut``, the rest train.

    ``cut``/``valid_cut`` are date strings (naive = UTC) or quantiles in (0, 1) of the timestamp
    distribution; validation = events in ``[valid_cut, cut)``. No training event is at/after it.
    """
    _check_frame(df)
    ts = df[TIMESTAMP].to_numpy()
    cut_s = _resolve_time(cut, ts, "split.cut")
    is_test = ts >= cut_s
    is_valid = None
    extra: dict[str, Any] = {"cut": cut_s, "cut_iso": _iso(cut_s)}
    if valid_cut is not None:
        valid_s = _resolve_time(valid_cut, ts, "split.valid_cut")
        check_cut_order(cut, valid_cut, cut_s, valid_s)
        is_valid = (ts >= valid_s) & ~is_test
        extra.update(valid_cut=valid_s, valid_cut_iso=_iso(valid_s))
    else:
        extra.update(valid_cut=None, valid_cut_iso=None)
    params = {"cut": cut, "valid_cut": valid_cut}
    return _build(df, is_test, is_valid, "global_time", params, extra)


def leave_one_out(df: pd.DataFrame, *, valid: bool = False, min_history: int = 2) -> Split:
    """Hold out each user's latest event as test (and the one before as validation).

    Ties on time go by item id, then input row: the last in that order is "latest". Users with
    fewer than ``min_history`` events stay train-only; validation needs ``min_history + 1``.
    """
    _check_frame(df)
    require_int("split.min_history", min_history, 1)
    order, starts, counts = _user_groups(df)
    n = len(df)
    group = np.repeat(np.arange(starts.size), counts)
    from_end = (starts + counts - 1)[group] - np.arange(n)
    cnt = counts[group]
    is_test = np.zeros(n, dtype=bool)
    is_test[order] = (from_end == 0) & (cnt >= min_history)
    is_valid = None
    if valid:
        is_valid = np.zeros(n, dtype=bool)
        is_valid[order] = (from_end == 1) & (cnt >= min_history + 1)
    extra = {
        "loo_eligible_users": int((counts >= min_history).sum()),
        "loo_train_only_users": int((counts < min_history).sum()),
        "loo_valid_users": int((counts >= min_history + 1).sum()) if valid else 0,
    }
    params = {"valid": valid, "min_history": min_history}
    return _build(df, is_test, is_valid, "leave_one_out", params, extra)


def user_time(df: pd.DataFrame, *, test_ratio: float = 0.2, valid_ratio: float = 0.0) -> Split:
    """Per-user chronological split: each user's latest ``round(n * test_ratio)`` events are test.

    Counts round half up (exactly: :func:`round_share`) and every user keeps at least one
    training event; with ``valid_ratio`` the events just before a user's test events are
    validation. Ties as in ``leave_one_out``.
    """
    _check_frame(df)
    _check_ratios(test_ratio, valid_ratio)
    order, starts, counts = _user_groups(df)
    n = len(df)
    counts = counts.astype(np.int64)
    n_test = np.minimum(counts - 1, round_share(counts, test_ratio))
    n_valid = np.minimum(counts - 1 - n_test, round_share(counts, valid_ratio))
    group = np.repeat(np.arange(starts.size), counts)
    from_end = (starts + counts - 1)[group] - np.arange(n)
    is_test = np.zeros(n, dtype=bool)
    is_test[order] = from_end < n_test[group]
    is_valid = None
    if valid_ratio > 0:
        is_valid = np.zeros(n, dtype=bool)
        is_valid[order] = (from_end >= n_test[group]) & (from_end < (n_test + n_valid)[group])
    params = {"test_ratio": test_ratio, "valid_ratio": valid_ratio}
    return _build(df, is_test, is_valid, "user_time", params, {})


def random_split(
    df: pd.DataFrame, *, test_ratio: float = 0.2, seed: int = 0, valid_ratio: float = 0.0
) -> Split:
    """Seeded random holdout of ``round(n * test_ratio)`` events (time ignored: leaks future).

    Events are ordered by a counter-based hash of (seed, user, item, timestamp, occurrence) (see
    :func:`random_order`), so the same events and seed give the same split in any row order,
    and the Spark split (:mod:`harness.spark.split`) gives the same rows.
    """
    _check_frame(df)
    _check_ratios(test_ratio, valid_ratio)
    n = len(df)
    perm = random_order(df, seed)
    n_test, n_valid = round_share(n, test_ratio), round_share(n, valid_ratio)
    is_test = np.zeros(n, dtype=bool)
    is_test[perm[:n_test]] = True
    is_valid = None
    if valid_ratio > 0:
        is_valid = np.zeros(n, dtype=bool)
        is_valid[perm[n_test : n_test + n_valid]] = True
    params = {"test_ratio": test_ratio, "seed": seed, "valid_ratio": valid_ratio}
    return _build(df, is_test, is_valid, "random", params, {})


def occurrence(df: pd.DataFrame) -> np.ndarray:
    """Each event's rank among the events with its (user, item, timestamp), by rating (if any)
    then input row: what tells repeated events apart in :func:`random_order`."""
    n = len(df)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    ucode, _ = pd.factorize(df[USER], sort=False)
    icode, _ = pd.factorize(df[ITEM], sort=False)
    ts = df[TIMESTAMP].to_numpy()
    keys = [np.arange(n)] + ([df["rating"].to_numpy()] if "rating" in df.columns else [])
    order = np.lexsort((*keys, ts, icode, ucode))
    u, i, t = ucode[order], icode[order], ts[order]
    new = np.r_[True, (u[1:] != u[:-1]) | (i[1:] != i[:-1]) | (t[1:] != t[:-1])]
    starts = np.flatnonzero(new)
    rank = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    occ = np.empty(n, dtype=np.int64)
    occ[order] = rank
    return occ


def sorted_codes(ids: pd.Series) -> np.ndarray:
    """Codes of ``ids`` in the order of the ids themselves (``pd.factorize(sort=True)``); a
    categorical column by its categories' values, not by the order its categories were given in
    (text ids as object, ``str`` or categorical split alike)."""
    if isinstance(ids.dtype, pd.CategoricalDtype):
        categories = ids.cat.categories
        if not categories.is_monotonic_increasing:
            order = categories.argsort()
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            return rank[ids.cat.codes.to_numpy()]
    return pd.factorize(ids, sort=True)[0]


def random_order(df: pd.DataFrame, seed: int) -> np.ndarray:
    """Row positions ordered by the signed int64 hash ``harness.hashing.mix(seed, user, item,
    timestamp, occurrence)``, ties (hash collisions) by user, item, timestamp, occurrence: a
    uniformly random permutation that depends on the events and seed, not on row order."""
    from harness.hashing import hash_ids

    ts = df[TIMESTAMP].to_numpy()
    occ = occurrence(df)
    h = mix(seed, hash_ids(df[USER]), hash_ids(df[ITEM]), time_words(ts), occ).view(np.int64)
    return np.lexsort((occ, ts, sorted_codes(df[ITEM]), sorted_codes(df[USER]), h))


METHODS: dict[str, Callable[..., Split]] = {
    "global_time": global_time,
    "leave_one_out": leave_one_out,
    "user_time": user_time,
    "random": random_split,
}
FILTER_PARAMS: dict[str, Any] = {
    "min_user_interactions": 0,
    "min_item_interactions": 0,
    "kcore": 0,
    "unseen": "drop",
}


#: The split that does not order events by time: the one a file without timestamps can use.
UNTIMED_METHODS = frozenset({"random"})


def check_split_has_time(method: str, dataset: Mapping[str, Any]) -> None:
    """A split that orders events by time needs a time column (ValueError before loading):
    without one every event is at time 0 and "the last event" would be an arbitrary one."""
    untimed = dataset.get("kind") == "file" and not timed(dataset.get("columns"))
    if untimed and method not in UNTIMED_METHODS:
        raise ValueError(
            f"split={method} orders events by time, but dataset.columns.timestamp=null (the "
            "file has no time column): use split=random"
        )


def without_times(split: Split, dataset: Mapping[str, Any]) -> Split:
    """``split`` with no time ranges or leakage in its stats when the file has no time column:
    every event is at time 0, so "1970-01-01 → 1970-01-01" would read as real dates and a
    leakage of 0 as "none" when it cannot be measured."""
    if dataset.get("kind") != "file" or timed(dataset.get("columns")):
        return split
    stats = {
        k: None if k.endswith(("_time_min", "_time_max")) or k.startswith("leakage_") else v
        for k, v in split.stats.items()
    }
    return replace(split, stats=stats)


# ------------------------------------------------------------------------------- filtering


def check_filters(min_user: int, min_item: int, kcore: int, unseen: str) -> None:
    """The filter settings both engines take (ValueError naming the ``split.`` key)."""
    require_int("split.min_user_interactions", min_user, 0)
    require_int("split.min_item_interactions", min_item, 0)
    require_int("split.kcore", kcore, 0)
    require_choice("split.unseen", unseen, UNSEEN_POLICIES)


def check_cut_order(cut: Any, valid_cut: Any, cut_s: float, valid_s: float) -> None:
    """``valid_cut`` before ``cut``: as quantiles when both are (two quantiles may resolve to one
    timestamp on small data: validation is then empty), else as resolved times."""
    both_quantiles = _is_quantile(cut) and _is_quantile(valid_cut)
    if (both_quantiles and float(valid_cut) >= float(cut)) or (
        not both_quantiles and valid_s >= cut_s
    ):
        raise ValueError(
            f"'split.valid_cut' must be earlier than 'split.cut' (got valid_cut="
            f"{_iso(valid_s)} >= cut={_iso(cut_s)})"
        )


def apply_filters(
    split: Split,
    *,
    min_user_interactions: int = 0,
    min_item_interactions: int = 0,
    kcore: int = 0,
    unseen: str = "drop",
) -> Split:
    """Filter the training part, then keep or drop test/validation events unseen in training.

    Filters look at training data only: users, then items, with fewer events are removed (one
    pass each); ``kcore`` then repeats until every user and item has at least ``kcore`` events.
    """
    check_filters(min_user_interactions, min_item_interactions, kcore, unseen)

    train = split.train
    parts = _coded(train, split.test, split.valid)
    coded_train, coded_test = cast(pd.DataFrame, parts[0]), cast(pd.DataFrame, parts[1])
    coded_valid = parts[2]
    filtering = max(min_user_interactions, min_item_interactions, kcore) > 1
    ucode, n_u = _codes(coded_train[USER]) if filtering else (np.zeros(0, np.int64), 0)
    icode, n_i = _codes(coded_train[ITEM]) if filtering else (np.zeros(0, np.int64), 0)
    keep = np.ones(len(train), dtype=bool)
    if min_user_interactions > 1:
        keep &= np.bincount(ucode, minlength=n_u)[ucode] >= min_user_interactions
    if min_item_interactions > 1:
        keep &= np.bincount(icode[keep], minlength=n_i)[icode] >= min_item_interactions
    if kcore > 1:
        while True:
            u_cnt = np.bincount(ucode[keep], minlength=n_u)
            i_cnt = np.bincount(icode[keep], minlength=n_i)
            bad = keep & ((u_cnt[ucode] < kcore) | (i_cnt[icode] < kcore))
            if not bad.any():
                break
            keep &= ~bad
    every = keep.all()  # nothing filtered: no copies
    new_train, kept_train = (train, coded_train) if every else (train[keep], coded_train[keep])
    stats: dict[str, Any] = {
        "train_filtered_events": int((~keep).sum()),
        "train_filtered_users": n_u - _nunique(kept_train[USER]) if filtering else 0,
        "train_filtered_items": n_i - _nunique(kept_train[ITEM]) if filtering else 0,
    }
    rows, test_stats = _unseen(coded_test, kept_train, "test", unseen)
    new_test, kept_test = (
        (split.test, coded_test) if rows is None else (split.test[rows], coded_test[rows])
    )
    stats.update(test_stats)
    new_valid = kept_valid = None
    if split.valid is not None and coded_valid is not None:
        rows, valid_stats = _unseen(coded_valid, kept_train, "valid", unseen)
        new_valid, kept_valid = (
            (split.valid, coded_valid) if rows is None else (split.valid[rows], coded_valid[rows])
        )
        stats.update(valid_stats)
    else:
        stats.update(_unseen_zero("valid"))
    stats["unseen_policy"] = unseen
    stats.update(_describe(kept_train, kept_test, kept_valid))
    params = {
        **split.params,
        "min_user_interactions": min_user_interactions,
        "min_item_interactions": min_item_interactions,
        "kcore": kcore,
        "unseen": unseen,
    }
    return replace(
        split,
        train=new_train,
        test=new_test,
        valid=new_valid,
        stats={**split.stats, **stats},
        params=params,
    )


def make_split(df: pd.DataFrame, method: str, **params: Any) -> Split:
    """Run split ``method`` with its params, then ``apply_filters`` with the filter params.

    ``params`` mixes the method's keywords and FILTER_PARAMS; ``Split.params`` records all of
    them with defaults filled in. Unknown method or param names raise ValueError listing names.
    """
    return _make_split(df, method, params)


def _make_split(
    df: pd.DataFrame,
    method: str,
    params: Mapping[str, Any],
    coded: Mapping[str, IdCodes] | None = None,
) -> Split:
    """:func:`make_split`; ``coded``: the text id columns' codes, if loading made them."""
    effective = _effective_params(method, dict(params))
    method_kw = {k: v for k, v in effective.items() if k not in FILTER_PARAMS}
    filter_kw = {k: v for k, v in effective.items() if k in FILTER_PARAMS}
    view = _id_view(df, coded)
    split = apply_filters(METHODS[method](view, **method_kw), **filter_kw)
    return split if view is df else _rows_of(df, split)


def _id_view(df: pd.DataFrame, coded: Mapping[str, IdCodes] | None = None) -> pd.DataFrame:
    """``df`` with its ``str`` id columns as categoricals with sorted categories and a
    ``RangeIndex``, or ``df`` itself when no id column is text.

    Every step of a split groups, counts, orders or hashes ids: on a categorical each is done on
    codes, and the text is hashed once here instead of once per step. Sorted categories keep
    "ties by item id" in text order, and ids hash by value (:func:`harness.hashing.hash_ids`).
    ``coded``: codes of the columns from loading (then no row's text is hashed at all).
    """
    text = [
        name
        for name in (USER, ITEM)
        if name in df.columns and isinstance(df[name].dtype, pd.StringDtype)
    ]
    if not text:
        return df
    columns = {}
    for name in text:
        known = (coded or {}).get(name)
        if known is not None and len(known.codes) == len(df):
            order = known.uniques.argsort().to_numpy()  # sorted as pd.factorize(sort=True)
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            codes, uniques = rank[known.codes], known.uniques.iloc[order]
        else:
            codes, uniques = pd.factorize(df[name], sort=True)
        columns[name] = pd.Categorical.from_codes(codes, categories=pd.Index(uniques))
    return df.assign(**columns).set_axis(pd.RangeIndex(len(df)))


def _rows_of(df: pd.DataFrame, split: Split) -> Split:
    """A split of :func:`_id_view` ``(df)`` as the same rows of ``df`` (the view's index labels
    are row positions): same columns, dtypes, index labels and order as splitting ``df``."""

    def rows(part: pd.DataFrame | None) -> pd.DataFrame | None:
        if part is None:
            return None
        pos = part.index.to_numpy()
        coded = [
            name
            for name in (USER, ITEM)
            if name in part.columns and isinstance(part[name].dtype, pd.CategoricalDtype)
        ]
        if list(part.columns) != list(df.columns) or any(
            part[c].dtype != df[c].dtype for c in part.columns if c not in coded
        ):
            out = df.iloc[pos]
        else:  # the view's other columns already are these rows: only the ids are taken again
            columns = {
                c: df[c].array.take(pos) if c in coded else part[c].array for c in part.columns
            }
            out = pd.DataFrame(columns, index=df.index[pos], copy=False)
        for name in coded:  # the view's codes, for models, comparison and digests
            ids = part[name].array
            remember_codes(out[name], ids.codes, ids.categories)  # type: ignore[attr-defined]
        return out

    return replace(split, train=rows(split.train), test=rows(split.test), valid=rows(split.valid))


# --------------------------------------------------------------------------------- caching


def data_hash(df: pd.DataFrame, coded: Mapping[str, IdCodes] | None = None) -> str:
    """Hex digest of a frame's content: its rows as a multiset, with the column names and kinds
    (:func:`harness.hashing.content_hash`): not the row order, not the index, not the dtype of
    text ids (``object``, ``str``, categorical); text and integer ids differ. The Spark engine
    computes the same digest per partition.

    ``coded``: text id columns of ``df`` as codes into their distinct values (what loading
    computed; else the codes the split noted, :func:`~harness.data.known_codes`); the digest is
    the same, without hashing every row's string again.
    """
    # each distinct id hashed once (a categorical hashes by its categories' values)
    columns = {
        name: pd.Categorical.from_codes(c.codes, categories=pd.Index(c.uniques))
        for name, c in (coded or {}).items()
    }
    for name in (USER, ITEM):  # codes the split noted for a part of its input
        known = None if name in columns or name not in df.columns else known_codes(df[name])
        if known is not None:
            columns[name] = pd.Categorical.from_codes(known[0], categories=known[1])
    return content_hash(df.assign(**columns) if columns else df)


def _tie_order(df: pd.DataFrame, coded: Mapping[str, IdCodes] | None = None) -> str | None:
    """What input order adds to a split whose ties go by input row (:data:`_INPUT_ORDER_METHODS`):
    None when no order can change it (no repeated (user, item, timestamp) event with rows that
    differ, or each such event's rows in one canonical order: by row hash), else the hex sum
    mod 2**64 of ``mix(row hash, rank of the row within its event by input row)``.

    Two inputs with the same rows and the same order within each repeated event get the same
    value (the events' order among themselves does not count); the data digest ignores order.
    """
    if len(df) < 2 or not {USER, ITEM, TIMESTAMP} < set(df.columns):
        return None  # only (user, item, timestamp) columns: a repeated event's rows are equal
    words = [_id_words(df[name], (coded or {}).get(name)) for name in (USER, ITEM)]
    key = mix(0, *words, time_words(df[TIMESTAMP].to_numpy()))
    ordered = np.sort(key)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if repeated.size == 0:
        return None
    rows = np.flatnonzero(member(key, repeated))
    event = key[rows]
    by_event = np.lexsort((rows, event))  # each event's rows in input order
    event, rows = event[by_event], rows[by_event]
    h = row_hashes(df.iloc[rows])
    same = event[1:] == event[:-1]
    if not (same & (h[1:] < h[:-1])).any():
        return None  # every repeated event's rows already in row-hash order (or equal)
    starts = np.flatnonzero(np.r_[True, ~same])
    rank = np.arange(rows.size) - np.repeat(starts, np.diff(np.r_[starts, rows.size]))
    total = int(mix(1, h, rank.astype(np.int64)).sum(dtype=np.uint64))
    return f"{total:016x}"


def _id_words(column: pd.Series, coded: IdCodes | None) -> np.ndarray:
    """An id column as int64 or uint64 words that are equal exactly when the ids are equal:
    integer ids themselves, else codes (from loading or noted by the split), else hashes."""
    if column.dtype.kind in "iub":
        return column.to_numpy().astype(np.int64, copy=False)
    if coded is not None and len(coded.codes) == len(column):
        # noted as codes into the sorted ids, so a later key of this frame (the CLI computes
        # it again) and the id lookups of models need not hash the text
        order = coded.uniques.argsort().to_numpy()
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        codes = rank[coded.codes]
        remember_codes(column, codes, pd.Index(coded.uniques.iloc[order]))
        return codes
    known = known_codes(column)
    return np.asarray(known[0], dtype=np.int64) if known is not None else column_hash(column)


_PART_DIGESTS: weakref.WeakKeyDictionary[Split, dict[str, str]] = weakref.WeakKeyDictionary()


def part_digest(split: Split, part: str) -> str:
    """:func:`data_hash` of ``split``'s ``train``, ``test`` or ``valid`` frame, computed once per
    split object: the sampled candidates' cache key and the logged dataset inputs need the same
    digests (a split's frames are not changed once made)."""
    digests = _PART_DIGESTS.setdefault(split, {})
    if part not in digests:
        frame = getattr(split, part)
        if frame is None:
            raise ValueError(f"the split has no {part!r} part")
        digests[part] = data_hash(frame)
    return digests[part]


def split_cache_key(
    df: pd.DataFrame,
    method: str,
    params: Mapping[str, Any],
    *,
    digest: str | None = None,
    coded: Mapping[str, IdCodes] | None = None,
) -> str:
    """Hex sha256 naming a split: the data hash, the method and its params with defaults filled.

    Passing a default explicitly or omitting it gives the same key; any changed value changes it.
    ``digest`` is ``data_hash(df)`` when the caller already has it (hashing a large frame is slow).
    The data hash ignores row order; for methods whose ties go by input row the key also holds
    that order where it can change the split (:func:`_tie_order`). ``coded``: as in
    :func:`load_or_make_split`.
    """
    effective = _effective_params(method, dict(params))
    payload = {
        "version": _CACHE_VERSION,
        "data": digest or data_hash(df, coded),
        "method": method,
        "params": effective,
    }
    ties = _tie_order(df, coded) if method in _INPUT_ORDER_METHODS else None
    if ties is not None:
        payload["ties"] = ties
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def load_or_make_split(
    df: pd.DataFrame,
    method: str,
    params: Mapping[str, Any],
    cache_dir: str | os.PathLike[str],
    *,
    digest: str | None = None,
    coded: Mapping[str, IdCodes] | None = None,
) -> Split:
    """Return the split cached under ``cache_dir/<key>/`` or make it, save it and return it.

    Saved as train/test/valid Parquet plus ``split.json`` (name, params, stats); the JSON is
    written last and the folder renamed into place, so a partial write is never reused.
    ``digest``: ``data_hash(df)`` if the caller has it; ``coded``: the codes of ``df``'s text
    id columns, if loading made them (``Dataset.coded``).
    """
    digest = digest or data_hash(df, coded)
    key = split_cache_key(df, method, params, digest=digest, coded=coded)
    target = Path(cache_dir) / key
    made = None
    if not (target / "split.json").is_file():
        made = _make_split(df, method, params, coded)
        save_split(made, cache_dir, key, digest)
    return _read_split(target, made)


def save_split(split: Split, cache_dir: str | os.PathLike[str], key: str, digest: str) -> Path:
    """Write ``split`` to ``cache_dir/<key>/`` unless a complete copy is there (train/test/valid
    Parquet, then ``split.json``, in a temporary folder renamed into place); return the folder."""
    root = Path(cache_dir)
    target = root / key
    if (target / "split.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        split.train.to_parquet(tmp / "train.parquet")
        split.test.to_parquet(tmp / "test.parquet")
        if split.valid is not None:
            split.valid.to_parquet(tmp / "valid.parquet")
        meta = {
            "name": split.name,
            "params": split.params,
            "stats": split.stats,
            "key": key,
            "data_hash": digest,
        }
        (tmp / "split.json").write_text(json.dumps(meta, indent=1, default=str))
        _publish(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _publish(tmp: Path, target: Path) -> None:
    """Rename a finished cache folder into place; never delete a complete one another run made.

    A folder is only ever renamed to ``target`` whole (``split.json`` written first), so a
    ``target`` with ``split.json`` is complete and is kept (the other run won the race). A
    ``target`` without it (left by an older version) is first renamed aside, atomically, then
    removed, so no run can be reading it.
    """
    for _ in range(3):
        if (target / "split.json").is_file():
            return
        if target.exists():
            aside = target.with_name(f".stale-{target.name}-{uuid.uuid4().hex}")
            with contextlib.suppress(OSError):  # another run moved it first
                target.rename(aside)
                shutil.rmtree(aside, ignore_errors=True)
        try:
            tmp.rename(target)
            return
        except OSError:  # another run renamed its folder into place first: use theirs
            continue
    if not (target / "split.json").is_file():
        raise OSError(f"could not write the split cache {target}")


def _read_split(folder: Path, made: Split | None = None) -> Split:
    """The cached split; ``made``: the one just written there, whose frames are used as they
    are (the Parquet round trip gives them back unchanged) instead of being read back."""
    meta = json.loads((folder / "split.json").read_text())
    valid_path = folder / "valid.parquet"
    if made is not None and meta.get("key") == folder.name:
        return replace(made, stats=meta["stats"], name=meta["name"], params=meta["params"])
    return Split(
        train=pd.read_parquet(folder / "train.parquet"),
        test=pd.read_parquet(folder / "test.parquet"),
        valid=pd.read_parquet(valid_path) if valid_path.is_file() else None,
        stats=meta["stats"],
        name=meta["name"],
        params=meta["params"],
    )


# --------------------------------------------------------------------------------- helpers


def _effective_params(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    if method not in METHODS:
        raise ValueError(f"unknown split method {method!r}; available: {sorted(METHODS)}")
    sig = inspect.signature(METHODS[method])
    allowed = [p for p in sig.parameters if p != "df"]
    unknown = sorted(set(params) - set(allowed) - set(FILTER_PARAMS))
    if unknown:
        raise ValueError(
            f"unknown parameter {unknown[0]!r} for split method {method!r}; "
            f"allowed: {sorted(allowed) + sorted(FILTER_PARAMS)}"
        )
    effective: dict[str, Any] = {}
    for name in allowed:
        default = sig.parameters[name].default
        if name in params:
            effective[name] = params[name]
        elif default is not inspect.Parameter.empty:
            effective[name] = default
    for name, default in FILTER_PARAMS.items():
        effective[name] = params.get(name, default)
    return effective


#: how to make a frame the splits accept
HINT = "use harness.data.validate_interactions"


def _check_frame(df: pd.DataFrame) -> None:
    require_columns(df.columns, (USER, ITEM, TIMESTAMP), "interactions frame", HINT)
    dtype = df[TIMESTAMP].dtype
    if not (pd.api.types.is_integer_dtype(dtype) or pd.api.types.is_float_dtype(dtype)):
        raise ValueError(
            f"column 'timestamp' must hold epoch seconds, int64 or float64 (got dtype "
            f"{df[TIMESTAMP].dtype}); {HINT}"
        )


def ratio_parts(ratio: float) -> tuple[int, int]:
    """``ratio`` as the fraction p/q nearest to it with q at most 10⁶ (exact for a decimal of
    up to 6 places: 0.35 is 7/20, where float64 holds 0.34999…), so counts round half up in
    integer arithmetic, as written: 0.35 × 90 = 31.5 gives 32 test events, not 31."""
    frac = Fraction(float(ratio)).limit_denominator(10**6)
    return frac.numerator, frac.denominator


def round_share(n: Any, ratio: float) -> Any:
    """``round(n * ratio)`` with halves up, exactly (see :func:`ratio_parts`); ``n`` an int or an
    int64 array."""
    p, q = ratio_parts(ratio)
    return (2 * n * p + q) // (2 * q)


def _check_ratios(test_ratio: float, valid_ratio: float) -> None:
    require_range("split.test_ratio", test_ratio, 0, 1, closed="neither")
    if not 0.0 <= valid_ratio < 1.0 or test_ratio + valid_ratio >= 1.0:
        raise ValueError(
            f"'split.valid_ratio' must be in [0, 1) with test_ratio + valid_ratio < 1 "
            f"(got {valid_ratio!r} with test_ratio={test_ratio!r})"
        )


def _is_quantile(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, float | int | np.floating | np.integer)
        and 0.0 < float(value) < 1.0
    )


def _date_text(text: str, name: str) -> pd.Timestamp:
    """A date written as text, read by the layouts the loader reads timestamp columns with
    (ISO 8601, then day-first / month-first with ``/`` or ``-``, dotted day-first): 01.02.2023
    is 1 February, as in a data file. A value both ways read differently is ambiguous (a
    one-line error); text no layout reads is left to pandas (e.g. ``1 Feb 2023``)."""
    from harness.data import DATE_LAYOUTS

    for group in DATE_LAYOUTS:
        read = ((fmt, pd.to_datetime(text.strip(), format=fmt, errors="coerce")) for fmt in group)
        found = {fmt: t for fmt, t in read if not pd.isna(t)}
        if len(set(found.values())) > 1:
            (a, ta), (b, tb) = found.items()
            raise ValueError(
                f"'{name}' {text!r} is ambiguous: {a!r} reads {ta.date()}, {b!r} reads "
                f"{tb.date()}; write it as ISO 8601 (YYYY-MM-DD)"
            )
        if found:
            return next(iter(found.values()))
    return pd.Timestamp(text)


def _resolve_time(value: Any, ts: np.ndarray, name: str) -> int | float:
    """A cut as epoch seconds (:func:`time_value`): a quantile in (0, 1) of ``ts`` or a date
    (naive = UTC)."""
    if isinstance(value, bool):
        pass
    elif isinstance(value, float | int | np.floating | np.integer):
        if 0.0 < float(value) < 1.0:
            if ts.size == 0:
                raise ValueError(f"'{name}' is a quantile but the frame is empty")
            return time_value(np.quantile(ts, float(value), method="higher"))
    elif isinstance(value, str | dt.datetime | dt.date | pd.Timestamp):
        try:
            stamp = _date_text(value, name) if isinstance(value, str) else pd.Timestamp(value)
        except (ValueError, TypeError) as exc:
            if "ambiguous" in str(exc):
                raise
            raise ValueError(f"'{name}' is not a parsable date (got {value!r})") from exc
        if pd.isna(stamp):
            raise ValueError(f"'{name}' is not a parsable date (got {value!r})")
        if stamp.tzinfo is None:
            stamp = stamp.tz_localize("UTC")
        return time_value((stamp - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(microseconds=1) / 1e6)
    raise ValueError(f"'{name}' must be a date string or a quantile in (0, 1) (got {value!r})")


_iso = _iso_utc  # a time in epoch seconds as ISO 8601 UTC (harness.data)


def _codes(s: pd.Series) -> tuple[np.ndarray, int]:
    codes, uniques = pd.factorize(s, sort=False)
    return codes.astype(np.int64), len(uniques)


def _nunique(s: pd.Series) -> int:
    return int(s.nunique())


def _user_groups(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row order by (user, timestamp, item id, input row) and the start/size of each user run."""
    n = len(df)
    ucode, _ = pd.factorize(df[USER], sort=False)
    order = np.lexsort((np.arange(n), sorted_codes(df[ITEM]), df[TIMESTAMP].to_numpy(), ucode))
    u = ucode[order]
    starts = np.flatnonzero(np.r_[True, u[1:] != u[:-1]]) if n else np.empty(0, np.int64)
    counts = np.diff(np.r_[starts, n]).astype(np.int64)
    return order, starts, counts


def _build(
    df: pd.DataFrame,
    is_test: np.ndarray,
    is_valid: np.ndarray | None,
    name: str,
    params: dict[str, Any],
    extra: dict[str, Any],
) -> Split:
    is_train = ~is_test if is_valid is None else ~(is_test | is_valid)
    coded = cast(pd.DataFrame, _coded(df)[0])  # statistics on codes: one hash of text ids
    train, test = coded[is_train], coded[is_test]
    valid = None if is_valid is None else coded[is_valid]
    stats: dict[str, Any] = {
        "method": name,
        "n_input_events": len(df),
        "n_input_users": _nunique(coded[USER]),
        "n_input_items": _nunique(coded[ITEM]),
        **extra,
        "train_filtered_events": 0,
        "train_filtered_users": 0,
        "train_filtered_items": 0,
    }
    stats.update(_unseen(test, train, "test", "keep")[1])
    stats.update(
        _unseen_zero("valid") if valid is None else _unseen(valid, train, "valid", "keep")[1]
    )
    stats["unseen_policy"] = "keep"
    stats.update(_describe(train, test, valid))
    return Split(
        train=df[is_train],
        test=df[is_test],
        valid=None if is_valid is None else df[is_valid],
        stats=stats,
        name=name,
        params=params,
    )


def _coded(*parts: pd.DataFrame | None) -> list[pd.DataFrame | None]:
    """The parts' user, item and timestamp columns with text ids replaced by int64 codes shared
    by all the parts (integer ids are kept): counting distinct ids, membership and grouping
    give the same numbers on codes, and hashing text once instead of once per statistic is
    most of a split's time on string ids."""
    present = [p for p in parts if p is not None]
    columns: dict[str, list[np.ndarray]] = {}
    for name in (USER, ITEM):
        series = [p[name] for p in present]
        if all(pd.api.types.is_integer_dtype(x.dtype) for x in series):
            columns[name] = [x.to_numpy() for x in series]
            continue
        if _same_categories(series):  # parts of one categorical: its codes already are codes
            columns[name] = [x.cat.codes.to_numpy().astype(np.int64) for x in series]
            continue
        joined = series[0] if len(series) == 1 else pd.concat(series, ignore_index=True)
        codes, _ = pd.factorize(joined, sort=False)
        columns[name] = np.split(codes.astype(np.int64), np.cumsum([len(x) for x in series])[:-1])
    out: list[pd.DataFrame | None] = []
    for p in parts:
        if p is None:
            out.append(None)
            continue
        i = len(out) - sum(q is None for q in out)
        out.append(
            pd.DataFrame(
                {
                    USER: columns[USER][i],
                    ITEM: columns[ITEM][i],
                    TIMESTAMP: p[TIMESTAMP].to_numpy(),
                },
                index=p.index,
                copy=False,
            )
        )
    return out


def _same_categories(series: list[pd.Series]) -> bool:
    """True when every series is a categorical with one and the same categories."""
    first = series[0].dtype
    return isinstance(first, pd.CategoricalDtype) and all(
        isinstance(x.dtype, pd.CategoricalDtype) and x.cat.categories.equals(first.categories)  # type: ignore[attr-defined]
        for x in series
    )


def _unseen(
    part: pd.DataFrame, train: pd.DataFrame, prefix: str, policy: str
) -> tuple[np.ndarray | None, dict[str, Any]]:
    """Unseen counts of ``part`` and, when ``policy`` drops some, the rows kept (else None)."""
    user_seen = part[USER].isin(train[USER].unique()).to_numpy()
    item_seen = part[ITEM].isin(train[ITEM].unique()).to_numpy()
    unseen = ~(user_seen & item_seen)
    stats = {
        f"{prefix}_unseen_events": int(unseen.sum()),
        f"{prefix}_unseen_user_events": int((~user_seen).sum()),
        f"{prefix}_unseen_item_events": int((~item_seen).sum()),
        f"{prefix}_unseen_users": _nunique(part[USER][~user_seen]),
        f"{prefix}_unseen_items": _nunique(part[ITEM][~item_seen]),
        f"{prefix}_dropped_events": 0,
        f"{prefix}_dropped_users": 0,
        f"{prefix}_dropped_items": 0,
    }
    if policy == "drop" and unseen.any():
        kept = part[~unseen]
        stats[f"{prefix}_dropped_events"] = int(unseen.sum())
        stats[f"{prefix}_dropped_users"] = _nunique(part[USER]) - _nunique(kept[USER])
        stats[f"{prefix}_dropped_items"] = _nunique(part[ITEM]) - _nunique(kept[ITEM])
        return ~unseen, stats
    return None, stats


def check_usable(split: Split, frame: pd.DataFrame | None = None) -> Split:
    """Return ``split`` unchanged, or raise DataError (one line) when its train or test part is
    empty: nothing could be fitted or evaluated, so it is the data's fault, not a model's.

    ``frame`` (the split's input) only sharpens the message with the data's time range.
    """
    s = split.stats
    name = f"split {split.name}"
    ts = None if frame is None or len(frame) == 0 else frame[TIMESTAMP].to_numpy()
    first = time_value(ts.min()) if ts is not None else s.get("train_time_min")
    last = time_value(ts.max()) if ts is not None else s.get("train_time_max")
    if s.get("n_train_events", 1) == 0:
        if ts is not None and first is not None and first == last:
            raise DataError(
                f"{name}: every event is at one timestamp ({_iso(first)}), so no event is "
                f"before the test ones; the training set is empty"
            )
        if s.get("train_filtered_events", 0):
            raise DataError(
                f"{name}: the training filters (min_user_interactions, min_item_interactions, "
                f"kcore) removed all {s['train_filtered_events']} training events"
            )
        if s.get("cut_iso") is not None and first is not None:
            # training ends at the validation cut when there is one
            key, iso = "cut", s["cut_iso"]
            if s.get("valid_cut_iso") is not None:
                key, iso = "valid_cut", s["valid_cut_iso"]
            raise DataError(
                f"{name}: split.{key}={split.params.get(key)!r} ({iso}) is at or "
                f"before the first event ({_iso(first)}); the training set is empty"
            )
        raise DataError(
            f"{name} leaves the training set empty ({s['n_input_events']} events, "
            f"{s['n_input_users']} users)"
        )
    if s.get("n_test_events", 1) == 0:
        if s.get("cut") is not None and last is not None and s["cut"] > last:
            raise DataError(
                f"{name}: split.cut={split.params.get('cut')!r} ({s['cut_iso']}) is after the "
                f"last event ({_iso(last)}); the test set is empty"
            )
        if s.get("test_dropped_events", 0):
            raise DataError(
                f"{name}: all {s['test_dropped_events']} test events are of users or items unseen"
                " in training and were dropped (split.unseen=drop); nothing is left to evaluate"
            )
        raise DataError(
            f"{name} leaves the test set empty ({s['n_input_events']} events, "
            f"{s['n_input_users']} users)"
        )
    return split


def _unseen_zero(prefix: str) -> dict[str, Any]:
    names = ("events", "user_events", "item_events", "users", "items")
    out: dict[str, Any] = {f"{prefix}_unseen_{n}": 0 for n in names}
    out.update({f"{prefix}_dropped_{n}": 0 for n in ("events", "users", "items")})
    return out


def _describe(
    train: pd.DataFrame, test: pd.DataFrame, valid: pd.DataFrame | None
) -> dict[str, Any]:
    stats: dict[str, Any] = {}
    for part_name, part in (("train", train), ("test", test), ("valid", valid)):
        if part is None:
            part = train.iloc[:0]
        ts = part[TIMESTAMP].to_numpy()
        stats[f"n_{part_name}_events"] = len(part)
        stats[f"n_{part_name}_users"] = _nunique(part[USER])
        stats[f"n_{part_name}_items"] = _nunique(part[ITEM])
        stats[f"{part_name}_time_min"] = time_value(ts.min()) if ts.size else None
        stats[f"{part_name}_time_max"] = time_value(ts.max()) if ts.size else None
    for part_name, part in (("test", test), ("valid", valid)):
        pairs, in_train = _pairs_in_train(train, part)
        stats[f"n_{part_name}_pairs"] = pairs
        stats[f"{part_name}_pairs_in_train"] = in_train
    stats.update(_leakage(train, test))
    return stats


def _pairs_in_train(train: pd.DataFrame, part: pd.DataFrame | None) -> tuple[int, int]:
    """Distinct (user, item) pairs of ``part`` and how many of them training holds too (a
    repeated interaction): a model that excludes seen items can never hit those."""
    if part is None or len(part) == 0:
        return 0, 0
    # ids (codes of text ids) shifted to start at 0, or factorized when spread over 64 bits
    codes = []
    for column in (USER, ITEM):
        ids = np.concatenate([train[column].to_numpy(), part[column].to_numpy()])
        low, high = int(ids.min()), int(ids.max())
        codes.append(ids - low if high - low < 2**31 else pd.factorize(ids)[0].astype(np.int64))
    key = codes[0] * (int(codes[1].max()) + 1) + codes[1]
    mine = distinct(key[len(train) :])
    return len(mine), int(member(mine, key[: len(train)]).sum())


def _leakage(train: pd.DataFrame, test: pd.DataFrame) -> dict[str, float | None]:
    keys = (
        "leakage_user_train_after_test",
        "leakage_mean_train_after_test",
        "leakage_global_train_after_first_test",
    )
    if len(train) == 0 or len(test) == 0:
        return dict.fromkeys(keys)
    train_ts = train[TIMESTAMP].to_numpy()
    test_ts = test[TIMESTAMP].to_numpy()
    first_test = test.groupby(USER, sort=False)[TIMESTAMP].min()
    own = train[USER].map(first_test).to_numpy(dtype=np.float64)  # NaN: user has no test
    user_share = float(np.mean(train_ts > own))  # comparisons with NaN are False
    sorted_ts = np.sort(train_ts)
    later = train_ts.size - np.searchsorted(sorted_ts, test_ts, side="right")
    mean_share = float(np.mean(later) / train_ts.size)
    global_share = float(np.mean(train_ts > test_ts.min()))
    return dict(zip(keys, (user_share, mean_share, global_share), strict=True))


def input_distinct(frame: pd.DataFrame, column: str, stats: Mapping[str, Any]) -> int | None:
    """Distinct ids of ``frame[column]`` (None without that column): the split's count of its
    input (``stats``) when that input is ``frame`` (same number of events), so millions of text
    ids are not hashed again for the report's counts or coverage's catalog size."""
    if column not in frame:
        return None
    counted = stats.get(f"n_input_{column}s")
    if counted is not None and stats.get("n_input_events") == len(frame):
        return int(counted)
    return int(frame[column].nunique())
