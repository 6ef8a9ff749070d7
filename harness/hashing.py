"""Counter-based hashing shared by the in-process and Spark engines (random split, sampled
candidates): a draw is a pure function of (seed, ids, counter), never of row order or of a
random generator's state, so both engines compute the same draws, row by row, vectorized.

Ids hash by value: integers through the splitmix64 finalizer, text through
``pandas.util.hash_array`` (SipHash with its fixed default key) and then splitmix64, so a value
hashes the same in any column dtype (object, ``str``, Arrow) and in any batch. Spark runs these
functions in its Python workers (``pandas_udf`` / ``mapInPandas``), so its draws are these.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["hash_ids", "mix", "uniform01"]

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


def uniform01(h: np.ndarray) -> np.ndarray:
    """Floats in [0, 1) from uint64 hashes (the top 53 bits)."""
    return (np.asarray(h, dtype=np.uint64) >> np.uint64(11)).astype(np.float64) * 2.0**-53
