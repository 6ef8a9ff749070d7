"""Models from the ``implicit`` library (ALS, BPR, logistic MF, item-item cosine/TF-IDF/BM25).

These are the harness's factorization and item-item models (``model=als`` and ``model=item_knn``
are ``ImplicitALS`` and ``ImplicitItemCosine``): the project's own ALS and item-kNN were removed
after ``benchmarks/bench_models.py`` showed ``implicit``'s give the same ndcg@10 (within 0.003)
2–4× faster. Each wraps one ``implicit`` estimator behind
:class:`~harness.models.base.BaseRecommender`: the harness encodes ids and builds the binary
user × item matrix, ``implicit`` fits on it, and the harness ranks from what was fitted
(``user_factors @ item_factorsᵀ`` for the factor models, ``interactions @ similarity`` for the
item-item models, ranked from its stored entries: :mod:`harness.models.sparse_topk`), so
seen-item exclusion, batching, tie order (ascending item id), padding and the unknown-user
fallback (popularity) are the same as for every built-in model. Fitting runs on
the CPU with ``num_threads`` threads (1 by default: the machine is usually shared, and a single
thread makes BPR/LMF deterministic for a ``seed``) and one BLAS thread, as ``implicit``
recommends. ``implicit`` is imported when a model is fitted.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp

from harness.models.base import BaseRecommender
from metrics.checks import require_int, require_positive

__all__ = [
    "ImplicitALS",
    "ImplicitBM25",
    "ImplicitBPR",
    "ImplicitItemCosine",
    "ImplicitItemTFIDF",
    "ImplicitLMF",
    "factor_scores",
]


def _implicit() -> Any:
    """The ``implicit`` package, or a one-line error saying how to install it."""
    try:
        import implicit
    except ImportError:
        raise ImportError(
            "the als, item_knn and implicit_* models need the package 'implicit' "
            "(a dependency of recsys-harness): pip install 'implicit>=0.7.3,<0.8'"
        ) from None
    return implicit


def factor_scores(user_factors: np.ndarray, items64: np.ndarray) -> np.ndarray:
    """``user_factors @ items64ᵀ`` in float64 (the float32 products are exact there), rounded
    to float32.

    The rounding removes the last-bit differences between BLAS kernels chosen for different
    batch shapes, so a user's scores (and tie order) do not depend on the batching.
    """
    scores = user_factors.astype(np.float64) @ items64.T
    scores[...] = scores.astype(np.float32)  # round in place: one float32 temporary
    return scores


class _Implicit(BaseRecommender):
    """Shared fitting: build the ``implicit`` estimator, fit it on the float32 matrix with one
    BLAS thread and no progress bar unless asked."""

    def __init__(
        self,
        *,
        num_threads: int = 1,
        seed: int = 0,
        exclude_seen: bool = True,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(exclude_seen=exclude_seen, batch_size=batch_size, progress=progress)
        if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 0:
            raise ValueError(f"'num_threads' must be an int >= 0 (got {num_threads!r})")
        self.num_threads = num_threads
        self.seed = seed

    def _estimator(self) -> Any:
        """The unfitted ``implicit`` estimator with this model's parameters."""
        raise NotImplementedError

    def _fit(self, matrix: sp.csr_matrix) -> None:
        _implicit()
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="blas"), warnings.catch_warnings():
            # implicit warns about BLAS threads (limited here) and about the COO matrices its
            # own item-item weighting produces: nothing a user can act on.
            from implicit.utils import ParameterWarning

            warnings.simplefilter("ignore", RuntimeWarning)
            warnings.simplefilter("ignore", ParameterWarning)
            estimator = self._estimator()
            estimator.fit(matrix.astype(np.float32), show_progress=self.progress)
        self.estimator_ = estimator  # the fitted implicit model itself (for cross-checks)
        self._fitted(estimator)

    def _fitted(self, estimator: Any) -> None:
        raise NotImplementedError


class _ImplicitFactors(_Implicit):
    """A factor model: score(u, i) = user_factors[u] · item_factors[i] (bias columns included,
    as ``implicit`` ranks)."""

    def _fitted(self, estimator: Any) -> None:
        self.user_factors_ = np.asarray(estimator.user_factors, dtype=np.float32)
        self.item_factors_ = np.asarray(estimator.item_factors, dtype=np.float32)
        self._items64 = self.item_factors_.astype(np.float64)

    def _score(self, user_codes: np.ndarray) -> np.ndarray:
        return factor_scores(self.user_factors_[user_codes], self._items64)


class ImplicitALS(_ImplicitFactors):
    """``implicit.als.AlternatingLeastSquares`` (Hu, Koren & Volinsky 2008, conjugate-gradient
    solver), ``model=als``: confidence ``alpha`` on observed pairs, 1 elsewhere."""

    def __init__(
        self,
        factors: int = 64,
        regularization: float = 0.05,
        alpha: float = 20.0,
        iterations: int = 15,
        seed: int = 0,
        *,
        num_threads: int = 1,
        exclude_seen: bool = True,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(
            num_threads=num_threads,
            seed=seed,
            exclude_seen=exclude_seen,
            batch_size=batch_size,
            progress=progress,
        )
        self.factors = require_int("factors", factors)
        self.iterations = require_int("iterations", iterations)
        self.regularization = require_positive("regularization", regularization)
        self.alpha = require_positive("alpha", alpha)

    def _estimator(self) -> Any:
        from implicit.cpu.als import AlternatingLeastSquares

        return AlternatingLeastSquares(
            factors=self.factors,
            regularization=self.regularization,
            alpha=self.alpha,
            iterations=self.iterations,
            num_threads=self.num_threads,
            random_state=self.seed,
        )


class ImplicitBPR(_ImplicitFactors):
    """``implicit.bpr.BayesianPersonalizedRanking`` (Rendle et al. 2009, SGD on sampled
    (user, seen item, unseen item) triples, item bias included)."""

    def __init__(
        self,
        factors: int = 64,
        learning_rate: float = 0.01,
        regularization: float = 0.01,
        iterations: int = 100,
        seed: int = 0,
        *,
        num_threads: int = 1,
        exclude_seen: bool = True,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(
            num_threads=num_threads,
            seed=seed,
            exclude_seen=exclude_seen,
            batch_size=batch_size,
            progress=progress,
        )
        self.factors = require_int("factors", factors)
        self.iterations = require_int("iterations", iterations)
        self.learning_rate = require_positive("learning_rate", learning_rate)
        self.regularization = require_positive("regularization", regularization, zero=True)

    def _estimator(self) -> Any:
        from implicit.cpu.bpr import BayesianPersonalizedRanking

        return BayesianPersonalizedRanking(
            factors=self.factors,
            learning_rate=self.learning_rate,
            regularization=self.regularization,
            iterations=self.iterations,
            num_threads=self.num_threads,
            random_state=self.seed,
        )


class ImplicitLMF(_ImplicitFactors):
    """``implicit.lmf.LogisticMatrixFactorization`` (Johnson 2014): logistic loss on observed
    pairs and ``neg_prop`` sampled negatives per positive, user and item biases included."""

    def __init__(
        self,
        factors: int = 30,
        learning_rate: float = 1.0,
        regularization: float = 0.6,
        iterations: int = 30,
        neg_prop: int = 30,
        seed: int = 0,
        *,
        num_threads: int = 1,
        exclude_seen: bool = True,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(
            num_threads=num_threads,
            seed=seed,
            exclude_seen=exclude_seen,
            batch_size=batch_size,
            progress=progress,
        )
        self.factors = require_int("factors", factors)
        self.iterations = require_int("iterations", iterations)
        self.neg_prop = require_int("neg_prop", neg_prop)
        self.learning_rate = require_positive("learning_rate", learning_rate)
        self.regularization = require_positive("regularization", regularization, zero=True)

    def _estimator(self) -> Any:
        from implicit.cpu.lmf import LogisticMatrixFactorization

        return LogisticMatrixFactorization(
            factors=self.factors,
            learning_rate=self.learning_rate,
            regularization=self.regularization,
            iterations=self.iterations,
            neg_prop=self.neg_prop,
            num_threads=self.num_threads,
            random_state=self.seed,
        )


class _ImplicitItemItem(_Implicit):
    """An item-item model: score(u, j) = sum over the user's training items i of sim(i, j), with
    ``implicit``'s similarity matrix (each item's ``k_neighbors`` most similar items, itself
    included, as ``implicit`` keeps it)."""

    def __init__(
        self,
        k_neighbors: int = 100,
        *,
        num_threads: int = 1,
        exclude_seen: bool = True,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(
            num_threads=num_threads,
            seed=0,
            exclude_seen=exclude_seen,
            batch_size=batch_size,
            progress=progress,
        )
        self.k_neighbors = require_int("k_neighbors", k_neighbors)

    def _fitted(self, estimator: Any) -> None:
        similarity = sp.csr_matrix(estimator.similarity, dtype=np.float64)
        similarity.sort_indices()
        self.similarity_ = similarity

    def _score(self, user_codes: np.ndarray) -> np.ndarray:
        return (self.interactions_[user_codes] @ self.similarity_).toarray()

    def _sparse_factors(self) -> tuple[sp.csr_matrix, sp.csr_matrix]:
        return self.interactions_, self.similarity_


class ImplicitItemCosine(_ImplicitItemItem):
    """``implicit.nearest_neighbours.CosineRecommender``, ``model=item_knn``: cosine of the
    items' binary user vectors."""

    def _estimator(self) -> Any:
        from implicit.nearest_neighbours import CosineRecommender

        return CosineRecommender(K=self.k_neighbors, num_threads=self.num_threads)


class ImplicitItemTFIDF(_ImplicitItemItem):
    """``implicit.nearest_neighbours.TFIDFRecommender``: cosine after TF-IDF weighting of users."""

    def _estimator(self) -> Any:
        from implicit.nearest_neighbours import TFIDFRecommender

        return TFIDFRecommender(K=self.k_neighbors, num_threads=self.num_threads)


class ImplicitBM25(_ImplicitItemItem):
    """``implicit.nearest_neighbours.BM25Recommender``: item-item dot products after BM25
    weighting (``k1`` saturation, ``b`` length normalization)."""

    def __init__(
        self,
        k_neighbors: int = 100,
        k1: float = 1.2,
        b: float = 0.75,
        *,
        num_threads: int = 1,
        exclude_seen: bool = True,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> None:
        super().__init__(
            k_neighbors,
            num_threads=num_threads,
            exclude_seen=exclude_seen,
            batch_size=batch_size,
            progress=progress,
        )
        self.k1 = require_positive("k1", k1, zero=True)
        if not isinstance(b, int | float | np.number) or isinstance(b, bool) or not 0.0 <= b <= 1:
            raise ValueError(f"'b' must be in [0, 1] (got {b!r})")
        self.b = float(b)

    def _estimator(self) -> Any:
        from implicit.nearest_neighbours import BM25Recommender

        return BM25Recommender(
            K=self.k_neighbors, K1=self.k1, B=self.b, num_threads=self.num_threads
        )
