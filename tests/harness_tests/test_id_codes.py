"""Text ids coded once per run: the codes the split notes for its train/test parts
(``harness.data.remember_codes``) are reused by the models, the qrels, the comparison's segments
and the digests, and every one of them gives what it gives on the same ids hashed afresh.

References are independent of the reuse: the same frames copied (new Arrow data, so nothing
noted), as Python objects, as categoricals and as integers (``u0042`` <-> 42, zero-padded so text
order is integer order and ties by id break the same way).
"""

from __future__ import annotations

import gc

import numpy as np
import pandas as pd
import pytest

from harness import data
from harness.compare import CompareSpec, _counts, segment_data
from harness.data import id_codes, known_codes, remember_codes, validate_interactions
from harness.experiment import MetricSuite, qrels_from_test
from harness.models import ImplicitItemCosine, PopularityModel, RandomModel
from harness.split import data_hash, input_distinct, make_split

N_USERS, N_ITEMS = 80, 30


def _ints() -> pd.DataFrame:
    """Integer-id events, rows shuffled (first occurrence is not id order), score ties likely."""
    rng = np.random.default_rng(11)
    n = 1500
    frame = pd.DataFrame(
        {
            "user": rng.integers(0, N_USERS, n),
            "item": rng.integers(0, N_ITEMS, n) ** 2 % 97,  # sparse ids, some items rare
            "timestamp": 1_700_000_000 + rng.integers(0, 400, n) * 60,
            "rating": rng.integers(1, 6, n).astype(float),
        }
    )
    return validate_interactions(frame.drop_duplicates(["user", "item"]), source="frame")


def _text(ints: pd.DataFrame) -> pd.DataFrame:
    return ints.assign(
        user=pd.array([f"u{v:04d}" for v in ints["user"]], dtype="str"),
        item=pd.array([f"i{v:04d}" for v in ints["item"]], dtype="str"),
    )


def _fresh(frame: pd.DataFrame) -> pd.DataFrame:
    """The same values in new Arrow data: nothing noted for them."""
    out = frame.assign(
        user=pd.array(frame["user"].to_numpy(dtype=object), dtype="str"),
        item=pd.array(frame["item"].to_numpy(dtype=object), dtype="str"),
    )
    assert known_codes(out["user"]) is None and known_codes(out["item"]) is None
    return out


@pytest.fixture(scope="module")
def splits() -> dict[str, object]:
    ints = _ints()
    return {
        "int": make_split(ints, "user_time", test_ratio=0.3),
        "str": make_split(_text(ints), "user_time", test_ratio=0.3),
    }


def test_split_parts_carry_codes_that_rebuild_them(splits) -> None:
    split = splits["str"]
    for part in (split.train, split.test):
        for name in ("user", "item"):
            known = known_codes(part[name])
            assert known is not None, name
            codes, categories = known
            assert categories.is_monotonic_increasing and categories.is_unique
            np.testing.assert_array_equal(
                categories.to_numpy(dtype=object)[codes], part[name].to_numpy(dtype=object)
            )
            got_codes, got_uniques = id_codes(part[name])
            want_codes, want_uniques = pd.factorize(_fresh(part)[name], sort=True)
            np.testing.assert_array_equal(got_codes, want_codes)
            assert got_codes.dtype == np.int64
            pd.testing.assert_index_equal(got_uniques, pd.Index(want_uniques))


def test_id_codes_of_other_columns_is_factorize() -> None:
    values = ["b", "a", "c", "a", "b"]
    for column in (
        pd.Series(values, dtype=object),
        pd.Series(values, dtype="category"),
        pd.Series([5, 3, 9, 3, 5]),
        pd.Series(values, dtype="str"),
    ):
        codes, uniques = id_codes(column)
        want_codes, want_uniques = pd.factorize(column, sort=True)
        np.testing.assert_array_equal(codes, want_codes)
        pd.testing.assert_index_equal(uniques, pd.Index(want_uniques))
    # a text column factorized once is not hashed again: the second call reuses the codes
    column = pd.Series(values, dtype="str")
    assert known_codes(column) is None
    first = id_codes(column)
    assert known_codes(column) is not None
    np.testing.assert_array_equal(id_codes(column)[0], first[0])


def test_codes_that_do_not_fit_are_not_noted_and_freed_data_is_forgotten() -> None:
    column = pd.Series(["b", "a", "b"], dtype="str")
    remember_codes(column, np.array([1, 0]), pd.Index(["a", "b"]))  # wrong length
    remember_codes(column, np.array([1, -1, 1]), pd.Index(["a", "b"]))  # a missing value
    remember_codes(
        pd.Series(["b", "a", "b"], dtype=object), np.array([1, 0, 1]), pd.Index(["a", "b"])
    )
    assert known_codes(column) is None
    remember_codes(column, np.array([1, 0, 1]), pd.Index(["a", "b"]))
    assert known_codes(column) is not None
    before = len(data._KNOWN_CODES)
    del column
    gc.collect()
    assert len(data._KNOWN_CODES) == before - 1


@pytest.mark.parametrize(
    "make",
    [
        lambda: PopularityModel(),
        lambda: ImplicitItemCosine(k_neighbors=5, num_threads=1),
        lambda: RandomModel(seed=3),
    ],
    ids=["popularity", "item_knn", "random"],
)
def test_a_model_fitted_on_coded_text_ids_gives_the_integer_lists(splits, make, request) -> None:
    """Same scores, ids and tie order as integer ids (the random model draws by hashing ids,
    so its reference is the same text ids in fresh Arrow data)."""
    text, ints = splits["str"], splits["int"]
    users_int = np.r_[np.unique(ints.test["user"]), 10_000]  # and an unknown user
    users_txt = np.array([f"u{v:04d}" for v in users_int], dtype=object)

    def lists(train: pd.DataFrame, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return make().fit(train).recommend(users, 40)  # more than the items: padding

    if "random" in request.node.name:
        want_scores = lists(_fresh(text.train), users_txt)[1]
        mapped = lists(_fresh(text.train), users_txt)[0]
    else:
        want_ids, want_scores = lists(ints.train, users_int)
        pad = want_ids == np.iinfo(np.int64).min
        mapped = np.array([f"i{v:04d}" for v in want_ids.ravel()], dtype=object)
        mapped = mapped.reshape(pad.shape)
        mapped[pad] = None
        assert pad.any()
    trains = {
        "coded": text.train,
        "fresh": _fresh(text.train),
        "object": text.train.astype({"user": object, "item": object}),
        "categorical": text.train.astype({"user": "category", "item": "category"}),
    }
    assert known_codes(trains["coded"]["user"]) is not None
    for name, train in trains.items():
        ids, scores = lists(train, users_txt)
        np.testing.assert_array_equal(scores, want_scores, err_msg=name)
        assert ids.dtype == object, name
        assert ids.tolist() == mapped.tolist(), name


def test_qrels_from_coded_test_ids_are_the_grouped_qrels(splits) -> None:
    test = splits["str"].test
    doubled = pd.concat([test, test.assign(rating=test["rating"] + 1)], ignore_index=True)
    for frame in (test, doubled):  # test: codes from the split; doubled: from id_codes
        coded = frame.copy(deep=False)
        id_codes(coded["user"]), id_codes(coded["item"])
        assert known_codes(coded["user"]) is not None and known_codes(coded["item"]) is not None
        for relevance in ("binary", "rating"):
            suite = MetricSuite(k=10, names=("ndcg@10",), relevance=relevance)
            got = qrels_from_test(coded, suite.relevance)
            plain = _fresh(frame)
            values = plain["rating"] if relevance == "rating" else pd.Series(1.0, index=plain.index)
            want = (
                pd.DataFrame({"user": plain["user"], "item": plain["item"], "relevance": values})
                .groupby(["user", "item"], as_index=False, sort=True)["relevance"]
                .max()
            )
            pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_segment_counts_from_codes_are_value_counts(splits) -> None:
    train = splits["str"].train
    fresh = _fresh(train)
    keys = np.array(["u0003", "u9999", *pd.unique(train["user"].to_numpy(dtype=object))[:20]])
    for column, wanted in (("user", keys), ("item", None)):
        got = _counts(train[column], wanted)
        counted = fresh[column].value_counts()
        want = counted if wanted is None else counted.reindex(wanted, fill_value=0)
        assert got.to_dict() == want.to_dict()
        if wanted is not None:
            assert got.index.tolist() == list(wanted)
    spec = CompareSpec()
    users = np.unique(splits["str"].test["user"].to_numpy(dtype=object))
    got, want = segment_data(train, users, spec), segment_data(fresh, users, spec)
    for name in want.users:
        np.testing.assert_array_equal(got.users[name], want.users[name])
    pd.testing.assert_series_equal(got.item_bucket, want.item_bucket)


def test_digest_of_a_coded_part_is_its_plain_digest(splits) -> None:
    for part in (splits["str"].train, splits["str"].test):
        assert known_codes(part["user"]) is not None
        plain = part.astype({"user": object, "item": object}).astype({"user": "str", "item": "str"})
        assert known_codes(plain["user"]) is None
        assert data_hash(part) == data_hash(plain)


def test_distinct_counts_from_split_stats_are_nunique() -> None:
    frame = _text(_ints())
    split = make_split(frame, "user_time", test_ratio=0.3)
    for column in ("user", "item"):
        assert input_distinct(frame, column, split.stats) == frame[column].nunique()
        assert input_distinct(frame, column, {}) == frame[column].nunique()
        part = frame.iloc[:10]  # not the split's input: counted, not read from the stats
        assert input_distinct(part, column, split.stats) == part[column].nunique()
    assert input_distinct(frame.drop(columns="item"), "item", split.stats) is None


def test_a_released_dataset_keeps_its_counts_and_digest_only() -> None:
    from harness.datasets import Dataset

    frame = _text(_ints())
    split = make_split(frame, "user_time", test_ratio=0.3)
    full = Dataset("d", frame, "memory")
    gone = full.released(split.stats)
    assert len(gone.frame) == 0 and gone.frame.dtypes.to_dict() == frame.dtypes.to_dict()
    assert gone.events == full.events == len(frame)
    assert gone.sha256 == data_hash(frame)
    for column in ("user", "item"):
        assert gone.distinct(column, split.stats) == frame[column].nunique()
        # another split's stats cannot describe these events: an error, never a count of 0
        other = make_split(frame.iloc[:50], "user_time", test_ratio=0.3).stats
        with pytest.raises(ValueError, match=f"released after the split.*distinct {column}s"):
            gone.distinct(column, other)
    assert gone.released(split.stats) is gone
    assert full.released({}) is full  # no counts in the stats: the events stay
    assert full.released(other) is full


# ----------------------------------------------------------- loading, split parts, buckets, digests


def _plain_parquet(frame: pd.DataFrame, path) -> None:
    """Text ids as plain (not dictionary) pages in many row groups: read back in many chunks."""
    frame.to_parquet(path, index=False, use_dictionary=False, row_group_size=97)


def test_text_ids_read_in_many_chunks_load_as_one_array_with_first_seen_codes(tmp_path) -> None:
    ints = _ints().sample(frac=1.0, random_state=4).reset_index(drop=True)  # first seen != order
    text = _text(ints)
    _plain_parquet(text, tmp_path / "events.parquet")
    frame, coded = data.load_interactions_coded(tmp_path / "events.parquet")
    pd.testing.assert_frame_equal(frame, validate_interactions(_fresh(text), source="frame"))
    for name in ("user", "item"):
        assert frame[name].array.__arrow_array__().num_chunks == 1, name
        codes, uniques = pd.factorize(text[name].to_numpy(dtype=object), sort=False)
        np.testing.assert_array_equal(coded[name].codes, codes)
        assert coded[name].uniques.tolist() == list(uniques)


def test_the_number_test_is_pythons_for_ascii_and_other_scripts_digits() -> None:
    import re

    values = ["12", "+1.", "-3.50", "a1", "١٢", "١٢.0", "1\n", "1.2", "", " 1", "+-1", ".5", "5."]
    want = [re.fullmatch(data._NUMBER_TEXT, v) is not None for v in values]
    for dtype in ("str", pd.StringDtype("python")):
        got = data._number_text(pd.Series(values, dtype=dtype))
        assert got.tolist() == want, dtype
    # ids differing only in number formatting are refused in either script, named in row order
    for a, b in (("70", "+70.0"), ("١٢", "١٢.0")):
        frame = pd.DataFrame(
            {"user": ["x", a, "y", b], "item": [1, 2, 3, 4], "timestamp": [1, 2, 3, 4]}
        )
        with pytest.raises(
            data.DataError, match=rf"{a!r} at row 1 and {re.escape(repr(b))} at row 3"
        ):
            validate_interactions(frame.astype({"user": "str"}), source="frame")


@pytest.mark.parametrize("method", ["global_time", "leave_one_out", "user_time", "random"])
def test_text_split_parts_are_the_integer_parts_rows(method, tmp_path) -> None:
    """The parts of the split on text ids (loaded from many chunks) are the integer split's rows:
    same index labels, order, values and dtypes, ids written as text."""
    params = {"global_time": {"cut": 0.7}, "random": {"seed": 2}}.get(method, {})
    ints = _ints()
    _plain_parquet(_text(ints), tmp_path / "events.parquet")
    frame, coded = data.load_interactions_coded(tmp_path / "events.parquet")
    from harness.split import _make_split

    got = _make_split(frame, method, params, coded)
    if method == "random":  # draws hash the ids' values: the reference is text ids as objects
        objects = _text(ints).astype({"user": object, "item": object})
        want = make_split(objects, method, **params)
        expected = {
            p: getattr(want, p).astype({"user": "str", "item": "str"}) for p in ("train", "test")
        }
    else:
        want = make_split(ints, method, **params)
        expected = {p: _text(getattr(want, p)) for p in ("train", "test")}
    for part in ("train", "test"):
        pd.testing.assert_frame_equal(getattr(got, part), expected[part], check_exact=True)
        g = getattr(got, part)
        assert known_codes(g["user"]) is not None and known_codes(g["item"]) is not None
    assert got.stats == want.stats


def test_models_on_one_training_frame_share_one_read_only_id_index(splits) -> None:
    train = splits["str"].train
    a, b = PopularityModel().fit(train), ImplicitItemCosine(k_neighbors=5).fit(train)
    assert a.user_ids_ is b.user_ids_ and a._user_index is b._user_index
    assert not a.user_ids_.flags.writeable
    fresh = PopularityModel().fit(_fresh(train))  # other Arrow data: its own arrays, same ids
    assert fresh.user_ids_ is not a.user_ids_
    assert fresh.user_ids_.tolist() == sorted(pd.unique(train["user"].to_numpy(dtype=object)))
    users = np.unique(splits["str"].test["user"].to_numpy(dtype=object))
    for model in (a, fresh):
        ids, scores = model.recommend(users, 7)
        want_ids, want_scores = (
            PopularityModel()
            .fit(splits["int"].train)
            .recommend(np.array([int(u[1:]) for u in users]), 7)
        )
        np.testing.assert_array_equal(scores, want_scores)
        assert ids.tolist() == [[f"i{v:04d}" for v in row] for row in want_ids]


def test_item_buckets_on_coded_text_ids_are_the_integer_buckets(splits) -> None:
    """Buckets from the split's codes (qrels) and object ids (lists, as the harness makes
    them) give the integer-id numbers, by the engine path on integer ids as reference."""
    from harness.compare.buckets import bucket_tables, bucket_tables_by_engine

    suite = MetricSuite(k=5, names=("ndcg@5", "recall@5", "mrr@5"))
    names = list(suite.names)
    recs = {}
    for kind in ("int", "str"):
        split = splits[kind]
        users = np.unique(split.test["user"].to_numpy(dtype=object if kind == "str" else None))
        pair = []
        for model in (PopularityModel(), ImplicitItemCosine(k_neighbors=5, num_threads=1)):
            ids, _ = model.fit(split.train).recommend(users, 5)
            pair.append(
                pd.DataFrame(
                    {
                        "user": np.repeat(users, 5),
                        "rank": np.tile(np.arange(1, 6), len(users)),
                        "item": ids.ravel(),
                    }
                )
            )
        recs[kind] = tuple(pair)
    counts = splits["int"].train["item"].value_counts()
    bucket_of = pd.Series(
        np.where(counts.rank(ascending=False, method="first") <= 5, "head", "tail"),
        index=counts.index,
    )
    text_bucket = bucket_of.set_axis([f"i{v:04d}" for v in bucket_of.index])
    qrels_int = qrels_from_test(splits["int"].test, suite.relevance)
    qrels_txt = qrels_from_test(splits["str"].test, suite.relevance)
    want = bucket_tables_by_engine(qrels_int, recs["int"], names, bucket_of, {})
    got = bucket_tables(qrels_txt, recs["str"], names, text_bucket, {})
    for bucket in ("head", "mid", "tail"):
        for g, w in zip(got[bucket], want[bucket], strict=True):
            w = w.set_axis([f"u{v:04d}" for v in w.index])
            np.testing.assert_array_equal(g.index.to_numpy(dtype=object), w.index.to_numpy())
            np.testing.assert_allclose(g.to_numpy(), w.to_numpy(), rtol=0, atol=1e-12)


def test_part_digests_are_the_plain_digests_and_computed_once(splits) -> None:
    from harness.split import _PART_DIGESTS, part_digest

    split = splits["str"]
    for part in ("train", "test"):
        frame = getattr(split, part)
        plain = frame.astype({"user": object, "item": object}).astype(
            {"user": "str", "item": "str"}
        )
        assert part_digest(split, part) == data_hash(plain)
    assert set(_PART_DIGESTS[split]) == {"train", "test"}
    _PART_DIGESTS[split]["train"] = "noted"  # the noted value is what later calls return
    assert part_digest(split, "train") == "noted"
    del _PART_DIGESTS[split]["train"]
    with pytest.raises(ValueError, match="no 'valid' part"):
        part_digest(split, "valid")
