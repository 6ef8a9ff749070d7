"""Seeded synthetic interactions with popularity skew and per-user taste.

The generative story, all numpy-vectorized:

- items belong to ``n_clusters`` (at most ``n_items``) equal-sized taste clusters and have a
  Zipf-like popularity weight ``1 / rank ** popularity_exponent`` (ranks are a random
  permutation, independent of clusters);
- every user has a primary and a secondary cluster; each event is, with probability ``taste``,
  drawn from the user's clusters (primary 70 %, secondary 30 %) by popularity within the
  cluster, otherwise from global popularity;
- per-user event counts are log-normal (heavy users and light users), at least
  ``min(3, n_events // n_users)`` each and at most half the catalog; a user never sees an item
  twice, so there are no duplicate (user, item) pairs and the total is exactly ``n_events``;
- each user joins at a random time of the period, stays active for an exponential span and
  produces sessions of close events separated by longer gaps; a user's timestamps are strictly
  increasing (so their order is unambiguous);
- ratings 1–5 are higher for items of the user's clusters, with user and item biases and noise.

:func:`item_categories` gives each item's taste cluster as a category column (``c00``…), the
item features that ``diversity`` and ``miscalibration`` read.

A popularity model therefore beats random, and item-kNN (which sees the user's clusters) beats
popularity on held-out data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from harness.data import ITEM, RATING, TIMESTAMP, USER, validate_interactions
from metrics.checks import require_int, require_range

__all__ = ["generate", "generate_with_items"]

_DAY = 86_400


def generate(
    n_users: int = 2000, n_items: int = 1000, n_events: int = 60000, seed: int = 0, **options: Any
) -> pd.DataFrame:
    """Return a validated Interactions frame of exactly ``n_events`` synthetic events.

    Identical output for identical arguments; user ids are ``0..n_users-1`` and item ids
    ``0..n_items-1`` (int64), rows are sorted by timestamp, then user, then item. ``options``
    are :func:`generate_with_items`'s keyword-only arguments (``n_clusters``, ``taste``…).
    """
    return generate_with_items(n_users, n_items, n_events, seed, **options)[0]


def generate_with_items(
    n_users: int = 2000,
    n_items: int = 1000,
    n_events: int = 60000,
    seed: int = 0,
    *,
    n_clusters: int = 20,
    taste: float = 0.75,
    popularity_exponent: float = 1.0,
    activity_sigma: float = 0.9,
    start: str = "2023-01-01",
    days: int = 365,
    ratings: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`generate`'s interactions plus the item table ``item, category`` (the item's taste
    cluster as ``c00``, ``c01``…): the same events as ``generate`` for the same arguments."""
    _check_args(n_users, n_items, n_events, n_clusters, taste, days)
    rng = np.random.default_rng(seed)
    n_clusters = min(n_clusters, n_items)

    counts = _user_counts(rng, n_users, n_items, n_events, activity_sigma)

    # Items: clusters and popularity weights; a cumulative table over items sorted by cluster
    # lets one searchsorted draw from any cluster (or from the whole catalog).
    item_cluster = rng.permutation(n_items) % n_clusters
    weight = (rng.permutation(n_items) + 1.0) ** -popularity_exponent
    by_cluster = np.argsort(item_cluster, kind="stable")
    cum = np.cumsum(weight[by_cluster])
    bounds = np.searchsorted(item_cluster[by_cluster], np.arange(n_clusters + 1))
    before = np.concatenate(([0.0], cum))[bounds[:-1]]
    mass = np.concatenate(([0.0], cum))[bounds[1:]] - before

    primary = rng.integers(n_clusters, size=n_users)
    if n_clusters > 1:
        secondary = (primary + 1 + rng.integers(n_clusters - 1, size=n_users)) % n_clusters
    else:
        secondary = primary

    def draw(users: np.ndarray, uniform: bool) -> np.ndarray:
        m = users.size
        if uniform:
            return rng.integers(n_items, size=m)
        u = rng.random(m)
        from_taste = rng.random(m) < taste
        cluster = np.where(rng.random(m) < 0.7, primary[users], secondary[users])
        target = np.where(from_taste, before[cluster] + u * mass[cluster], u * cum[-1])
        pos = np.minimum(np.searchsorted(cum, target, side="right"), n_items - 1)
        return by_cluster[pos]

    users, items = _sample_distinct(rng, counts, n_items, draw)

    timestamps = _timestamps(rng, counts, days, pd.Timestamp(start, tz="UTC"))

    data: dict[str, np.ndarray] = {USER: users, ITEM: items, TIMESTAMP: timestamps}
    if ratings:
        tastes = (item_cluster, primary, secondary)
        data[RATING] = _ratings(rng, users, items, n_users, n_items, weight, tastes)

    order = _time_order(timestamps, users, items, n_users, n_items)
    del users, items, timestamps  # each column is freed once it is taken in time order
    df = pd.DataFrame({name: data.pop(name)[order] for name in list(data)}, copy=False)
    del order
    width = len(str(n_clusters - 1))
    categories = pd.DataFrame(
        {
            ITEM: np.arange(n_items, dtype=np.int64),
            "category": np.char.add("c", np.char.zfill(item_cluster.astype(str), width)),
        }
    )
    frame = validate_interactions(
        df, source=f"synthetic(seed={seed})", rating_range=(1.0, 5.0) if ratings else None
    )
    return frame, categories


def _ratings(
    rng: np.random.Generator,
    users: np.ndarray,
    items: np.ndarray,
    n_users: int,
    n_items: int,
    weight: np.ndarray,
    tastes: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> np.ndarray:
    """Ratings 1-5: higher on the user's clusters, user and item biases, noise (a function, so
    its event-sized temporaries are freed before the frame is built)."""
    item_cluster, primary, secondary = tastes
    user_bias = rng.normal(0.0, 0.5, n_users)
    item_bias = rng.normal(0.0, 0.5, n_items) + 0.3 * (weight / weight.max())
    cluster = item_cluster[items]
    affinity = np.where(
        cluster == primary[users], 1.0, np.where(cluster == secondary[users], 0.6, 0.0)
    )
    del cluster
    noise = rng.normal(0.0, 0.7, users.size)
    raw = 2.8 + affinity + user_bias[users] + item_bias[items] + noise
    return np.clip(np.rint(raw), 1.0, 5.0)


def _time_order(
    timestamps: np.ndarray, users: np.ndarray, items: np.ndarray, n_users: int, n_items: int
) -> np.ndarray:
    """Row order by (timestamp, user, item): one argsort of a composite int64 key when it fits
    (the keys are distinct, so the order is the same as ``np.lexsort``'s), else lexsort."""
    if timestamps.size == 0:
        return np.zeros(0, dtype=np.int64)
    low = int(timestamps.min())
    span = int(timestamps.max()) - low + 1
    if span * n_users * n_items < 2**63:
        return np.argsort(((timestamps - low) * n_users + users) * n_items + items)
    return np.lexsort((items, users, timestamps))


def _check_args(
    n_users: int, n_items: int, n_events: int, n_clusters: int, taste: float, days: int
) -> None:
    for name, value in (
        ("n_users", n_users), ("n_items", n_items), ("n_events", n_events),
        ("n_clusters", n_clusters), ("days", days),
    ):  # fmt: skip
        require_int(name, value)
    require_range("taste", taste, 0, 1)
    cap = max(1, n_items // 2)
    if n_events > n_users * cap:
        raise ValueError(
            f"'n_events' must be at most n_users * max(1, n_items // 2) = {n_users * cap} "
            f"(got {n_events}): each user sees at most half the catalog"
        )


def _user_counts(
    rng: np.random.Generator, n_users: int, n_items: int, n_events: int, sigma: float
) -> np.ndarray:
    """Per-user event counts: log-normal activity, floor ``min(3, n_events // n_users)``, cap."""
    cap = max(1, n_items // 2)
    base = min(3, n_events // n_users, cap)
    activity = rng.lognormal(0.0, sigma, n_users)
    counts = base + rng.multinomial(n_events - base * n_users, activity / activity.sum())
    # Move the excess above the cap to users with room, proportional to their activity.
    for _ in range(100):
        excess = int(np.maximum(counts - cap, 0).sum())
        if excess == 0:
            break
        counts = np.minimum(counts, cap)
        room = activity * (counts < cap)
        counts = counts + rng.multinomial(excess, room / room.sum())
    return counts.astype(np.int64)


def _sample_distinct(
    rng: np.random.Generator,
    counts: np.ndarray,
    n_items: int,
    draw: Callable[[np.ndarray, bool], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``counts[u]`` distinct items per user in rounds of vectorized oversampling."""
    n_users = counts.size
    need = counts.copy()
    kept_users: list[np.ndarray] = []
    kept_items: list[np.ndarray] = []
    accepted = np.empty(0, dtype=np.int64)  # sorted keys user * n_items + item
    for round_ in range(1000):
        todo = np.flatnonzero(need > 0)
        if todo.size == 0:
            break
        m = np.ceil(need[todo] * 1.3).astype(np.int64) + 2
        users = np.repeat(todo, m)
        items = draw(users, round_ >= 4)
        key = users * n_items + items
        _, first = np.unique(key, return_index=True)
        fresh = np.zeros(key.size, dtype=bool)
        fresh[first] = True
        if accepted.size:
            pos = np.minimum(np.searchsorted(accepted, key), accepted.size - 1)
            fresh &= accepted[pos] != key
        users, items, key = users[fresh], items[fresh], key[fresh]
        # rank of each fresh candidate within its user (users are grouped, draw order kept)
        starts = np.flatnonzero(np.r_[True, users[1:] != users[:-1]])
        run = np.diff(np.r_[starts, users.size])
        rank = np.arange(users.size) - np.repeat(starts, run)
        take = rank < need[users]
        kept_users.append(users[take])
        kept_items.append(items[take])
        need -= np.bincount(users[take], minlength=n_users)
        accepted = np.sort(np.concatenate((accepted, key[take])))
    users = np.concatenate(kept_users)
    items = np.concatenate(kept_items)
    order = np.argsort(users, kind="stable")
    return users[order].astype(np.int64), items[order].astype(np.int64)


def _timestamps(
    rng: np.random.Generator, counts: np.ndarray, days: int, start: pd.Timestamp
) -> np.ndarray:
    """Strictly increasing epoch seconds per user, for events grouped by user in draw order."""
    n_users = counts.size
    period = days * _DAY
    join = rng.uniform(0.0, 0.85 * period, n_users)
    span = rng.exponential(0.3 * period, n_users) + _DAY
    span = np.maximum(np.minimum(span, period - join - counts - 1.0), 0.0)

    total = int(counts.sum())
    owner = np.repeat(np.arange(n_users), counts)
    # sessions: most gaps are short (same session), some are long (a new session)
    gaps = rng.exponential(1.0, total) * np.where(rng.random(total) < 0.7, 0.01, 1.0)
    cum = np.cumsum(gaps)
    ends = np.cumsum(counts)
    starts = ends - counts
    base = np.concatenate(([0.0], cum))[starts]
    within = cum - base[owner]
    tail = rng.exponential(1.0, n_users)  # a gap after the last event, so it is not the end
    length = np.concatenate(([0.0], cum))[ends] - base + tail
    offset = np.floor(within / length[owner] * span[owner])
    rank = np.arange(total) - starts[owner]
    epoch = int((start - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(seconds=1))
    return (epoch + np.floor(join[owner]) + offset + rank).astype(np.int64)
