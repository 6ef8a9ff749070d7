"""Every kind of id column gives the numbers and the tie order of the same data with int ids.

Ids are arbitrary text here (digit strings whose string order differs from their numeric order,
such as "10" < "9", non-ASCII and 4-byte UTF-8 characters, the empty string), held as pandas 3
``str`` (Arrow-backed), Arrow ``large_string``, Python ``object``, categoricals (categories in
any order) or Python-backed ``string``; qrels and run may hold different kinds. The same data
with each id replaced by its rank in Python's string order is the integer reference (integer
ids order naturally, so ties break the same way), and a naive per-user loop is a second,
independent reference. Scores tie often, so a wrong tie order changes the numbers.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from id_strategies import KINDS, as_ints, frame, string_ranks, tables

import metrics

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

NAMES = ["precision@1", "precision@3", "recall@3", "ndcg@3", "mrr", "map", "hit_rate@2", "auc"]


def naive(qrels: list[tuple], run: list[tuple], tie_break: str) -> dict[str, dict[str, float]]:
    """Per truth user: precision@1, precision@3, recall@3, ndcg@3 and mrr by a plain loop
    (default conventions: relevance >= 1 relevant, gain 2**rel - 1, users without a relevant
    item left out, ties by item id ascending or descending in Python string order)."""
    out: dict[str, dict[str, float]] = {}
    for user in {u for u, _, _ in qrels}:
        rel = {i: r for u, i, r in qrels if u == user}
        n_rel = sum(r >= 1 for r in rel.values())
        if n_rel == 0:
            continue
        mine = [(i, s) for u, i, s in run if u == user]
        by_item = sorted(mine, key=lambda x: x[0], reverse=tie_break == "item_desc")
        ranked = [i for i, _ in sorted(by_item, key=lambda x: -x[1])]  # stable: ties keep order
        hits = [rel.get(i, 0) >= 1 for i in ranked]
        dcg = sum((2 ** rel.get(i, 0) - 1) / math.log2(r + 2) for r, i in enumerate(ranked[:3]))
        ideal = sorted((g for g in rel.values() if g > 0), reverse=True)[:3]
        idcg = sum((2**g - 1) / math.log2(r + 2) for r, g in enumerate(ideal))
        first = next((r for r, h in enumerate(hits) if h), None)
        out[user] = {
            "precision@1": sum(hits[:1]) / 1,
            "precision@3": sum(hits[:3]) / 3,
            "recall@3": sum(hits[:3]) / n_rel,
            "ndcg@3": dcg / idcg,
            "mrr": 0.0 if first is None else 1 / (first + 1),
        }
    return out


@SETTINGS
@given(
    t=tables(),
    q_kind=st.sampled_from(KINDS),
    r_kind=st.sampled_from(KINDS),
    tie_break=st.sampled_from(["item_asc", "item_desc"]),
    user_set=st.sampled_from(["truth", "intersection"]),
)
def test_every_id_kind_matches_int_ids_and_a_naive_loop(t, q_kind, r_kind, tie_break, user_set):
    qrels, run = t
    rank = string_ranks(qrels, run)
    opts = {"tie_break": tie_break, "user_set": user_set}
    want = metrics.evaluate(
        pd.DataFrame(as_ints(qrels, rank), columns=["user", "item", "relevance"]),
        pd.DataFrame(as_ints(run, rank), columns=["user", "item", "score"]),
        NAMES,
        **opts,
    )
    got = metrics.evaluate(
        frame(qrels, "relevance", q_kind), frame(run, "score", r_kind), NAMES, **opts
    )
    # the same users, in string order, with exactly the same values
    assert [rank[u] for u in got.per_user.index] == list(want.per_user.index)
    np.testing.assert_array_equal(got.per_user.to_numpy(), want.per_user.to_numpy())
    assert got.counts == want.counts
    for name, value in want.summary.items():
        np.testing.assert_allclose(got.summary[name], value, rtol=1e-12, atol=1e-15)
    if user_set == "truth":
        ref = naive(qrels, run, tie_break)
        for user, values in ref.items():
            for name, value in values.items():
                assert got.per_user.loc[user, name] == pytest.approx(value, rel=1e-12, abs=1e-15), (
                    user,
                    name,
                )
        skipped = set(got.per_user.index) - set(ref)
        assert got.per_user.loc[sorted(skipped), "mrr"].isna().all()


@given(t=tables(), kind=st.sampled_from(KINDS))
@settings(max_examples=30, deadline=None, database=None)
def test_int_ids_compared_as_strings_match_digit_strings(t, kind):
    # id_order="string" (trec_eval's rule): integer ids tie-break as their decimal strings, so
    # "10" before "9", exactly as the same ids held as text
    qrels, run = t
    digits = sorted({x for rows in t for r in rows for x in r[:2]})
    as_number = {v: n for n, v in enumerate(digits)}  # any ints; shown as their decimal text
    text = {n: str(n) for n in as_number.values()}
    opts = {"tie_break": "item_desc", "id_order": "string"}
    want = metrics.evaluate(
        pd.DataFrame(as_ints(qrels, as_number), columns=["user", "item", "relevance"]),
        pd.DataFrame(as_ints(run, as_number), columns=["user", "item", "score"]),
        NAMES,
        **opts,
    )
    q_text = [(text[u], text[i], v) for u, i, v in as_ints(qrels, as_number)]
    r_text = [(text[u], text[i], v) for u, i, v in as_ints(run, as_number)]
    got = metrics.evaluate(
        frame(q_text, "relevance", kind), frame(r_text, "score", kind), NAMES, **opts
    )
    by_text = got.per_user.rename(index=int).sort_index()
    np.testing.assert_array_equal(by_text.to_numpy(), want.per_user.sort_index().to_numpy())


def test_string_order_is_not_numeric_order():
    # items "9" and "10" tie; ascending string order puts "10" first, so it is the top item
    for kind in KINDS:
        q = frame([("u", "10", 1)], "relevance", kind)
        r = frame([("u", "9", 1.0), ("u", "10", 1.0)], "score", kind)
        assert metrics.evaluate(q, r, ["precision@1"]).summary["precision@1"] == 1.0, kind
        desc = metrics.evaluate(q, r, ["precision@1"], tie_break="item_desc")
        assert desc.summary["precision@1"] == 0.0, kind


def test_ties_at_the_cutoff_next_to_a_lower_score():
    # "b" and "c" tie above "a": the top 1 is "b" ascending, "c" descending, never "a"
    for kind in KINDS:
        q = frame([("u", "c", 1)], "relevance", kind)
        r = frame([("u", "a", 0.0), ("u", "b", 1.0), ("u", "c", 1.0)], "score", kind)
        assert metrics.evaluate(q, r, ["precision@1"]).summary["precision@1"] == 0.0, kind
        desc = metrics.evaluate(q, r, ["precision@1"], tie_break="item_desc")
        assert desc.summary["precision@1"] == 1.0, kind


def test_empty_string_and_astral_ids_are_ids():
    qrels = [("", "😀", 1), ("", "", 1), ("中", "", 2)]
    run = [("", "", 1.0), ("", "😀", 1.0), ("", "a", 1.0), ("中", "😀", 0.5), ("中", "", 0.5)]
    for kind in KINDS:
        ev = metrics.evaluate(frame(qrels, "relevance", kind), frame(run, "score", kind), NAMES)
        # "" < "a" < "中" < "😀" in code point order: user "" ranks "", "a", "😀"
        assert list(ev.per_user.index) == ["", "中"], kind
        assert ev.per_user.loc["", "precision@1"] == 1.0, kind
        assert ev.per_user.loc["", "mrr"] == 1.0, kind
        assert ev.per_user.loc["中", "precision@1"] == 1.0, kind  # "" before "😀"


@pytest.mark.parametrize("tie_break", ["item_asc", "input_order"])
def test_a_dictionary_holding_a_user_twice_with_the_users_interleaved(tie_break: str) -> None:
    # user "a" is code 0 and code 2 of the run's dictionary, "b" codes 1 and 3, and their rows
    # interleave: the rows regrouped by code, then each user's codes joined, are still the
    # user's own rows, in their order
    users = ["a", "a", "a", "b", "b", "b", "a"]
    run = pd.DataFrame(
        {
            "user": users,
            "item": ["x", "y", "z", "x", "y", "z", "w"],
            "score": [5.0, 1.0, 1.0, 2.0, 4.0, 0.5, 1.0],
        }
    )
    qrels = pd.DataFrame({"user": ["a", "b", "a"], "item": ["y", "y", "w"], "relevance": [1, 1, 1]})
    codes = pa.array([0, 2, 0, 1, 3, 1, 2], pa.int32())
    coded = run.assign(
        user=pd.arrays.ArrowExtensionArray(
            pa.DictionaryArray.from_arrays(codes, pa.array(["a", "b", "a", "b"]))
        )
    )
    for names in (["ndcg@2", "precision@1", "mrr"], ["ndcg@2", "mrr", "auc"]):
        want = metrics.evaluate(qrels, run, names, tie_break=tie_break)
        got = metrics.evaluate(qrels, coded, names, tie_break=tie_break)
        pd.testing.assert_frame_equal(got.per_user, want.per_user)


def test_exposure_groups_from_an_arrow_dictionary_train() -> None:
    """Found by an audit: an Arrow dictionary ``train`` item column (``read_parquet`` with
    ``dtype_backend="pyarrow"`` of a categorical) crashed the popularity groups. By hand: item
    x holds 3 of 6 training events (head: the first 20%), y 2, z 1 (tail: the last 20% and
    below); user a's top-2 is x (rank 1), y; user b's is z (rank 1), y."""
    q = pd.DataFrame({"user": ["a", "b"], "item": ["x", "z"], "relevance": [1, 1]})
    r = pd.DataFrame(
        {"user": ["a", "a", "b", "b"], "item": ["x", "y", "z", "y"], "score": [2.0, 1, 2, 1]}
    )
    items = ["x", "x", "x", "y", "y", "z"]
    train = pd.DataFrame({"user": ["a", "b", "c", "c", "d", "d"], "item": items})
    as_dict = pd.array(
        pa.array(items).dictionary_encode(),
        dtype=pd.ArrowDtype(pa.dictionary(pa.int32(), pa.string())),
    )
    names = ["exposure_head@2", "exposure_tail@2"]
    plain = metrics.evaluate(q, r, names, train=train).summary
    coded = metrics.evaluate(q, r, names, train=train.assign(item=as_dict)).summary
    assert coded == plain
    w1, w2 = 1.0, 1 / math.log2(3)  # exposure of ranks 1 and 2
    assert plain["exposure_head@2"] == pytest.approx(w1 / (2 * (w1 + w2)))
    assert plain["exposure_tail@2"] == pytest.approx(w1 / (2 * (w1 + w2)))
