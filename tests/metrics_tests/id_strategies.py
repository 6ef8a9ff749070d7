"""Hypothesis data shared by the id-kind tests: text ids, (qrels, run) rows, and id columns of
every kind pandas can hold them in."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import strategies as st

#: every kind of id column: pandas 3 ``str`` (Arrow-backed), Arrow ``large_string``, Python
#: objects, Python-backed ``string``, categoricals with categories sorted or shuffled, Arrow
#: dictionaries (two chunks, each with its own dictionary; or one dictionary holding every value
#: twice, in reverse order, as Arrow allows and a Categorical does not)
KINDS = [
    "str",
    "arrow",
    "object",
    "python",
    "category",
    "category_shuffled",
    "dictionary",
    "dictionary_repeats",
]

#: ids: digit strings (string order is not numeric order), other text with non-ASCII and
#: astral characters (no lone surrogates: they have no UTF-8 form), the empty string
TEXT = st.one_of(
    st.text(alphabet="0123456789", max_size=3),
    st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=3),
    st.sampled_from(["", "é", "e\u0301", "中", "😀", "Z", "a", "a\x00"]),
)

#: same length and last 8 bytes: their fingerprints collide, only an exact check tells them apart
TWINS = ["xABCDEFGH", "yABCDEFGH", "é_ABCDEFGH", "zz_ABCDEFGH", "ABCDEFGH", "\x00ABCDEFGH"]

#: longer ids too: fingerprint collisions and UUIDs (36 bytes)
LONG_IDS = st.one_of(TEXT, st.sampled_from(TWINS), st.uuids().map(str))


@st.composite
def tables(
    draw,
    ids: st.SearchStrategy[str] = TEXT,
    max_items: int = 12,
    max_users: int = 6,
    duplicate: bool = False,
) -> tuple[list[tuple], list[tuple]]:
    """Rows of qrels (user, item, relevance) and run (user, item, score): scores in {0, 1, 2}
    (many ties); the run grouped by user, interleaved, or with a user's rows in two blocks apart;
    with ``duplicate``, one run row repeated (any score) at any place."""
    items = draw(st.lists(ids, min_size=1, max_size=max_items, unique=True))
    users = draw(st.lists(ids, min_size=1, max_size=max_users, unique=True))
    pick = st.lists(st.sampled_from(items), unique=True, max_size=len(items))
    qrels: list[tuple] = []
    run: list[tuple] = []
    for u in users:
        in_truth, in_run = draw(st.sampled_from([(True, True), (True, False), (False, True)]))
        if in_truth:
            qrels += [(u, i, draw(st.integers(0, 3))) for i in draw(pick)]
        if in_run:
            run += [(u, i, float(draw(st.integers(0, 2)))) for i in draw(pick)]
    if not qrels:
        qrels.append((users[0], items[0], 1))
    if not run:
        run.append((users[0], items[0], 1.0))
    if duplicate:
        u, i, _ = draw(st.sampled_from(run))
        run.insert(draw(st.integers(0, len(run))), (u, i, float(draw(st.integers(-1, 3)))))
    layout = draw(st.sampled_from(["grouped", "interleaved", "split"]))
    if layout == "interleaved":  # users interleaved: the run is not grouped
        run = draw(st.permutations(run))
    elif layout == "split":  # rotated: the user cut at the seam sits in two blocks apart
        at = draw(st.integers(0, len(run)))
        run = run[at:] + run[:at]
    return qrels, run


def column(values: list[str], kind: str, seed: int = 0) -> pd.Series:
    """``values`` as an id column of ``kind`` (one of :data:`KINDS`)."""
    if kind == "str":
        return pd.Series(values, dtype="str")
    if kind == "arrow":
        return pd.Series(
            pa.array(values, pa.large_string()), dtype=pd.ArrowDtype(pa.large_string())
        )
    if kind == "object":
        return pd.Series(values, dtype=object)
    if kind == "python":
        return pd.Series(values, dtype="string[python]")
    if kind == "dictionary":
        half = len(values) // 2
        parts = [
            pa.array(p, pa.string()).dictionary_encode() for p in (values[:half], values[half:])
        ]
        return pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array(parts)))
    if kind == "dictionary_repeats":
        distinct = sorted(set(values), reverse=True)
        at = {v: n for n, v in enumerate(distinct)}
        # row r takes the value's first or second copy, alternately
        codes = [at[v] + len(distinct) * (r % 2) for r, v in enumerate(values)]
        dictionary = pa.array(distinct + distinct, pa.string())
        # int8 indices, as pandas writes a small categorical to Parquet
        array = pa.DictionaryArray.from_arrays(pa.array(codes, pa.int8()), dictionary)
        return pd.Series(pd.arrays.ArrowExtensionArray(array))
    categories = sorted(set(values))
    if kind == "category_shuffled":  # category order is not id order
        categories = list(np.random.default_rng(seed).permutation(np.array(categories, object)))
    return pd.Series(pd.Categorical(values, categories=categories))


def frame(rows: list[tuple], value: str, kind: str) -> pd.DataFrame:
    """A qrels (``value="relevance"``) or run (``"score"``) DataFrame with ids of ``kind``."""
    users, items, values = (list(c) for c in zip(*rows, strict=True))
    return pd.DataFrame(
        {"user": column(users, kind, 1), "item": column(items, kind, 2), value: values}
    )


def as_ints(rows: list[tuple], rank: dict[str, int]) -> list[tuple]:
    """Rows with every id replaced by its rank in string order."""
    return [(rank[u], rank[i], v) for u, i, v in rows]


def string_ranks(*tables: list[tuple]) -> dict[str, int]:
    """Every id of ``tables`` mapped to its rank in Python's string order (code points)."""
    ids = sorted({x for rows in tables for r in rows for x in r[:2]})
    return {v: n for n, v in enumerate(ids)}
