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
from harness.data import arrow_text, id_codes
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
    item: np.ndarray  # int32 code of each row's item in ``items``
    rel: np.ndarray
    bucket: np.ndarray  # int8 index into BUCKETS
    items: pd.Index  # distinct truth items


def _sorted_users(column: pd.Series) -> tuple[pd.Index, np.ndarray]:
    """Distinct ids sorted as ``metrics.evaluate`` orders its users (integers numerically,
    strings by code point) and the position of each row's id among them."""
    if pd.api.types.is_integer_dtype(column.dtype):
        users, pos = np.unique(column.to_numpy(dtype=np.int64), return_inverse=True)
        return pd.Index(users, name="user"), pos.astype(np.int64)
    if arrow_text(column) is not None:  # sorted codes, those the split noted when it has
        codes, uniques = id_codes(column)
        return pd.Index(uniques.array, name="user"), codes.astype(np.int64, copy=False)
    codes, uniques = pd.factorize(column)
    text = pa.array(pd.Index(uniques).astype(str)).cast(pa.large_string())
    order = pc.sort_indices(text).to_numpy()
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    users = pd.Index(pd.array(text.take(pa.array(order)), dtype="str"), name="user")
    return users, rank[codes]


def _truth(qrels: pd.DataFrame, bucket_of: pd.Series) -> _Truth:
    users, user = _sorted_users(qrels["user"])
    item, items = (id_codes if arrow_text(qrels["item"]) is not None else pd.factorize)(
        qrels["item"]
    )
    of_item = bucket_of.reindex(items).fillna("tail").to_numpy()
    bucket_codes = np.select([of_item == b for b in BUCKETS], np.arange(len(BUCKETS)), 2)
    order = np.argsort(user, kind="stable")
    return _Truth(
        users=users,
        user=user[order],
        item=item.astype(np.int32)[order],
        rel=qrels["relevance"].to_numpy(dtype=np.float64)[order],
        bucket=bucket_codes.astype(np.int8)[item[order]],
        items=pd.Index(items),
    )


@dataclass(frozen=True)
class _Lists:
    """One model's ranked lists judged against the whole truth, one row per listed user."""

    user: np.ndarray  # int64[G] position in _Truth.users, ascending
    n_ret: np.ndarray  # int64[G]
    hits: np.ndarray  # bool[G, W] the listed item is relevant (relevance >= threshold)
    gains: np.ndarray  # float64[G, W] its gain (0: not in the user's truth, or padding)
    bucket: np.ndarray  # int8[G, W] the matched truth row's bucket (-1: no truth row)


def _item_codes(values: pd.Series, index: pd.Index) -> np.ndarray:
    """Position of each item in ``index`` (-1 when absent): a table lookup for integer ids in a
    range at most a few times the number of values, else one hash lookup per value."""
    if pd.api.types.is_integer_dtype(values.dtype) and pd.api.types.is_integer_dtype(index.dtype):
        v = values.to_numpy(dtype=np.int64)
        keys = index.to_numpy(dtype=np.int64)
        if len(v) and len(keys):
            lo = min(int(v.min()), int(keys.min()))
            hi = max(int(v.max()), int(keys.max()))
            if hi - lo < 4 * (len(v) + len(keys)):
                table = np.full(hi - lo + 1, -1, dtype=np.int64)
                table[keys - lo] = np.arange(len(keys))
                return table[v - lo]
        return index.get_indexer(v).astype(np.int64)
    if not len(index):
        return np.full(len(values), -1, dtype=np.int64)
    # distinct values first (Python strings hash once, cached), then only those converted to
    # the index's type: converting every row of an object column to text costs far more
    codes, uniques = pd.factorize(values)
    distinct = pd.Index(uniques)
    if pd.api.types.is_integer_dtype(index.dtype) and not _integers(distinct):
        # text ids against integer ones (a score file with a non-integer id, which compares
        # its ids as text): compared as text, as the run's own evaluation does
        index, distinct = index.astype(str), distinct.astype(str)
    else:
        distinct = distinct.astype(index.dtype)
    at = np.append(index.get_indexer(distinct).astype(np.int64), -1)
    return at[codes]  # code -1 (missing id) picks the appended -1


def _integers(ids: pd.Index) -> bool:
    """True for integer ids (an integer dtype, or Python ints in an object index)."""
    return pd.api.types.is_integer_dtype(ids.dtype) or pd.api.types.infer_dtype(ids) == "integer"


def _runs(values: pd.Series, index: pd.Index) -> tuple[np.ndarray, np.ndarray]:
    """Start of each run of equal neighbouring ids and its id's position in ``index`` (-1 when
    absent): integer ids are looked up once per run (lists come grouped by user)."""
    if pd.api.types.is_integer_dtype(values.dtype):
        v = values.to_numpy(dtype=np.int64)
        starts = np.concatenate(([0], np.flatnonzero(v[1:] != v[:-1]) + 1)) if len(v) else v
        return starts, index.get_indexer(v[starts]).astype(np.int64)
    codes = _item_codes(values, index)
    starts = np.concatenate(([0], np.flatnonzero(codes[1:] != codes[:-1]) + 1))
    return (starts, codes[starts]) if len(codes) else (codes, codes)


def _lists(
    recs: pd.DataFrame, truth: _Truth, depth: int | None, hit: np.ndarray, gain: np.ndarray
) -> _Lists | None:
    """The lists in rank order, cut at ``depth``, judged by the truth rows (``hit`` and ``gain``
    of each); None when a user's list has two items at the same rank (the engine's tie rule
    then decides: not done here)."""
    rank = recs["rank"].to_numpy()
    item = _item_codes(recs["item"], truth.items).astype(np.int32)  # -1: in no one's truth
    starts, user = _runs(recs["user"], truth.users)
    length = np.diff(starts, append=len(rank))
    ranked = (rank[1:] > rank[:-1]).astype(np.int8)
    ranked[starts[1:] - 1] = 1  # a new run may start at any rank
    if not (ranked.all() and (user >= 0).all() and (user[1:] > user[:-1]).all()):
        row_user = np.repeat(user, length)  # other orders, or users without truth: sort
        keep = row_user >= 0
        order = np.flatnonzero(keep)[np.lexsort((rank[keep], row_user[keep]))]
        row_user, rank, item = row_user[order], rank[order], item[order]
        same = row_user[1:] == row_user[:-1]
        if (same & (rank[1:] == rank[:-1])).any():
            return None
        starts = np.concatenate(([0], np.flatnonzero(~same) + 1)) if len(row_user) else row_user
        user, length = row_user[starts], np.diff(starts, append=len(row_user))
    longest = int(length.max()) if len(length) else 0
    width = longest if depth is None else min(longest, depth)
    first = np.arange(len(starts), dtype=np.int64) * width  # cell of each list's first item
    matrix = np.full((len(starts), width), -1, dtype=np.int32)
    if width == longest:
        matrix.ravel()[np.arange(len(item)) + np.repeat(first - starts, length)] = item
    else:
        pos = np.arange(len(item)) - np.repeat(starts, length)
        listed = pos < width
        matrix.ravel()[(pos + np.repeat(first, length))[listed]] = item[listed]
    hits = np.zeros(matrix.shape, dtype=bool)
    gains = np.zeros(matrix.shape)
    bucket = np.full(matrix.shape, -1, dtype=np.int8)
    # each truth row against its user's list: at most one position matches (no duplicates)
    row_of_user = np.full(len(truth.users), -1, dtype=np.int64)
    row_of_user[user] = np.arange(len(user))
    g = row_of_user[truth.user]
    step = max(1, _CELLS // max(width, 1))
    for lo in range(0, len(g), step):
        gs = g[lo : lo + step]
        src = np.flatnonzero(gs >= 0)
        found, col = np.nonzero(matrix[gs[src]] == truth.item[lo + src][:, None])
        src, row = src[found] + lo, gs[src[found]]
        hits[row, col], gains[row, col] = hit[src], gain[src]
        bucket[row, col] = truth.bucket[src]
    return _Lists(user, np.minimum(length, width), hits, gains, bucket)


def _judged(
    hits: np.ndarray,
    gains: np.ndarray,
    n_ret: np.ndarray,
    n_rel: np.ndarray,
    ideal: tuple[np.ndarray, np.ndarray, np.ndarray],
    rows: np.ndarray,
) -> Judged:
    """The engine's judged form of these lists (``rows``: row of each ideal entry's user, -1
    for users not in this block)."""
    mine = rows[ideal[0]] >= 0
    return Judged(
        hits=hits,
        gains=gains,
        n_ret=n_ret,
        n_rel=n_rel,
        ideal_user=rows[ideal[0]][mine],
        ideal_rank=ideal[1][mine],
        ideal_gain=ideal[2][mine],
    )


def _values(j: Judged, specs: list[tuple[str, MetricSpec]], opts: Options) -> dict[str, np.ndarray]:
    """Each metric's per-user values from its kernel, as its definition calls it."""
    return {
        name: np.asarray(
            spec.definition.kernel(j, k=spec.k, **spec.definition.kernel_options(opts)),
            dtype=np.float64,
        )
        for name, spec in specs
    }


def _kernel_valued(spec: MetricSpec) -> bool:
    """Whether the engine's per-user values of this ranking metric are its kernel's: no
    ``compute`` of its own, or the one precision, recall and f1 share (the kernel plus the
    pieces of a micro average)."""
    d = spec.definition
    return d.kind == "ranking" and (
        d.compute is None or d.compute is metrics.parse("precision").definition.compute
    )


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
        mine = lists.bucket[listed] == b  # the bucket's truth: other items are misses
        hits = lists.hits[listed] & mine
        gains = np.where(mine, lists.gains[listed], 0.0)
        blocks.append((lists.user[listed], hits, gains, lists.n_ret[listed]))
    missing = users[~has_list[users]]  # evaluated users without a list: empty lists
    if len(missing):
        none = np.zeros((len(missing), 0))
        blocks.append((missing, none.astype(bool), none, np.zeros(len(missing), np.int64)))
    for u, hits, gains, n_ret in blocks:
        rows = np.full(len(truth.users), -1, dtype=np.int64)
        rows[u] = np.arange(len(u))
        j = _judged(hits, gains, n_ret, n_rel[u], ideal, rows)
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


def _ideal(truth: _Truth, b: int, gains: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(user, rank, gain) of the positive gains of bucket ``b``, by user then gain descending."""
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
    metric whose per-user values are not its ranking kernel's, or a list with two items at one
    rank takes the engine path.
    """
    specs = [(str(n), metrics.parse(n)) for n in names]
    opts = _options(options)
    if (
        evaluate is not metrics.evaluate
        or opts is None
        or qrels.empty
        or not all(_kernel_valued(s) for _, s in specs)
    ):
        return bucket_tables_by_engine(qrels, recs, names, bucket_of, options, evaluate)
    # judged as deep as the engine would: to the largest cutoff, the whole list without one
    ks = [s.k for _, s in specs if s.definition.depth == "cutoff"]
    whole = any(k is None for k in ks) or any(s.definition.depth == "relevant" for _, s in specs)
    depth = None if whole else max((k for k in ks if k is not None), default=1)
    truth = _truth(qrels, bucket_of)
    thr = opts.relevance_threshold  # > 0: padding and unjudged items are no hit and gain 0
    hit, gain = truth.rel >= thr, gain_of(truth.rel, opts.gain, thr)
    judged = []
    for r in recs:
        lists = _lists(r, truth, depth, hit, gain)
        if lists is None:
            return bucket_tables_by_engine(qrels, recs, names, bucket_of, options, evaluate)
        judged.append(lists)
    out: _Tables = {}
    for b, name in enumerate(BUCKETS):
        if not (truth.bucket == b).any():
            empty = pd.DataFrame(columns=list(names), dtype=float)
            out[name] = (empty, empty.copy())
            continue
        relevant = (truth.rel >= thr) & (truth.bucket == b)
        n_rel = np.bincount(truth.user[relevant], minlength=len(truth.users)).astype(np.int64)
        ideal = _ideal(truth, b, gain)
        pa_, pb = (_table(truth, lists, b, specs, opts, ideal, n_rel) for lists in judged)
        out[name] = (pa_, pb.reindex(pa_.index))
    return out
