"""Item ids with only cutoff metrics: only the rows that can reach a top-k list are encoded
(strings) or keyed (integers), and the duplicate check reads a fingerprint of every row.

The references never take that path: the same data with a metric that needs every row (``auc``),
and for strings also the same data with each id replaced by its rank in string order (integer
ids). Ids include strings and integers whose fingerprints collide, scores tie often (ties at the
k boundary decide the numbers), and duplicates sit anywhere in a list.
"""

from __future__ import annotations

import os
from unittest import mock

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from id_strategies import KINDS, LONG_IDS, TWINS, as_ints, frame, string_ranks, tables

import metrics
from metrics.engine import _fingerprints, _int_fingerprints, prepare
from metrics.options import Options

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

CUT = ["precision@1", "precision@3", "recall@3", "ndcg@3", "mrr@3", "map@3", "hit_rate@2"]
CATALOG = ["coverage@3", "gini@3"]  # the default catalog counts every run item, cut or not
#: run id columns that take the cut (object and Python strings via one conversion to Arrow,
#: categoricals and Arrow dictionaries on their codes linked to the truth's ids): every kind
CUT_KINDS = KINDS
TABLES = tables(ids=LONG_IDS, max_items=14, max_users=5)


@SETTINGS
@given(
    t=TABLES,
    q_kind=st.sampled_from(KINDS),
    r_kind=st.sampled_from(CUT_KINDS),
    tie_break=st.sampled_from(["item_asc", "item_desc", "input_order"]),
    user_set=st.sampled_from(["truth", "intersection"]),
    names=st.sampled_from([CUT, CUT + CATALOG, ["precision@1"], ["ndcg@10", "recall@1"]]),
)
def test_cut_lists_match_int_ids_and_whole_lists(t, q_kind, r_kind, tie_break, user_set, names):
    qrels, run = t
    rank = string_ranks(qrels, run)
    opts = {"tie_break": tie_break, "user_set": user_set}
    want = metrics.evaluate(
        pd.DataFrame(as_ints(qrels, rank), columns=["user", "item", "relevance"]),
        pd.DataFrame(as_ints(run, rank), columns=["user", "item", "score"]),
        names,
        **opts,
    )
    q, r = frame(qrels, "relevance", q_kind), frame(run, "score", r_kind)
    got = metrics.evaluate(q, r, names, **opts)
    assert [rank[u] for u in got.per_user.index] == list(want.per_user.index)
    np.testing.assert_array_equal(got.per_user.to_numpy(), want.per_user.to_numpy())
    assert got.counts == want.counts
    for name, value in want.summary.items():
        np.testing.assert_allclose(got.summary[name], value, rtol=1e-12, atol=1e-15)
    whole = metrics.evaluate(q, r, [*names, "auc"], **opts)  # auc reads every row: no cut
    np.testing.assert_array_equal(got.per_user.to_numpy(), whole.per_user[names].to_numpy())


def _outcome(q: pd.DataFrame, r: pd.DataFrame, names: list[str]) -> object:
    """precision@1 per user, or the error message."""
    try:
        return metrics.evaluate(q, r, names).per_user["precision@1"].tolist()
    except ValueError as err:
        return str(err)


@SETTINGS
@given(
    t=tables(ids=LONG_IDS, max_items=14, max_users=5, duplicate=True),
    q_kind=st.sampled_from(KINDS),
    r_kind=st.sampled_from(CUT_KINDS),
)
def test_duplicates_anywhere_raise_the_whole_list_error(t, q_kind, r_kind):
    # a duplicate in an evaluated user's list raises (the same message as without the cut);
    # one in a user who is not evaluated does not (as without the cut)
    qrels, run = t
    q, r = frame(qrels, "relevance", q_kind), frame(run, "score", r_kind)
    whole = _outcome(q, r, ["precision@1", "auc"])
    truth_users = {u for u, _, _ in qrels}
    dup_users = {u for u, i, _ in run if sum((u, i) == (x, y) for x, y, _ in run) > 1}
    assert isinstance(whole, str) == bool(dup_users & truth_users)
    got = _outcome(q, r, ["precision@1"])
    assert got == whole or (np.isnan(got).tolist() == np.isnan(whole).tolist())


def test_lists_are_cut_to_the_rows_that_can_reach_the_top():
    # user "u": scores 3, 2, 2, 1, 0 -> top 2 needs the 3 and both 2s (tied at the boundary)
    q = frame([("u", "a", 1)], "relevance", "str")
    r = frame(
        [("u", "e", 0.0), ("u", "b", 2.0), ("u", "a", 3.0), ("u", "d", 1.0), ("u", "c", 2.0)],
        "score",
        "str",
    )
    prep = prepare(q, r, Options(), depth=2)
    assert sorted(prep.item_ids(prep.run_items)) == ["a", "b", "c"]
    assert sorted(prep.run_item_ids()) == ["a", "b", "c", "d", "e"]
    assert prepare(q, r, Options()).run_items.size == 5


def test_depth_must_be_a_positive_int():
    q = frame([("u", "a", 1)], "relevance", "str")
    r = frame([("u", "a", 1.0)], "score", "str")
    with pytest.raises(ValueError, match=r"^'depth' must be a positive int \(got 0\)$"):
        prepare(q, r, Options(), depth=0)


def test_a_duplicate_below_the_cutoff_is_still_found():
    q = frame([("u", "a", 1)], "relevance", "str")
    r = frame([("u", "a", 3.0), ("u", "b", 0.0), ("u", "c", 2.0), ("u", "b", 0.5)], "score", "str")
    with pytest.raises(
        ValueError, match=r"^run has duplicate \(user, item\) rows: user 'u', item 'b'"
    ):
        metrics.evaluate(q, r, ["precision@1"])


def test_twins_collide_yet_are_different_ids():
    data = pa.chunked_array([pa.array([*TWINS[:2], "ABCDEFGH", "xABCDEFGH"], pa.large_string())])
    fp = _fingerprints(data)
    assert fp[0] == fp[1] == fp[3]  # same length and last 8 bytes: the check must compare text
    q = frame([("u", "xABCDEFGH", 1)], "relevance", "str")
    r = frame([("u", "xABCDEFGH", 1.0), ("u", "yABCDEFGH", 1.0)], "score", "str")
    assert metrics.evaluate(q, r, ["precision@1"]).summary["precision@1"] == 1.0
    desc = metrics.evaluate(q, r, ["precision@1"], tie_break="item_desc")
    assert desc.summary["precision@1"] == 0.0


#: lists of equally long strings (read as a strided slice), some with a shorter one among them
FIXED_WIDTH = (
    st.integers(6, 40)
    .flatmap(
        lambda w: st.lists(
            st.text(st.characters(codec="ascii"), min_size=w, max_size=w), min_size=1, max_size=30
        )
    )
    .flatmap(lambda xs: st.sampled_from([xs, [*xs[:-1], xs[-1][1:]]]))
)


def _naive_equal(strings: list[str]) -> np.ndarray:
    """Row pairs (i < j) holding the same string."""
    return np.array(
        [
            (i, j)
            for i in range(len(strings))
            for j in range(i + 1, len(strings))
            if strings[i] == strings[j]
        ]
    )


@SETTINGS
@given(
    strings=st.one_of(
        st.lists(
            st.one_of(LONG_IDS, st.sampled_from(["", "a", "1234567", "12345678"])),
            min_size=1,
            max_size=30,
        ),
        FIXED_WIDTH,
    ),
    cut=st.integers(0, 30),
    large=st.booleans(),
    slice_rows=st.sampled_from([1, 3, 7, 1 << 18]),
)
def test_equal_strings_have_equal_fingerprints_wherever_they_sit(strings, cut, large, slice_rows):
    """In any chunk, at any offset of Arrow's buffers (slices, strings ending in the first
    bytes), in slices of any size (scratch reused): equal strings hash equal, each to what a
    naive hash of its length and last 8 bytes (zeros before a shorter string) gives."""
    arr = pa.array(strings, pa.large_string() if large else pa.string())
    cut = min(cut, len(strings))
    with mock.patch("metrics.engine._FP_ROWS", slice_rows):
        fp = _fingerprints(pa.chunked_array([arr.slice(0, cut), arr.slice(cut)]))
    assert fp.dtype == np.uint32 and len(fp) == len(strings)
    for i, j in _naive_equal(strings):
        assert fp[i] == fp[j]
    for s, got in zip(strings, fp, strict=True):
        raw = s.encode()
        word = int.from_bytes(raw[-8:].rjust(8, b"\0"), "little") ^ len(raw)
        assert got == (word * 0x9E3779B97F4A7C15 % 2**64) >> 32


@pytest.mark.parametrize("dtype", [object, "string[python]"])
def test_a_missing_item_in_a_python_column_is_named_with_its_row(dtype):
    # object and Python-string item ids take the cut through one conversion to Arrow; a missing
    # id there gives the whole-list path's message (with "auc": no cut)
    q = frame([("u", "a", 1)], "relevance", "str")
    r = pd.DataFrame(
        {
            "user": ["u", "u", "v"],
            "item": pd.Series(["a", "b", None], dtype=dtype),
            "score": [1.0, 2.0, 3.0],
        }
    )
    message = r"^run column 'item' has a missing id at row 2$"
    for names in (["precision@1"], ["precision@1", "auc"]):
        with pytest.raises(ValueError, match=message):
            metrics.evaluate(q, r, names)


@pytest.mark.parametrize(
    ("items", "truth"),
    [
        (["b", 1, "1x", 2.5], ["b", "1"]),  # not all text: ids compare as their str()
        ([b"b", b"a", b"c", b"d"], [b"b", b"a"]),  # bytes: not converted to Arrow text
    ],
)
def test_object_ids_that_are_not_all_text_keep_the_whole_list_rules(items, truth):
    q = pd.DataFrame(
        {"user": ["u", "u"], "item": pd.Series(truth, dtype=object), "relevance": [1, 1]}
    )
    r = pd.DataFrame(
        {
            "user": ["u"] * 4,
            "item": pd.Series(items, dtype=object),
            "score": [1.0, 1.0, 1.0, 0.5],
        }
    )
    cut = metrics.evaluate(q, r, CUT, tie_break="item_desc")
    whole = metrics.evaluate(q, r, [*CUT, "auc"], tie_break="item_desc")
    np.testing.assert_array_equal(cut.per_user.to_numpy(), whole.per_user[CUT].to_numpy())
    assert cut.summary["recall@3"] == 1.0  # both truth items among the three tied on top


def test_object_ids_take_the_cut():
    q = pd.DataFrame({"user": ["u"], "item": ["a"], "relevance": [1]}).astype({"item": object})
    r = pd.DataFrame({"user": ["u"] * 3, "item": ["c", "a", "b"], "score": [3.0, 2.0, 1.0]})
    r = r.astype({"user": object, "item": object})
    prep = prepare(q, r, Options(), depth=1)
    assert prep.depth == 1 and list(prep.item_ids(prep.run_items)) == ["c"]
    assert sorted(prep.run_item_ids()) == ["a", "b", "c"]


def test_categorical_ids_take_the_cut_on_their_codes():
    # categories in an order unlike the ids' (and one, "z", in no row): keys rank the ids
    q = pd.DataFrame({"user": ["u"], "item": ["a"], "relevance": [1]})
    items = pd.Categorical(["c", "a", "b", "b"], categories=["z", "c", "b", "a"])
    r = pd.DataFrame({"user": ["u", "u", "u", "v"], "item": items, "score": [3.0, 2.0, 1.0, 0.0]})
    prep = prepare(q, r, Options(), depth=1)
    assert prep.depth == 1 and list(prep.item_ids(prep.run_items)) == ["c"]
    assert sorted(prep.run_item_ids()) == ["a", "b", "c"]
    dup = r.assign(item=pd.Categorical(["b", "a", "b", "b"], categories=["z", "c", "b", "a"]))
    with pytest.raises(ValueError, match="user 'u', item 'b' appears more than once"):
        prepare(q, dup, Options(), depth=1)


def test_categories_with_the_same_text_are_one_id_on_the_cut():
    # categories 1 and "1" are one id, as in the whole-list path: a user with both repeats it
    q = pd.DataFrame({"user": ["u"], "item": ["1"], "relevance": [1]})
    items = pd.Categorical([1, "1", "2"], categories=pd.Index([1, "1", "2"], dtype=object))
    r = pd.DataFrame({"user": ["u"] * 3, "item": items, "score": [1.0, 0.0, 2.0]})
    whole, cut = _outcome(q, r, ["precision@1", "auc"]), _outcome(q, r, ["precision@1"])
    assert isinstance(whole, str) and "item '1' appears more than once" in whole
    assert cut == whole


def _threaded_tables(seed: int, grouped: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """300 users with 1-40 text items each (scores tie in threes), text qrels."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(300):
        for i in rng.choice(1000, size=rng.integers(1, 40), replace=False):
            rows.append((f"u{u}", f"i{i:04d}", float(rng.integers(0, 3))))
    run = pd.DataFrame(rows, columns=["user", "item", "score"])
    if not grouped:
        run = run.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    qrels = run.sample(frac=0.3, random_state=seed)[["user", "item"]].assign(relevance=1)
    return qrels.reset_index(drop=True), run


@pytest.mark.parametrize("grouped", [True, False])
def test_cut_in_many_blocks_on_threads_gives_the_same_numbers_and_first_error(monkeypatch, grouped):
    # tiny pieces and blocks: fingerprints, neighbour comparisons, the cut and the encoding of
    # the kept rows all run in many pieces on threads; the reference reads every row (auc)
    from metrics import engine

    qrels, run = _threaded_tables(11, grouped)
    dup = run.copy()
    # two duplicates in different users: the error names the first in batch order
    twice = {}
    for user in ("u7", "u250"):
        at = dup.index[dup["user"] == user][0]
        twice[user] = dup.loc[at, "item"]
        dup = pd.concat([dup, dup.loc[[at]].assign(score=-1.0)], ignore_index=True)
    want = metrics.evaluate(qrels, run, [*CUT, "auc"], tie_break="item_desc").per_user[CUT]
    want_error = _outcome(qrels, dup, ["precision@1", "auc"])
    # u250's list (13 rows) is in a shorter length class than u7's (35): batched first
    assert want_error == (
        f"run has duplicate (user, item) rows: user 'u250', item {twice['u250']!r} appears more "
        "than once"
    )
    monkeypatch.setattr(engine, "PIECE_ROWS", 97)
    monkeypatch.setattr(engine, "_CUT_CELLS", 64)
    assert engine.workers(len(run)) == min(os.cpu_count() or 1, 4)
    got = metrics.evaluate(qrels, run, CUT, tie_break="item_desc")
    pd.testing.assert_frame_equal(got.per_user, want)
    assert _outcome(qrels, dup, ["precision@1"]) == want_error


#: the inverse of the fingerprints' multiplier modulo 2**64: ``x + k * _INV`` multiplies to
#: ``x * M + k``, so small multiples share the product's high half (colliding fingerprints)
_INV = pow(0x9E3779B97F4A7C15, -1, 2**64)
INT_TWINS = [(k * _INV + 2**63) % 2**64 - 2**63 for k in range(4)]
#: int64 ids: small (their own keys), extremes and powers of two (spread too wide: ranked),
#: fingerprint twins
INT_IDS = st.one_of(
    st.integers(-3, 12),
    st.sampled_from([-(2**63), 2**63 - 1, 2**32, 2**33, -(2**40), *INT_TWINS]),
    st.integers(-(2**63), 2**63 - 1),
)


def _int_frame(rows: list[tuple], value: str) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["user", "item", value]).astype(
        {"user": np.int64, "item": np.int64}
    )


@SETTINGS
@given(
    t=tables(ids=INT_IDS, max_items=14, max_users=5),
    tie_break=st.sampled_from(["item_asc", "item_desc", "input_order"]),
    id_order=st.sampled_from(["natural", "string"]),
    user_set=st.sampled_from(["truth", "intersection"]),
    names=st.sampled_from([CUT, CUT + CATALOG, ["precision@1"], ["ndcg@10", "recall@1"]]),
)
def test_int_ids_cut_lists_match_whole_lists(t, tie_break, id_order, user_set, names):
    qrels, run = t
    q, r = _int_frame(qrels, "relevance"), _int_frame(run, "score")
    opts = {"tie_break": tie_break, "id_order": id_order, "user_set": user_set}
    got = metrics.evaluate(q, r, names, **opts)
    whole = metrics.evaluate(q, r, [*names, "auc"], **opts)  # auc reads every row: no cut
    assert list(got.per_user.index) == list(whole.per_user.index)
    np.testing.assert_array_equal(got.per_user.to_numpy(), whole.per_user[names].to_numpy())
    assert got.counts == {k: whole.counts[k] for k in got.counts}  # auc adds its own


@SETTINGS
@given(
    t=tables(ids=INT_IDS, max_items=14, max_users=5, duplicate=True),
    id_order=st.sampled_from(["natural", "string"]),
)
def test_int_ids_duplicates_anywhere_raise_the_whole_list_error(t, id_order):
    qrels, run = t
    q, r = _int_frame(qrels, "relevance"), _int_frame(run, "score")

    def outcome(names: list[str]) -> object:
        try:
            return metrics.evaluate(q, r, names, id_order=id_order).per_user["precision@1"].tolist()
        except ValueError as err:
            return str(err)

    whole, got = outcome(["precision@1", "auc"]), outcome(["precision@1"])
    assert got == whole or (np.isnan(got).tolist() == np.isnan(whole).tolist())


@SETTINGS
@given(
    ids=st.lists(INT_IDS, min_size=1, max_size=30),
    slice_rows=st.sampled_from([1, 3, 7, 1 << 18]),
)
def test_int_fingerprints_are_the_high_half_of_the_product(ids, slice_rows):
    values = np.array(ids, dtype=np.int64)
    with mock.patch("metrics.engine._FP_ROWS", slice_rows):
        fp = _int_fingerprints(values)
    assert fp.dtype == np.uint32
    assert fp.tolist() == [(x % 2**64 * 0x9E3779B97F4A7C15 % 2**64) >> 32 for x in ids]


def test_int_twins_collide_yet_are_different_ids():
    assert len(set(_int_fingerprints(np.array(INT_TWINS, dtype=np.int64)).tolist())) == 1
    a, b = INT_TWINS[1], INT_TWINS[2]
    q = _int_frame([(7, a, 1)], "relevance")
    r = _int_frame([(7, a, 1.0), (7, b, 1.0)], "score")
    assert metrics.evaluate(q, r, ["precision@1"]).summary["precision@1"] == float(a < b)
    with pytest.raises(ValueError, match=rf"user 7, item {a} appears more than once$"):
        metrics.evaluate(
            q, _int_frame([(7, a, 1.0), (7, b, 2.0), (7, a, 0.5)], "score"), ["precision@1"]
        )


@pytest.mark.parametrize(("id_order", "named"), [("natural", 9), ("string", 10)])
def test_int_ids_duplicate_error_names_the_smallest_id_in_id_order(id_order, named):
    q = _int_frame([(1, 9, 1)], "relevance")
    r = _int_frame([(1, 10, 1.0), (1, 9, 2.0), (1, 10, 0.0), (1, 9, 0.5)], "score")
    for names in (["precision@1"], ["precision@1", "auc"]):  # cut, and whole lists
        with pytest.raises(ValueError, match=rf"item {named} appears more than once$"):
            metrics.evaluate(q, r, names, id_order=id_order)


@pytest.mark.parametrize("kind", ["int", "str"])
@pytest.mark.parametrize(
    ("extra", "named"),
    [(0, 2), (2, 1)],  # lists of one length class: the first in the run; else the shorter class
)
def test_of_several_duplicates_the_error_names_the_first_in_batch_order(kind, extra, named):
    # the run lists user 2 before user 1; both lists repeat an item; with ``extra`` rows user
    # 2's list falls in a longer length class, which batches reach later
    rows = [(2, 5, 1.0), (2, 5, 0.5), (2, 6, 0.1)] + [(2, 10 + i, 0.0) for i in range(extra)]
    rows += [(1, 7, 1.0), (1, 7, 0.2), (1, 8, 0.3)]
    truth = [(1, 7, 1), (2, 5, 1)]
    if kind == "int":
        q, r = _int_frame(truth, "relevance"), _int_frame(rows, "score")
        user = str(named)
    else:
        as_text = [(f"u{u}", f"i{i}", v) for u, i, v in rows]
        q = frame([(f"u{u}", f"i{i}", v) for u, i, v in truth], "relevance", "str")
        r, user = frame(as_text, "score", "str"), f"'u{named}'"
    for names in (["precision@1"], ["precision@1", "auc"]):  # cut, and whole lists
        with pytest.raises(ValueError, match=rf"rows: user {user}, item"):
            metrics.evaluate(q, r, names)
    one_per_block = mock.patch("metrics.engine._CUT_CELLS", 3)  # the cut: a block per user
    with one_per_block, pytest.raises(ValueError, match=rf"rows: user {user}, item"):
        metrics.evaluate(q, r, ["precision@1"])
