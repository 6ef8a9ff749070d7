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

__all__ = ["KINDS", "CandidateSpec", "build_candidates", "sample_negatives"]

KINDS = ("full", "sampled", "file")
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


def _keys(users: np.ndarray, items: np.ndarray, item_index: pd.Index) -> np.ndarray:
    return users.astype(np.int64) * (len(item_index) + 1) + item_index.get_indexer(items)


def sample_negatives(
    train: pd.DataFrame, test: pd.DataFrame, n_negatives: int, sampling: str, seed: int
) -> pd.DataFrame:
    """(user, item) rows: each test user's test items plus ``n_negatives`` distinct items drawn
    from the training catalog that the user has neither trained nor tested on.

    Draws in rounds over all users at once (no loop over users); a user whose unseen catalog is
    smaller than ``n_negatives`` gets all of it.
    """
    rng = np.random.default_rng(seed)
    catalog = pd.Index(np.sort(pd.unique(train[ITEM])))
    users = np.sort(pd.unique(test[USER]))
    user_index = pd.Index(users)
    weights = None
    if sampling == "popularity":
        counts = train[ITEM].value_counts().reindex(catalog).to_numpy(dtype=np.float64)
        weights = counts / counts.sum()
    known = pd.concat([train[[USER, ITEM]], test[[USER, ITEM]]])
    known = known[known[USER].isin(users)]
    known_codes = user_index.get_indexer(known[USER])
    width = len(catalog) + 1
    seen = np.unique(_keys(known_codes, known[ITEM].to_numpy(), catalog))
    in_catalog = seen % width != len(catalog)  # items outside the catalog map to position -1
    seen_per_user = np.bincount(seen[in_catalog] // width, minlength=len(users))
    target = np.minimum(n_negatives, len(catalog) - seen_per_user)
    chosen = pd.DataFrame({"u": np.zeros(0, np.int64), "i": np.zeros(0, np.int64)})
    for _ in range(50):  # rounds, each drawing for every user still short of its target
        have = np.bincount(chosen["u"], minlength=len(users))
        short = np.flatnonzero(have < target)
        if short.size == 0:
            break
        need = (target - have)[short]
        owner = np.repeat(short, 2 * need + 4)
        drawn = rng.choice(len(catalog), size=len(owner), p=weights)
        fresh = ~np.isin(owner * width + drawn, seen)
        batch = pd.DataFrame({"u": owner[fresh], "i": drawn[fresh]})
        chosen = pd.concat([chosen, batch]).drop_duplicates()
        rank = chosen.groupby("u").cumcount().to_numpy()
        chosen = chosen[rank < target[chosen["u"].to_numpy()]]
    negatives = pd.DataFrame(
        {USER: users[chosen["u"].to_numpy()], ITEM: catalog.to_numpy()[chosen["i"].to_numpy()]}
    )
    positives = test[[USER, ITEM]].drop_duplicates()
    return (
        pd.concat([positives, negatives], ignore_index=True)
        .sort_values([USER, ITEM], kind="stable")
        .reset_index(drop=True)
    )


def _read_file(path: str) -> pd.DataFrame:
    """The (user, item) rows of a candidates file; ids follow the interaction files' id rule."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{path}: candidate file not found")
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            frame = pd.read_parquet(p)
        else:
            frame = read_text_table(p, "csv", path)
    except (pd.errors.ParserError, UnicodeDecodeError, pa.ArrowException, OSError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{path}: cannot read the candidates file: {first}") from None
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
        for col, part in ((USER, split.test), (ITEM, split.train)):
            if frame[col].dtype != part[col].dtype:
                try:
                    frame[col] = frame[col].astype(part[col].dtype)
                except (TypeError, ValueError):
                    raise DataError(
                        f"{spec.path}: column '{col}' holds {_kind(frame[col])} ids but the "
                        f"interactions have {_kind(part[col])} ids, e.g. {frame[col].iloc[0]!r}"
                    ) from None
    else:
        frame = _cached_sample(spec, split, cache_dir)
    stats = {
        "candidates.kind": spec.kind,
        "candidates.rows": len(frame),
        "candidates.users": int(frame[USER].nunique()),
        "candidates.per_user_mean": float(len(frame) / max(frame[USER].nunique(), 1)),
    }
    if spec.kind == "sampled":
        stats |= {
            "candidates.n_negatives": spec.n_negatives,
            "candidates.sampling": spec.sampling,
            "candidates.seed": spec.seed,
        }
    return frame, stats


def _cached_sample(spec: CandidateSpec, split: Split, cache_dir: Path | None) -> pd.DataFrame:
    from harness.split import data_hash

    payload = json.dumps(
        {
            "train": data_hash(split.train),
            "test": data_hash(split.test),
            "n": spec.n_negatives,
            "sampling": spec.sampling,
            "seed": spec.seed,
        },
        sort_keys=True,
    )
    key = hashlib.sha256(payload.encode()).hexdigest()
    path = None if cache_dir is None else cache_dir / f"candidates-{key[:16]}.parquet"
    if path is not None and path.is_file():
        return pd.read_parquet(path)
    frame = sample_negatives(split.train, split.test, spec.n_negatives, spec.sampling, spec.seed)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        frame.to_parquet(tmp, index=False)
        tmp.replace(path)
    return frame
