"""Turn (qrels, run) DataFrames into batches of judged top-k lists, without a loop over users.

Preparation encodes ids once, groups run rows by user (free when the run is already grouped,
as exports usually are), and sorts the truth once for lookups and ideal gains. Batches then
pad a block of users into ``float[b, w]`` scores, select the top ``K`` with the tie rule and
judge them by binary search into the sorted truth.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from metrics.checks import require_columns, require_frame
from metrics.judged import Judged, gain_of
from metrics.options import Options
from metrics.sets import distinct as sorted_distinct
from metrics.sets import member, tied_sort
from metrics.topk import PAD_KEY, top_k

__all__ = ["Batch", "Prepared", "prepare", "validate_qrels", "validate_run"]

QRELS_COLUMNS = ("user", "item", "relevance")
RUN_COLUMNS = ("user", "item", "score")


def _check_columns(
    df: pd.DataFrame, needed: tuple[str, ...], what: str, object_ids: bool = True
) -> None:
    """Columns present, rows present, no missing id (in object id columns only when
    ``object_ids``: ``prepare`` finds those while encoding, for free)."""
    require_frame(df, what)
    require_columns(df.columns, needed, what)
    if len(df) == 0:
        raise ValueError(f"{what} is empty: it needs at least one row")
    for c in ("user", "item"):
        if isinstance(df[c].dtype, np.dtype) and df[c].dtype.kind in "iu":
            continue  # numpy integers cannot be missing
        if not object_ids and df[c].dtype == object:
            continue
        arrow = _arrow_strings(df[c])
        if arrow is not None and arrow.null_count == 0:  # Arrow keeps the count: no row pass
            continue
        coded = _arrow_dictionary(df[c])
        if coded is not None:  # missing: a null index, or an index to a null value
            if coded.null_count == 0 and not any(x.dictionary.null_count for x in coded.chunks):
                continue
            nulls = pc.is_null(coded.cast(coded.type.value_type)).to_numpy(zero_copy_only=False)
        else:
            nulls = df[c].isna().to_numpy()
        if nulls.any():
            row = int(np.flatnonzero(nulls)[0])
            raise ValueError(f"{what} column {c!r} has a missing id at row {row}")


def _plain(value: object) -> object:
    """Numpy scalars as plain Python values, so messages read ``2`` not ``np.int64(2)``."""
    return value.item() if isinstance(value, np.generic) else value


def _check_finite(values: np.ndarray, df: pd.DataFrame, column: str, what: str) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{what} column {column!r} must be finite numbers: {int(bad.sum())} bad value(s), "
            f"first {_plain(values[row])!r} at row {row} (user {_plain(df['user'].iloc[row])!r}, "
            f"item {_plain(df['item'].iloc[row])!r})"
        )


def _numeric(df: pd.DataFrame, column: str, what: str) -> np.ndarray:
    try:
        return df[column].to_numpy(dtype=np.float64, na_value=np.nan)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} column {column!r} must be numeric ({err})") from None


def validate_qrels(qrels: pd.DataFrame) -> np.ndarray:
    """Check the truth table; return its relevance as float64."""
    _check_columns(qrels, QRELS_COLUMNS, "qrels")
    rel = _numeric(qrels, "relevance", "qrels")
    _check_finite(rel, qrels, "relevance", "qrels")
    return rel


def validate_run(run: pd.DataFrame, *, object_ids: bool = True) -> np.ndarray:
    """Check the run table; return its scores as float64 (``object_ids=False``: the caller
    checks object id columns for missing ids)."""
    _check_columns(run, RUN_COLUMNS, "run", object_ids)
    score = _numeric(run, "score", "run")
    _check_finite(score, run, "score", "run")
    return score


def _is_int(series: pd.Series) -> bool:
    """True for integer id columns; False for string-like ones; ValueError for bools and floats."""
    if pd.api.types.is_integer_dtype(series.dtype):
        if pd.api.types.is_unsigned_integer_dtype(series.dtype) and series.dtype.itemsize == 8:
            values = series.to_numpy()
            if len(values) and int(values.max()) >= 2**63:  # would wrap to negative int64 keys
                raise ValueError(
                    f"ids in column {series.name!r} reach {int(values.max())}: uint64 ids of "
                    f"2**63 or more are not supported; convert the column to str"
                )
        return True
    if pd.api.types.is_bool_dtype(series.dtype) or pd.api.types.is_float_dtype(series.dtype):
        raise ValueError(
            f"ids in column {series.name!r} must be integers or strings (got dtype {series.dtype})"
        )
    return False


def _same_kind(q: pd.Series, r: pd.Series, column: str) -> bool:
    """Whether both tables hold integer ids in ``column``; ValueError when they differ."""
    q_int, r_int = _is_int(q), _is_int(r)
    if q_int != r_int:
        raise ValueError(
            f"column {column!r} has an integer dtype in one table and not in the other "
            f"(qrels {q.dtype}, run {r.dtype}; object and categorical columns are read as text, "
            f"whatever they hold); convert both to the same type"
        )
    return q_int


def _arrow_strings(series: pd.Series) -> pa.ChunkedArray | None:
    """The column's Arrow string data when it is Arrow-backed (pandas 3 ``str``), else None."""
    dtype = series.dtype
    arrow = (
        isinstance(dtype, pd.StringDtype) and dtype.storage in ("pyarrow", "pyarrow_numpy")
    ) or (
        isinstance(dtype, pd.ArrowDtype)
        and (
            pa.types.is_string(dtype.pyarrow_dtype) or pa.types.is_large_string(dtype.pyarrow_dtype)
        )
    )
    return _chunked(series) if arrow else None


def _chunked(series: pd.Series) -> pa.ChunkedArray:
    """An Arrow-backed column's data as one chunked array (zero-copy)."""
    data = series.array.__arrow_array__()
    return data if isinstance(data, pa.ChunkedArray) else pa.chunked_array([data])


def _arrow_dictionary(series: pd.Series) -> pa.ChunkedArray | None:
    """The column's Arrow data when it is an Arrow dictionary (``read_parquet`` with
    ``dtype_backend="pyarrow"`` gives one for a column written from a categorical), else None."""
    dtype = series.dtype
    coded = isinstance(dtype, pd.ArrowDtype) and pa.types.is_dictionary(dtype.pyarrow_dtype)
    return _chunked(series) if coded else None


def _is_coded(series: pd.Series) -> bool:
    """Whether the column holds codes into distinct values: a categorical or an Arrow dictionary."""
    return isinstance(series.dtype, pd.CategoricalDtype) or _arrow_dictionary(series) is not None


def _own_codes(series: pd.Series) -> _Coded:
    """A categorical or Arrow dictionary column (no missing id) as its own codes and values, no
    encoding. An Arrow dictionary may hold a value twice (one id: linked to one key); a
    categorical's categories are distinct, though two may share a text (1 and "1")."""
    data = _arrow_dictionary(series)
    if data is None:
        # the Categorical's own codes (read-only, no copy: 100M rows cost 0.06 s to copy)
        return _Coded([series.array.codes], [_as_strings(series.cat.categories)])
    whole = data.chunk(0) if data.num_chunks == 1 else data.unify_dictionaries().combine_chunks()
    values = whole.dictionary
    if values.null_count:  # a missing value that no row points to (validation found none):
        values = pc.fill_null(values, values.drop_null()[0])  # a repeat, harmless
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        text = values.cast(pa.large_string())
    else:  # other values read as text the way a categorical's categories are
        text = _as_strings(values.to_pandas())
    return _Coded([whole.indices.to_numpy()], [text])


def _cut_strings(series: pd.Series) -> pa.ChunkedArray | None:
    """Item ids as Arrow strings for the cut path: Arrow-backed columns as they are; object and
    Python-string columns converted once when every id is a ``str`` (cheaper than factorizing
    the Python objects), missing ids reported; None for other columns (categoricals, mixed
    types, bytes: the general path keeps their ``str()`` semantics)."""
    data = _arrow_strings(series)
    if data is not None or _is_coded(series):
        return data
    try:
        arr = pa.array(series.to_numpy(dtype=object), from_pandas=True)
    except (pa.ArrowException, UnicodeError, ValueError, TypeError):
        return None
    data = arr if isinstance(arr, pa.ChunkedArray) else pa.chunked_array([arr])
    if not (pa.types.is_string(data.type) or pa.types.is_large_string(data.type)):
        return None  # e.g. bytes, which ``str()`` would spell differently
    if data.null_count:
        missing = pc.is_null(data).to_numpy(zero_copy_only=False)
        raise _missing_id("run", series.name, int(np.argmax(missing)))
    return data


def _as_strings(values: object) -> pa.Array:
    """A few distinct ids as an Arrow ``large_string`` array (ids other than str via ``str``)."""
    return pa.array(pd.Index(values).astype(str)).cast(pa.large_string())


#: Arrow id columns are dictionary-encoded in pieces of at least this many rows, on threads.
PIECE_ROWS = 1 << 20


def workers(rows: int) -> int:
    """Threads worth using for ``rows`` rows of string ids (1: encode on the calling thread)."""
    return max(1, min(os.cpu_count() or 1, 4, rows // PIECE_ROWS))


def _map(pool: Executor | None, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    """``fn`` over ``items``, on ``pool`` when there is one and more than one item."""
    if pool is None or len(items) < 2:
        return [fn(x) for x in items]
    return list(pool.map(fn, items))


@dataclass
class _Coded:
    """String-like ids in pieces of rows: ``values[i][codes[i]]`` are the ids of piece ``i``."""

    codes: list[np.ndarray]
    values: list[pa.Array]  # large_string, one per piece; may repeat across pieces

    @property
    def rows(self) -> int:
        """Number of rows over all pieces."""
        return sum(len(c) for c in self.codes)

    @classmethod
    def of(cls, parts: list[tuple[np.ndarray, pa.Array]]) -> _Coded:
        """From (codes, values) pieces such as :func:`_encode` gives."""
        return cls([c for c, _ in parts], [v for _, v in parts])


def _piece_rows(rows: int) -> int:
    """Rows per piece of a ``rows``-row column: at least :data:`PIECE_ROWS`, one per worker."""
    return max(PIECE_ROWS, -(-rows // workers(rows)))


def _pieces(data: pa.ChunkedArray | pa.Array) -> list[pa.Array]:
    """``data`` in pieces of :func:`_piece_rows` rows at most (none empty)."""
    chunks = data.chunks if isinstance(data, pa.ChunkedArray) else [data]
    size = _piece_rows(len(data))
    return [c.slice(lo, size) for c in chunks for lo in range(0, len(c), size)]


def _encode(piece: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Dictionary-encode one Arrow piece: (int32 codes, its distinct values)."""
    enc = piece.dictionary_encode()
    return enc.indices.to_numpy(), enc.dictionary.cast(pa.large_string())


def _encode_pieces(data: pa.ChunkedArray | pa.Array, pool: Executor | None) -> _Coded:
    """Arrow strings dictionary-encoded in pieces (on ``pool``), each with its own values."""
    return _Coded.of(_map(pool, _encode, _pieces(data) or [pa.array([], pa.large_string())]))


def _missing_id(what: str, column: object, row: int) -> ValueError:
    return ValueError(f"{what} column {column!r} has a missing id at row {row}")


def _codes(series: pd.Series, pool: Executor | None, what: str | None = None) -> _Coded:
    """Int codes of a string-like id column, without turning it into Python objects.

    Arrow-backed columns are dictionary-encoded in Arrow (in pieces on ``pool``), categoricals
    give their codes; other columns (object, python strings) are factorized by pandas, which
    also finds missing ids (code -1): reported as ``what``'s when given.
    """
    data = _arrow_strings(series)
    if data is not None:
        return _encode_pieces(data, pool)
    if _is_coded(series):
        return _own_codes(series)
    codes, uniques = pd.factorize(series)
    if what is not None and len(codes) and codes.min() < 0:
        raise _missing_id(what, series.name, int(np.argmax(codes < 0)))
    return _Coded([codes], [_as_strings(uniques)])


def _block_starts(data: pa.ChunkedArray, pool: Executor | None) -> np.ndarray:
    """Rows (int64) where a block of equal neighbours starts, row 0 first; ``len(data) > 1``.
    Neighbours are compared in pieces on ``pool``."""
    n = len(data) - 1
    size = _piece_rows(n)

    def part(lo: int) -> np.ndarray:
        m = min(size, n - lo)
        change = pc.not_equal(data.slice(lo + 1, m), data.slice(lo, m))
        return pc.indices_nonzero(change).to_numpy().astype(np.int64) + (lo + 1)

    return np.concatenate([np.zeros(1, np.int64), *_map(pool, part, list(range(0, n, size)))])


def _run_codes(series: pd.Series, pool: Executor | None) -> _Coded:
    """:func:`_codes` of a column whose equal ids mostly sit together (a truth table sorted by
    user): an Arrow column then costs one comparison of neighbours and the encoding of each run's
    first id only."""
    data = _arrow_strings(series)
    if data is None or len(data) < 2:
        return _codes(series, pool)
    starts = _block_starts(data, pool)
    if 4 * len(starts) > len(data):  # not grouped enough to pay
        return _codes(series, pool)
    heads = data.take(pa.array(starts)).combine_chunks().cast(pa.large_string())
    codes = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(data))))
    return _Coded([codes], [heads])  # a user in several blocks: joined by :func:`_link`


_TAKE_ROWS = 1 << 18


def _remap(job: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    """``out[:] = keys[codes]``; a plain copy when the keys are the codes (sorted categories)."""
    keys, codes, out = job
    if len(keys) and keys[0] == 0 and keys[-1] == len(keys) - 1 and (np.diff(keys) == 1).all():
        out[:] = codes
        return
    # in blocks: numpy's take converts and buffers the whole index array otherwise (5x slower
    # at 100M rows); "clip" skips the bounds check (codes are in range)
    for lo in range(0, len(codes), _TAKE_ROWS):
        hi = lo + _TAKE_ROWS
        np.take(keys, codes[lo:hi], out=out[lo:hi], mode="clip")


def _string_order(values: pa.Array) -> np.ndarray:
    """Indices that sort ``large_string`` ``values`` (no nulls) by their UTF-8 bytes, as
    ``pc.sort_indices`` does (equal strings in any order), at numpy's speed: one sort of a
    64-bit key per string (its 8 bytes after the prefix every string shares, read from Arrow's
    buffers), then an exact Arrow sort of only the strings whose keys tie with a different
    string's. 2M random UUIDs: 0.38 against Arrow's 0.96 s."""
    n = len(values)
    if n < 2:
        return np.arange(n, dtype=np.int64)
    low, high = (v.as_py().encode() for v in pc.min_max(values).values())
    # the bytes every string shares: those the lowest and the highest share
    common = next((i for i, (a, b) in enumerate(zip(low, high, strict=False)) if a != b), len(low))
    _, offsets, data = values.buffers()[:3]
    ends = np.frombuffer(offsets, "<i8", n + 1, values.offset * 8)
    raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    start = ends[:-1] + common
    length = ends[1:] - start  # bytes after the common prefix
    # the 8 bytes from ``start`` as a big-endian word (first byte highest), read unaligned;
    # those that would run past the buffer come from a zero-padded copy of its last 8 bytes
    edge = max(len(raw) - 8, 0)
    inside = int(np.searchsorted(start, edge, side="right")) if len(raw) >= 8 else 0
    key = np.empty(n, np.uint64)
    key[:inside] = np.ndarray((max(len(raw) - 7, 0),), ">u8", raw, strides=(1,))[start[:inside]]
    tail = np.zeros(16, np.uint8)
    tail[: len(raw) - edge] = raw[edge:]
    tail_words = np.ndarray((9,), ">u8", tail, strides=(1,))
    key[inside:] = tail_words[np.minimum(start[inside:] - edge, 8)]
    key &= np.take(_FP_KEEP, length, mode="clip")  # the string's own bytes (at most 8)
    order, at, run = tied_sort(key)
    if not at.size:
        return order
    rows = order[at]
    same_run = run[1:] == run[:-1]
    size = length[rows]
    # neighbours whose text is all in the key are equal when their lengths are ("a" < "a\0");
    # longer ones are compared in Arrow
    differ = size[1:] != size[:-1]
    check = np.flatnonzero(same_run & ((size[1:] > 8) | (size[:-1] > 8)))
    if check.size:
        pair = [values.take(pa.array(rows[check + d])) for d in (0, 1)]
        differ[check] |= pc.not_equal(*pair).to_numpy(zero_copy_only=False)
    unsettled = np.unique(run[1:][differ & same_run])
    if unsettled.size:
        sel = np.flatnonzero(np.isin(run, unsettled))
        table = pa.table({"run": run[sel], "text": values.take(pa.array(rows[sel]))})
        by = pc.sort_indices(table, sort_keys=[("run", "ascending"), ("text", "ascending")])
        order[at[sel]] = rows[sel][by.to_numpy()]
    return order


def _link(coded: list[_Coded], pool: Executor | None) -> tuple[list[np.ndarray], pa.Array]:
    """One int key per row of each coded column, and the sorted distinct ids the keys index.

    Keys are ranks in string order (UTF-8 bytes, i.e. code points, as Python compares str), so
    ordering keys orders ids. Only the pieces' values (distinct ids, block heads) are sorted,
    never the rows; equal values in several pieces get one key. Keys are int32
    while the distinct ids fit (half the memory and the page faults of a 100M-row key column).
    """
    values = [v for c in coded for v in c.values]
    # an array equal to an earlier one (truth and run listing the same users in the same
    # order, as they usually do) is sorted once: ``same[i]``, the first array equal to ``i``
    same = list(range(len(values)))
    for i, v in enumerate(values):
        same[i] = next((j for j in range(i) if same[j] == j and v.equals(values[j])), i)
    firsts = [i for i in range(len(values)) if same[i] == i]
    every = pa.concat_arrays([values[i] for i in firsts])
    # a sort, not a hash table: cheaper for the ~1M distinct user ids
    order = _string_order(every)
    ordered = every.take(pa.array(order))
    new = np.ones(len(ordered), bool)
    if len(ordered) > 1:
        new[1:] = pc.not_equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1)).to_numpy(
            zero_copy_only=False
        )
    n_distinct = int(new.sum())
    dtype = np.int32 if n_distinct < 2**31 else np.int64
    rank = np.empty(len(ordered), dtype=dtype)
    rank[order] = np.cumsum(new, dtype=dtype) - 1
    sizes = [len(values[i]) for i in firsts]
    ranks = dict(zip(firsts, np.split(rank, np.cumsum(sizes)[:-1]), strict=True))
    maps = iter(ranks[j] for j in same)
    keys, jobs = [], []
    for c in coded:
        out, lo = np.empty(c.rows, dtype=dtype), 0
        for codes in c.codes:
            jobs.append((next(maps), codes, out[lo : lo + len(codes)]))
            lo += len(codes)
        keys.append(out)
    _map(pool, _remap, jobs)
    return keys, ordered.filter(pa.array(new))


def _runs(values: np.ndarray) -> np.ndarray:
    """Start of each run of equal neighbours in an int array."""
    return np.concatenate(([0], np.flatnonzero(values[1:] != values[:-1]) + 1))


def _group_codes(codes: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Group rows by int code: (row order or None if already grouped, group starts, group codes)."""
    starts = _runs(codes)
    firsts = codes[starts]
    if len(pd.unique(firsts)) == len(firsts):
        return None, np.append(starts, len(codes)), firsts
    local, uniques = pd.factorize(codes)
    order = np.argsort(local, kind="stable")
    counts = np.bincount(local, minlength=len(uniques))
    return order, np.concatenate(([0], np.cumsum(counts))), np.asarray(uniques)


def _group_rows(
    series: pd.Series, pool: Executor | None
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray | _Coded]:
    """Group run rows by user: (row order or None if already grouped, group starts, group ids).

    Group ids are int64 for integer ids, else coded strings. A grouped column costs one
    comparison of neighbours; only each group's first id is encoded. Arrow string columns in
    blocks of equal ids give one group per block: a user whose rows sit in blocks apart gets
    one group per block here (:func:`_merge_blocks` joins them once the ids are keys).
    """
    if _is_int(series):
        return _group_codes(series.to_numpy(dtype=np.int64))
    data = _arrow_strings(series)
    firsts: pa.Array | None = None
    if data is not None and len(data) > 1:
        starts = _block_starts(data, pool)
        if 4 * len(starts) <= len(data):  # in blocks: only each block's first id is encoded
            heads = data.take(pa.array(starts)).combine_chunks().cast(pa.large_string())
            return None, np.append(starts, len(series)), _Coded([np.arange(len(starts))], [heads])
    elif data is None and not _is_coded(series):
        values = series.to_numpy(dtype=object)  # object or python strings: compared in place
        starts = _runs(values)
        missing = pd.isna(values[starts])  # a missing id starts a run of its own
        if missing.any():
            raise _missing_id("run", series.name, int(starts[np.argmax(missing)]))
        firsts = _as_strings(values[starts])
    if firsts is not None and pc.count_distinct(firsts).as_py() == len(firsts):
        return None, np.append(starts, len(series)), _Coded([np.arange(len(starts))], [firsts])
    coded = _codes(series, pool, "run")
    # pieces with their own dictionaries, or an Arrow dictionary that may hold a user twice:
    # one code per user first (so a user's rows stay in their order)
    if len(coded.codes) > 1 or _arrow_dictionary(series) is not None:
        (keys,), distinct = _link([coded], pool)
        coded = _Coded([keys], [distinct])
    order, group_start, group_codes = _group_codes(coded.codes[0])
    return order, group_start, _Coded([group_codes], coded.values)


def _unique(ids: np.ndarray) -> np.ndarray:
    """Distinct ids; a linear scan when integer ids arrive sorted (truth tables usually do)."""
    if len(ids) and (ids[1:] >= ids[:-1]).all():
        return ids[_runs(ids)]
    return pd.unique(ids)


_SAME_TEXT = "holds different ids with the same text (such as 1 and '1'); make the ids one type"


def _user_keys(
    q_user: pd.Series, group: np.ndarray | _Coded, pool: Executor | None
) -> tuple[np.ndarray, np.ndarray, pd.api.extensions.ExtensionArray | None]:
    """Int keys of truth rows and run groups, ordered as the users are, and their decoding.

    Integer ids are their own keys (decoding None); string ids get their rank among all users.
    Group keys repeat only for the blocks of an Arrow string column (see :func:`_group_rows`).
    """
    if isinstance(group, np.ndarray):
        return q_user.to_numpy(dtype=np.int64), group, None
    truth = _run_codes(q_user, pool)
    if _arrow_strings(q_user) is None and _arrow_dictionary(q_user) is None:
        # object or categorical: distinct ids, maybe equal text
        held = q_user.cat.categories if isinstance(q_user.dtype, pd.CategoricalDtype) else q_user
        # only ids that are not all str can share a text (1 and "1", one user once keyed);
        # the type check is cheap, Arrow's count of distinct strings is not (0.5 s per 1M)
        if pd.api.types.infer_dtype(held, skipna=False) != "string":
            (ids,) = truth.values
            if pc.count_distinct(ids).as_py() != len(ids):
                raise ValueError(f"qrels column 'user' {_SAME_TEXT}")
    (q_keys, group_keys), distinct = _link([truth, group], pool)
    return q_keys, group_keys, pd.array(distinct, dtype="str")


def _merge_blocks(
    group_start: np.ndarray, keys: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blocks of rows with the same key joined into one group: (row order, group starts, group
    keys), groups in order of first appearance and rows in their order, as :func:`_group_codes`
    gives for the rows' keys, at the cost of the blocks."""
    local, uniques = pd.factorize(keys)
    by = np.argsort(local, kind="stable")
    sizes = np.diff(group_start)
    size = sizes[by]
    ends = np.cumsum(size)
    order = np.repeat(group_start[:-1][by] - (ends - size), size) + np.arange(
        ends[-1] if len(ends) else 0
    )
    counts = np.bincount(local, weights=sizes, minlength=len(uniques)).astype(np.int64)
    return order, np.concatenate(([0], np.cumsum(counts))), np.asarray(uniques)


def _int_item_keys(
    q: np.ndarray, r: np.ndarray, id_order: str, n_truth: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int, int]:
    """:func:`_item_keys` of int64 truth and run item ids."""
    present = [a for a in (q, r) if len(a)]  # the cut may leave no run rows
    offset = min(int(a.min()) for a in present) if present else 0
    span = max(int(a.max()) for a in present) - offset + 1 if present else 1
    wide = max(abs(offset), abs(offset + span)) >= PAD_KEY
    if id_order == "natural" and not wide and span * max(n_truth, 1) < PAD_KEY:
        return q, r, None, offset, span
    codes, values = pd.factorize(np.concatenate([q, r]))
    values = np.asarray(values)
    # "string": compared as their decimal strings, the way trec_eval compares docnos
    by = values if id_order == "natural" else values.astype(str)
    order = np.argsort(by, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    keys = rank[codes]
    return keys[: len(q)], keys[len(q) :], values[order], 0, len(values)


def _item_keys(
    q_item: pd.Series,
    r_item: pd.Series,
    is_int: bool,
    id_order: str,
    n_truth: int,
    pool: Executor | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, int, int]:
    """Item keys of truth and run rows: (truth keys, run keys, decoding or None, offset, span).

    Keys are ordered as the ids compare under ``id_order``, so tie rules work on keys alone.
    Integer ids shifted to start at 0 are their own keys when ordered numerically and not spread
    too wide to combine with a user index; otherwise keys are ranks of the distinct ids.
    """
    if is_int:
        return _int_item_keys(
            q_item.to_numpy(dtype=np.int64), r_item.to_numpy(dtype=np.int64), id_order, n_truth
        )
    (q_keys, r_keys), distinct = _link([_codes(q_item, pool), _codes(r_item, pool, "run")], pool)
    values = np.asarray(distinct.to_numpy(zero_copy_only=False), dtype=object)
    return q_keys, r_keys, values, 0, len(values)


#: Rows of string ids fingerprinted per slice (temporaries that stay in cache).
_FP_ROWS = 1 << 18
#: ``_FP_KEEP[m]`` keeps the top ``m`` bytes of a little-endian word: a string's last m bytes.
_FP_KEEP = np.array([0] + [(1 << 64) - (1 << (8 * (8 - m))) for m in range(1, 9)], dtype=np.uint64)
_FP_MUL = np.uint64(0x9E3779B97F4A7C15)


def _chunk_fingerprints(chunk: pa.Array) -> np.ndarray:
    """:func:`_fingerprints` of one Arrow ``string``/``large_string`` array."""
    n = len(chunk)
    out = np.empty(n, np.uint32)
    if n == 0:
        return out
    _, offsets, data = chunk.buffers()[:3]
    width = 8 if pa.types.is_large_string(chunk.type) else 4
    ends = np.frombuffer(offsets, f"<i{width}", n + 1, chunk.offset * width)
    raw = np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)
    # the 8 bytes ending where each string ends, read unaligned straight from the buffer
    words = np.ndarray((max(len(raw) - 7, 0),), "<u8", raw, strides=(1,))
    head = np.zeros(16, np.uint8)  # strings ending in the first 8 bytes: zeros before them
    head[8 : 8 + min(8, len(raw))] = raw[:8]
    head_words = np.ndarray((9,), "<u8", head, strides=(1,))
    # scratch reused by every slice: no fresh (page-faulting) temporaries per slice
    rows = min(n, _FP_ROWS)
    length, keep = np.empty(rows, np.int64), np.empty(rows, np.uint64)
    for lo in range(0, n, _FP_ROWS):
        end = ends[lo + 1 : lo + 1 + _FP_ROWS]
        m = len(end)
        np.subtract(end, ends[lo : lo + m], out=length[:m])
        width = int(length[0])
        if width >= 8 and end[0] >= 8 and (length[:m] == width).all():
            # equally long strings (UUIDs, fixed-width codes): their last words lie ``width``
            # bytes apart, a strided slice (3x cheaper than a gather), and need no mask
            first = int(end[0]) - 8
            word = words[first : first + width * (m - 1) + 1 : width].copy()
        else:
            if end[0] < 8:  # ends are sorted: only the first slices can end that early
                early = int(np.searchsorted(end, 8))
                word = np.empty(m, np.uint64)
                word[:early] = head_words[end[:early]]
                word[early:] = words[end[early:] - 8]
            else:
                word = words[end - 8]
            # np.take: numpy's fancy indexing costs 4x more; "clip" caps lengths above 8 at 8
            word &= np.take(_FP_KEEP, length[:m], out=keep[:m], mode="clip")
        word ^= length[:m].view(np.uint64)  # lengths are never negative
        word *= _FP_MUL
        # the product's high half (on a little-endian machine; either half hashes equal strings
        # equal, the high one mixes more bits)
        out[lo : lo + m] = word.view(np.uint32)[1::2]
    return out


def _int_fingerprints(ids: np.ndarray) -> np.ndarray:
    """:func:`_fingerprints` of int ids: the high half of each id times an odd constant (ids
    that differ in their high bits only still mostly differ)."""
    out = np.empty(len(ids), np.uint32)
    for lo in range(0, len(ids), _FP_ROWS):  # int32 keys (categorical items) widened per slice
        word = ids[lo : lo + _FP_ROWS].astype(np.int64, copy=False).view(np.uint64) * _FP_MUL
        out[lo : lo + len(word)] = word.view(np.uint32)[1::2]
    return out


def _fingerprints(data: pa.ChunkedArray, pool: Executor | None = None) -> np.ndarray:
    """A 32-bit hash of each string (its length and last 8 bytes), read from Arrow's buffers
    without encoding (in pieces on ``pool``): equal strings hash equal, so rows can hold the
    same id only where their hashes collide, which callers then compare exactly."""
    parts = _map(pool, _chunk_fingerprints, _pieces(data))
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, np.uint32)


#: Users per block at most: each user also costs per-user arrays (ideal gains, judged top-k
#: rows), which a budget of cells alone lets grow with short (cut) lists.
_BLOCK_USERS = 1 << 16


def _blocks(group_user: np.ndarray, group_start: np.ndarray, budget: int) -> Iterator[np.ndarray]:
    """Evaluated groups in blocks of about ``budget`` padded cells (and at most
    :data:`_BLOCK_USERS` groups), by length class, then in run order (rows read as slices)."""
    groups = np.flatnonzero(group_user >= 0)
    sizes = np.diff(group_start)
    level = np.ceil(np.log2(np.maximum(sizes[groups], 1))).astype(np.int64)
    for lv in np.unique(level):
        members = groups[level == lv]
        per_batch = max(1, min(budget // int(sizes[members].max()), _BLOCK_USERS))
        for lo in range(0, len(members), per_batch):
            yield members[lo : lo + per_batch]


def _cells(
    group_start: np.ndarray, groups: np.ndarray
) -> tuple[slice | np.ndarray, np.ndarray | None, int]:
    """Where the groups' lists sit as a padded ``[b, w]`` block: a slice of rows when they are
    consecutive and equally long (then ``values[where].reshape(-1, w)``), else row positions
    ``int[b, w]`` (0 in padding); the mask of real cells (None: no padding); and ``w``."""
    start = group_start[groups]
    length = group_start[groups + 1] - start
    w = int(length.max()) if len(length) else 0
    if (length == w).all():
        if groups[-1] - groups[0] == len(groups) - 1:
            return slice(int(start[0]), int(start[0]) + w * len(groups)), None, w
        return start[:, None] + np.arange(w), None, w
    cols = np.arange(w)
    valid = cols[None, :] < length[:, None]
    return np.where(valid, start[:, None] + cols, 0), valid, w


def _block(values: np.ndarray, where: slice | np.ndarray, w: int) -> np.ndarray:
    """``values`` at :func:`_cells`' ``where`` as ``[b, w]``."""
    return values[where].reshape(-1, w) if isinstance(where, slice) else values[where]


def _first_duplicate(
    where: slice | np.ndarray,
    valid: np.ndarray | None,
    w: int,
    fp: Callable[[slice | np.ndarray, int], np.ndarray],
    text: Callable[[np.ndarray], pa.Array],
    id_order: str = "natural",
) -> tuple[int, object] | None:
    """(block row, smallest duplicated id) of the first list holding an id twice, or None.

    Lists are sorted by fingerprint (``fp`` of :func:`_cells`' ``where`` and ``w``: 32-bit);
    only lists where two fingerprints collide have their ids (``text`` of row positions)
    compared exactly. "Smallest" under ``id_order``.
    """
    keys = fp(where, w)
    if valid is not None:  # padding above every 32-bit fingerprint, distinct per column
        keys = np.where(valid, keys, np.uint64(1 << 32) + np.arange(w, dtype=np.uint64))
    ordered = np.sort(keys, axis=1)
    rows = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
    if rows.size == 0:
        return None
    if isinstance(where, slice):
        pos = where.start + rows[:, None] * w + np.arange(w)
    else:
        pos = where[rows]
    real = np.ones(pos.shape, bool) if valid is None else valid[rows]
    row = np.broadcast_to(rows[:, None], real.shape)[real].astype(np.int64)
    enc = text(pos[real]).dictionary_encode()
    n = max(len(enc.dictionary), 1)
    key = np.sort(row * n + enc.indices.to_numpy())
    dup = key[1:][key[1:] == key[:-1]]
    if dup.size == 0:
        return None
    first = int(dup[0] // n)
    ids = enc.dictionary.take(pa.array(dup[dup // n == first] % n)).to_pylist()
    return first, min(ids, key=str if id_order == "string" else None)


#: Padded cells per block of the cut (temporaries that stay in cache).
_CUT_CELLS = 1 << 18


def _cut(
    group_start: np.ndarray,
    group_user: np.ndarray,
    score: np.ndarray,
    fp: Callable[[slice | np.ndarray, int], np.ndarray],
    depth: int,
    text: Callable[[np.ndarray], pa.Array],
    users: Any,
    id_order: str = "natural",
    pool: Executor | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, ValueError | None]:
    """The rows that can reach an evaluated user's top ``depth`` (score at least the list's
    ``depth``-th best, so ties at the boundary stay whole), their scores, the groups' starts
    among them, and the run's duplicate (user, item) error if any (the first in batch order,
    as :func:`batches` would report it, naming the smallest duplicated id under ``id_order``).
    Blocks run on ``pool`` (numpy releases the GIL)."""

    def block(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray] | ValueError:
        where, valid, w = _cells(group_start, groups)
        found = _first_duplicate(where, valid, w, fp, text, id_order)
        if found is not None:
            row, item = found
            return ValueError(
                f"run has duplicate (user, item) rows: user "
                f"{_plain(users[group_user[groups[row]]])!r}, item {item!r} appears more than once"
            )
        s = _block(score, where, w)
        if valid is not None:
            s = np.where(valid, s, -np.inf)
        if depth < w:
            kth = np.partition(s, w - depth, axis=1)[:, w - depth]
            chosen = s >= kth[:, None]
            if valid is not None:
                chosen &= valid
        else:
            chosen = np.ones(s.shape, bool) if valid is None else valid
        if isinstance(where, slice):
            at = np.flatnonzero(chosen)
            return at + where.start, s.ravel()[at]
        return where[chosen], s[chosen]

    parts = _map(pool, block, list(_blocks(group_user, group_start, _CUT_CELLS)))
    for part in parts:  # in batch order: the first error is the one batches would raise
        if isinstance(part, ValueError):
            return np.empty(0, np.int64), np.empty(0), group_start, part
    # one column at a time, each part dropped once joined: less memory at once
    kept, kept_scores = [p[0] for p in parts], [p[1] for p in parts]
    del parts
    rows = np.concatenate(kept) if kept else np.empty(0, np.int64)
    del kept
    scores = np.concatenate(kept_scores) if kept_scores else np.empty(0)
    del kept_scores
    if len(rows) > 1 and not (rows[1:] > rows[:-1]).all():  # blocks of several length classes
        by_row = np.argsort(rows)
        rows, scores = rows[by_row], scores[by_row]
    return rows, scores, np.searchsorted(rows, group_start).astype(group_start.dtype), None


def _is_sorted(values: np.ndarray) -> bool:
    """Whether ``values`` never decrease."""
    return bool((values[1:] >= values[:-1]).all())


def _duplicates(key: np.ndarray) -> np.ndarray:
    """Positions (in ``key``'s sorted order) of repeated keys; ``key`` must be sorted."""
    return np.flatnonzero(key[1:] == key[:-1])


@dataclass
class Prepared:
    """Encoded inputs shared by all batches."""

    users: np.ndarray  # evaluated users, sorted
    n_rel: np.ndarray  # int[U]
    span: int  # item keys lie in [item_offset, item_offset + span)
    item_offset: int
    q_keys: np.ndarray  # sorted user * span + (item key - item_offset)
    q_rel: np.ndarray  # relevance aligned with q_keys
    ideal_start: np.ndarray  # int[U + 1] CSR offsets into ideal_gain
    ideal_gain: np.ndarray  # positive gains sorted by user, then descending
    run_items: np.ndarray  # int item keys of run rows (int32 for string ids), by user
    run_scores: np.ndarray
    group_start: np.ndarray  # int[G + 1]
    group_user: np.ndarray  # int[G]: index into users, -1 when not evaluated
    item_values: np.ndarray | None  # decoding of item keys (None: keys are the int ids)
    truth_items: np.ndarray  # item keys of every truth row, evaluated users or not (repeats)
    counts: dict[str, int] = field(default_factory=dict)
    depth: int | None = None  # lists cut to the rows that can reach a top-`depth` list
    run_every_item: np.ndarray | pa.ChunkedArray | None = None  # when lists are cut
    every_keys: np.ndarray | None = None  # item key of each run_every_item code (categoricals)
    user_rank: np.ndarray | None = None  # the users' numbers in q_keys (None: their index)

    def item_ids(self, keys: np.ndarray) -> np.ndarray:
        """Original item ids of item keys."""
        return keys if self.item_values is None else self.item_values[keys]

    def run_item_ids(self) -> np.ndarray:
        """The distinct ids of every run item (cut lists included)."""
        every = self.run_every_item
        if isinstance(every, np.ndarray):
            distinct = np.sort(pd.unique(every))
            return distinct if self.every_keys is None else self.item_ids(self.every_keys[distinct])
        if every is not None:
            return np.asarray(pc.unique(every).to_numpy(zero_copy_only=False), object)
        return self.item_ids(sorted_distinct(self.run_items))


def prepare(
    qrels: pd.DataFrame, run: pd.DataFrame, options: Options, *, depth: int | None = None
) -> Prepared:
    """Validate, encode and index both tables once.

    ``depth``: the batches will only be asked for top-``depth`` lists (no candidates, no
    R-precision, ordered ties). When some list is longer, integer and string item ids (Arrow,
    or Python strings converted once) are then keyed only in the rows that can reach such a
    list, and the run's duplicate check reads a fingerprint of every row instead.
    """
    if depth is not None and (not isinstance(depth, int) or depth < 1):
        raise ValueError(f"'depth' must be a positive int (got {depth!r})")
    rel = validate_qrels(qrels)
    score = validate_run(run, object_ids=False)  # missing object ids: found while encoding
    _same_kind(qrels["user"], run["user"], "user")
    items_int = _same_kind(qrels["item"], run["item"], "item")

    # Every id becomes an int key ordered as the ids are (string ids: their rank among the
    # distinct ids, computed without turning the column into Python objects). With ``depth``,
    # run items are keyed only in the rows that can reach a top-``depth`` list.
    every: np.ndarray | pa.ChunkedArray | None = None  # every run item id, for the cut
    # categorical items are cut on their codes (int speed), each code's key found once
    coded_items = depth is not None and _is_coded(run["item"])
    code_keys: np.ndarray | None = None  # item key of each category code
    item_values: np.ndarray | None  # decoding of item keys (None: keys are the int ids)
    if depth is not None and not coded_items:
        every = run["item"].to_numpy(dtype=np.int64) if items_int else _cut_strings(run["item"])
    n = workers(len(run))
    with ThreadPoolExecutor(n) if n > 1 else nullcontext() as pool:
        order, group_start, group = _group_rows(run["user"], pool)
        q_user, group_ids, user_values = _user_keys(qrels["user"], group, pool)
        n_truth = len(q_user)
        if user_values is not None and len(pd.unique(group_ids)) != len(group_ids):
            if _arrow_strings(run["user"]) is None:
                raise ValueError(f"run column 'user' {_SAME_TEXT}")
            order, group_start, group_ids = _merge_blocks(group_start, group_ids)
        if depth is not None and int(np.diff(group_start).max(initial=0)) <= depth:
            every, coded_items = None, False  # no list is longer than the cut: nothing to leave
        if coded_items:  # the categories linked to the truth's ids; the rows keep their codes
            own = _own_codes(run["item"])
            each = _Coded([np.arange(len(own.values[0]))], own.values)
            (q_item, code_keys), distinct = _link([_codes(qrels["item"], pool), each], pool)
            item_values = np.asarray(distinct.to_numpy(zero_copy_only=False), dtype=object)
            offset, span = 0, len(item_values)
            every = own.codes[0]
        elif every is None:
            q_item, r_item, item_values, offset, span = _item_keys(
                qrels["item"], run["item"], items_int, options.id_order, n_truth, pool
            )
            if order is not None:
                r_item = r_item[order]
        elif not items_int:
            q_coded = _codes(qrels["item"], pool)
        if order is not None:
            score = score[order]

        q_users = _unique(q_user)
        if options.user_set == "truth":
            users = np.sort(q_users)
        else:
            known = sorted_distinct(q_users)
            users = known[member(known, group_ids)]
        index = pd.Index(users)
        group_user = index.get_indexer(group_ids).astype(np.int64)
        q_code = index.get_indexer(q_user).astype(np.int64)
        del q_user  # large as the truth; read no more
        if user_values is not None:
            users = user_values[users]

        run_error = None
        if every is not None and depth is not None:
            rows_of = (lambda p: p) if order is None else (lambda p: order[p])
            ids = every  # bound for the closure below (mypy narrows ``every`` only here)

            # ids of categorical codes; keys of them for the duplicate check, which compares
            # ids: needed only when two categories are one id (1 and "1"), else codes will do
            decode = None if code_keys is None or item_values is None else item_values[code_keys]
            keys = code_keys
            if keys is not None and len(pd.unique(keys)) == len(keys):
                keys = None

            def text(positions: np.ndarray) -> pa.Array:
                """The run item ids at (grouped) row ``positions``, as an Arrow array."""
                rows = rows_of(positions)
                if isinstance(ids, np.ndarray):
                    return pa.array(ids[rows] if decode is None else decode[ids[rows]])
                index = pa.array(rows)
                if ids.num_chunks == 1:  # a chunked take's result costs a copy to combine
                    return ids.chunk(0).take(index)
                return ids.take(index).combine_chunks()

            if isinstance(ids, np.ndarray):  # int ids: hashed block by block (no copy)

                def fp(where: slice | np.ndarray, w: int) -> np.ndarray:
                    block = _block(ids, where, w) if order is None else ids[_block(order, where, w)]
                    if keys is not None:
                        block = keys[block]
                    return _int_fingerprints(block.ravel()).reshape(block.shape)

            else:
                every_fp = _fingerprints(ids, pool)
                grouped_fp = every_fp if order is None else every_fp[order]

                def fp(where: slice | np.ndarray, w: int) -> np.ndarray:
                    return _block(grouped_fp, where, w)

            kept, score, group_start, run_error = _cut(
                group_start,
                group_user,
                score,
                fp,
                depth,
                text,
                users,
                options.id_order if items_int else "natural",
                pool,
            )
            if code_keys is not None:  # q_item, item_values: linked with the categories above
                r_item = code_keys[ids[rows_of(kept)]]
            elif isinstance(ids, np.ndarray):
                q_item, r_item, item_values, offset, span = _int_item_keys(
                    qrels["item"].to_numpy(dtype=np.int64),
                    ids[rows_of(kept)],
                    options.id_order,
                    n_truth,
                )
            else:
                pieces = np.array_split(kept, workers(len(kept)))
                kept_coded = _Coded.of(_map(pool, lambda rows: _encode(text(rows)), pieces))
                (q_item, r_item), distinct = _link([q_coded, kept_coded], pool)
                item_values = np.asarray(distinct.to_numpy(zero_copy_only=False), dtype=object)
                offset, span = 0, len(item_values)
            del kept

    truth_items = q_item  # every truth item, evaluated users or not (catalog size)
    keep = q_code >= 0
    if not keep.all():  # copies only when some truth user is not evaluated
        q_code, q_item, rel = q_code[keep], q_item[keep], rel[keep]
    rank = _run_rank(group_user, len(users))
    q_keys = (q_code if rank is None else rank[q_code]) * span + (q_item - offset)
    # not a stable sort: equal keys are duplicates, an error naming their (equal) ids
    by_key = None if _is_sorted(q_keys) else np.argsort(q_keys)
    q_rel, q_user_code = (rel, q_code) if by_key is None else (rel[by_key], q_code[by_key])
    if by_key is not None:
        q_keys = q_keys[by_key]
    dup = _duplicates(q_keys)
    if dup.size:
        i = dup[0] if by_key is None else by_key[dup[0]]
        raise ValueError(
            f"qrels has {dup.size} duplicate (user, item) row(s); first: user "
            f"{_plain(users[q_code[i]])!r}, item {_decode(item_values, q_item[i])!r}"
        )
    if run_error is not None:
        raise run_error

    n_users = len(users)
    # ideal gains by user index: equal gains need no order; others are sorted by user below
    relevant = q_rel >= options.relevance_threshold
    n_rel = np.bincount(q_user_code, weights=relevant, minlength=n_users)
    gains = gain_of(q_rel, options.gain, options.relevance_threshold)
    positive = gains > 0
    pos_code, pos_gain = q_user_code[positive], gains[positive]
    if pos_gain.size and (pos_gain == pos_gain[0]).all():  # binary truth: equal gains
        ideal_gain = pos_gain
    else:
        ideal_gain = pos_gain[np.lexsort((-pos_gain, pos_code))]
    ideal_counts = np.bincount(pos_code, minlength=n_users)

    evaluated_groups = int((group_user >= 0).sum())
    counts = {
        "users": n_users,
        "users_without_relevant": int((n_rel == 0).sum()),
        "users_missing_from_run": n_users - evaluated_groups,
        "truth_users_not_evaluated": len(q_users) - n_users,
        "run_users_not_in_truth": len(group_ids) - evaluated_groups,
    }
    return Prepared(
        users=users,
        n_rel=n_rel.astype(np.int64),
        span=span,
        item_offset=offset,
        q_keys=q_keys,
        q_rel=q_rel,
        ideal_start=np.concatenate(([0], np.cumsum(ideal_counts))),
        ideal_gain=ideal_gain,
        run_items=r_item,
        run_scores=score,
        group_start=group_start,
        group_user=group_user,
        item_values=item_values,
        truth_items=truth_items,
        counts=counts,
        depth=None if every is None else depth,
        run_every_item=every,
        every_keys=code_keys,
        user_rank=rank,
    )


def _run_rank(group_user: np.ndarray, n_users: int) -> np.ndarray | None:
    """Each evaluated user's place in run order (users with no list after them), the number the
    truth's lookup keys use: batches, in run order, then search a rising range of the sorted
    truth (local in memory) whatever order the ids sort in; None when it is the user's index."""
    listed = group_user[group_user >= 0]
    if len(listed) == n_users and _is_sorted(listed):
        return None
    rank = np.empty(n_users, np.int64)
    absent = np.ones(n_users, bool)
    absent[listed] = False
    rank[listed] = np.arange(len(listed))
    rank[absent] = np.arange(len(listed), n_users)
    return rank


def _decode(values: np.ndarray | None, key: int) -> object:
    return _plain(key if values is None else values[key])


@dataclass(frozen=True)
class Batch:
    """One block of users: their judged top-K lists plus what score metrics need."""

    users: np.ndarray  # int[b] indices into Prepared.users
    judged: Judged
    top_items: np.ndarray  # int[b, K] item keys (padding beyond judged.n_ret)
    scores: np.ndarray | None = None  # float[b, w] all candidates (only when asked)
    labels: np.ndarray | None = None  # float[b, w] relevance of all candidates, NaN if unjudged


def _lookup(prep: Prepared, users: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Relevance of (user, item) pairs (``users`` broadcast over rows); NaN where unjudged."""
    if len(prep.q_keys) == 0:
        return np.full(items.shape, np.nan)
    # Padding keys overflow to garbage here; callers mask padding out.
    if prep.user_rank is not None:
        users = prep.user_rank[users]
    key = users.reshape(users.shape + (1,) * (items.ndim - users.ndim)) * prep.span + (
        items - prep.item_offset
    )
    at = np.minimum(np.searchsorted(prep.q_keys, key), len(prep.q_keys) - 1)
    return np.where(prep.q_keys[at] == key, prep.q_rel[at], np.nan)


def _ideal(prep: Prepared, users: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat (local user, rank, gain) of the batch users' ideal gains."""
    start, stop = prep.ideal_start[users], prep.ideal_start[users + 1]
    sizes = stop - start
    local = np.repeat(np.arange(len(users), dtype=np.int64), sizes)
    offsets = np.cumsum(sizes) - sizes
    rank = np.arange(sizes.sum(), dtype=np.int64) - np.repeat(offsets, sizes)
    return local, rank, prep.ideal_gain[np.repeat(start, sizes) + rank]


def _pad(prep: Prepared, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores ``float[b, w]`` (-inf padding), item keys ``int[b, w]`` and lengths of groups."""
    start = prep.group_start[groups]
    length = prep.group_start[groups + 1] - start
    w = int(length.max()) if len(length) else 0
    contiguous = len(groups) and groups[-1] - groups[0] == len(groups) - 1
    if contiguous and (length == w).all():
        lo, hi = start[0], start[0] + w * len(groups)
        return (
            prep.run_scores[lo:hi].reshape(-1, w),
            prep.run_items[lo:hi].reshape(-1, w),
            length,
        )
    cols = np.arange(w)
    valid = cols[None, :] < length[:, None]
    rows = np.where(valid, start[:, None] + cols[None, :], 0)
    scores = np.where(valid, prep.run_scores[rows], -np.inf)
    items = np.where(valid, prep.run_items[rows], PAD_KEY + cols[None, :])
    return scores, items, length


def _tie_keys(items: np.ndarray, tie_break: str) -> np.ndarray:
    if tie_break == "item_asc":
        return items
    if tie_break == "item_desc":
        return -items
    return np.broadcast_to(np.arange(items.shape[1], dtype=np.int64), items.shape)


def _check_duplicates(
    prep: Prepared, users: np.ndarray, items: np.ndarray, length: np.ndarray
) -> None:
    """Raise if a user's list holds an item twice (one row sort; 32-bit keys when they fit)."""
    w = items.shape[1]
    keys = items - prep.item_offset
    if prep.span + w < 1 << 32:
        keys = keys.astype(np.uint32)
        if (length < w).any():
            cols = np.arange(w, dtype=np.uint32)
            keys = np.where(cols[None, :] < length[:, None], keys, np.uint32(prep.span) + cols)
    ordered = np.sort(keys, axis=1)
    dup = ordered[:, 1:] == ordered[:, :-1]
    if dup.any():
        row, col = np.argwhere(dup)[0]
        item = int(ordered[row, col]) + prep.item_offset
        raise ValueError(
            f"run has duplicate (user, item) rows: user {_plain(prep.users[users[row]])!r}, item "
            f"{_decode(prep.item_values, item)!r} appears more than once"
        )


def batches(
    prep: Prepared,
    options: Options,
    *,
    depth: int | None,
    need_rprec: bool = False,
    need_candidates: bool = False,
    budget: int = 1 << 23,
) -> Iterator[Batch]:
    """Judged batches covering every evaluated user once (users with no list come last).

    ``depth`` is the largest cutoff any metric needs (``None`` = whole list); ``need_rprec``
    widens it to each user's ``|T_u|``; ``need_candidates`` also returns every scored candidate
    with its relevance (for AUC and rating metrics).
    """
    if prep.depth is not None and (
        depth is None
        or depth > prep.depth
        or need_rprec
        or need_candidates
        or options.ndcg_ties != "ordered"
    ):
        raise ValueError(f"these inputs were prepared for top-{prep.depth} lists only")
    for groups in _blocks(prep.group_user, prep.group_start, budget):
        users = prep.group_user[groups]
        scores, items, length = _pad(prep, groups)
        if prep.depth is None:  # cut lists were checked whole while preparing
            _check_duplicates(prep, users, items, length)
        width = scores.shape[1]
        k = width if depth is None else min(depth, width)
        if need_rprec:
            k = max(k, min(width, int(prep.n_rel[users].max())))
        cols = top_k(scores, _tie_keys(items, options.tie_break), k)
        top_items = np.take_along_axis(items, cols, axis=1)
        n_ret = np.minimum(length, k)
        valid = np.arange(k)[None, :] < n_ret[:, None]
        rel = np.where(valid, np.nan_to_num(_lookup(prep, users, top_items), nan=0.0), 0.0)
        labels = _lookup(prep, users, items) if need_candidates else None
        judged = _judged(prep, users, rel, valid, n_ret, options)
        if options.ndcg_ties == "average":
            every = labels if labels is not None else _lookup(prep, users, items)
            every = np.nan_to_num(every, nan=0.0)
            gains = gain_of(every, options.gain, options.relevance_threshold)
            tied = _tie_average_gains(scores, gains, length, cols)
            judged = replace(judged, gains=np.where(valid, tied, 0.0))
        yield Batch(
            users=users,
            judged=judged,
            top_items=top_items,
            scores=scores if need_candidates else None,
            labels=labels,
        )
    listed = np.zeros(len(prep.users), dtype=bool)
    listed[prep.group_user[prep.group_user >= 0]] = True
    missing = np.flatnonzero(~listed)
    if missing.size:
        empty = np.zeros((len(missing), 0))
        yield Batch(
            users=missing,
            judged=_judged(
                prep, missing, empty, empty.astype(bool), np.zeros(len(missing), np.int64), options
            ),
            top_items=np.zeros((len(missing), 0), np.int64),
            scores=empty if need_candidates else None,
            labels=empty if need_candidates else None,
        )


def _tie_average_gains(
    scores: np.ndarray, gains: np.ndarray, length: np.ndarray, cols: np.ndarray
) -> np.ndarray:
    """Gain at each selected position replaced by the mean gain of every item of the user's list
    with the same score (torchmetrics' and scikit-learn's tie-averaged DCG).

    ``scores``/``gains`` are ``[b, w]`` over every candidate (first ``length`` of each row valid),
    ``cols`` the selected columns ``[b, K]``.
    """
    n, w = scores.shape
    valid = np.arange(w)[None, :] < length[:, None]
    row = np.broadcast_to(np.arange(n)[:, None], (n, w))[valid]
    score = scores[valid]
    order = np.lexsort((score, row))
    r, s = row[order], score[order]
    start = np.ones(len(order), bool)
    start[1:] = (r[1:] != r[:-1]) | (s[1:] != s[:-1])
    group = np.cumsum(start) - 1
    mean = np.bincount(group, weights=gains[valid][order]) / np.bincount(group)
    cell_group = np.zeros((n, w), np.int64)
    flat = np.empty(len(order), np.int64)
    flat[order] = group
    cell_group[valid] = flat
    if mean.size == 0:
        return np.zeros(cols.shape)
    return mean[np.take_along_axis(cell_group, cols, axis=1)]


def _judged(
    prep: Prepared,
    users: np.ndarray,
    rel: np.ndarray,
    valid: np.ndarray,
    n_ret: np.ndarray,
    options: Options,
) -> Judged:
    local, rank, gain = _ideal(prep, users)
    return Judged(
        hits=valid & (rel >= options.relevance_threshold),
        gains=np.where(valid, gain_of(rel, options.gain, options.relevance_threshold), 0.0),
        n_ret=n_ret,
        n_rel=prep.n_rel[users],
        ideal_user=local,
        ideal_rank=rank,
        ideal_gain=gain,
    )
