"""The input checks both packages share: one kind of bad input, one wording, one ``ValueError``.

``metrics`` checks its arguments with these and ``harness`` (data, splits, models, comparison,
Spark engine) calls the same functions, so a setting or a frame is refused the same way wherever
it enters.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "require_choice",
    "require_columns",
    "require_frame",
    "require_int",
    "require_positive",
    "require_range",
]


def require_frame(frame: object, what: str) -> None:
    """``frame`` is a pandas DataFrame (named ``what`` in the message)."""
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"{what} must be a pandas DataFrame (got {type(frame).__name__})")


def require_columns(
    columns: Iterable[Any], needed: Sequence[str], what: str, hint: str = ""
) -> None:
    """Every column of ``needed`` is among ``columns``; the message names the first missing one,
    what is needed and what was found, then ``hint`` (e.g. the function that makes the frame)."""
    found = [str(c) for c in columns]
    missing = [c for c in needed if c not in found]
    if missing:
        tail = f"; {hint}" if hint else ""
        raise ValueError(
            f"{what} is missing column {missing[0]!r}; it needs {list(needed)}, found {found}{tail}"
        )


def require_int(name: str, value: object, minimum: int = 1, none_ok: bool = False) -> Any:
    """``value`` is an int (not a bool) of at least ``minimum``, or None when ``none_ok``."""
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        kind = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        alt = " or null" if none_ok else ""
        raise ValueError(f"'{name}' must be {kind}{alt} (got {value!r})")
    return int(value)


def require_positive(name: str, value: object, zero: bool = False) -> float:
    """``value`` is a real number > 0 (>= 0 with ``zero``), returned as a float."""
    ok = isinstance(value, int | float | np.number) and not isinstance(value, bool)
    if not ok or not (value >= 0.0 if zero else value > 0.0):  # type: ignore[operator]
        raise ValueError(f"'{name}' must be {'>= 0' if zero else '> 0'} (got {value!r})")
    return float(value)  # type: ignore[arg-type]


def require_range(name: str, value: object, low: float, high: float, closed: str = "both") -> float:
    """``value`` is a real number in the interval from ``low`` to ``high``; ``closed`` says which
    ends belong to it: ``"both"``, ``"left"``, ``"right"`` or ``"neither"``."""
    left, right = closed in ("both", "left"), closed in ("both", "right")
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float | np.integer | np.floating)
        and (low <= value if left else low < value)
        and (value <= high if right else value < high)
    )
    if not ok:
        interval = f"{'[' if left else '('}{low:g}, {high:g}{']' if right else ')'}"
        raise ValueError(f"'{name}' must be in {interval} (got {value!r})")
    return float(value)  # type: ignore[arg-type]


def require_choice(name: str, value: object, choices: Iterable[Any]) -> Any:
    """``value`` is one of ``choices``; the message lists them."""
    options = list(choices)
    if value not in options:
        listed = ", ".join(map(repr, options))
        raise ValueError(f"'{name}' must be one of {listed} (got {value!r})")
    return value
