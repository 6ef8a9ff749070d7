"""Implicit-feedback matrix factorization (ALS of Hu, Koren & Volinsky 2008), exact and batched.

Model: preference ``p_ui = 1`` for observed (user, item) pairs and 0 otherwise, confidence
``c_ui = 1 + alpha`` for observed pairs and 1 otherwise; factors minimize
``sum_ui c_ui (p_ui - x_u·y_i)² + regularization (|x|² + |y|²)``. Each half-iteration solves every
user (then every item) exactly::

    x_u = (YᵀY + λI + α Y_uᵀY_u)⁻¹ (1 + α) Y_uᵀ1        (Y_u: factors of the user's items)

without a Python loop per user: rows are grouped into buckets of similar length, padded, and solved
as stacked systems. Rows with fewer interactions ``n`` than ``factors`` use the Woodbury identity,
which solves an ``n × n`` system instead of ``f × f``::

    x_u = (1 + α) M Y_uᵀ d,   (I + α Y_u M Y_uᵀ) d = 1,   M = (YᵀY + λI)⁻¹

(written with ``M = L Lᵀ`` so only ``Y L`` is gathered). Longer rows form the ``f × f`` Gram
matrix. Solves run in float32 (twice the speed of float64 on the gathers and small products);
scores are returned as float64.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from harness.models.base import BaseRecommender, _positive_float, _positive_int

__all__ = ["ALS"]

_DTYPE = np.float32
# Elements of one padded (rows × length × factors) bucket; bounds memory per stacked solve.
_BUCKET_ELEMENTS = 2**22
# Lengths within one bucket differ by at most this ratio, which bounds the padding waste.
_LENGTH_RATIO = 1.25


class ALS(BaseRecommender):
    """Implicit ALS: score(u, i) = user factors · item factors (see the module doc).

    Deterministic for a ``seed`` (item factors start as ``normal(0, 0.01)``; users are solved
    first). Unknown users get the popularity ranking (``BaseRecommender``'s fallback).
    Fitted attributes: ``user_factors_`` (``float32[n_users, factors]``), ``item_factors_``.
    """

    def __init__(
        self,
        factors: int = 64,
        regularization: float = 0.05,
        alpha: float = 20.0,
        iterations: int = 15,
        seed: int = 0,
        *,
        exclude_seen: bool = True,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(exclude_seen=exclude_seen, batch_size=batch_size, progress=progress)
        self.factors = _positive_int("factors", factors)
        self.regularization = _positive_float("regularization", regularization)
        self.alpha = _positive_float("alpha", alpha, zero=True)
        self.iterations = _positive_int("iterations", iterations)
        self.seed = seed

    def _fit(self, matrix: sp.csr_matrix) -> None:
        """Alternate exact user and item solves ``iterations`` times."""
        rng = np.random.default_rng(self.seed)
        by_user = _Plan.of(matrix, self.factors)
        by_item = _Plan.of(matrix.T.tocsr(), self.factors)
        items = rng.normal(0.0, 0.01, (matrix.shape[1], self.factors)).astype(_DTYPE)
        users = np.zeros((matrix.shape[0], self.factors), dtype=_DTYPE)
        steps = range(self.iterations)
        with _single_blas_thread():
            for _ in tqdm(steps, disable=not self.progress, desc="ALS fit", unit="iter"):
                users = by_user.solve(items, self.regularization, self.alpha)
                items = by_item.solve(users, self.regularization, self.alpha)
        self.user_factors_ = users
        self.item_factors_ = items
        self._items64 = items.astype(np.float64)

    def _score(self, user_codes: np.ndarray) -> np.ndarray:
        return factor_scores(self.user_factors_[user_codes], self._items64)


def factor_scores(user_factors: np.ndarray, items64: np.ndarray) -> np.ndarray:
    """``user_factors @ items64ᵀ`` in float64 (the float32 products are exact there), rounded
    to float32.

    The rounding removes the last-bit differences between BLAS kernels chosen for different
    batch shapes, so a user's scores (and tie order) do not depend on the batching.
    """
    scores = user_factors.astype(np.float64) @ items64.T
    scores[...] = scores.astype(np.float32)  # round in place: one float32 temporary
    return scores


@dataclass(frozen=True)
class _Bucket:
    """Rows of similar length, padded to ``length``: ``slots`` index the flat (rows·length)
    padded buffer, ``cols`` the other side's factors to put there."""

    rows: np.ndarray
    length: int
    slots: np.ndarray
    cols: np.ndarray


@dataclass(frozen=True)
class _Plan:
    """The bucketed layout of one side's rows; the sparsity pattern never changes, so it is
    computed once per fit and reused by every iteration."""

    n_rows: int
    buckets: tuple[_Bucket, ...]

    @classmethod
    def of(cls, matrix: sp.csr_matrix, factors: int) -> _Plan:
        """Group the rows of ``matrix`` by length (ratio ≤ 1.25, ≤ 2**22 padded elements)."""
        lengths = np.diff(matrix.indptr)
        order = np.argsort(lengths, kind="stable")
        sorted_len = lengths[order]
        buckets = []
        start = int(np.searchsorted(sorted_len, 1))  # empty rows keep zero factors
        while start < order.size:
            low = int(sorted_len[start])
            stop = int(np.searchsorted(sorted_len, max(low * _LENGTH_RATIO, low + 1), "right"))
            longest = int(sorted_len[stop - 1])
            stop = min(stop, start + max(1, _BUCKET_ELEMENTS // (longest * factors)))
            rows = order[start:stop]
            length = int(sorted_len[stop - 1])
            counts = lengths[rows]
            first = np.repeat(matrix.indptr[rows], counts)
            rank = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
            owner = np.repeat(np.arange(rows.size), counts)
            buckets.append(
                _Bucket(rows, length, owner * length + rank, matrix.indices[first + rank])
            )
            start = stop
        return cls(matrix.shape[0], tuple(buckets))

    def solve(self, other: np.ndarray, reg: float, alpha: float) -> np.ndarray:
        """Exact least-squares factors of every row given the other side's factors."""
        f = other.shape[1]
        gram = other.T.astype(np.float64) @ other + reg * np.eye(f)
        inv = np.linalg.inv(gram)
        chol = np.linalg.cholesky((inv + inv.T) / 2)  # M = L Lᵀ
        other_l = (other @ chol).astype(_DTYPE)  # rows of Y L
        chol32, gram32 = chol.astype(_DTYPE), gram.astype(_DTYPE)
        out = np.zeros((self.n_rows, f), dtype=_DTYPE)
        for b in self.buckets:
            n, m = b.rows.size, b.length
            if m < f:  # Woodbury: (I + α Q Qᵀ) d = 1, x = (1 + α) L Qᵀ d with Q = Y_u L
                flat = np.zeros((n * m, f), dtype=_DTYPE)
                flat[b.slots] = other_l[b.cols]
                q = flat.reshape(n, m, f)
                system = q @ q.transpose(0, 2, 1)
                system *= alpha
                system[:, np.arange(m), np.arange(m)] += 1.0
                d = np.linalg.solve(system, np.ones((n, m, 1), dtype=_DTYPE))
                out[b.rows] = (1.0 + alpha) * ((q.transpose(0, 2, 1) @ d)[:, :, 0] @ chol32.T)
            else:  # Gram: (YᵀY + λI + α Y_uᵀ Y_u) x = (1 + α) Y_uᵀ 1
                zt = np.zeros((n, f, m), dtype=_DTYPE)  # Y_uᵀ, so the product needs no copy
                zt[b.slots // m, :, b.slots % m] = other[b.cols]
                system = zt @ zt.transpose(0, 2, 1)
                system *= alpha
                system += gram32
                rhs = (1.0 + alpha) * zt.sum(axis=2)
                out[b.rows] = np.linalg.solve(system, rhs[:, :, None])[:, :, 0]
        return out


@contextlib.contextmanager
def _single_blas_thread() -> Iterator[None]:
    """One BLAS thread while solving: the stacked products are many tiny matrices, and
    multi-threaded OpenBLAS spends more time starting threads on them than computing (5–10×
    slower on 2 busy cores). Uses threadpoolctl when installed, else changes nothing."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield
