"""Online A/B test sizing: how many users and days a test needs to see the offline effect.

An offline GO (or INCONCLUSIVE) is a reason to run an online test; this estimates its size with
the standard two-sample normal formula (:func:`metrics.stats.ab_test_size`):

    n per arm = (z_{1−α/2} + z_{power})² · (σ²_baseline + σ²_candidate) / Δ²
    Δ = lift · mean_baseline

σ² are the per-user variances (ddof=1) of the metric over the offline test users the pair was
compared on: the comparison's ``sd_a²`` and ``sd_b²``, from the pairs in process and from Spark's
sums on ``engine=spark``, so runs of both engines are sized at any size. ``lift`` is the relative
lift measured offline, oriented so positive is better; it is sized twice: at the measured lift
and at the low end of its CI (the pessimistic case; "not detectable" when that end is at or below
0). A baseline whose mean is 0 has no relative lift: the pair is then sized on the difference Δ
and the low end of its CI. Days = ⌈2 · n / ``compare.daily_users``⌉: the daily traffic split
evenly over the two arms, each user counted once. It is an estimate: it assumes the online metric
behaves like the offline one, with the same per-user spread and relative effect.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from harness.compare import CompareSpec, PairComparison
from metrics.stats import ab_test_size

__all__ = ["SIZED_DECISIONS", "format_sizing", "sizing_notes", "sizing_of", "sizing_rows"]

#: The gate decisions worth an online test.
SIZED_DECISIONS = ("GO", "INCONCLUSIVE")
_COLUMNS = [
    "candidate",
    "baseline",
    "decision",
    "metric",
    "segment",
    "higher_is_better",
    "mean_a",
    "var_a",
    "var_b",
    "lift",
    "users_per_arm",
    "days",
    "lift_ci_low",
    "users_per_arm_ci_low",
    "days_ci_low",
    "diff",
    "diff_ci_low",
]


def _size(
    lift: float, mean_a: float, var_a: float, var_b: float, spec: CompareSpec
) -> tuple[float, float]:
    """Users per arm (whole users) and days for one relative lift of ``mean_a`` (``mean_a=1``: a
    difference); NaN when not detectable."""
    if not np.isfinite(lift) or lift <= 0:
        return float("nan"), float("nan")
    n = ab_test_size(mean_a, var_a, var_b, lift, alpha=spec.alpha, power=spec.power)
    if not np.isfinite(n):
        return float("nan"), float("nan")
    users = float(max(math.ceil(n), 1))
    days = float(math.ceil(2 * users / spec.daily_users)) if spec.daily_users else float("nan")
    return users, days


def sizing_rows(
    pairs: Sequence[PairComparison],
    spec: CompareSpec,
    *,
    metric: str,
    decisions: Mapping[str, str] | None = None,
    segment: str = "all",
) -> pd.DataFrame:
    """One row per pair worth an online test (GO or INCONCLUSIVE in ``decisions``; every pair
    when there is no gate): users per arm and days to detect the measured lift of ``metric`` and
    the low end of its CI (NaN: not detectable). The per-user means and spreads are the
    comparison's own (its ``mean_a``, ``sd_a``, ``sd_b`` over the paired users), so a pair
    compared on Spark is sized as one compared in process. ``segment``: the users sized (the
    gate's primary rule's segment), whose traffic ``compare.daily_users`` then is.
    """
    rows: list[dict[str, Any]] = []
    for pair in pairs:
        decision = decisions.get(pair.candidate) if decisions is not None else None
        if decisions is not None and decision not in SIZED_DECISIONS:
            continue
        row = pair.row(metric, segment)
        if row is None or row.get("kind") != "per-user":
            continue  # not compared, or a whole-run metric: no per-user variance to size with
        sd_a, sd_b = float(row.get("sd_a", np.nan)), float(row.get("sd_b", np.nan))
        if not (np.isfinite(sd_a) and np.isfinite(sd_b)):  # under 2 paired users: no spread
            continue
        var_a, var_b = sd_a * sd_a, sd_b * sd_b
        mean_a = float(row["mean_a"])
        sign = 1.0 if bool(row.get("higher_is_better", True)) else -1.0
        lift = float(row["lift"]) * sign
        low = min(float(row["lift_ci_low"]) * sign, float(row["lift_ci_high"]) * sign)
        diff = float(row["diff"]) * sign
        diff_low = min(float(row["diff_ci_low"]) * sign, float(row["diff_ci_high"]) * sign)
        # a zero baseline has no relative lift: Δ is then sized as a lift of a mean of 1
        on_diff = mean_a == 0
        effect, effect_low, scale = (diff, diff_low, 1.0) if on_diff else (lift, low, mean_a)
        users, days = _size(effect, scale, var_a, var_b, spec)
        users_low, days_low = _size(effect_low, scale, var_a, var_b, spec)
        rows.append(
            {
                "candidate": pair.candidate,
                "baseline": pair.baseline,
                "decision": decision,
                "metric": metric,
                "segment": segment,
                "higher_is_better": sign > 0,
                "mean_a": mean_a,
                "var_a": var_a,
                "var_b": var_b,
                "lift": lift,
                "users_per_arm": users,
                "days": days,
                "lift_ci_low": low,
                "users_per_arm_ci_low": users_low,
                "days_ci_low": days_low,
                "diff": diff,
                "diff_ci_low": diff_low,
            }
        )
    return pd.DataFrame(rows, columns=_COLUMNS)


def sizing_of(
    pairs: Sequence[PairComparison],
    decisions: Mapping[str, Any],
    cspec: CompareSpec,
    gspec: Any,
) -> pd.DataFrame:
    """:func:`sizing_rows` for one harness run's pairs: the gate's primary metric on its segment
    (else ``compare.gsb_metric`` on all users), decisions from the gate when it is on; sanity
    baselines (``gate.sanity``) are never launch candidates, so they get no sizing."""
    primary = getattr(gspec, "primary", None) if getattr(gspec, "enabled", False) else None
    metric = str(primary.metric) if primary else cspec.gsb_metric
    segment = str(primary.segment) if primary else "all"
    gated = (
        {c: getattr(d, "decision", d) for c, d in decisions.items()}
        if getattr(gspec, "enabled", False)
        else None
    )
    sanity = set(getattr(gspec, "sanity", ()) or ())
    launchable = [p for p in pairs if p.candidate not in sanity]
    return sizing_rows(launchable, cspec, metric=metric, decisions=gated, segment=segment)


def _count(users: float, days: float, daily: bool) -> str:
    if np.isnan(users):
        return "not detectable"
    text = f"{int(users):,} users per arm"
    if daily:
        text += f", {int(days):,} day{'s' if days != 1 else ''}"
    return text


def _lines(frame: pd.DataFrame, spec: CompareSpec) -> list[str]:
    """One sentence per row."""
    daily = spec.daily_users is not None
    out = []
    for _, r in frame.iterrows():
        who = f"{r['candidate']} vs {r['baseline']}"
        if r["decision"] is not None:
            who += f" ({r['decision']})"
        # the lift as the metric moved (the columns are oriented: + is better), as everywhere
        sign, end = (1, "low") if r["higher_is_better"] else (-1, "high")
        if r["mean_a"] == 0:  # no relative lift over a zero baseline: sized on the difference
            effect = f"difference {sign * r['diff']:+.4g} (the baseline scores 0)"
            low = f"{sign * r['diff_ci_low']:+.4g}"
        else:
            effect, low = f"lift {sign * r['lift']:+.2%}", f"{sign * r['lift_ci_low']:+.2%}"
        where = ""
        if r["segment"] != "all":  # the gate's primary rule is on a segment: its users only
            days = "; compare.daily_users taken as its users per day" if daily else ""
            where = f" on segment {r['segment']} (its users only{days})"
        out.append(
            f"{who}: {r['metric']}{'' if sign > 0 else ' (lower is better)'}{where} {effect}: "
            f"{_count(r['users_per_arm'], r['days'], daily)}; "
            f"CI {end} end {low}: {_count(r['users_per_arm_ci_low'], r['days_ci_low'], daily)}"
        )
    return out


def _heading(spec: CompareSpec) -> str:
    traffic = (
        f"{spec.daily_users:,.0f} users/day over 2 arms"
        if spec.daily_users is not None
        else "days: set compare.daily_users"
    )
    return (
        f"online A/B test sizing (estimate; two-sided α={spec.alpha:g}, power {spec.power:g}, "
        f"offline per-user variance; {traffic})"
    )


def format_sizing(frame: pd.DataFrame, spec: CompareSpec) -> str:
    """The sizing table for the terminal: a heading and one line per candidate, each block
    starting with a blank line; the empty string when nothing is sized."""
    if frame.empty:
        return ""
    return "\n" + "\n".join([_heading(spec)] + [f"  {line}" for line in _lines(frame, spec)])


def sizing_notes(frame: pd.DataFrame, spec: CompareSpec) -> list[str]:
    """The same sentences as report notes, one per candidate, each with the heading's
    assumptions (a note stands alone in the report's list); none when nothing is sized."""
    return [f"{_heading(spec)}: {line}" for line in _lines(frame, spec)]
