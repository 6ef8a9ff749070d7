"""The model protocol and a base class doing id encoding, seen-item exclusion and batched top-k.

Conventions of ``recommend(users, k)`` for every model built on ``BaseRecommender``:

- returns ``(ids, scores)``, both of shape ``(len(users), k)``, best first; ``ids`` has the dtype
  of the training item ids (``int64``, or ``object`` holding ``str``), ``scores`` is ``float64``;
- ties in score are broken by ascending item id, so output is deterministic;
- items the user interacted with in training are excluded (``exclude_seen=True``, the default);
- padding: when fewer than ``k`` items are left for a user (small catalog, or seen items
  excluded), the remaining positions hold score ``-inf`` and id ``PAD_ITEM_INT``
  (``np.iinfo(np.int64).min``) for integer ids or ``None`` for object ids. Real scores are always
  finite, so ``scores == -inf`` (see ``padding_mask``) marks padding exactly;
- unknown users (absent from training) get the model's fallback scores: popularity for the
  popularity and item-kNN models, random for the random model; nothing is excluded for them.

``score_items(users, items)`` scores given candidates instead of ranking the whole catalog (sampled
or file candidate sets, AUC): ``items`` is ``(len(users), m)`` item ids, the result
``float64[len(users), m]`` holds the same scores ``recommend`` ranks by, with no seen-item
exclusion (the candidate set is the caller's choice), unknown users' fallback scores, and ``NaN``
for item ids the model does not know (absent from training). Scores are finite otherwise.

``recommend_with_auc(users, k, relevant_users, relevant_items)`` returns ``recommend``'s output
plus the AUC counts of every ranked candidate (``metrics.scores.AucCounts``), counted from the same
score rows, so ``auc``/``gauc``/``global_auc`` cover the whole ranked catalog; ``scores_catalog``
says whether a model has it (models that implement ``_score``). ``rank_positions(users, k)``
(and ``recommend_with_auc(..., positions=True)``) give the same lists as positions in
``item_ids_`` (``-1``: padding), so a caller building one long table takes each id once.
Positions are a duck-typed capability: a model whose ``position_ids_`` is not ``None`` has
``rank_positions`` giving ``recommend``'s lists as positions in ``position_ids_``
(``item_ids_`` here when the model scores the catalog; ``PrecomputedScores``: its file's items).

Optional capabilities are duck-typed: a model *can predict ratings* iff it has a method
``predict_ratings(users, items) -> float64[n]`` for ``n`` (user, item) pairs (see
``BiasRating``). Models that do not rank from a score matrix (``PrecomputedScores``,
``MLflowModel``) keep the ``recommend`` conventions above: same shapes, dtypes, tie order and
padding.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Protocol, Self, runtime_checkable

import numpy as np
import pandas as pd
import scipy.sparse as sp
from tqdm.auto import tqdm

from harness.data import ITEM, USER, IdentityCache, id_codes, plain
from harness.models.sparse_topk import row_spans, sparse_topk
from metrics.checks import require_columns, require_int
from metrics.scores import AucCounts, matrix_auc_counts, pooled_wins2
from metrics.sets import tied_sort

__all__ = [
    "PAD_ITEM_INT",
    "PAD_ITEM_OBJECT",
    "BaseRecommender",
    "Recommender",
    "checked_lists",
    "padding_mask",
    "topk_rows",
]

PAD_ITEM_INT: int = int(np.iinfo(np.int64).min)
PAD_ITEM_OBJECT: Any = None
# Elements of one dense user × item score block (float64: 16 MiB); bounds memory per batch. Below
# glibc's largest mmap threshold (32 MiB), so blocks are reused from the heap: a 64 MiB block was
# a fresh mmap per batch, and its page faults cost as much system time as the ranking itself.
_BLOCK_ELEMENTS = 2**21
# Stored scores (at most) and users per batch of sparse score rows
# (:meth:`BaseRecommender._rank_sparse`): about 50 MiB of temporaries.
_SPARSE_ENTRIES = 2**21
_SPARSE_ROWS = 4096


@runtime_checkable
class Recommender(Protocol):
    """What the harness needs from a model: fit on training interactions, recommend top-k."""

    def fit(self, train: pd.DataFrame) -> Recommender:
        """Learn from an Interactions frame (columns user, item, ...); return self."""
        ...

    def recommend(self, users: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return item ids and scores, each ``(len(users), k)``, best first."""
        ...


def padding_mask(scores: np.ndarray) -> np.ndarray:
    """Boolean mask of padded positions in a ``recommend`` output (score is ``-inf``)."""
    return np.isneginf(scores)


def checked_lists(
    model: Any, users: np.ndarray, k: int, at: Any, scores: Any
) -> tuple[np.ndarray, np.ndarray]:
    """A model's ``recommend`` output held to its contract, so no list is credited to another
    user or silently lost: one row per user asked, ids and scores of one shape, at most ``k``
    columns, scores finite or ``-inf`` (padding); whole-number float ids (``1.0``) become the
    integer ids they name, as the data loader reads them."""
    at, scores = np.asarray(at), np.asarray(scores)
    name = f"{type(model).__name__}.recommend"
    if at.ndim != 2 or at.shape != scores.shape or at.shape[0] != len(users) or at.shape[1] > k:
        raise ValueError(
            f"{name} returned ids of shape {at.shape} and scores of shape {scores.shape} for "
            f"{len(users):,} users and k={k}: it must return one row per user asked, in their "
            "order, of at most k columns (pad short lists with score -inf)"
        )
    scores = scores.astype(np.float64, copy=False)
    bad = np.isnan(scores) | np.isposinf(scores)
    if bad.any():
        row, col = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(
            f"{name} scored user {plain(users[row])!r}'s item at rank {col + 1} "
            f"{scores[row, col]}: scores must be finite (-inf marks padding)"
        )
    if at.dtype.kind == "f":
        real = ~padding_mask(scores)
        ids = at[real]
        whole = np.isfinite(ids) & (ids == np.round(ids)) & (np.abs(ids) < 2.0**63)
        if not whole.all():
            raise ValueError(
                f"{name} returned item id {float(ids[~whole][0])!r}, not a whole number: return "
                "the item ids as they are in the data"
            )
        at = np.where(real, at, PAD_ITEM_INT).astype(np.int64)
    return at, scores


def topk_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Column indices and values of each row's ``k`` largest entries, best first.

    Ties are broken by ascending column index. Linear in the row length and robust to massive
    ties (e.g. many zero scores): see ``_topk_pruned``. No NaN allowed; ``k`` is clipped to the
    number of columns.
    """
    n_rows, n_cols = scores.shape
    k = min(k, n_cols)
    if k < 1 or n_rows == 0:
        empty = np.zeros((n_rows, max(k, 0)), dtype=np.int64)
        return empty, empty.astype(scores.dtype)
    group = max(1, int(np.sqrt(n_cols / k)))
    if n_cols <= 4 * k * group or n_cols <= 256:
        return _topk_sorted(scores, k)
    return _topk_pruned(scores, k, group)


def _topk_sorted(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Reference top-k by a full stable sort of each row (for small rows)."""
    cols = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return cols, np.take_along_axis(scores, cols, axis=1)


def _select_ordered(vals: np.ndarray, cols: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of each row of ``vals`` whose ``cols`` ascend along the row; ties: lowest col.

    Finds the k-th largest value with ``np.partition``, keeps everything above it plus the
    leftmost entries equal to it, then sorts only those ``k`` (stable, so ties keep col order).
    """
    n_rows = vals.shape[0]
    kth = -np.partition(-vals, k - 1, axis=1)[:, k - 1, None]
    greater = vals > kth
    equal = vals == kth
    need = k - greater.sum(axis=1)
    keep = greater | (equal & (np.cumsum(equal, axis=1, dtype=np.int32) <= need[:, None]))
    pos = np.nonzero(keep)[1].reshape(n_rows, k)
    sel_vals = np.take_along_axis(vals, pos, axis=1)
    order = np.argsort(-sel_vals, axis=1, kind="stable")
    return (
        np.take_along_axis(np.take_along_axis(cols, pos, axis=1), order, axis=1),
        np.take_along_axis(sel_vals, order, axis=1),
    )


def _topk_pruned(scores: np.ndarray, k: int, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k via group maxima: only ``k`` column groups per row can hold values above the bound.

    Columns are cut into groups of ``group``; ``lb`` = the k-th largest group maximum is a lower
    bound of the row's k-th largest value, and every value ``> lb`` lies in the ``k`` groups with
    the largest maxima. Gathering those groups and sorting them by (-value, column) gives the
    answer unless the k-th value equals ``lb`` and more groups have ``lb`` as maximum than were
    gathered: then the lowest-index ties at ``lb`` are gathered by ``_first_ties``.
    """
    n_rows, n_cols = scores.shape
    starts = np.arange(0, n_cols, group)
    gmax = np.maximum.reduceat(scores, starts, axis=1)
    top_groups = np.sort(np.argpartition(-gmax, k - 1, axis=1)[:, :k], axis=1)
    lb = np.take_along_axis(gmax, top_groups, axis=1).min(axis=1)
    cols = (top_groups[:, :, None] * group + np.arange(group)).reshape(n_rows, k * group)
    inside = cols < n_cols
    vals = np.take_along_axis(scores, np.minimum(cols, n_cols - 1), axis=1)
    vals[~inside] = -np.inf
    cols[~inside] = n_cols  # out-of-range slots: last in column order, never chosen over real ones
    top_cols, top_vals = _select_ordered(vals, cols, k)

    # Values equal to lb outside the gathered groups exist only in groups whose max is lb and
    # that were not gathered; only those rows need a scan.
    groups_at_lb = (gmax == lb[:, None]).sum(axis=1)
    gathered_at_lb = k - (gmax > lb[:, None]).sum(axis=1)
    tied = np.flatnonzero((top_vals[:, k - 1] == lb) & (groups_at_lb > gathered_at_lb))
    if tied.size:
        bound = lb[tied, None]
        above = (top_vals[tied] > bound).sum(axis=1)  # all values > lb are already in place
        need = k - above
        tie_cols = _first_ties(scores, tied, gmax, lb[tied], need, group)
        rr, jj = np.nonzero(np.arange(k) < need[:, None])
        row_cols = top_cols[tied]
        row_vals = top_vals[tied]
        row_cols[rr, above[rr] + jj] = tie_cols[rr, jj]
        row_vals[rr, above[rr] + jj] = lb[tied][rr]
        top_cols[tied] = row_cols
        top_vals[tied] = row_vals
    return top_cols, top_vals


def _first_ties(
    scores: np.ndarray,
    rows: np.ndarray,
    gmax: np.ndarray,
    bound: np.ndarray,
    need: np.ndarray,
    group: int,
) -> np.ndarray:
    """For each of ``rows``, the first ``need`` column indices whose value equals ``bound``.

    Only groups whose maximum is ``>= bound`` can hold such values, and the first ``need`` of
    them lie in groups up to the ``need``-th group whose maximum equals ``bound`` (each of those
    holds at least one). That is at most ``need + k - 1`` groups per row, gathered in column
    order. Returns ``int64[len(rows), max(need)]``; slots after a row's ``need``-th are unused.
    """
    n_cols = scores.shape[1]
    gm = gmax[rows]
    at = gm == bound[:, None]
    cum_at = np.cumsum(at, axis=1, dtype=np.int32)
    wanted = (at & (cum_at <= need[:, None])) | ((gm > bound[:, None]) & (cum_at < need[:, None]))
    r, g = np.nonzero(wanted)  # row-major: groups ascending within a row
    first = np.searchsorted(r, np.arange(rows.size))
    slot = np.arange(r.size) - first[r]
    n_groups = int(wanted.sum(axis=1).max())
    grp = np.full((rows.size, n_groups), -1, dtype=np.int64)
    grp[r, slot] = g
    cols = (grp[:, :, None] * group + np.arange(group)).reshape(rows.size, n_groups * group)
    inside = (grp[:, :, None] >= 0).repeat(group, axis=2).reshape(cols.shape) & (cols < n_cols)
    vals = scores[rows[:, None], np.clip(cols, 0, n_cols - 1)]
    eq = inside & (vals == bound[:, None])
    rank = np.cumsum(eq, axis=1, dtype=np.int32)
    take = eq & (rank <= need[:, None])
    tr, tc = np.nonzero(take)
    out = np.zeros((rows.size, int(need.max())), dtype=np.int64)
    out[tr, rank[tr, tc] - 1] = cols[tr, tc]
    return out


def candidate_arrays(users: object, items: object) -> tuple[np.ndarray, np.ndarray]:
    """``score_items`` arguments checked: 1-D users and an items matrix of one row per user."""
    users, items = np.asarray(users), np.asarray(items)
    if users.ndim != 1:
        raise ValueError(f"'users' must be a 1-D array of user ids (got shape {users.shape})")
    if items.ndim != 2 or items.shape[0] != users.size:
        raise ValueError(
            f"'items' must have shape (len(users), m) = ({users.size}, m) (got shape {items.shape})"
        )
    return users, items


class BaseRecommender:
    """Shared machinery: dense id codes, the binary user × item CSR matrix and batched top-k.

    Subclasses implement ``_score(user_codes) -> float[b, n_items]`` (finite values) and may
    override ``_fit(matrix)``, ``_score_unknown(users)`` (default: item popularity) and
    ``_sparse_factors()`` (scores that are a product of sparse matrices, ranked sparsely).
    At most ``batch_size`` users are scored at a time, and at most about 2**21 scores (16 MiB)
    per batch whatever ``batch_size`` says (default: that many).
    """

    def __init__(
        self,
        *,
        exclude_seen: bool = True,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> None:
        require_int("batch_size", batch_size, none_ok=True)
        self.exclude_seen = exclude_seen
        self.batch_size = batch_size
        self.progress = progress

    # -------------------------------------------------------------------------- fitting

    def fit(self, train: pd.DataFrame) -> Self:
        """Encode ids (sorted, so codes follow id order), build the binary matrix, then ``_fit``."""
        require_columns(train.columns, (USER, ITEM), "training frame")
        if len(train) == 0:
            raise ValueError("training frame is empty (0 rows)")
        ucodes, user_ids = id_codes(train[USER])  # text ids: the split's codes, not rehashed
        icodes, item_ids = id_codes(train[ITEM])
        self.user_ids_, self._user_index = _ids_and_index(user_ids)
        self.item_ids_, self._item_index = _ids_and_index(item_ids)
        shape = (len(self.user_ids_), len(self.item_ids_))
        matrix = sp.csr_matrix(
            (np.ones(len(train), dtype=np.float64), (ucodes, icodes)), shape=shape
        )
        matrix.sum_duplicates()
        matrix.data[:] = 1.0
        self.interactions_ = matrix
        self.item_popularity_ = np.diff(matrix.tocsc().indptr).astype(np.float64)
        self._fit(matrix)
        return self

    def _fit(self, matrix: sp.csr_matrix) -> None:
        """Model-specific fitting on the binary user × item matrix (default: nothing)."""

    # ---------------------------------------------------------------------------- scoring

    def _score(self, user_codes: np.ndarray) -> np.ndarray:
        """Dense ``float64[len(user_codes), n_items]`` scores for known users."""
        raise NotImplementedError

    def _score_unknown(self, users: np.ndarray) -> np.ndarray:
        """Scores for users absent from training: item popularity (distinct users per item)."""
        return np.tile(self.item_popularity_, (len(users), 1))

    @property
    def scores_catalog(self) -> bool:
        """True when the model ranks the whole catalog from ``_score`` with the base ``recommend``
        (so ``recommend_with_auc`` gives the same lists); False for models that only return lists
        (e.g. ``PrecomputedScores``) or rank their own way."""
        cls = type(self)
        return cls._score is not BaseRecommender._score and (
            cls.recommend is BaseRecommender.recommend
        )

    def recommend(
        self, users: np.ndarray, k: int, *, exclude_seen: bool | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` item ids and scores per user, best first (see the module doc for padding).

        ``exclude_seen=None`` uses the value given at construction.
        """
        positions, scores = self.rank_positions(users, k, exclude_seen=exclude_seen)
        return self._ids_at(positions), scores

    def rank_positions(
        self, users: np.ndarray, k: int, *, exclude_seen: bool | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``recommend``'s lists as positions in ``item_ids_`` (``-1`` where padded) and
        scores: a caller building one table of many lists takes each id from ``item_ids_`` once
        instead of receiving a Python object per list entry (text ids)."""
        users, k, exclude = self._recommend_args(users, k, exclude_seen)
        positions, scores, _, _ = self._rank(users, k, exclude, None)
        return positions, scores

    @property
    def position_ids_(self) -> np.ndarray | None:
        """The ids ``rank_positions``' positions index: ``item_ids_`` when the model ranks the
        catalog with the base ``recommend`` (``scores_catalog``), else ``None`` (no positions)."""
        return self.item_ids_ if self.scores_catalog else None

    def _ids_at(self, positions: np.ndarray) -> np.ndarray:
        """Item ids at ``positions`` of ``item_ids_``; the padding id where ``-1``."""
        return _ids_at(self.item_ids_, positions)

    def recommend_with_auc(
        self,
        users: np.ndarray,
        k: int,
        relevant_users: np.ndarray,
        relevant_items: np.ndarray,
        *,
        pooled: bool = False,
        exclude_seen: bool | None = None,
        positions: bool = False,
    ) -> tuple[np.ndarray, np.ndarray, AucCounts]:
        """``recommend`` plus the AUC counts of every ranked candidate (catalog-wide AUC).

        The candidates of a user are exactly the items ``recommend`` ranks: the catalog minus
        the user's seen items when excluded. The relevant ones are the (user, item) pairs
        ``relevant_users[i], relevant_items[i]``; pairs of users not requested, of items the
        model does not know, or of seen items are not candidates. Returns ``(ids, scores,
        counts)``: ``recommend``'s output and an :class:`~metrics.scores.AucCounts` aligned with
        ``users`` (which must be distinct), ties counting 1/2, counted batch by batch while
        ranking, from the same score rows.

        ``pooled=True`` also counts ``pooled_wins`` (for ``global_auc``): the relevant scores of
        every user are only all known after the ranking pass, so a second scoring pass compares
        each batch's irrelevant scores with them (``pooled_wins2``, exact); memory stays bounded
        by a batch plus one score per relevant pair. ``positions=True``: the lists as
        :meth:`rank_positions` gives them.
        """
        if not self.scores_catalog:
            raise TypeError(f"{type(self).__name__} does not score the whole catalog")
        users, k, exclude = self._recommend_args(users, k, exclude_seen)
        user_index = pd.Index(users)
        if not user_index.is_unique:
            dup = user_index[user_index.duplicated()][0]
            raise ValueError(f"'users' must be distinct for recommend_with_auc (got {dup!r} twice)")
        ru, ri = np.asarray(relevant_users), np.asarray(relevant_items)
        if ru.shape != ri.shape or ru.ndim != 1:
            raise ValueError(
                "'relevant_users' and 'relevant_items' must be 1-D arrays of one length "
                f"(got shapes {ru.shape} and {ri.shape})"
            )
        rows, cols = user_index.get_indexer(ru), self._item_index.get_indexer(ri)
        pairs = np.unique(np.stack([rows, cols])[:, (rows >= 0) & (cols >= 0)], axis=1)
        at, scores, counts, relevant = self._rank(users, k, exclude, pairs)
        if pooled:
            wins = self._pooled_wins(users, exclude, pairs, relevant)
            counts = replace(counts, pooled_wins=wins)
        return (at if positions else self._ids_at(at)), scores, counts

    def _recommend_args(
        self, users: np.ndarray, k: int, exclude_seen: bool | None
    ) -> tuple[np.ndarray, int, bool]:
        """``recommend``'s arguments checked: 1-D users, positive ``k``, the exclusion used."""
        if not hasattr(self, "item_ids_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(train) first")
        require_int("k", k)
        users = np.asarray(users)
        if users.ndim != 1:
            raise ValueError(f"'users' must be a 1-D array of user ids (got shape {users.shape})")
        return users, int(k), self.exclude_seen if exclude_seen is None else exclude_seen

    def _batch_users(self) -> int:
        """Users per score block: ``batch_size`` at most, and never more than fit in
        ``_BLOCK_ELEMENTS`` scores (16 MiB), so a wide catalog cannot make a block of gigabytes
        (a user's scores do not depend on the batch, so neither do the lists)."""
        fit = max(1, _BLOCK_ELEMENTS // max(self.item_ids_.size, 1))
        return min(self.batch_size, fit) if self.batch_size else fit

    def _batches(
        self, users: np.ndarray, exclude: bool, seen: sp.csr_matrix | None = None
    ) -> Iterator[tuple[int, np.ndarray]]:
        """``(start, block)`` per user batch: the batch's score rows, seen items at ``-inf``
        (with ``exclude``: the fitted rows' items and, when given, ``seen``'s: one row per user of
        ``users``, columns the model's item codes, for a model fitted on a sample of the rows)."""
        codes = self._user_index.get_indexer(users)
        batch = self._batch_users()
        starts = range(0, users.size, batch)
        for start in tqdm(
            starts, disable=not self.progress, desc=type(self).__name__, unit="batch"
        ):
            stop = min(start + batch, users.size)
            rows = None if seen is None else seen[start:stop]
            yield start, self._score_block(users[start:stop], codes[start:stop], exclude, rows)

    def _rank(
        self,
        users: np.ndarray,
        k: int,
        exclude: bool,
        pairs: np.ndarray | None,
        seen: sp.csr_matrix | None = None,
    ) -> tuple[np.ndarray, np.ndarray, AucCounts, np.ndarray]:
        """Top-``k`` of every user as positions in ``item_ids_`` (``-1``: padding) and scores
        and, when ``pairs`` (relevant ``[row; item code]``, sorted by row) is given, the AUC
        counts of each user and the scores of the relevant candidates, from the same score
        rows (``seen``: see :meth:`_batches`)."""
        factors = self._sparse_factors()
        if pairs is None and factors is not None:
            return self._rank_sparse(users, k, exclude, seen, factors)
        return self._rank_dense(users, k, exclude, pairs, seen)

    def _rank_dense(
        self,
        users: np.ndarray,
        k: int,
        exclude: bool,
        pairs: np.ndarray | None,
        seen: sp.csr_matrix | None = None,
    ) -> tuple[np.ndarray, np.ndarray, AucCounts, np.ndarray]:
        """:meth:`_rank` from dense score rows, ``_BLOCK_ELEMENTS`` at a time."""
        n_users, n_items = users.size, self.item_ids_.size
        scores_out = np.full((n_users, k), -np.inf)
        cols_out = np.full((n_users, k), -1, dtype=np.int64)
        width = min(k, n_items)
        wins, n_pos, n_neg = np.zeros(n_users), np.zeros(n_users), np.zeros(n_users)
        relevant: list[np.ndarray] = []
        for start, block in self._batches(users, exclude, seen):
            stop = start + block.shape[0]
            cols, vals = topk_rows(block, width)
            cols_out[start:stop, :width] = cols
            scores_out[start:stop, :width] = vals
            if pairs is not None:
                lo, hi = np.searchsorted(pairs[0], [start, stop])
                rows, items = pairs[0, lo:hi] - start, pairs[1, lo:hi]
                part = matrix_auc_counts(block, rows, items)
                value = block[rows, items]
                relevant.append(value[np.isfinite(value)])
                wins[start:stop], n_pos[start:stop] = part.wins, part.n_pos
                n_neg[start:stop] = part.n_neg

        cols_out[np.isneginf(scores_out)] = -1  # excluded items ranked last are padding
        scored = np.concatenate(relevant) if relevant else np.zeros(0)
        return cols_out, scores_out, AucCounts(wins, n_pos, n_neg), scored

    def _sparse_factors(self) -> tuple[sp.csr_matrix, sp.csr_matrix] | None:
        """``(left, right)`` when known users' scores are ``left[codes] @ right`` with implicit
        zeros (item-item models): lists are then ranked from the stored scores
        (:meth:`_rank_sparse`); ``None`` (the default) ranks dense rows."""
        return None

    def _rank_sparse(
        self,
        users: np.ndarray,
        k: int,
        exclude: bool,
        seen: sp.csr_matrix | None,
        factors: tuple[sp.csr_matrix, sp.csr_matrix],
    ) -> tuple[np.ndarray, np.ndarray, AucCounts, np.ndarray]:
        """:meth:`_rank`'s lists from sparse score rows (:func:`sparse_topk`), in batches of
        about ``_SPARSE_ENTRIES`` stored scores; users with fewer than ``k`` positive unexcluded
        scores and unknown users are ranked densely (their lists reach zero or fallback
        scores). The same lists as :meth:`_rank_dense` (10M events: several times faster)."""
        left, right = factors
        n_users, n_items = users.size, self.item_ids_.size
        width = min(k, n_items)
        cols_out = np.full((n_users, k), -1, dtype=np.int64)
        scores_out = np.full((n_users, k), -np.inf)
        codes = self._user_index.get_indexer(users)
        bound = np.minimum(left @ np.diff(right.indptr), n_items)[np.maximum(codes, 0)]
        known = np.flatnonzero((codes >= 0) & (bound >= width))  # others cannot fill a list
        bound = bound[known]
        done = np.zeros(n_users, dtype=bool)
        spans = list(row_spans(bound, _SPARSE_ENTRIES, _SPARSE_ROWS))
        for lo, hi in tqdm(
            spans, disable=not self.progress, desc=type(self).__name__, unit="batch"
        ):
            at = known[lo:hi]
            scores = left[codes[at]] @ right
            if not np.isfinite(scores.data).all():
                raise ValueError(f"{type(self).__name__} produced non-finite scores")
            excluded = None
            if exclude:
                excluded = self.interactions_[codes[at]]
                if seen is not None:
                    excluded = excluded + seen[at]
            cols, values, full = sparse_topk(scores, width, excluded)
            cols_out[at[full], :width] = cols[full]
            scores_out[at[full], :width] = values[full]
            done[at[full]] = True
        rest = np.flatnonzero(~done)
        if rest.size:
            part = None if seen is None else seen[rest]
            cols_out[rest], scores_out[rest], _, _ = self._rank_dense(
                users[rest], k, exclude, None, part
            )
        empty = np.zeros(n_users)
        return cols_out, scores_out, AucCounts(empty, empty.copy(), empty.copy()), np.zeros(0)

    def _pooled_wins(
        self,
        users: np.ndarray,
        exclude: bool,
        pairs: np.ndarray,
        relevant: np.ndarray,
        seen: sp.csr_matrix | None = None,
    ) -> float:
        """Wins of the relevant candidates (``relevant``: their scores) over the irrelevant
        candidates of all users, by a second pass over the score rows (``seen``: see
        :meth:`_batches`)."""
        wins2 = 0
        for start, block in self._batches(users, exclude, seen):
            lo, hi = np.searchsorted(pairs[0], [start, start + block.shape[0]])
            negative = np.isfinite(block)
            negative[pairs[0, lo:hi] - start, pairs[1, lo:hi]] = False
            wins2 += pooled_wins2(relevant, block[negative])
        return wins2 / 2

    def score_items(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Scores of given candidates: ``float64[len(users), m]`` for ``items`` of shape
        ``(len(users), m)``; ``NaN`` where the item id is unknown to the model.

        The same scores ``recommend`` ranks by (unknown users get the fallback scores) but without
        seen-item exclusion: for sampled or file candidate sets and AUC. Computed in user batches
        from full-catalog score rows, so the cost does not depend on ``m``.
        """
        if not hasattr(self, "item_ids_"):
            raise RuntimeError(f"{type(self).__name__} is not fitted; call fit(train) first")
        users, items = candidate_arrays(users, items)
        n_users, m = items.shape
        out = np.full((n_users, m), np.nan)
        if n_users == 0 or m == 0:
            return out
        item_codes = self._item_index.get_indexer(items.ravel()).reshape(n_users, m)
        codes = self._user_index.get_indexer(users)
        batch = self._batch_users()
        starts = range(0, n_users, batch)
        for start in tqdm(
            starts, disable=not self.progress, desc=type(self).__name__, unit="batch"
        ):
            stop = min(start + batch, n_users)
            block = self._score_block(users[start:stop], codes[start:stop], exclude=False)
            cols = item_codes[start:stop]
            vals = np.take_along_axis(block, np.maximum(cols, 0), axis=1)
            vals[cols < 0] = np.nan
            out[start:stop] = vals
        return out

    def _score_block(
        self,
        users: np.ndarray,
        codes: np.ndarray,
        exclude: bool,
        seen: sp.csr_matrix | None = None,
    ) -> np.ndarray:
        known = codes >= 0
        if known.all():
            block = np.asarray(self._score(codes), dtype=np.float64)
        else:
            block = np.empty((codes.size, self.item_ids_.size), dtype=np.float64)
            if known.any():
                block[known] = self._score(codes[known])
            block[~known] = self._score_unknown(users[~known])
        if not _all_finite(block):
            raise ValueError(f"{type(self).__name__} produced non-finite scores")
        if not block.flags.writeable:
            block = block.copy()
        if exclude and known.any():
            fitted = self.interactions_[codes[known]]
            rows = np.repeat(np.flatnonzero(known), np.diff(fitted.indptr))
            block[rows, fitted.indices] = -np.inf
        if exclude and seen is not None:
            block[np.repeat(np.arange(seen.shape[0]), np.diff(seen.indptr)), seen.indices] = -np.inf
        return block


def _all_finite(block: np.ndarray) -> bool:
    """No NaN or infinity in ``block``, in one pass when the sum is finite (NaN and infinities
    make it non-finite); only a sum that overflows takes the exact two-pass check."""
    with np.errstate(over="ignore", invalid="ignore"):
        total = block.sum()
    return bool(np.isfinite(total)) or bool(np.isfinite(block.max()) and np.isfinite(block.min()))


# Text ids' object arrays and lookup indexes, shared by the models fitted on the same training
# ids (``id_codes`` gives them the same categories object): converting a million ids to Python
# strings and hashing them for the lookup is then done once per run, not once per model.
_SHARED_IDS = IdentityCache()


def _ids_and_index(uniques: pd.Index) -> tuple[np.ndarray, pd.Index]:
    """``_id_array(uniques)`` and a ``pd.Index`` of it; for text ids the same two objects for
    every model fitted on the same ``uniques`` (read-only: the models never change them)."""
    if pd.api.types.is_integer_dtype(uniques.dtype):
        ids = _id_array(uniques)
        return ids, pd.Index(ids)
    shared: tuple[np.ndarray, pd.Index] | None = _SHARED_IDS.get(uniques)
    if shared is None:
        ids = _id_array(uniques)
        ids.flags.writeable = False
        shared = (ids, pd.Index(ids))
        _SHARED_IDS.put(uniques, shared)
    return shared


def _id_array(uniques: pd.Index | np.ndarray) -> np.ndarray:
    """Ids as ``int64`` when integer, else an ``object`` array (never pandas' ``str`` dtype)."""
    values = np.asarray(uniques)
    if np.issubdtype(values.dtype, np.integer):
        return values.astype(np.int64)
    return np.asarray(pd.Index(uniques).to_numpy(dtype=object))


def _pad_id(ids: np.ndarray) -> Any:
    """The padding id for an id array: ``None`` for object ids, ``PAD_ITEM_INT`` otherwise."""
    return PAD_ITEM_OBJECT if ids.dtype == object else PAD_ITEM_INT


def _ids_at(ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``ids`` at ``positions``; the padding id of ``ids``' dtype where ``-1``."""
    out = ids[positions]
    pad = positions < 0
    if pad.any():
        out[pad] = _pad_id(ids)
    return out


def _rank_order(owner: np.ndarray, items: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Row order by (owner, score descending, item id ascending).

    One ``argsort`` of an ``int64`` key: the owner code in the high bits, then the top bits of
    the score as an unsigned int that grows as the score falls (IEEE bits made monotone, so
    no sort of the scores is needed: a global one cost 2.7 of 3.9 s at 20M rows). Rows sharing
    an (owner, score prefix) key, mostly equal scores, are then ordered exactly in place: by
    item when their scores are equal, else by (score, item). Equal to
    ``np.lexsort((item ranks, -scores, owner))``, used directly for non-finite scores or
    owner codes too wide for the key.
    """
    if owner.size == 0:
        return np.zeros(0, dtype=np.int64)
    if items.dtype.kind in "iu" and items.min() >= 0 and items.max() < items.size:
        item_codes = items.astype(np.int64, copy=False)  # codes already (20M rows: -0.9 s)
        n_items = int(items.max()) + 1
    else:
        item_codes, item_uniques = pd.factorize(items, sort=True)
        n_items = max(len(item_uniques), 1)
    values = np.asarray(scores, dtype=np.float64)
    free = 63 - int(owner.max()).bit_length()  # bits of the key left for the score
    if free < 16 or int(owner.min()) < 0 or not np.isfinite(values).all():
        return np.lexsort((item_codes, -values, owner))
    bits = (values + 0.0).view(np.uint64)  # + 0.0: -0.0 becomes 0.0, equal keys for equal scores
    # grows as the score falls: non-negative scores' bits flipped (below 2**63), negative
    # scores' bits as they are (sign bit set: after them; a larger magnitude, larger bits)
    negative = (bits >> np.uint64(63)).astype(bool)
    down = np.where(negative, bits, ~bits & np.uint64(2**63 - 1))
    key = (owner.astype(np.int64) << free) | (down >> np.uint64(64 - free)).astype(np.int64)
    order, at, run = tied_sort(key)
    if not at.size:
        return order
    rows = order[at]
    exact = down[rows]
    same = (exact[1:] == exact[:-1]) | (run[1:] != run[:-1])
    if same.all():  # equal scores within each run: by item alone
        by = np.argsort(run * n_items + item_codes[rows], kind="stable")
    else:
        by = np.lexsort((item_codes[rows], exact, run))
    order[at] = rows[by]
    return order


def _ranked_lists(
    owner: np.ndarray, n_owners: int, items: np.ndarray, scores: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort a long (owner, item, score) table into per-owner ranked lists (CSR layout).

    ``owner`` holds codes in ``[0, n_owners)``. Within an owner, rows are ordered by score
    descending, ties by ascending item id (the ``recommend`` convention); no repeated
    (owner, item). Returns ``indptr`` (``int64[n_owners + 1]``), the sorted ``items`` and
    ``scores``; no Python loop over owners.
    """
    order = _rank_order(owner, items, scores)
    return _indptr(owner, n_owners), items[order], scores[order]


def _indptr(owner: np.ndarray, n_owners: int) -> np.ndarray:
    """CSR row pointers of rows grouped by ``owner`` code."""
    indptr = np.zeros(n_owners + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=n_owners), out=indptr[1:])
    return indptr


def _take_lists(
    indptr: np.ndarray, items: np.ndarray, scores: np.ndarray, codes: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` entries of the lists ``codes`` point at, as padded ``(n, k)`` arrays.

    ``codes`` index the lists of ``_ranked_lists`` (``-1``: no list, an all-padding row). Short
    lists are padded with score ``-inf`` and the padding id of ``items``' dtype.
    """
    has = codes >= 0
    safe = np.where(has, codes, 0)
    start = np.where(has, indptr[safe], 0)
    length = np.where(has, indptr[safe + 1] - start, 0)
    valid = np.arange(k) < length[:, None]
    if items.size == 0:
        ids = np.full(valid.shape, _pad_id(items), dtype=items.dtype)
        return ids, np.full(valid.shape, -np.inf)
    pos = np.where(valid, start[:, None] + np.arange(k), 0)
    ids = items[pos]
    ids[~valid] = _pad_id(items)
    return ids, np.where(valid, scores[pos], -np.inf)
