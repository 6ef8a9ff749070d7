"""GSB (good / same / bad) comparisons of model B against model A, unit by unit (seed 001)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = [
    "GSB",
    "TOLERANCE_ROUNDING",
    "VALUE_ROUNDING",
    "gsb",
    "gsb_from_labels",
    "gsb_margin",
    "gsb_margins",
]

#: How far (relatively) beyond a positive tolerance a difference must be to count: metric values
#: carry decimal rounding (0.4 − 0.3 is 0.10000000000000003 in floating point), and a
#: difference of exactly the tolerance is "same" whatever side its rounding falls.
TOLERANCE_ROUNDING = 1e-9
#: Differences within this share of the larger value are rounding, not a difference, even at
#: tolerance 0: two models with equal average precision 0.2 can get 0.2 and
#: 0.19999999999999998 from sums taken in another order.
VALUE_ROUNDING = 1e-12


def gsb_margin(tolerance: float) -> float:
    """The tolerance the GSB rule compares differences with: ``tolerance`` widened by
    :data:`TOLERANCE_ROUNDING` (0 stays 0)."""
    return tolerance * (1.0 + TOLERANCE_ROUNDING)


def gsb_margins(a: np.ndarray, b: np.ndarray, tolerance: float, relative: bool) -> np.ndarray:
    """Per unit, how far B must beat (or trail) A to be good (bad): the tolerance (:func:
    `gsb_margin`, absolute or relative to ``|a|``), at least :data:`VALUE_ROUNDING` of the larger
    ``|a|``, ``|b|`` (rounding is no difference, at tolerance 0 too)."""
    tol = gsb_margin(tolerance)
    base = tol * np.abs(a) if relative else np.full(np.shape(a), tol)
    return np.maximum(base, VALUE_ROUNDING * np.maximum(np.abs(a), np.abs(b)))


@dataclass(frozen=True)
class GSB:
    """Counts of units where B is better (good), tied (same) or worse (bad) than A.

    ``delta`` = (good − bad) / (good + same + bad); ``excluded`` counts units left out because a
    value was missing (NaN) on either side.
    """

    good: int
    same: int
    bad: int
    delta: float
    excluded: int = 0

    @property
    def n(self) -> int:
        """Units compared."""
        return self.good + self.same + self.bad

    def __iter__(self) -> Iterator[float]:
        """Unpack as ``good, same, bad, delta = gsb(...)``."""
        return iter((self.good, self.same, self.bad, self.delta))


def _delta(good: int, same: int, bad: int) -> float:
    n = good + same + bad
    return (good - bad) / n if n else float("nan")


def _aligned(a: object, b: object) -> tuple[np.ndarray, np.ndarray]:
    """Two per-unit vectors as float arrays; Series are aligned on their index, which must match."""
    if isinstance(a, pd.Series) and isinstance(b, pd.Series):
        if not a.index.is_unique or not b.index.is_unique:
            raise ValueError("per-unit vectors must have a unique index (one value per user)")
        if len(a.index) != len(b.index) or not a.index.isin(b.index).all():
            only_a = a.index.difference(b.index)
            only_b = b.index.difference(a.index)
            example = only_a[0] if len(only_a) else only_b[0]
            raise ValueError(
                f"per-unit vectors cover different units ({len(only_a)} only in A, "
                f"{len(only_b)} only in B, e.g. {example!r}); compare on the same users"
            )
        b = b.reindex(a.index)
    va = np.asarray(a, dtype=np.float64)
    vb = np.asarray(b, dtype=np.float64)
    if va.shape != vb.shape or va.ndim != 1:
        raise ValueError(
            f"per-unit vectors must be 1-D of equal length (got {va.shape}, {vb.shape})"
        )
    return va, vb


def gsb(
    per_user_a: object,
    per_user_b: object,
    tolerance: float = 0.0,
    *,
    relative: bool = False,
    higher_is_better: bool = True,
) -> GSB:
    """GSB of B against A from two per-unit metric vectors.

    ``good`` when B beats A by more than ``tolerance`` (absolute, or relative to ``|A|`` when
    ``relative``), ``bad`` when it loses by more, else ``same`` (a difference at the tolerance,
    or within floating-point rounding of the values, is ``same``: :func:`gsb_margins`). Units
    missing on either side are excluded and counted.

    >>> gsb([0.5, 0.5, 0.5, 0.5], [0.9, 0.5, 0.1, 0.2])    # good, same, bad, bad (seed 001)
    GSB(good=1, same=1, bad=2, delta=-0.25, excluded=0)
    """
    if not tolerance >= 0:
        raise ValueError(f"'tolerance' must be >= 0 (got {tolerance!r})")
    a, b = _aligned(per_user_a, per_user_b)
    ok = ~(np.isnan(a) | np.isnan(b))
    diff = (b - a)[ok] * (1.0 if higher_is_better else -1.0)
    margin = gsb_margins(a[ok], b[ok], tolerance, relative)
    good = int((diff > margin).sum())
    bad = int((diff < -margin).sum())
    same = int(ok.sum()) - good - bad
    return GSB(good, same, bad, _delta(good, same, bad), int((~ok).sum()))


def gsb_from_labels(labels: Iterable[str] | pd.Series) -> GSB:
    """GSB from human side-by-side labels, one of ``good``, ``same``, ``bad`` per unit.

    >>> gsb_from_labels(["good", "same", "bad", "bad"]).delta
    -0.25
    """
    values = pd.Series(list(labels) if not isinstance(labels, pd.Series) else labels, dtype=object)
    norm = values.astype(str).str.strip().str.lower()
    unknown = ~norm.isin(["good", "same", "bad"])
    if unknown.any():
        raise ValueError(
            f"GSB labels must be 'good', 'same' or 'bad' (got {values[unknown].iloc[0]!r} "
            f"at position {int(np.flatnonzero(unknown.to_numpy())[0])})"
        )
    good, same, bad = (int((norm == x).sum()) for x in ("good", "same", "bad"))
    return GSB(good, same, bad, _delta(good, same, bad))
