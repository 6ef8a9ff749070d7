"""Item-bucket segments of a comparison: each model's per-user ranking metrics judged only
against the user's test items in one popularity bucket (head, mid, tail).

:func:`bucket_tables` reads each model's ranked lists once and judges them against the whole
truth once; each bucket then masks the judged relevance (and the relevant counts and ideal gains)
to its own items and runs the metric kernels on those arrays. The numbers are those of
``metrics.evaluate(truth of the bucket, the model's lists)`` (:func:`bucket_tables_by_engine`,
the straightforward path, kept for other engines and as the test reference), without building
frames or re-preparing ids per bucket.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

import metrics
from metrics.evaluate import _kernel_options
from metrics.judged import Judged, gain_of
from metrics.options import Options, resolve_options
from metrics.registry import MetricSpec

__all__ = ["BUCKETS", "bucket_tables", "bucket_tables_by_engine"]

BUCKETS = ("head", "mid", "tail")
_CELLS = 1 << 23  # cells of (truth row × list position) compared per chunk
_Tables = dict[str, tuple[pd.DataFrame, pd.DataFrame]]


def bucket_tables_by_engine(
    qrels: pd.DataFrame,
    recs: tuple[pd.DataFrame, pd.DataFrame],
    names: Sequence[str],
    bucket_of: pd.Series,
    options: Mapping[str, Any],
    evaluate: Callable[..., metrics.Evaluation] = metrics.evaluate,
) -> _Tables:
    """Per bucket, both models' per-user metrics from ``evaluate`` on the bucket's truth rows
    (items unseen in training count as tail); each bucket evaluates only its users' lists."""
    item_bucket = bucket_of.reindex(qrels["item"]).fillna("tail").to_numpy()
    truths = {b: qrels[item_bucket == b] for b in BUCKETS}
    tables: dict[str, list[pd.DataFrame]] = {b: [] for b in truths}
    for r in recs:  # one model's lists in memory at a time
        user = pd.Series(r["user"]).astype(qrels["user"].dtype)
        codes, uniques = pd.factorize(user)
        index = pd.Index(uniques)
        item, score = pd.Series(r["item"]).array, -r["rank"].to_numpy()
        for bucket, truth in truths.items():
            if truth.empty:
                tables[bucket].append(pd.DataFrame(columns=list(names), dtype=float))
                continue
            wanted = np.zeros(len(index) + 1, dtype=bool)
            at = index.get_indexer(truth["user"].unique())
            wanted[at[at >= 0]] = True
            keep = wanted[codes]
            mine = pd.DataFrame(
                {"user": user.array[keep], "item": item[keep], "score": score[keep]}
            )
            if mine.empty:
                mine = truth.assign(score=0.0).iloc[:0][["user", "item", "score"]]
            tables[bucket].append(evaluate(truth, mine, list(names), **options).per_user)
        del user, codes, index, item, score
    return {b: (pa_, pb.reindex(pa_.index)) for b, (pa_, pb) in tables.items()}


@dataclass(frozen=True)
class _Truth:
    """The truth rows sorted by user: user position, item code, relevance and bucket per row."""

    users: pd.Index  # evaluated users in metrics.evaluate's order (the tables' index)
    user: np.ndarray  # int64 position in ``users`` of each row
    item: np.ndarray  # int64 code of each row's item in ``items``
    rel: np.ndarray
    bucket: np.ndarray  # int8 index into BUCKETS
    items: pd.Index  # distinct truth items


def _sorted_users(column: pd.Series) -> tuple[pd.Index, np.ndarray]:
    """Distinct ids sorted as ``metrics.evaluate`` orders its users (integers numerically,
    strings by code point) and the position of each row's id among them."""
    if pd.api.types.is_integer_dtype(column.dtype):
        users, pos = np.unique(column.to_numpy(dtype=np.int64), return_inverse=True)
        return pd.Index(users, name="user"), pos.astype(np.int64)
    codes, uniques = pd.factorize(column)
    text = pa.array(pd.Index(uniques).astype(str)).cast(pa.large_string())
    order = pc.sort_indices(text).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    users = pd.Index(pd.array(text.take(pa.array(order)), dtype="str"), name="user")
    return users, rank[codes]


def _truth(qrels: pd.DataFrame, bucket_of: pd.Series) -> _Truth:
    users, user = _sorted_users(qrels["user"])
    item, items = pd.factorize(qrels["item"])
    of_item = bucket_of.reindex(items).fillna("tail").to_numpy()
    bucket_codes = np.select([of_item == b for b in BUCKETS], np.arange(len(BUCKETS)), 2)
    order = np.argsort(user, kind="stable")
    return _Truth(
        users=users,
        user=user[order],
        item=item.astype(np.int64)[order],
        rel=qrels["relevance"].to_numpy(dtype=np.float64)[order],
        bucket=bucket_codes.astype(np.int8)[item[order]],
        items=pd.Index(items),
    )


@dataclass(frozen=True)
class _Lists:
    """One model's ranked lists judged against the whole truth, one row per listed user."""

    user: np.ndarray  # int64[G] position in _Truth.users, ascending
    n_ret: np.ndarray  # int64[G]
    rel: np.ndarray  # float64[G, W] relevance of the listed item (0: not in the user's truth)
    bucket: np.ndarray  # int8[G, W] the matched truth row's bucket (-1: no truth row)


def _item_codes(values: pd.Series, index: pd.Index) -> np.ndarray:
    """Position of each item in ``index`` (-1 when absent): a table lookup for integer ids in a
    range at most a few times the number of values, else one hash lookup per value."""
    if pd.api.types.is_integer_dtype(values.dtype) and pd.api.types.is_integer_dtype(index.dtype):
        v = values.to_numpy(dtype=np.int64)
        keys = index.to_numpy(dtype=np.int64)
        if len(v) and len(keys):
            lo, hi = int(keys.min()), int(keys.max())
            if hi - lo < 4 * (len(v) + len(keys)):
                table = np.full(hi - lo + 2, -1, dtype=np.int64)  # last cell: out of range
                table[keys - lo] = np.arange(len(keys))
                at = v - lo
                at[(at < 0) | (at > hi - lo)] = hi - lo + 1
                return table[at]
        return index.get_indexer(v).astype(np.int64)
    codes, uniques = pd.factorize(values.astype(index.dtype) if len(index) else values)
    at = np.append(index.get_indexer(uniques).astype(np.int64), -1)
    return at[codes]  # code -1 (missing id) picks the appended -1


def _user_codes(values: pd.Series, index: pd.Index) -> np.ndarray:
    """Position of each row's user in ``index`` (-1 when absent), looking up each run of equal
    neighbours once (lists come grouped by user)."""
    if not pd.api.types.is_integer_dtype(values.dtype):
        return _item_codes(values, index)
    v = values.to_numpy(dtype=np.int64)
    if len(v) == 0:
        return v
    starts = np.concatenate(([0], np.flatnonzero(v[1:] != v[:-1]) + 1))
    at = index.get_indexer(v[starts]).astype(np.int64)
    return np.repeat(at, np.diff(starts, append=len(v)))


def _lists(recs: pd.DataFrame, truth: _Truth, depth: int | None) -> _Lists | None:
    """The lists in rank order, cut at ``depth``, judged by the truth rows; None when a user's
    list has two items at the same rank (the engine's tie rule then decides: not done here)."""
    user = _user_codes(recs["user"], truth.users)
    rank = recs["rank"].to_numpy()
    item = _item_codes(recs["item"], truth.items)
    keep = user >= 0
    if not keep.all():
        user, rank, item = user[keep], rank[keep], item[keep]
    same = user[1:] == user[:-1]
    if not ((user[1:] > user[:-1]) | (same & (rank[1:] > rank[:-1]))).all():
        order = np.lexsort((rank, user))
        user, rank, item = user[order], rank[order], item[order]
        same = user[1:] == user[:-1]
        if (same & (rank[1:] == rank[:-1])).any():
            return None
    starts = np.concatenate(([0], np.flatnonzero(~same) + 1)) if len(user) else user
    length = np.diff(starts, append=len(user))
    width = int(length.max()) if len(length) else 0
    if depth is not None:
        width = min(width, depth)
    pos = np.arange(len(user), dtype=np.int64) - np.repeat(starts, length)
    cell = np.repeat(np.arange(len(starts), dtype=np.int64) * width, length) + pos
    matrix = np.full((len(starts), width), -1, dtype=np.int64)
    if depth is not None and len(length) and int(length.max()) > width:
        listed = pos < width
        matrix.ravel()[cell[listed]] = item[listed]
    else:
        matrix.ravel()[cell] = item
    rel = np.zeros(matrix.shape)
    bucket = np.full(matrix.shape, -1, dtype=np.int8)
    # each truth row against its user's list: at most one position matches (no duplicates)
    row_of_user = np.full(len(truth.users), -1, dtype=np.int64)
    row_of_user[user[starts]] = np.arange(len(starts))
    g = row_of_user[truth.user]
    step = max(1, _CELLS // max(width, 1))
    for lo in range(0, len(g), step):
        gs = g[lo : lo + step]
        src = np.flatnonzero(gs >= 0)
        hit, col = np.nonzero(matrix[gs[src]] == truth.item[lo + src][:, None])
        src, row = src[hit] + lo, gs[src[hit]]
        rel[row, col] = truth.rel[src]
        bucket[row, col] = truth.bucket[src]
    return _Lists(user[starts], np.minimum(length, width), rel, bucket)


def _judged(
    rel: np.ndarray,
    n_ret: np.ndarray,
    n_rel: np.ndarray,
    ideal: tuple[np.ndarray, np.ndarray, np.ndarray],
    rows: np.ndarray,
    opts: Options,
) -> Judged:
    """The engine's judged form of these lists (``rows``: row of each ideal entry's user, -1
    for users not in this block)."""
    valid = np.arange(rel.shape[1])[None, :] < n_ret[:, None]
    thr = opts.relevance_threshold
    mine = rows[ideal[0]] >= 0
    return Judged(
        hits=valid & (rel >= thr),
        gains=np.where(valid, gain_of(rel, opts.gain, thr), 0.0),
        n_ret=n_ret,
        n_rel=n_rel,
        ideal_user=rows[ideal[0]][mine],
        ideal_rank=ideal[1][mine],
        ideal_gain=ideal[2][mine],
    )


def _values(j: Judged, specs: list[tuple[str, MetricSpec]], opts: Options) -> dict[str, np.ndarray]:
    """Each metric's per-user values from its kernel, as ``metrics.evaluate`` calls it."""
    return {
        name: np.asarray(
            spec.definition.kernel(j, k=spec.k, **_kernel_options(spec.metric, opts)),
            dtype=np.float64,
        )
        for name, spec in specs
    }


def _table(
    truth: _Truth,
    lists: _Lists,
    b: int,
    specs: list[tuple[str, MetricSpec]],
    opts: Options,
    ideal: tuple[np.ndarray, np.ndarray, np.ndarray],
    n_rel: np.ndarray,
) -> pd.DataFrame:
    """One model's per-user table in bucket ``b``: its users are those with a truth row there."""
    in_bucket = np.zeros(len(truth.users), dtype=bool)
    in_bucket[truth.user[truth.bucket == b]] = True
    has_list = np.zeros(len(truth.users), dtype=bool)
    has_list[lists.user] = True
    if opts.user_set == "intersection":
        in_bucket &= has_list
    users = np.flatnonzero(in_bucket)
    local = np.full(len(truth.users), -1, dtype=np.int64)
    local[users] = np.arange(len(users))
    out = {name: np.full(len(users), np.nan) for name, _ in specs}
    blocks = []
    listed = np.flatnonzero(in_bucket[lists.user])  # list rows of the bucket's users
    if len(listed):
        u = lists.user[listed]
        rel = np.where(lists.bucket[listed] == b, lists.rel[listed], 0.0)
        blocks.append((u, rel, lists.n_ret[listed]))
    missing = users[~has_list[users]]  # evaluated users without a list: empty lists
    if len(missing):
        blocks.append((missing, np.zeros((len(missing), 0)), np.zeros(len(missing), np.int64)))
    for u, rel, n_ret in blocks:
        rows = np.full(len(truth.users), -1, dtype=np.int64)
        rows[u] = np.arange(len(u))
        j = _judged(rel, n_ret, n_rel[u], ideal, rows, opts)
        for name, values in _values(j, specs, opts).items():
            out[name][local[u]] = values
    empty = n_rel[users] == 0
    for name, spec in specs:
        if spec.definition.needs_relevant:
            if opts.empty_users == "skip":
                out[name][empty] = np.nan
            elif opts.empty_users == "one":
                out[name][empty] = 1.0
    return pd.DataFrame(out, index=truth.users[users])


def _ideal(truth: _Truth, b: int, opts: Options) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(user, rank, gain) of the positive gains of bucket ``b``, by user then gain descending."""
    gains = gain_of(truth.rel, opts.gain, opts.relevance_threshold)
    keep = (gains > 0) & (truth.bucket == b)
    user, gain = truth.user[keep], gains[keep]
    order = np.lexsort((-gain, user))  # truth rows are sorted by user already
    user, gain = user[order], gain[order]
    starts = np.concatenate(([0], np.flatnonzero(user[1:] != user[:-1]) + 1)) if len(user) else user
    sizes = np.diff(np.append(starts, len(user)))
    rank = np.arange(len(user), dtype=np.int64) - np.repeat(starts, sizes)
    return user, rank, gain


def _options(options: Mapping[str, Any]) -> Options | None:
    """The evaluation options, or None when some keyword is not an option (engine path)."""
    known = {f.name for f in fields(Options)}
    if any(key not in known for key in options):
        return None
    rest = {k: v for k, v in options.items() if k != "preset"}
    return resolve_options(options.get("preset"), **rest)


def bucket_tables(
    qrels: pd.DataFrame,
    recs: tuple[pd.DataFrame, pd.DataFrame],
    names: Sequence[str],
    bucket_of: pd.Series,
    options: Mapping[str, Any],
    evaluate: Callable[..., metrics.Evaluation] = metrics.evaluate,
) -> _Tables:
    """Per bucket (head, mid, tail), both models' per-user ranking metrics judged only against
    each user's test items in that bucket (items unseen in training count as tail): the numbers
    of :func:`bucket_tables_by_engine`, from one judging pass per model.

    Another engine than ``metrics.evaluate``, a keyword that is not an evaluation option, a
    metric that is not a ranking metric or a list with two items at one rank takes the engine
    path.
    """
    specs = [(str(n), metrics.parse(n)) for n in names]
    opts = _options(options)
    if (
        evaluate is not metrics.evaluate
        or opts is None
        or qrels.empty
        or any(s.definition.kind != "ranking" for _, s in specs)
    ):
        return bucket_tables_by_engine(qrels, recs, names, bucket_of, options, evaluate)
    ks = [s.k for _, s in specs if s.metric not in ("r_precision", "num_rel")]
    depth = None if any(k is None for k in ks) or any(
        s.metric == "r_precision" for _, s in specs
    ) else max((k for k in ks if k is not None), default=1)
    truth = _truth(qrels, bucket_of)
    judged = []
    for r in recs:
        lists = _lists(r, truth, depth)
        if lists is None:
            return bucket_tables_by_engine(qrels, recs, names, bucket_of, options, evaluate)
        judged.append(lists)
    thr = opts.relevance_threshold
    out: _Tables = {}
    for b, name in enumerate(BUCKETS):
        if not (truth.bucket == b).any():
            empty = pd.DataFrame(columns=list(names), dtype=float)
            out[name] = (empty, empty.copy())
            continue
        relevant = (truth.rel >= thr) & (truth.bucket == b)
        n_rel = np.bincount(truth.user[relevant], minlength=len(truth.users)).astype(np.int64)
        ideal = _ideal(truth, b, opts)
        pa_, pb = (_table(truth, lists, b, specs, opts, ideal, n_rel) for lists in judged)
        out[name] = (pa_, pb.reindex(pa_.index))
    return out
