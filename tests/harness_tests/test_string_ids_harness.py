"""String ids through loading and splitting: every way a text id column can arrive (Parquet
text, Parquet dictionary, CSV, object, ``str``, categorical) gives the same frame, the same
dataset digest and the same split rows and statistics as integer ids mapped one to one.

The reference is the integer-id run of the same events: the text ids are ``u0042``/``i0007``
(zero-padded, so text order is integer order and ties by id break the same way).
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness import hashing
from harness.data import (
    _dictionary_categorical,
    _dictionary_stored,
    _parquet_schema,
    load_interactions,
    load_interactions_coded,
    validate_interactions,
)
from harness.datasets import load_dataset
from harness.errors import DataError
from harness.split import data_hash, load_or_make_split, make_split

N_USERS, N_ITEMS = 60, 25
METHODS = {
    "global_time": {"cut": 0.7, "valid_cut": 0.5, "min_user_interactions": 2},
    "leave_one_out": {"valid": True},
    "user_time": {"test_ratio": 0.3, "kcore": 2},
    "random": {"test_ratio": 0.25, "seed": 3, "unseen": "keep"},
}


def _int_events() -> pd.DataFrame:
    """Integer-id events with timestamp ties (so tie order by item id matters)."""
    rng = np.random.default_rng(7)
    n = 900
    frame = pd.DataFrame(
        {
            "user": rng.integers(0, N_USERS, n),
            "item": rng.integers(0, N_ITEMS, n),
            "timestamp": 1_700_000_000 + rng.integers(0, 300, n) * 60,
            "rating": rng.integers(1, 6, n).astype(float),
        }
    )
    return frame.drop_duplicates(["user", "item"]).reset_index(drop=True)


def _user_text(ids: np.ndarray) -> np.ndarray:
    return np.array([f"u{v:04d}" for v in ids], dtype=object)


def _item_text(ids: np.ndarray) -> np.ndarray:
    return np.array([f"i{v:04d}" for v in ids], dtype=object)


def _as_text(frame: pd.DataFrame) -> pd.DataFrame:
    """The integer-id frame with its ids written as text (one to one, order-preserving)."""
    return frame.assign(
        user=pd.array(_user_text(frame["user"].to_numpy()), dtype="str"),
        item=pd.array(_item_text(frame["item"].to_numpy()), dtype="str"),
    )


def _categorical(values: pd.Series) -> pd.Categorical:
    """A categorical of ``values`` whose categories are in reverse order, plus an unused one."""
    categories = [*sorted(pd.unique(values.astype(object)), reverse=True), "zzz-unused"]
    return pd.Categorical(values.astype(object), categories=categories)


def _variants(ints: pd.DataFrame, tmp_path: Path) -> dict[str, pd.DataFrame]:
    """The same text-id events loaded every way they can come."""
    text = _as_text(ints)
    out: dict[str, pd.DataFrame] = {}
    # Parquet text pages of dictionary indices (read as a dictionary) and of plain text
    many = pd.concat([text] * 8, ignore_index=True)  # enough rows to repeat every id
    many.to_parquet(tmp_path / "indices.parquet")
    schema = _parquet_schema(tmp_path / "indices.parquet")
    assert _dictionary_stored(tmp_path / "indices.parquet", schema, "user")
    out["parquet indices"] = load_interactions(
        tmp_path / "indices.parquet", duplicates="keep_first"
    )
    text.to_parquet(tmp_path / "text.parquet", use_dictionary=False)
    assert not _dictionary_stored(tmp_path / "text.parquet", schema, "user")
    out["parquet text"] = load_interactions(tmp_path / "text.parquet")
    cat = text.assign(user=_categorical(text["user"]), item=_categorical(text["item"]))
    cat.to_parquet(tmp_path / "dictionary.parquet")
    out["parquet dictionary"] = load_interactions(tmp_path / "dictionary.parquet")
    # spaces around ids are removed: " u0001" and "u0001" are one id
    spaced = text.assign(user=text["user"].where(text.index % 3 != 0, " " + text["user"] + " "))
    spaced.to_csv(tmp_path / "text.csv", index=False)
    out["csv, spaces"] = load_interactions(tmp_path / "text.csv")
    out["object"] = validate_interactions(
        text.astype({"user": object, "item": object}), source="frame"
    )
    out["str"] = validate_interactions(text, source="frame")
    out["categorical"] = validate_interactions(cat, source="frame")
    return out


def test_text_ids_load_to_the_same_frame_every_way(tmp_path: Path) -> None:
    ints = _int_events()
    want = _as_text(validate_interactions(ints, source="frame"))
    for name, got in _variants(ints, tmp_path).items():
        assert str(got["user"].dtype) == "str", name
        pd.testing.assert_frame_equal(got, want, obj=name)


def test_digest_from_the_loader_codes_is_the_plain_digest(tmp_path: Path) -> None:
    text = _as_text(_int_events())
    text.to_parquet(tmp_path / "e.parquet")
    frame, coded = load_interactions_coded(tmp_path / "e.parquet")
    assert set(coded) == {"user", "item"}
    for name, codes in coded.items():  # the codes rebuild the column
        assert codes.uniques.is_unique
        np.testing.assert_array_equal(
            codes.uniques.to_numpy(dtype=object)[codes.codes], frame[name].to_numpy(dtype=object)
        )
    plain = data_hash(frame)
    assert data_hash(frame, coded) == plain
    assert load_dataset({"kind": "file", "path": str(tmp_path / "e.parquet")}).sha256 == plain
    text.to_csv(tmp_path / "e.csv", index=False)  # CSV text: codes from factorizing the column
    from_csv = load_dataset({"kind": "file", "path": str(tmp_path / "e.csv")})
    assert from_csv.coded is not None and from_csv.sha256 == data_hash(from_csv.frame) == plain
    freed = from_csv.without_codes()  # after the split: the codes go, the digest stays
    assert freed.coded is None and freed.digest == plain and freed.frame is from_csv.frame
    # a duplicates policy that removes rows: the codes of the rows it keeps
    dup = pd.concat([text.iloc[:3], text, text.iloc[5:9]], ignore_index=True)
    dup.to_parquet(tmp_path / "dup.parquet")
    for policy in ("keep_first", "keep_last"):
        frame, coded = load_interactions_coded(tmp_path / "dup.parquet", duplicates=policy)
        assert len(frame) == len(text) and set(coded) == {"user", "item"}
        for name, codes in coded.items():
            assert codes.uniques.is_unique
            assert len(np.unique(codes.codes)) == len(codes.uniques)  # every id still used
            np.testing.assert_array_equal(
                codes.uniques.to_numpy(dtype=object)[codes.codes],
                frame[name].to_numpy(dtype=object),
            )
        assert data_hash(frame, coded) == data_hash(frame)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_text_ids_split_into_the_rows_of_integer_ids(method: str, tmp_path: Path) -> None:
    ints = validate_interactions(_int_events(), source="frame")
    variants = _variants(_int_events(), tmp_path)
    # random draws hash ids by value (text hashes differ from integer ones): its reference is
    # the split of a plain Python-object text column
    ref = (
        make_split(ints, method, **METHODS[method])
        if method != "random"
        else make_split(variants.pop("object"), method, **METHODS[method])
    )
    assert len(ref.test) and len(ref.train)
    for name, frame in variants.items():
        got = make_split(frame, method, **METHODS[method])
        assert got.stats == ref.stats, (name, method)
        for part in ("train", "test", "valid"):
            a, b = getattr(ref, part), getattr(got, part)
            if a is None:
                assert b is None
                continue
            want = _as_text(a) if method != "random" else a
            pd.testing.assert_frame_equal(b, want, obj=f"{name} {method} {part}")


def test_hash_ids_is_the_same_for_every_text_dtype() -> None:
    values = pd.Series(["b", "a", "c", "a", "b"], dtype=object)
    want = hashing.hash_ids(values.to_numpy())
    for dtype in ("str", "category", object):
        np.testing.assert_array_equal(hashing.hash_ids(values.astype(dtype)), want, str(dtype))
    cat = pd.Series(_categorical(values))
    np.testing.assert_array_equal(hashing.hash_ids(cat), want)
    # integer ids hash by value whatever holds them
    ints = pd.Series([5, 3, 5, 9])
    np.testing.assert_array_equal(
        hashing.hash_ids(ints.astype("category")), hashing.hash_ids(ints.to_numpy())
    )


def test_near_duplicate_text_ids_are_named_in_row_order_from_every_source(
    tmp_path: Path,
) -> None:
    rows = pd.DataFrame(
        {"user": ["abc", "70", "70.0", "abc"], "item": [1, 2, 3, 4], "timestamp": [1, 2, 3, 4]}
    )
    want = "'70' at row 1 and '70.0' at row 2"
    # categories in another order than the rows: the message still follows the rows
    cat = rows.assign(user=pd.Categorical(rows["user"], categories=["70.0", "abc", "70"]))
    for frame in (rows, cat):
        with pytest.raises(DataError, match=want):
            validate_interactions(frame, source="frame")
    rows.to_parquet(tmp_path / "near.parquet")
    with pytest.raises(DataError, match=rf"near\.parquet: column 'user' has ids .*{want}"):
        load_interactions(tmp_path / "near.parquet")


def test_parquet_text_id_errors_name_the_row(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {"user": ["a", "b", None], "item": ["x", "y", "z"], "timestamp": [1, 2, 3]}
    )
    frame.to_parquet(tmp_path / "null.parquet")
    with pytest.raises(DataError, match=r"column 'user' has 1 null id\(s\), e\.g\. null at row 2"):
        load_interactions(tmp_path / "null.parquet")
    dup = pd.DataFrame({"user": ["a", "a"], "item": [" x", "x"], "timestamp": [5, 5]})
    dup.to_parquet(tmp_path / "dup.parquet")
    with pytest.raises(DataError, match=r"2 rows in duplicate events, e\.g\. user='a' item='x'"):
        load_interactions(tmp_path / "dup.parquet")


@pytest.mark.parametrize("pages", ["indices", "plain", "repeats"])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_split_from_the_loader_codes_is_the_plain_split(
    method: str, pages: str, tmp_path: Path
) -> None:
    """``repeats``: the file repeats 7 events, which ``keep_first`` drops (the codes of the
    rows kept then reach the split)."""
    # shuffled rows: the loader's codes are in order of first occurrence, not text order
    ints = _int_events().sample(frac=1.0, random_state=1).reset_index(drop=True)
    text = _as_text(ints)
    path = tmp_path / "e.parquet"
    stored = pd.concat([text, text.iloc[:7]], ignore_index=True) if pages == "repeats" else text
    stored.to_parquet(path, use_dictionary=pages != "plain")
    assert _dictionary_stored(path, _parquet_schema(path), "user") == (pages != "plain")
    spec = {"kind": "file", "path": str(path), "duplicates": "keep_first"}
    dataset = load_dataset(spec)
    assert len(dataset.frame) == len(text)
    assert dataset.coded is not None and set(dataset.coded) == {"user", "item"}
    got = load_or_make_split(
        dataset.frame,
        method,
        METHODS[method],
        tmp_path / "splits",
        digest=dataset.sha256,
        coded=dataset.coded,
    )
    plain = validate_interactions(text.astype({"user": object, "item": object}), source="f")
    want = make_split(plain, method, **METHODS[method])
    assert got.stats == want.stats
    for part in ("train", "test", "valid"):
        a, b = getattr(want, part), getattr(got, part)
        if a is None:
            assert b is None
        else:
            pd.testing.assert_frame_equal(b, a, obj=f"{method} {part}")
    if method != "random":  # and the integer-id split of the same events, row for row
        ref = make_split(validate_interactions(ints, source="f"), method, **METHODS[method])
        assert got.stats == ref.stats
        pd.testing.assert_frame_equal(got.test, _as_text(ref.test))


@pytest.mark.slow
def test_whole_run_with_text_ids_gives_the_integer_id_tables(harness_cli, tmp_path: Path) -> None:
    """``python -m harness dataset=file``: Parquet text ids and integer ids give the same
    summary, per-user metrics and top-k lists (ids mapped back one to one, same tie order)."""
    ints = validate_interactions(_int_events(), source="frame")
    ints.to_parquet(tmp_path / "int.parquet")
    _as_text(ints).to_parquet(tmp_path / "str.parquet")

    def run(ids: str) -> Path:
        cwd = tmp_path / ids
        proc = harness_cli.run(
            cwd,
            "dataset=file",
            f"dataset.path={tmp_path / f'{ids}.parquet'}",
            "model=[popularity,item_knn]",
            "tracking=none",
            "progress=false",
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        found = re.findall(r"^results: (.+)$", proc.stdout, flags=re.MULTILINE)
        return cwd / found[0].strip()

    with ThreadPoolExecutor(max_workers=2) as pool:
        as_int, as_str = pool.map(run, ("int", "str"))
    pd.testing.assert_frame_equal(
        pd.read_csv(as_str / "summary.csv"), pd.read_csv(as_int / "summary.csv")
    )
    to_user = {f"u{v:04d}": v for v in range(N_USERS)}
    to_item = {f"i{v:04d}": v for v in range(N_ITEMS)}
    for model in ("popularity", "item_knn"):
        for table in ("per_user.parquet", "topk.parquet"):
            want = pd.read_parquet(as_int / model / table).reset_index()  # per_user: by user
            got = pd.read_parquet(as_str / model / table).reset_index()
            assert str(got["user"].dtype) == "str"
            got["user"] = got["user"].map(to_user).astype(want["user"].dtype)
            if "item" in got.columns:
                got["item"] = got["item"].map(to_item).astype(want["item"].dtype)
            pd.testing.assert_frame_equal(got, want, check_exact=True, obj=f"{model} {table}")


def test_dictionary_columns_become_the_categorical_pyarrow_makes(tmp_path: Path) -> None:
    # row groups with their own dictionaries (some values in several), each read in several
    # batches that share it, and nulls: the values row by row are pyarrow's own conversion's
    rng = np.random.default_rng(5)
    names = np.array([f"id{i:03d}" for i in range(300)], dtype=object)
    values = names[np.concatenate([rng.integers(0, 200, 5000), rng.integers(100, 300, 5000)])]
    values[rng.random(values.size) < 0.01] = None
    pq.write_table(pa.table({"id": values}), tmp_path / "d.parquet", row_group_size=2500)
    file = pq.ParquetFile(tmp_path / "d.parquet", read_dictionary=["id"])
    column = pa.Table.from_batches(list(file.iter_batches(batch_size=1000))).column("id")
    assert column.num_chunks > 4  # several batches per row group, several dictionaries
    got = _dictionary_categorical(column)
    want = column.to_pandas()
    assert got.categories.is_unique
    pd.testing.assert_series_equal(
        pd.Series(got).astype(object), want.astype(object), check_names=False
    )
    assert np.array_equal(got.isna(), pd.isna(values))
