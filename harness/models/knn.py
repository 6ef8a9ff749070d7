"""Item-based k-nearest-neighbours on the binary interaction matrix (sparse, scipy)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from harness.models.base import (
    _BLOCK_ELEMENTS,
    BaseRecommender,
    _positive_float,
    _positive_int,
    topk_rows,
)

__all__ = ["SIMILARITIES", "ItemKNN"]

SIMILARITIES: tuple[str, ...] = ("cosine", "jaccard")


class ItemKNN(BaseRecommender):
    """Item-kNN: score(u, j) = sum of sim(i, j) over the user's training items i.

    ``sim`` is cosine ``c_ij / (sqrt(n_i n_j) + shrink)`` or Jaccard
    ``c_ij / (n_i + n_j - c_ij + shrink)`` on binary interactions (``c_ij`` co-occurring users,
    ``n_i`` users of item i), no self-similarity, and only each item i's ``k_neighbors`` most
    similar items j are kept. Unknown users get the popularity ranking.
    """

    def __init__(
        self,
        k_neighbors: int = 100,
        shrink: float = 0.0,
        similarity: str = "cosine",
        *,
        exclude_seen: bool = True,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(exclude_seen=exclude_seen, batch_size=batch_size, progress=progress)
        self.k_neighbors = _positive_int("k_neighbors", k_neighbors)
        self.shrink = _positive_float("shrink", shrink, zero=True)
        if similarity not in SIMILARITIES:
            raise ValueError(
                f"'similarity' must be one of {list(SIMILARITIES)} (got {similarity!r})"
            )
        self.similarity = similarity

    def _fit(self, matrix: sp.csr_matrix) -> None:
        """Build the sparse item × item top-neighbour matrix, one dense item block at a time."""
        n_items = matrix.shape[1]
        by_item = matrix.tocsc()
        counts = self.item_popularity_
        width = min(self.k_neighbors, n_items)
        step = max(1, _BLOCK_ELEMENTS // n_items)
        rows, cols, vals = [], [], []
        blocks = range(0, n_items, step)
        for start in tqdm(blocks, disable=not self.progress, desc="ItemKNN fit", unit="block"):
            stop = min(start + step, n_items)
            # c_ij for the block's items i (rows) and all items j, sparse; similarity computed
            # on the stored entries only, then densified for the top-k.
            co = (by_item[:, start:stop].T @ matrix).tocoo()
            i, j, c = co.row, co.col, co.data
            if self.similarity == "cosine":
                s = c / (np.sqrt(counts[start + i] * counts[j]) + self.shrink)
            else:
                s = c / (counts[start + i] + counts[j] - c + self.shrink)
            s[start + i == j] = 0.0  # no self-similarity
            sim = np.zeros((stop - start, n_items))
            sim[i, j] = s
            local = np.arange(stop - start)
            top_cols, top_vals = topk_rows(sim, width)
            keep = top_vals > 0.0
            rows.append(np.broadcast_to((start + local)[:, None], keep.shape)[keep])
            cols.append(top_cols[keep])
            vals.append(top_vals[keep])
        self.similarity_ = sp.csr_matrix(
            (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
            shape=(n_items, n_items),
        )

    def _score(self, user_codes: np.ndarray) -> np.ndarray:
        return (self.interactions_[user_codes] @ self.similarity_).toarray()
