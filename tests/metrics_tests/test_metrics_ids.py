"""The same ids in any column type give the same per-user numbers and the same tie order.

Integer ids and their string forms (pandas 3 ``str``, object, python strings, categorical,
Arrow ``string`` / ``large_string``, Arrow columns of several chunks) must evaluate identically:
with ``id_order="string"`` an integer id compares as its decimal string; with the default
``natural`` order the strings are zero-padded so that they sort as the numbers do. Scores tie
often, so a wrong tie order changes the numbers.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import metrics
from metrics import engine

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

NAMES = [
    "precision@1",
    "precision@3",
    "recall@3",
    "ndcg@3",
    "ndcg",
    "map",
    "ap@2",
    "mrr",
    "r_precision",
    "hit_rate@2",
    "num_ret",
    "num_rel",
    "num_rel_ret",
    "auc",
    "coverage@2",
]

FORMS = {
    "str": "str",
    "object": object,
    "python": "string[python]",
    "string_pyarrow": "string[pyarrow]",
    "arrow": pd.ArrowDtype(pa.string()),
    "arrow_large": pd.ArrowDtype(pa.large_string()),
    "category": "category",
}


@st.composite
def int_tables(draw) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Random qrels/run with non-negative int ids of 1 to 3 digits and many tied scores."""
    pool = draw(st.lists(st.integers(0, 999), min_size=1, max_size=14, unique=True))
    n_users = draw(st.integers(1, 6))
    user_ids = draw(st.lists(st.integers(0, 500), min_size=n_users, max_size=n_users, unique=True))
    items = st.lists(st.sampled_from(pool), unique=True, max_size=len(pool))
    qrels, run = [], []
    for u in user_ids:
        in_truth, in_run = draw(st.sampled_from([(True, True), (True, False), (False, True)]))
        if in_truth:
            qrels += [(u, i, draw(st.integers(0, 3))) for i in draw(items)]
        if in_run:
            run += [(u, i, float(draw(st.integers(0, 2)))) for i in draw(items)]
    first = user_ids[0]
    if not any(r[0] == first for r in qrels):
        qrels.append((first, pool[0], 1))
    if not any(r[0] == first for r in run):
        run.append((first, pool[0], 1.0))
    if draw(st.booleans()):  # users interleaved: the run is not grouped
        run = draw(st.permutations(run))
    return (
        pd.DataFrame(qrels, columns=["user", "item", "relevance"]),
        pd.DataFrame(run, columns=["user", "item", "score"]),
    )


def as_strings(df: pd.DataFrame, form: str, padded: bool) -> pd.DataFrame:
    """``df`` with its ids as strings in column type ``form``."""
    out = df.copy()
    for col, prefix in (("user", "u"), ("item", "")):
        text = [f"{prefix}{v:04d}" if padded else f"{prefix}{v}" for v in df[col]]
        out[col] = pd.Series(text, index=df.index, dtype=object).astype(FORMS[form])
    return out


def chunked(df: pd.DataFrame, form: str, padded: bool) -> pd.DataFrame:
    """``as_strings`` built from two concatenated halves: Arrow columns of two chunks."""
    half = len(df) // 2
    parts = [as_strings(df.iloc[:half], form, padded), as_strings(df.iloc[half:], form, padded)]
    return pd.concat(parts, ignore_index=True)


def same_evaluation(a: metrics.Evaluation, b: metrics.Evaluation, key) -> None:
    """Per-user values equal exactly (users matched by ``key``), summaries to rounding."""
    a_rows = a.per_user.rename(index=key)
    assert sorted(a_rows.index) == sorted(b.per_user.index)
    a_rows = a_rows.loc[list(b.per_user.index)]
    np.testing.assert_array_equal(a_rows.to_numpy(), b.per_user.to_numpy())
    assert a.counts == b.counts
    assert a.options == b.options
    for name, value in a.summary.items():
        np.testing.assert_allclose(value, b.summary[name], rtol=1e-12, atol=1e-15)


@SETTINGS
@given(
    t=int_tables(),
    id_order=st.sampled_from(["natural", "string"]),
    tie_break=st.sampled_from(["item_asc", "item_desc"]),
    user_set=st.sampled_from(["truth", "intersection"]),
    form=st.sampled_from(list(FORMS)),
    two_chunks=st.booleans(),
)
def test_string_forms_evaluate_like_integer_ids(t, id_order, tie_break, user_set, form, two_chunks):
    qrels, run = t
    padded = id_order == "natural"  # zero-padded strings sort as the numbers do
    opts = {"id_order": id_order, "tie_break": tie_break, "user_set": user_set}
    want = metrics.evaluate(qrels, run, NAMES, **opts)
    build = chunked if two_chunks else as_strings
    got = metrics.evaluate(build(qrels, form, padded), build(run, form, padded), NAMES, **opts)
    same_evaluation(want, got, lambda u: f"u{u:04d}" if padded else f"u{u}")


@SETTINGS
@given(t=int_tables(), form=st.sampled_from(list(FORMS)))
def test_string_ids_ignore_id_order(t, form):
    # strings compare as strings either way: id_order only changes how integers compare
    qrels, run = (as_strings(d, form, padded=False) for d in t)
    natural = metrics.evaluate(qrels, run, NAMES, tie_break="item_desc")
    string = metrics.evaluate(qrels, run, NAMES, tie_break="item_desc", id_order="string")
    np.testing.assert_array_equal(natural.per_user.to_numpy(), string.per_user.to_numpy())


def test_two_chunk_columns_are_really_chunked():
    run = pd.DataFrame({"user": [1, 1, 2], "item": [3, 4, 3], "score": [1.0, 1.0, 1.0]})
    out = chunked(run, "str", padded=False)
    assert out["item"].array.__arrow_array__().num_chunks == 2


def _seeded(seed: int, n_users: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A larger grouped run (scores tie in threes) and graded qrels with int ids 1-999."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(n_users):
        items = rng.choice(np.arange(1, 1000), size=rng.integers(1, 40), replace=False)
        rows += [(u, int(i), float(rng.integers(0, 3))) for i in items]
    run = pd.DataFrame(rows, columns=["user", "item", "score"])
    truth = run.sample(frac=0.3, random_state=seed)[["user", "item"]]
    qrels = truth.assign(relevance=rng.integers(0, 4, len(truth)))
    return qrels.reset_index(drop=True), run


@pytest.mark.parametrize("form", ["str", "category", "object", "arrow"])
@pytest.mark.parametrize("grouped", [True, False])
def test_pieces_on_threads_give_the_same_numbers(monkeypatch, form, grouped):
    # tiny pieces: Arrow columns are encoded in many pieces, on threads when there are cores
    qrels, run = _seeded(3, 300)
    if not grouped:
        run = run.sample(frac=1.0, random_state=1).reset_index(drop=True)
    opts = {"id_order": "string", "tie_break": "item_desc"}
    want = metrics.evaluate(qrels, run, NAMES, **opts)
    monkeypatch.setattr(engine, "PIECE_ROWS", 97)
    assert engine.workers(len(run)) == min(os.cpu_count() or 1, 4)
    got = metrics.evaluate(
        as_strings(qrels, form, padded=False), as_strings(run, form, padded=False), NAMES, **opts
    )
    same_evaluation(want, got, lambda u: f"u{u}")


def test_per_user_index_holds_the_ids():
    qrels, run = _seeded(5, 20)
    ev = metrics.evaluate(
        as_strings(qrels, "category", False), as_strings(run, "category", False), ["ndcg@3"]
    )
    assert list(ev.per_user.index) == sorted(f"u{u}" for u in qrels["user"].unique())
    ev = metrics.evaluate(qrels, run, ["ndcg@3"])
    assert list(ev.per_user.index) == sorted(qrels["user"].unique())


def test_mixed_id_kinds_are_one_line_errors():
    qrels, run = _seeded(7, 5)
    with pytest.raises(ValueError, match="has an integer dtype in one table and not in the other"):
        metrics.evaluate(qrels, as_strings(run, "category", False), ["ndcg@3"])
    # numbers in an object column are text: the message says so rather than "strings"
    as_objects = qrels.assign(user=qrels["user"].astype(object))
    with pytest.raises(ValueError, match=r"qrels object, run int64; object and categorical"):
        metrics.evaluate(as_objects, run, ["ndcg@3"])


def test_uint64_ids_beyond_int64_are_refused_not_wrapped():
    """2**63 + 5 would wrap to a negative int64 key and rank before 5 (a wrong tie order)."""
    big = np.uint64(2**63 + 5)
    qrels = pd.DataFrame({"user": np.array([1], np.uint64), "item": [big], "relevance": [1]})
    run = pd.DataFrame(
        {"user": np.array([1, 1], np.uint64), "item": np.array([5, big]), "score": [1.0, 1.0]}
    )
    with pytest.raises(ValueError, match=r"^ids in column .item. reach 9223372036854775813: "):
        metrics.evaluate(qrels, run, ["precision@1"])
    small = run.assign(item=np.array([5, 7], np.uint64))  # below 2**63: integers as ever
    truth = qrels.assign(item=np.array([7], np.uint64))
    assert metrics.evaluate(truth, small, ["precision@1"]).summary["precision@1"] == 0.0


def test_run_users_equal_only_as_text_are_a_one_line_error():
    qrels = pd.DataFrame({"user": ["1"], "item": ["a"], "relevance": [1]})
    run = pd.DataFrame(
        {"user": pd.Series(["1", 1, "1"], dtype=object), "item": ["a", "b", "c"], "score": 1.0}
    )
    with pytest.raises(ValueError, match="different ids with the same text") as err:
        metrics.evaluate(qrels, run, ["ndcg@3"])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("dtype", [object, "category"])
def test_truth_users_equal_only_as_text_are_the_same_error(dtype):
    """As in the run: 1 and "1" in the truth's user column are refused, not merged into one
    user (they were, silently, whichever order they came in)."""
    qrels = pd.DataFrame(
        {"user": pd.Series([1, "1"], dtype=dtype), "item": ["a", "b"], "relevance": [1, 1]}
    )
    run = pd.DataFrame({"user": ["1", "1"], "item": ["a", "b"], "score": [2.0, 1.0]})
    with pytest.raises(ValueError, match=r"^qrels column 'user' holds different ids with the same"):
        metrics.evaluate(qrels, run, ["recall@1"])
