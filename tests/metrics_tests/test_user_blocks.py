"""Run rows grouped by user in blocks: string user ids are encoded once per block, and a user
whose rows sit in several blocks apart is joined exactly as grouping every row would."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

import metrics
from metrics.engine import _group_codes, _merge_blocks


def _naive_groups(keys: list[int]) -> tuple[list[int], list[list[int]]]:
    """Users in order of first appearance and each one's rows in order, by a plain loop."""
    rows: dict[int, list[int]] = {}
    for row, key in enumerate(keys):
        rows.setdefault(key, []).append(row)
    return list(rows), list(rows.values())


@settings(max_examples=200, deadline=None, database=None)
@given(blocks=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 4)), min_size=1, max_size=12))
def test_blocks_apart_join_as_grouping_every_row_would(blocks):
    # blocks of (key, length); neighbours may share a key, a key may come back later
    keys = [k for k, n in blocks for _ in range(n)]
    sizes = [n for _, n in blocks]
    group_start = np.concatenate(([0], np.cumsum(sizes)))
    order, start, ids = _merge_blocks(group_start, np.array([k for k, _ in blocks]))
    users, rows = _naive_groups(keys)
    assert ids.tolist() == users
    assert [order[a:b].tolist() for a, b in itertools.pairwise(start)] == rows
    ref_order, ref_start, ref_ids = _group_codes(np.array(keys))
    full = np.arange(len(keys)) if ref_order is None else ref_order
    np.testing.assert_array_equal(order, full)
    np.testing.assert_array_equal(start, ref_start)
    np.testing.assert_array_equal(ids, ref_ids)


def test_a_user_in_two_blocks_apart_is_one_user():
    # user "b" has rows before and after "a"'s: one list of three, in input order
    qrels = pd.DataFrame({"user": ["a", "b"], "item": ["x", "z"], "relevance": [1, 1]})
    run = pd.DataFrame(
        {
            "user": ["b"] * 4 + ["a"] * 4 + ["b"] * 4,
            "item": ["w", "x", "y", "v", "x", "y", "z", "w", "z", "u", "t", "s"],
            "score": [1.0, 1.0, 0.5, 0.1, 1.0, 0.0, 0.0, 0.0, 1.0, 0.2, 0.3, 0.4],
        }
    ).astype({"user": "str", "item": "str"})
    ints = run.assign(user=run["user"].map({"a": 0, "b": 1}))
    ints["item"] = run["item"].map({c: n for n, c in enumerate("stuvwxyz")})
    q_ints = qrels.assign(user=[0, 1], item=[5, 7])
    for tie_break in ("item_asc", "item_desc", "input_order"):
        got = metrics.evaluate(qrels, run, ["precision@1", "ndcg@3"], tie_break=tie_break)
        want = metrics.evaluate(q_ints, ints, ["precision@1", "ndcg@3"], tie_break=tie_break)
        np.testing.assert_array_equal(got.per_user.to_numpy(), want.per_user.to_numpy())
    # "b": w, x, z tie at 1.0; input order puts "w" first, ascending "w", descending "z"
    first = {
        t: metrics.evaluate(qrels, run, ["precision@1"], tie_break=t).per_user.loc["b"].iloc[0]
        for t in ("item_asc", "item_desc", "input_order")
    }
    assert first == {"item_asc": 0.0, "item_desc": 1.0, "input_order": 0.0}


def test_a_duplicate_across_blocks_apart_is_found():
    qrels = pd.DataFrame({"user": ["a", "b"], "item": ["x", "z"], "relevance": [1, 1]})
    run = pd.DataFrame(
        {
            "user": ["b"] * 4 + ["a"] * 4 + ["b"] * 4,
            "item": ["w", "x", "y", "v", "x", "y", "z", "w", "z", "u", "w", "s"],
            "score": np.linspace(0, 1, 12),
        }
    ).astype({"user": "str", "item": "str"})
    for names in (["precision@1"], ["precision@1", "auc"]):
        try:
            metrics.evaluate(qrels, run, names)
        except ValueError as err:
            assert str(err) == (
                "run has duplicate (user, item) rows: user 'b', item 'w' appears more than once"
            )
        else:
            raise AssertionError("no error")
