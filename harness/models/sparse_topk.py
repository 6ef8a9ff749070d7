"""Top-k of sparse score rows (implicit entries score 0), without a dense row per user.

An item-item model's scores are ``interactions[users] @ similarity``: about a thousand nonzero
scores per user out of a catalog of tens of thousands. Ranking them densely writes, checks and
scans every catalog cell; here only the stored entries are read. A row's top-``k`` comes from
its entries alone when at least ``k`` of them are positive and not excluded (every other item
scores 0 or less, so ranks below them); other rows are left to the dense ranking, which also
orders zero scores by item. Same lists, scores and tie order (ascending column) as
:func:`harness.models.base.topk_rows` on the dense rows with the excluded cells at ``-inf``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp

__all__ = ["row_spans", "sparse_topk"]

#: Rows of the padded blocks in which each row's bound is found.
_CHUNK_ROWS = 64


def row_spans(entries: np.ndarray, budget: int, max_rows: int) -> Iterator[tuple[int, int]]:
    """Consecutive ``[lo, hi)`` row spans of at most ``max_rows`` rows whose ``entries`` (an
    upper bound of each row's stored scores) sum to at most ``budget``; a row above the budget
    gets a span of its own."""
    total = np.cumsum(entries)
    lo = 0
    while lo < entries.size:
        before = int(total[lo - 1]) if lo else 0
        hi = int(np.searchsorted(total, before + budget, side="right"))
        hi = min(max(hi, lo + 1), lo + max_rows, entries.size)
        yield lo, hi
        lo = hi


def sparse_topk(
    scores: sp.csr_matrix, k: int, excluded: sp.csr_matrix | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's ``k`` largest positive scores outside ``excluded`` (same shape; its stored
    cells are left out), best first, ties by ascending column.

    Returns ``(cols int64[n, k], values float64[n, k], done bool[n])``: only the ``done`` rows
    (at least ``k`` such scores) are filled. Excluded cells are looked up only among each row's
    ``k + e`` largest scores (``e``: the row's excluded cells), which hold its answer.
    """
    n, n_cols = scores.shape
    row = np.repeat(np.arange(n), np.diff(scores.indptr))
    col, val = scores.indices, scores.data
    positive = val > 0
    if not positive.all():
        row, col, val = row[positive], col[positive], val[positive]
    extra = np.zeros(n, dtype=np.int64)
    if excluded is not None:
        excluded = excluded.tocsr()
        excluded.sort_indices()
        extra = np.diff(excluded.indptr)
    bound = _lower_bounds(row, val, np.bincount(row, minlength=n), k + extra)
    top = val >= bound[row]
    row, col, val = row[top], col[top], val[top]
    if excluded is not None and excluded.nnz:
        erow = np.repeat(np.arange(n, dtype=np.int64), extra)
        cells = erow * n_cols + excluded.indices  # ascending: rows in order, columns sorted
        keys = row.astype(np.int64) * n_cols + col
        hit = cells[np.minimum(np.searchsorted(cells, keys), cells.size - 1)] == keys
        row, col, val = row[~hit], col[~hit], val[~hit]
    left = np.bincount(row, minlength=n)
    done = left >= k
    order = np.lexsort((col, -val, row))
    take = order[(np.cumsum(left) - left)[done][:, None] + np.arange(k)]
    cols = np.zeros((n, k), dtype=np.int64)
    values = np.zeros((n, k))
    cols[done], values[done] = col[take], val[take]
    return cols, values, done


def _lower_bounds(
    row: np.ndarray, val: np.ndarray, counts: np.ndarray, need: np.ndarray
) -> np.ndarray:
    """A bound per row at or below its ``need``-th largest value (``-inf`` when the row has
    fewer): every entry at or above it is kept. ``row`` ascends; ``counts`` counts its entries.

    Rows sorted by count are padded (``-inf``) to the longest of each chunk of
    ``_CHUNK_ROWS``, so the padding stays small and one ``np.partition`` per chunk, at the
    chunk's largest ``need``, finds the bounds: linear in the entries."""
    out = np.full(counts.size, -np.inf)
    order = np.argsort(counts, kind="stable")
    order = order[counts[order] > 0]
    m = order.size
    if m == 0:
        return out
    chunk_start = np.arange(0, m, _CHUNK_ROWS)
    sizes = np.minimum(_CHUNK_ROWS, m - chunk_start)
    widths = counts[order[chunk_start + sizes - 1]]  # the longest row of each chunk
    needs = np.maximum.reduceat(need[order], chunk_start)
    offsets = np.concatenate(([0], np.cumsum(sizes * widths)))
    place = np.arange(m)
    chunk = place // _CHUNK_ROWS
    base = np.zeros(counts.size, dtype=np.int64)
    base[order] = offsets[chunk] + (place - chunk_start[chunk]) * widths[chunk]
    first = np.cumsum(counts) - counts  # each row's first entry
    padded = np.full(int(offsets[-1]), -np.inf)
    padded[base[row] + np.arange(row.size) - first[row]] = val
    chunks = zip(sizes.tolist(), widths.tolist(), needs.tolist(), strict=True)
    for c, (size, width, kk) in enumerate(chunks):
        if kk <= width:  # else every entry of the chunk is kept
            block = padded[offsets[c] : offsets[c + 1]].reshape(size, width)
            at = order[chunk_start[c] : chunk_start[c] + size]
            out[at] = np.partition(block, width - kk, axis=1)[:, width - kk]
    return out
