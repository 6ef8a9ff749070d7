"""Counter-based hashing shared by the in-process and Spark engines (random split, sampled
candidates): a draw is a pure function of (seed, ids, counter), never of row order or of a
random generator's state, so both engines compute the same draws, row by row, vectorized.

Ids hash by value: integers through the splitmix64 finalizer, text through
``pandas.util.hash_array`` (SipHash with its fixed default key) and then splitmix64, so a value
hashes the same in any column dtype (object, ``str``, Arrow) and in any batch. Spark runs these
functions in its Python workers (``pandas_udf`` / ``mapInPandas``), so its draws are these.

The content hash (:func:`content_hash`) names a frame by its rows as a multiset: each row hashes
by its values (ids as :func:`hash_ids`, numbers by value, whatever the dtype), the row hashes are
summed mod 2**64, so any row order and any split into batches (Spark partitions: see
:func:`content_partials`) give the same digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd

__all__ = [
    "CONTENT_VERSION",
    "column_hash",
    "column_kind",
    "column_kinds",
    "combine_partials",
    "content_digest",
    "content_hash",
    "content_partials",
    "content_sums",
    "hash_ids",
    "mix",
    "row_hashes",
    "uniform01",
]

CONTENT_VERSION = 1  # the row hash's definition: a new one changes every digest

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _splitmix(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer of a uint64 array (a bijection that mixes every bit)."""
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def hash_ids(values: pd.Series | np.ndarray) -> np.ndarray:
    """uint64 hash of each id by value: integer ids by their int64 value, others as text."""
    if isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
        # each category once, then its codes: the same hashes as the values themselves
        categories = hash_ids(values.cat.categories.to_numpy())
        return categories[values.cat.codes.to_numpy()]
    arr = values.to_numpy() if isinstance(values, pd.Series) else np.asarray(values)
    if arr.dtype.kind in "iub":
        return _splitmix(arr.astype(np.int64).view(np.uint64))
    codes, uniques = pd.factorize(pd.Series(arr, copy=False), sort=False)
    text = np.asarray(uniques, dtype=object)
    hashed = _splitmix(pd.util.hash_array(text, categorize=False))
    return hashed[codes]


def mix(seed: int, *parts: np.ndarray) -> np.ndarray:
    """uint64 hash of ``seed`` and the columns ``parts`` (int64 or uint64 arrays, one length)."""
    with np.errstate(over="ignore"):
        h = _splitmix(np.full(1, np.int64(seed)).view(np.uint64) + _GOLDEN)
        for p in parts:
            arr = np.asarray(p)
            word = arr.view(np.uint64) if arr.dtype == np.int64 else arr.astype(np.uint64)
            h = _splitmix((h ^ word) + _GOLDEN)
    return h


def time_words(ts: np.ndarray) -> np.ndarray:
    """int64 words of event times for :func:`mix`: int64 seconds as they are, float64
    (sub-second) seconds by their bits, so that times within one second hash apart."""
    ts = np.asarray(ts)
    if ts.dtype.kind == "f":
        return (ts + 0.0).view(np.int64)  # + 0.0: -0.0 as 0.0
    return ts.astype(np.int64, copy=False)


def uniform01(h: np.ndarray) -> np.ndarray:
    """Floats in [0, 1) from uint64 hashes (the top 53 bits)."""
    return (np.asarray(h, dtype=np.uint64) >> np.uint64(11)).astype(np.float64) * 2.0**-53


# ---------------------------------------------------------------------------- content hash

_CONTENT_SEED = 0x636F6E74656E74  # the row hash's seed ("content")
_SECOND = np.uint64(0xD6E8FEB86659FD93)  # the second sum hashes each row hash again with it
_NA = np.uint64(0x6E756C6C6E756C6C)  # a missing value's hash (categorical code -1)


def column_kind(values: pd.Series) -> str:
    """``int``, ``float``, ``time`` or ``text``: what a column holds, whatever its dtype (a
    categorical is the kind of its categories; integers with missing values are text)."""
    dtype = values.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        return column_kind(pd.Series(dtype.categories))
    if pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_integer_dtype(dtype):
        return "int" if isinstance(dtype, np.dtype) or not values.hasnans else "text"
    if pd.api.types.is_float_dtype(dtype):
        return "float"
    if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
        return "time"
    return "text"


def column_kinds(frame: pd.DataFrame) -> list[list[str]]:
    """``[name, kind]`` of each column, by name: the content hash's header."""
    return sorted([str(c), column_kind(frame[c])] for c in frame.columns)


def column_hash(values: pd.Series) -> np.ndarray:
    """A uint64 word per value, equal for equal values of one kind whatever the dtype: integers
    as their int64 bits (``int32`` and ``int64`` alike), floats as their float64 bits (``-0.0``
    as ``0.0``, one NaN), times as int64 nanoseconds, anything else as the SipHash of its text
    (``object``, ``str``, Arrow and categorical text alike). :func:`row_hashes` mixes them."""
    dtype = values.dtype
    if isinstance(dtype, pd.CategoricalDtype):  # each category once, then its codes
        categories = column_hash(pd.Series(dtype.categories))
        codes = values.cat.codes.to_numpy()
        if not len(categories):
            return np.full(len(codes), _NA)
        return np.where(codes < 0, _NA, categories[np.maximum(codes, 0)])
    kind = column_kind(values)
    if kind == "int":
        return values.to_numpy(dtype=np.int64).view(np.uint64)
    if kind == "float":
        arr = values.to_numpy(dtype=np.float64, na_value=np.nan) + 0.0  # -0.0 + 0.0 is 0.0
        arr[np.isnan(arr)] = np.nan
        return arr.view(np.uint64)
    if kind == "time":
        if isinstance(dtype, pd.DatetimeTZDtype):
            values = values.dt.tz_convert("UTC").dt.tz_localize(None)
        unit = "datetime64[ns]" if pd.api.types.is_datetime64_any_dtype(values.dtype) else None
        ns = values.astype(unit or "timedelta64[ns]").to_numpy()
        return ns.view(np.int64).view(np.uint64)
    # text by value: pandas hashes each distinct string once (SipHash, as hash_ids does)
    return pd.util.hash_pandas_object(values, index=False, categorize=True).to_numpy()


def row_hashes(frame: pd.DataFrame) -> np.ndarray:
    """uint64 hash of each row: its columns' :func:`column_hash` words folded in column-name
    order as :func:`mix` folds its parts, so a row hashes the same in any frame, batch or order."""
    h = np.full(len(frame), _splitmix(np.full(1, _CONTENT_SEED, np.uint64) + _GOLDEN)[0])
    tmp = np.empty_like(h)
    by_name = {str(c): c for c in frame.columns}
    with np.errstate(over="ignore"):
        for name, _ in column_kinds(frame):
            h ^= column_hash(frame[by_name[name]])
            h += _GOLDEN
            _splitmix_into(h, tmp)
    return h


def _splitmix_into(z: np.ndarray, tmp: np.ndarray) -> None:
    """:func:`_splitmix` of a uint64 array in place (``tmp``: scratch of its shape)."""
    with np.errstate(over="ignore"):
        for shift, factor in ((30, _M1), (27, _M2)):
            np.right_shift(z, np.uint64(shift), out=tmp)
            z ^= tmp
            z *= factor
        np.right_shift(z, np.uint64(31), out=tmp)
        z ^= tmp


def content_sums(frame: pd.DataFrame) -> tuple[int, int, int]:
    """The rows' count and two sums mod 2**64 of their hashes (:func:`row_hashes`, and those
    hashed again): order-free, and the sums of a frame's batches add up to the frame's."""
    h = row_hashes(frame)
    s1 = int(h.sum(dtype=np.uint64))
    h ^= _SECOND
    _splitmix_into(h, np.empty_like(h))
    s2 = int(h.sum(dtype=np.uint64))
    return len(frame), s1, s2


def content_digest(kinds: Sequence[Sequence[str]], rows: int, s1: int, s2: int) -> str:
    """Hex sha256 of a content hash's parts: the columns' names and kinds, rows, both sums."""
    payload = {
        "content": CONTENT_VERSION,
        "columns": [list(k) for k in kinds],
        "rows": int(rows),
        "sums": [int(s1) % 2**64, int(s2) % 2**64],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def content_hash(frame: pd.DataFrame) -> str:
    """Hex digest of a frame's rows as a multiset (not their order, not the index), with its
    column names and kinds: what both engines log as ``dataset.sha256``."""
    return content_digest(column_kinds(frame), *content_sums(frame))


def content_partials(batches: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """``mapInPandas`` body (schema ``rows long, s1 long, s2 long, kinds string``): each
    non-empty batch's :func:`content_sums` (sums as int64 bit patterns) and column kinds."""
    for batch in batches:
        if len(batch):
            rows, s1, s2 = content_sums(batch)
            yield pd.DataFrame(
                {
                    "rows": [rows],
                    "s1": np.array([s1], np.uint64).view(np.int64),
                    "s2": np.array([s2], np.uint64).view(np.int64),
                    "kinds": [json.dumps(column_kinds(batch))],
                }
            )


def combine_partials(partials: Iterable[tuple[int, int, int, str]]) -> str:
    """:func:`content_digest` of the batches' ``(rows, s1, s2, kinds)`` from
    :func:`content_partials`: the sums add mod 2**64; every batch must have the same kinds."""
    rows = s1 = s2 = 0
    kinds: set[str] = set()
    for n, a, b, k in partials:
        rows, s1, s2 = rows + int(n), (s1 + int(a)) % 2**64, (s2 + int(b)) % 2**64
        kinds.add(k)
    if len(kinds) != 1:
        raise ValueError(f"batches with different column kinds: {sorted(kinds)}")
    return content_digest(json.loads(kinds.pop()), rows, s1, s2)
