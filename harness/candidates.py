"""Candidate sets: which items each test user's model scores are ranked among.

``full`` ranks the whole catalog (the default, unbiased). ``sampled`` ranks each user's test
items among N sampled negatives (uniform or by popularity), frozen by seed and cached next to the
split so every model sees the same candidates; sampled metrics are biased estimates of the full
ones (Krichene & Rendle, 2020) and are flagged as such. ``file`` reads a given candidate list.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from harness.data import ITEM, USER, normalize_ids, read_text_table
from harness.errors import DataError
from harness.split import Split
from metrics.checks import require_choice, require_int
from metrics.sets import distinct, member

__all__ = [
    "KINDS",
    "CandidateSpec",
    "build_candidates",
    "candidate_stats",
    "catalog_weights",
    "draw_positions",
    "draws_per_round",
    "sample_negatives",
]

KINDS = ("full", "sampled", "file")
#: The stat (and the sample's ``attrs`` key) counting users with fewer negatives than asked.
SHORT = "candidates.users_short"
#: The stat counting test users a candidates file has no row for (``candidates=file``).
MISSING = "candidates.users_missing"
#: The stat counting the test users a candidates file is checked against.
TEST_USERS = "candidates.test_users"
#: Seeds the counter-based draws take (:func:`harness.hashing.mix` reads an int64).
SEED_RANGE = (-(2**63), 2**63 - 1)
SAMPLED_WARNING = (
    "sampled candidates: metrics rank test items among a few sampled negatives; they are "
    "biased estimates of full-catalog metrics and may even order models differently"
)


@dataclass(frozen=True)
class CandidateSpec:
    """The ``candidates/`` config: kind and its parameters."""

    kind: str = "full"
    n_negatives: int = 100
    sampling: str = "uniform"
    seed: int = 0
    path: str | None = None

    def __post_init__(self) -> None:
        require_choice("candidates.kind", self.kind, KINDS)
        require_choice("candidates.sampling", self.sampling, ("uniform", "popularity"))
        if self.kind == "sampled":
            require_int("candidates.n_negatives", self.n_negatives)
            seed, (low, high) = self.seed, SEED_RANGE
            if (
                isinstance(seed, bool)
                or not isinstance(seed, int | np.integer)
                or not (low <= seed <= high)
            ):
                raise ValueError(
                    f"'candidates.seed' must be an int from -2**63 to 2**63 - 1 (got {seed!r})"
                )


#: at most this many rounds of draws per user (a user still short after them keeps fewer)
MAX_ROUNDS = 50
#: a round draws for each short user ``2 * need + 4`` draws, scaled up by the inverse of the
#: chance that one draw is an unseen item the user has not drawn yet, at most this many times
#: under popularity sampling (uniform rounds are not capped: see :func:`draws_per_round`)
MAX_BOOST = 64


def catalog_weights(counts: np.ndarray, sampling: str) -> np.ndarray:
    """int64 draw weight of each catalog item: 1 (``uniform``) or its training events."""
    return np.ones(len(counts), np.int64) if sampling == "uniform" else counts.astype(np.int64)


def draws_per_round(
    need: np.ndarray, total: int, undrawn_weight: np.ndarray, capped: bool = True
) -> np.ndarray:
    """Draws in a round for users ``need`` items short whose unseen items not drawn yet weigh
    ``undrawn_weight`` of ``total``: ``2 * need + 4`` over that share (so a round expects
    ``2 * need + 4`` new items however many are drawn already), at most :data:`MAX_BOOST` times
    that when ``capped`` (integer maths, so both engines agree).

    Uniform rounds need no cap: a short user has more than ``need`` undrawn items, so a round is
    at most 3 catalogs long, and it can exceed the cap only for a user who has seen or asked for
    all but 1/64 of the catalog (the rows the user brings in anyway)."""
    base = 2 * need.astype(np.int64) + 4
    boosted = (base * np.int64(total) + undrawn_weight - 1) // np.maximum(undrawn_weight, 1)
    return np.minimum(boosted, MAX_BOOST * base) if capped else boosted


def draw_positions(
    seed: int, user_hash: np.ndarray, draw: np.ndarray, cum_weights: np.ndarray
) -> np.ndarray:
    """Catalog position of draw number ``draw`` of each user (``user_hash`` from
    :func:`harness.hashing.hash_ids`): a counter-based uniform mapped through the cumulative
    integer weights, so position ``p`` comes with probability ``weight[p] / total``."""
    from harness.hashing import mix, uniform01

    total = int(cum_weights[-1])
    u = uniform01(mix(seed, user_hash, draw.astype(np.int64)))
    x = np.minimum(np.floor(u * total).astype(np.int64), total - 1)
    return np.searchsorted(cum_weights, x, side="right").astype(np.int64)


def _first_distinct(
    u: np.ndarray, p: np.ndarray, j: np.ndarray, target: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each user's first ``target`` distinct positions in draw order (the draws (u, p, j); a
    user's draw numbers ``j`` are distinct)."""
    span = int(j.max()) + 1 if j.size else 1
    if u.size and (int(u.max()) + 1) * width * span < 2**62:
        # sorted (user, position, draw) keys: each pair's first draw leads its run; then sorted
        # (user, draw, position) keys: each user's distinct positions in draw order
        key = np.sort((u * width + p) * span + j)
        pair = key // span
        lead = np.ones(key.size, bool)
        np.not_equal(pair[1:], pair[:-1], out=lead[1:])
        pair, draw = pair[lead], key[lead] % span
        key = np.sort(((pair // width) * span + draw) * width + pair % width)
        u, j, p = key // (span * width), key // width % span, key % width
        starts = np.flatnonzero(np.r_[True, u[1:] != u[:-1]])
        rank = np.arange(u.size) - np.repeat(starts, np.diff(np.r_[starts, u.size]))
        keep = rank < target[u]
        return u[keep], p[keep], j[keep]
    order = np.lexsort((j, u))
    u, p, j = u[order], p[order], j[order]
    _, first = np.unique(u * width + p, return_index=True)
    first.sort()
    u, p, j = u[first], p[first], j[first]
    starts = np.flatnonzero(np.r_[True, u[1:] != u[:-1]]) if u.size else np.zeros(0, np.int64)
    rank = np.arange(u.size) - np.repeat(starts, np.diff(np.r_[starts, u.size]))
    keep = rank < target[u]
    return u[keep], p[keep], j[keep]


def sample_negatives(
    train: pd.DataFrame,
    test: pd.DataFrame,
    n_negatives: int,
    sampling: str,
    seed: int,
    valid: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """(user, item) rows: each test user's test items plus ``n_negatives`` distinct items drawn
    from the training catalog that the user has neither trained, validated (``valid``, the
    split's validation part) nor tested on.

    Draw ``j`` of a user is a counter-based hash of (seed, user, j) mapped to an item, uniformly
    or by training popularity (:func:`draw_positions`); a user's negatives are the first
    ``n_negatives`` distinct unseen items of that sequence: a uniform (or popularity-weighted,
    without replacement) sample that does not depend on row order or on other users, and that
    the Spark engine reproduces (:mod:`harness.spark.candidates`). Draws come in rounds over all
    short users at once; a user whose unseen catalog is no larger than ``n_negatives`` gets all
    of it. A round is sized from the weight of the unseen items the user has not drawn yet
    (:func:`draws_per_round`), so uniform draws leave no user short in practice; under
    popularity a user still short after :data:`MAX_ROUNDS` rounds keeps fewer, and
    ``attrs[SHORT]`` counts them.
    """
    from harness.hashing import hash_ids

    catalog = pd.Index(np.sort(pd.unique(train[ITEM])))
    n_items = len(catalog)
    users = np.sort(pd.unique(test[USER]))
    counts = train[ITEM].value_counts().reindex(catalog).to_numpy(dtype=np.int64)
    weights = catalog_weights(counts, sampling)
    cum = np.cumsum(weights)
    total = int(cum[-1]) if n_items else 0
    parts = (train, test) if valid is None else (train, test, valid)
    known = pd.concat([part[[USER, ITEM]] for part in parts])
    known = known[known[USER].isin(users)]
    width = n_items + 1
    kpos = catalog.get_indexer(known[ITEM])
    kuser = pd.Index(users).get_indexer(known[USER]).astype(np.int64)
    seen = distinct(kuser[kpos >= 0] * width + kpos[kpos >= 0])
    seen_user, seen_pos = seen // width, seen % width
    seen_count = np.bincount(seen_user, minlength=len(users)).astype(np.int64)
    seen_weight = np.bincount(seen_user, weights[seen_pos], minlength=len(users)).astype(np.int64)
    target = np.minimum(n_negatives, n_items - seen_count)
    everything = (target > 0) & (target == n_items - seen_count)
    sampled = (target > 0) & ~everything
    user_hash = hash_ids(users)
    got_u, got_p, got_j = (np.zeros(0, np.int64) for _ in range(3))
    start = np.zeros(len(users), np.int64)
    for _ in range(MAX_ROUNDS):
        have = np.bincount(got_u, minlength=len(users))
        short = np.flatnonzero(sampled & (have < target))
        if short.size == 0:
            break
        drawn_weight = np.bincount(got_u, weights[got_p], minlength=len(users)).astype(np.int64)
        d = draws_per_round(
            target[short] - have[short],
            total,
            total - seen_weight[short] - drawn_weight[short],
            capped=sampling != "uniform",
        )
        owner = np.repeat(short, d)
        j = start[owner] + np.arange(owner.size) - np.repeat(np.cumsum(d) - d, d)
        pos = draw_positions(seed, user_hash[owner], j, cum)
        fresh = ~member(owner * width + pos, seen)
        got_u, got_p, got_j = _first_distinct(
            np.r_[got_u, owner[fresh]],
            np.r_[got_p, pos[fresh]],
            np.r_[got_j, j[fresh]],
            target,
            width,
        )
        start[short] += d
    # users still short after MAX_ROUNDS: their undrawn items weigh almost nothing (popularity)
    n_short = int((sampled & (np.bincount(got_u, minlength=len(users)) < target)).sum())
    full_u = np.repeat(np.flatnonzero(everything), n_items)
    full_p = np.tile(np.arange(n_items, dtype=np.int64), int(everything.sum()))
    unseen = ~member(full_u * width + full_p, seen)
    neg_u, neg_p = np.r_[got_u, full_u[unseen]], np.r_[got_p, full_p[unseen]]
    negatives = pd.DataFrame({USER: users[neg_u], ITEM: catalog.to_numpy()[neg_p]})
    positives = test[[USER, ITEM]].drop_duplicates()
    rows = pd.concat([positives, negatives], ignore_index=True)
    # by (user, item): one sort of int keys, ids ranked among the (sorted) distinct ones
    items = np.sort(pd.unique(np.concatenate([catalog.to_numpy(), positives[ITEM].to_numpy()])))
    item_rank = np.r_[
        pd.Index(items).get_indexer(positives[ITEM]), np.searchsorted(items, catalog)[neg_p]
    ]
    user_rank = np.r_[np.searchsorted(users, positives[USER].to_numpy()), neg_u]
    order = np.argsort(user_rank.astype(np.int64) * len(items) + item_rank)
    rows = rows.take(order).reset_index(drop=True)
    rows.attrs[SHORT] = n_short  # kept by the Parquet cache
    return rows


def _read_file(path: str) -> pd.DataFrame:
    """The (user, item) rows of a candidates file; ids follow the interaction files' id rule."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{path}: no such file (candidates.path)")
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            frame = pd.read_parquet(p)
        else:
            frame = read_text_table(p, "csv", path)
    except (pd.errors.ParserError, UnicodeDecodeError, pa.ArrowException, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{path}: cannot read the file (candidates.path): {first}") from None
    missing = [c for c in (USER, ITEM) if c not in frame.columns]
    if missing:
        raise DataError(
            f"{path}: column {missing[0]!r} is missing (found {[str(c) for c in frame.columns]})"
        )
    if len(frame) == 0:
        raise DataError(f"{path}: the candidates file has no rows")
    if frame[[USER, ITEM]].isna().any().any():
        raise DataError(f"{path}: column 'user' or 'item' has missing ids")
    ids = {c: normalize_ids(frame[c].reset_index(drop=True), path, f"'{c}'") for c in (USER, ITEM)}
    return pd.DataFrame(ids).drop_duplicates().reset_index(drop=True)


def _kind(s: pd.Series) -> str:
    return "integer" if pd.api.types.is_integer_dtype(s.dtype) else "text"


def build_candidates(
    spec: CandidateSpec, split: Split, cache_dir: Path | None
) -> tuple[pd.DataFrame | None, dict[str, Any]]:
    """Candidates for ``spec`` (None for ``full``) and stats for logging; sampled sets are cached
    under ``cache_dir`` keyed by the split content and the sampling parameters."""
    if spec.kind == "full":
        return None, {"candidates.kind": "full"}
    if spec.kind == "file":
        if not spec.path:
            raise DataError("candidates=file needs candidates.path=<csv or parquet of user,item>")
        frame = _read_file(spec.path)
        for col, part, whose in (
            (USER, split.test, "test user"),
            (ITEM, split.train, "training item"),
        ):
            if frame[col].dtype == part[col].dtype:
                continue
            was, want = _kind(frame[col]), _kind(part[col])
            kinds = f"holds {was} ids but the interactions have {want} ids"
            first = frame[col].iloc[0]
            try:
                frame[col] = frame[col].astype(part[col].dtype)
            except (TypeError, ValueError):
                raise DataError(f"{spec.path}: column '{col}' {kinds}, e.g. {first!r}") from None
            if was == "integer" and want == "text" and not frame[col].isin(part[col]).any():
                # integer ids as text match none of the split's ids: say so here, not later
                raise DataError(
                    f"{spec.path}: column '{col}' {kinds} and none is a {whose}'s id, "
                    f"e.g. {int(first)!r}"
                )
        test_users = pd.unique(split.test[USER])
        missing = int((~pd.Index(test_users).isin(frame[USER])).sum())
        stats = candidate_stats(
            spec,
            len(frame),
            int(frame[USER].nunique()),
            missing=missing,
            test_users=len(test_users),
        )
        return frame, stats
    frame = _cached_sample(spec, split, cache_dir)
    short = int(frame.attrs.get(SHORT, 0))
    return frame, candidate_stats(spec, len(frame), int(frame[USER].nunique()), short)


def candidate_stats(
    spec: CandidateSpec,
    rows: int,
    users: int,
    short: int = 0,
    missing: int = 0,
    test_users: int = 0,
) -> dict[str, Any]:
    """The ``candidates.*`` statistics of a candidate set (both engines report these);
    ``short``: sampled users who got fewer negatives than asked; ``missing``: of the
    ``test_users``, those a candidates file has no row for (see :func:`short_warning`)."""
    stats: dict[str, Any] = {
        "candidates.kind": spec.kind,
        "candidates.rows": rows,
        "candidates.users": users,
        "candidates.per_user_mean": float(rows / max(users, 1)),
    }
    if spec.kind == "sampled":
        stats |= {
            "candidates.n_negatives": spec.n_negatives,
            "candidates.sampling": spec.sampling,
            "candidates.seed": spec.seed,
            SHORT: short,
        }
    if spec.kind == "file":
        stats |= {MISSING: missing, TEST_USERS: test_users}
    return stats


def short_warning(stats: dict[str, Any]) -> str | None:
    """The warning for test users short of candidates, or None: sampled users left with fewer
    negatives than asked, or test users a candidates file has no row for (they rank nothing)."""
    missing = int(stats.get(MISSING) or 0)
    if missing:
        users = int(stats.get(TEST_USERS) or 0)
        return (
            f"the candidates file (candidates.path) covers {users - missing:,} of the {users:,} "
            f"test users: the other {missing:,} have no candidate to rank, so their lists are "
            "empty and they count as misses (0) in the ranking metrics"
        )
    short = int(stats.get(SHORT) or 0)
    if not short:
        return None
    return (
        f"{short:,} test user(s) got fewer than candidates.n_negatives="
        f"{stats.get('candidates.n_negatives')} sampled negatives: the items they have not seen "
        f"carry too little of the {stats.get('candidates.sampling')} sampling weight to be drawn "
        f"in {MAX_ROUNDS} rounds; their metrics rank among fewer candidates "
        "(candidates.sampling=uniform avoids it)"
    )


def _cached_sample(spec: CandidateSpec, split: Split, cache_dir: Path | None) -> pd.DataFrame:
    from harness.split import part_digest

    payload = json.dumps(
        {
            "train": part_digest(split, "train"),  # the same digests the run logs: hashed once
            "test": part_digest(split, "test"),
            "valid": None if split.valid is None else part_digest(split, "valid"),
            "n": spec.n_negatives,
            "sampling": spec.sampling,
            "seed": spec.seed,
            # 4: validated items are known; rounds sized from the undrawn weight, uniform uncapped
            "sampler": 4,
        },
        sort_keys=True,
    )
    key = hashlib.sha256(payload.encode()).hexdigest()
    path = None if cache_dir is None else cache_dir / f"candidates-{key[:16]}.parquet"
    if path is not None and path.is_file():
        return pd.read_parquet(path)
    frame = sample_negatives(
        split.train, split.test, spec.n_negatives, spec.sampling, spec.seed, valid=split.valid
    )
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        frame.to_parquet(tmp, index=False)
        tmp.replace(path)
    return frame
