"""Full-catalog top-k for 100k users x 100k items from matrix-factorization scores.

Times `BaseRecommender.recommend` (batched scoring, seen-item exclusion, argpartition top-k with
the tie rule) on an ALS model whose factors are set directly (seeded random, 64 factors) so the
ranking is measured, not the fit; compared in the same run with a naive peer that sorts every
user's full score row (`np.argsort` per batch), on a subset of users.

    python benchmarks/bench_ranking.py [--users 100000 --items 100000 --factors 64 --k 10]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))

from _measure import print_table, stage

from harness.models import ImplicitALS


class RandomFactors(ImplicitALS):
    """ALS (implicit's) scoring and ranking with seeded random factors instead of a fit."""

    def _fit(self, matrix: object) -> None:
        rng = np.random.default_rng(self.seed)
        n_users, n_items = matrix.shape  # type: ignore[attr-defined]
        self.user_factors_ = rng.normal(size=(n_users, self.factors)).astype(np.float32)
        self.item_factors_ = rng.normal(size=(n_items, self.factors)).astype(np.float32)
        self._items64 = self.item_factors_.astype(np.float64)


def model_with_factors(n_users: int, n_items: int, factors: int, per_user: int) -> ImplicitALS:
    """Every user has ``per_user`` random training items (excluded from the lists)."""
    rng = np.random.default_rng(0)
    train = pd.DataFrame(
        {
            "user": np.repeat(np.arange(n_users), per_user),
            "item": np.concatenate(
                [np.arange(n_items), rng.integers(0, n_items, n_users * per_user - n_items)]
            ),
        }
    )
    return RandomFactors(factors=factors).fit(train)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--users", type=int, default=100_000)
    p.add_argument("--items", type=int, default=100_000)
    p.add_argument("--factors", type=int, default=64)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--peer-users", type=int, default=5_000)
    args = p.parse_args()
    model = model_with_factors(args.users, args.items, args.factors, per_user=10)
    users = np.arange(args.users)
    rows: list[tuple[str, float, float]] = []
    with stage(
        rows, f"recommend top-{args.k}, {args.users:,} users x {len(model.item_ids_):,} items"
    ):
        ids, _ = model.recommend(users, args.k)
    sub = users[: args.peer_users]
    with stage(rows, f"recommend, first {args.peer_users:,} users (same code)"):
        ours_sub, _ = model.recommend(sub, args.k)
    with stage(rows, f"naive full argsort peer, {args.peer_users:,} users"):
        scores = model.user_factors_[sub].astype(np.float64) @ model._items64.T
        seen = model.interactions_[sub].toarray().astype(bool)
        scores[seen] = -np.inf
        naive = model.item_ids_[np.argsort(-scores, axis=1, kind="stable")[:, : args.k]]
    agree = float((naive == ours_sub).mean())
    print_table(("stage", "seconds", "peak MB"), [(n, f"{s:.2f}", f"{m:.0f}") for n, s, m in rows])
    per_user_ours = rows[1][1] / args.peer_users
    per_user_naive = rows[2][1] / args.peer_users
    print(
        f"\nnaive / ours per user: {per_user_naive / per_user_ours:.1f}x; "
        f"identical top-{args.k} lists: {agree:.2%}; ids shape {ids.shape}"
    )


if __name__ == "__main__":
    main()
