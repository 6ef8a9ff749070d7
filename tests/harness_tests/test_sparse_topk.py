"""Sparse ranking (``harness.models.sparse_topk``, ``BaseRecommender._rank_sparse``) against
naive references: one full sort per row of the dense scores, written here."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.models import PAD_ITEM_INT
from harness.models.base import BaseRecommender
from harness.models.sparse_topk import row_spans, sparse_topk
from harness.synthetic import generate

# halves of small integers: sums of products are exact, so ties are real ties
VALUES = st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0])


@st.composite
def matrices(draw: st.DrawFn, rows: int, cols: int, values: st.SearchStrategy) -> sp.csr_matrix:
    """A CSR matrix with stored cells drawn (stored zeros included)."""
    cells = draw(st.sets(st.tuples(st.integers(0, rows - 1), st.integers(0, cols - 1))))
    r, c = (np.array(x, dtype=np.int64) for x in zip(*cells, strict=True)) if cells else ([], [])
    v = [draw(values) for _ in range(len(cells))]
    return sp.csr_matrix((np.array(v, dtype=np.float64), (r, c)), shape=(rows, cols))


def naive_topk(
    scores: sp.csr_matrix, k: int, excluded: sp.csr_matrix | None
) -> tuple[list[list[int]], list[list[float]], list[bool]]:
    """Per row: the positive stored scores outside ``excluded``, sorted by (-value, column)."""
    cols, vals, done = [], [], []
    out = set() if excluded is None else set(zip(*excluded.nonzero(), strict=True))
    coo = scores.tocoo()
    for r in range(scores.shape[0]):
        entries = sorted(
            (-v, c)
            for rr, c, v in zip(coo.row, coo.col, coo.data, strict=True)
            if rr == r and v > 0 and (r, c) not in out
        )
        done.append(len(entries) >= k)
        cols.append([c for _, c in entries[:k]])
        vals.append([-v for v, _ in entries[:k]])
    return cols, vals, done


@settings(max_examples=150, deadline=None)
@given(data=st.data(), rows=st.integers(1, 12), cols=st.integers(1, 15), k=st.integers(1, 6))
def test_sparse_topk_is_the_sorted_positive_unexcluded_scores(
    data: st.DataObject, rows: int, cols: int, k: int
) -> None:
    scores = data.draw(matrices(rows, cols, VALUES))
    excluded = data.draw(st.none() | matrices(rows, cols, st.just(1.0)))
    cols_ref, vals_ref, done_ref = naive_topk(scores, k, excluded)
    got_cols, got_vals, done = sparse_topk(scores, k, excluded)
    assert done.tolist() == done_ref
    for r in np.flatnonzero(done):
        assert got_cols[r].tolist() == cols_ref[r]
        assert got_vals[r].tolist() == vals_ref[r]


@settings(max_examples=100, deadline=None)
@given(
    entries=st.lists(st.integers(0, 50), max_size=40),
    budget=st.integers(1, 120),
    max_rows=st.integers(1, 9),
)
def test_row_spans_cover_the_rows_within_budget(
    entries: list[int], budget: int, max_rows: int
) -> None:
    spans = list(row_spans(np.array(entries, dtype=np.int64), budget, max_rows))
    assert [lo for lo, _ in spans] == [0, *(hi for _, hi in spans[:-1])][: len(spans)]
    assert (spans[-1][1] if spans else 0) == len(entries)
    for lo, hi in spans:
        assert 1 <= hi - lo <= max_rows
        assert hi - lo == 1 or sum(entries[lo:hi]) <= budget
        if hi < len(entries) and hi - lo < max_rows:  # a span ends only when full
            assert sum(entries[lo : hi + 1]) > budget


class _ProductModel(BaseRecommender):
    """Scores ``interactions[u] @ right`` for a given ``right`` (item × item)."""

    def __init__(self, right: sp.csr_matrix, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.right = right

    def _score(self, user_codes: np.ndarray) -> np.ndarray:
        return (self.interactions_[user_codes] @ self.right).toarray()

    def _sparse_factors(self) -> tuple[sp.csr_matrix, sp.csr_matrix]:
        return self.interactions_, self.right


def naive_lists(
    model: BaseRecommender, users: np.ndarray, k: int, exclude: bool, seen: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """recommend's lists from dense scores: unknown users get popularity and exclude nothing;
    excluded items at -inf; sorted by (-score, item id); -inf slots are padding."""
    x = model.interactions_.toarray()
    items = model.item_ids_
    ids, vals = [], []
    for row, user in enumerate(users):
        where = np.flatnonzero(model.user_ids_ == user)
        if where.size:
            scores = x[where[0]] @ model.right.toarray()
            if exclude:
                scores[x[where[0]] > 0] = -np.inf
        else:
            scores = x.sum(axis=0).astype(np.float64)
        if exclude and seen is not None:
            scores[seen[row]] = -np.inf
        order = np.lexsort((items, -scores))[:k]
        top = scores[order]
        got = np.where(np.isneginf(top), PAD_ITEM_INT, items[order])
        ids.append(np.pad(got, (0, k - got.size), constant_values=PAD_ITEM_INT))
        vals.append(np.pad(top, (0, k - top.size), constant_values=-np.inf))
    return np.array(ids), np.array(vals)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), n_items=st.integers(1, 9), k=st.integers(1, 6), exclude=st.booleans())
def test_item_item_lists_equal_the_dense_ranking(
    data: st.DataObject, n_items: int, k: int, exclude: bool
) -> None:
    """Lists from the sparse path (users with k positive scores) and the dense one (the others,
    unknown users) are recommend's lists, with and without ``seen`` items."""
    events = data.draw(
        st.lists(st.tuples(st.integers(0, 7), st.integers(0, n_items - 1)), min_size=1)
    )
    train = pd.DataFrame(events, columns=["user", "item"]).assign(item=lambda f: f["item"] * 3)
    model = _ProductModel(data.draw(matrices(n_items, n_items, VALUES)), batch_size=2).fit(train)
    n = model.item_ids_.size
    if model.right.shape != (n, n):  # items absent from training: keep the known ones
        model.right = model.right[:n, :n].tocsr()
    users = np.array(data.draw(st.lists(st.integers(0, 9), min_size=1, max_size=10, unique=True)))
    seen_mask = np.array(
        data.draw(st.lists(st.booleans(), min_size=n * users.size, max_size=n * users.size))
    ).reshape(users.size, n)
    for seen in (None, seen_mask):
        ids_ref, vals_ref = naive_lists(model, users, k, exclude, seen)
        csr = None if seen is None else sp.csr_matrix(seen.astype(np.float64))
        at, scores, _, _ = model._rank(users, k, exclude, None, csr)
        np.testing.assert_array_equal(model._ids_at(at), ids_ref)
        np.testing.assert_array_equal(scores, vals_ref)


def test_item_knn_takes_the_sparse_path_and_equals_the_dense_one() -> None:
    """implicit's cosine kNN on synthetic events: every known user with 10 positive scores is
    ranked sparsely (none falls back), and the lists equal the dense ranking's."""
    pytest.importorskip("implicit")
    from harness.models import ImplicitItemCosine

    train = generate(n_users=3000, n_items=800, n_events=40_000, seed=3)
    model = ImplicitItemCosine(k_neighbors=50).fit(train)
    users = np.concatenate([model.user_ids_[::2], [-1]])  # and one unknown user
    rng = np.random.default_rng(0)
    seen = sp.random(users.size, model.item_ids_.size, density=0.01, random_state=rng, format="csr")
    for extra in (None, seen):
        dense = model._rank_dense(users, 10, True, None, extra)
        sparse = model._rank(users, 10, True, None, extra)
        np.testing.assert_array_equal(sparse[0], dense[0])
        np.testing.assert_array_equal(sparse[1], dense[1])
    at = model._user_index.get_indexer(users[:-1])
    scores = model.interactions_[at] @ model.similarity_
    _, _, done = sparse_topk(scores, 10, model.interactions_[at] + seen[:-1])
    assert done.mean() > 0.95  # the sparse path is the one taken
