"""The dataset content hash (``dataset.sha256``) and the split key: the same for the same rows in
any order, different for different rows, and the hash's definition rebuilt by hand.

The Spark engine's digest of the same file: tests/spark_tests/test_spark_content_hash.py.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.datasets import Dataset, load_dataset
from harness.split import METHODS, data_hash, load_or_make_split, make_split, split_cache_key
from harness.synthetic import generate

# every method with a validation part and a filter or unseen policy that changes rows
CASES = {
    "global_time": {"cut": 0.8, "valid_cut": 0.7, "kcore": 3},
    "leave_one_out": {"valid": True, "min_user_interactions": 5},
    "user_time": {"test_ratio": 0.3, "valid_ratio": 0.1, "unseen": "keep"},
    "random": {"seed": 3, "valid_ratio": 0.1, "min_item_interactions": 8},
}


def events() -> pd.DataFrame:
    return generate(n_users=60, n_items=40, n_events=900, seed=7)


def shuffled(df: pd.DataFrame, seed: int, *, keep_index: bool = False) -> pd.DataFrame:
    out = df.iloc[np.random.default_rng(seed).permutation(len(df))]
    return out if keep_index else out.reset_index(drop=True)


def rows(part: pd.DataFrame | None) -> list[tuple] | None:
    """A part's rows as a sorted list of value tuples (a multiset: order and index ignored)."""
    if part is None:
        return None
    cols = sorted(part.columns)
    return sorted(map(tuple, part[cols].astype(object).to_numpy().tolist()))


def same_rows(a: object, b: object) -> bool:
    return all(rows(getattr(a, p)) == rows(getattr(b, p)) for p in ("train", "test", "valid"))


# ------------------------------------------------------------------------ order and content


@pytest.mark.parametrize("method", sorted(METHODS))
def test_shuffled_rows_same_digest_key_and_split(method: str) -> None:
    """Without repeated events every method picks the same rows from a shuffled input, so the
    digest and the split key may ignore order; both do."""
    df = events()
    assert set(CASES) == set(METHODS)
    params = CASES[method]
    ref = make_split(df, method, **params)
    for seed in range(3):
        for keep_index in (False, True):
            other = shuffled(df, seed, keep_index=keep_index)
            assert rows(other) == rows(df) and not other[["user", "item"]].equals(df)
            assert data_hash(other) == data_hash(df)
            assert split_cache_key(other, method, params) == split_cache_key(df, method, params)
            assert same_rows(make_split(other, method, **params), ref)


def test_changed_added_or_moved_values_change_the_digest() -> None:
    df = events()
    digest = data_hash(df)
    changed = df.copy()
    changed.loc[5, "rating"] = changed.loc[5, "rating"] % 5 + 1
    later = df.copy()
    later.loc[5, "timestamp"] += 1
    added = pd.concat([df, df.iloc[[5]]], ignore_index=True)  # a duplicate row: a multiset
    dropped = df.drop(index=5)
    # the same values in each column, paired differently: rows 0 and 1 swap their items
    swapped = df.copy()
    swapped.loc[[0, 1], "item"] = df.loc[[1, 0], "item"].to_numpy()
    assert swapped.loc[0, "item"] != df.loc[0, "item"]
    renamed = df.rename(columns={"rating": "score"})
    others = [changed, later, added, dropped, swapped, renamed, df.drop(columns="rating")]
    digests = [data_hash(f) for f in others]
    assert digest not in digests and len(set(digests)) == len(digests)
    twice = pd.concat([added, df.iloc[[5]]], ignore_index=True)
    assert data_hash(twice) not in (digest, data_hash(added))
    # column order and index are not content
    assert data_hash(df[["rating", "timestamp", "item", "user"]]) == digest
    assert data_hash(df.set_axis(np.arange(len(df)) * 3 + 11)) == digest


def test_text_ids_in_any_dtype_and_differ_from_integer_ids(tmp_path: Path) -> None:
    """Text ids hash by value whatever their dtype; a frame's text "7" is not integer 7, and
    the digest is of the ids as the loader types them (a file's "7" loads as integer 7)."""
    df = events()
    text = df.assign(user="u" + df["user"].astype(str), item="i" + df["item"].astype(str))
    want = data_hash(text.astype({"user": "str", "item": "str"}))
    for dtype in (object, "category"):
        assert data_hash(text.astype({"user": dtype, "item": dtype})) == want
    assert data_hash(shuffled(text.astype({"user": object, "item": "category"}), 1)) == want
    numbers_as_text = df.astype({"item": str}).astype({"item": "str"})
    assert data_hash(numbers_as_text) != data_hash(df)
    assert data_hash(df.astype({"item": np.int32})) == data_hash(df)  # an int is an int
    # the loader's text ids: a Parquet file and the same rows shuffled in a CSV
    text.to_parquet(tmp_path / "t.parquet")
    shuffled(text, 2).to_csv(tmp_path / "t.csv", index=False)
    a = load_dataset({"kind": "file", "path": str(tmp_path / "t.parquet")})
    b = load_dataset({"kind": "file", "path": str(tmp_path / "t.csv")})
    assert a.coded is not None and b.coded is not None  # digests from the loader's codes
    assert a.sha256 == b.sha256 == data_hash(b.frame) == want
    numbers_as_text.to_csv(tmp_path / "n.csv", index=False)
    df.to_parquet(tmp_path / "n.parquet")
    c = load_dataset({"kind": "file", "path": str(tmp_path / "n.csv")})
    d = load_dataset({"kind": "file", "path": str(tmp_path / "n.parquet")})
    assert c.frame["item"].dtype == np.int64 and c.sha256 == d.sha256 == data_hash(df)


# -------------------------------------------------------------------- the definition by hand

M64 = 2**64
GOLDEN = 0x9E3779B97F4A7C15
SEED = 0x636F6E74656E74  # "content"
SECOND = 0xD6E8FEB86659FD93


def splitmix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % M64
    return z ^ (z >> 31)


def word(value: object, kind: str) -> int:
    """One value's 64-bit word, as documented: int64 bits, float64 bits, SipHash of text."""
    if kind == "int":
        return int(value) % M64  # type: ignore[call-overload]
    if kind == "float":
        return int(struct.unpack("<Q", struct.pack("<d", float(value) + 0.0))[0])  # type: ignore[arg-type]
    return int(pd.util.hash_array(np.array([str(value)], dtype=object), categorize=False)[0])


def reference_digest(records: list[dict[str, object]], kinds: dict[str, str]) -> str:
    """The documented combination in plain Python integers, one row at a time: each row's
    words folded by ``splitmix((h ^ word) + golden)`` in column-name order, the sum of the row
    hashes and of their re-hashes mod 2**64, the row count and the columns' names and kinds."""
    s1 = s2 = 0
    for record in records:
        h = splitmix((SEED + GOLDEN) % M64)
        for name in sorted(kinds):
            h = splitmix(((h ^ word(record[name], kinds[name])) + GOLDEN) % M64)
        s1, s2 = (s1 + h) % M64, (s2 + splitmix(h ^ SECOND)) % M64
    payload = {
        "content": 1,
        "columns": [[n, kinds[n]] for n in sorted(kinds)],
        "rows": len(records),
        "sums": [s1, s2],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def test_digest_is_the_documented_combination() -> None:
    records = [
        {"user": "ann", "item": 3, "timestamp": 1_700_000_000, "rating": 4.5},
        {"user": "bob", "item": -2, "timestamp": 1_700_000_060, "rating": -0.0},
        {"user": "ann", "item": 3, "timestamp": 1_700_000_000, "rating": 4.5},  # a repeat
        {"user": "é", "item": 2**40, "timestamp": 0, "rating": 1.0},
    ]
    kinds = {"user": "text", "item": "int", "timestamp": "int", "rating": "float"}
    frame = pd.DataFrame(records).astype({"user": "str"})
    want = reference_digest(records, kinds)
    assert data_hash(frame) == want
    assert data_hash(frame.iloc[::-1]) == want
    ints = [{**r, "user": i % 2} for i, r in enumerate(records)]
    assert data_hash(pd.DataFrame(ints)) == reference_digest(ints, {**kinds, "user": "int"})


# --------------------------------------------- ties that go by input row, and the split cache


def with_repeats(*, differing: bool) -> pd.DataFrame:
    """events() plus a second row for 30 events (same user, item and timestamp): the other
    rating when ``differing``, else the very same row."""
    df = events()
    again = df.iloc[::30].copy()
    if differing:
        again["rating"] = again["rating"] % 5 + 1
    return pd.concat([df, again], ignore_index=True)


def reversed_within_events(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the rows of each repeated event in the opposite order (others unmoved)."""
    key = df[["user", "item", "timestamp"]].astype(str).agg("|".join, axis=1)
    pos = np.arange(len(df))
    out = pos.copy()
    for _, members in pd.Series(pos).groupby(key.to_numpy()):
        out[members.to_numpy()] = members.to_numpy()[::-1]
    return df.iloc[out].reset_index(drop=True)


@pytest.mark.parametrize("method", ["leave_one_out", "user_time"])
def test_ties_by_input_row_stay_in_the_key(method: str) -> None:
    """leave_one_out and user_time order an event's repeated rows by input row (their docs):
    the split changes with that order, and so does the key, while the digest does not; an order
    that keeps each event's rows in place keeps key and split."""
    params = {"valid": True} if method == "leave_one_out" else {"test_ratio": 0.5}
    df = with_repeats(differing=True)
    flipped = reversed_within_events(df)
    assert rows(flipped) == rows(df) and data_hash(flipped) == data_hash(df)
    ref = make_split(df, method, **params)
    assert not same_rows(make_split(flipped, method, **params), ref)  # the order matters
    key = split_cache_key(df, method, params)
    assert split_cache_key(flipped, method, params) != key
    # events moved as wholes, each event's rows in the same order: same split, same key
    first = np.random.default_rng(4).permutation(900)  # each repeat (row >= 900) stays last
    moved = df.iloc[np.r_[first, np.arange(900, len(df))]].reset_index(drop=True)
    assert not moved.equals(df)
    assert same_rows(make_split(moved, method, **params), ref)
    assert split_cache_key(moved, method, params) == key
    # order-free methods on the same data: one key
    for other, p in (("global_time", {"cut": 0.8}), ("random", {"seed": 1})):
        assert same_rows(make_split(flipped, other, **p), make_split(df, other, **p))
        assert split_cache_key(flipped, other, p) == split_cache_key(df, other, p)


@pytest.mark.parametrize("method", ["leave_one_out", "user_time"])
def test_repeats_of_equal_rows_do_not_count(method: str) -> None:
    df = with_repeats(differing=False)
    for seed in range(3):
        other = shuffled(df, seed)
        assert same_rows(make_split(other, method), make_split(df, method))
        assert split_cache_key(other, method, {}) == split_cache_key(df, method, {})


def test_a_shuffled_input_reuses_the_cached_split(tmp_path: Path) -> None:
    df = events()
    first = load_or_make_split(df, "leave_one_out", {}, tmp_path)
    second = load_or_make_split(shuffled(df, 5), "leave_one_out", {}, tmp_path)
    assert len([p for p in tmp_path.iterdir() if not p.name.startswith(".")]) == 1
    assert same_rows(first, second)
    meta = json.loads(next(tmp_path.glob("*/split.json")).read_text())
    assert meta["data_hash"] == Dataset("d", shuffled(df, 6), "d").sha256
