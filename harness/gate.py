"""The launch gate: GO / NO_GO / INCONCLUSIVE for a candidate, with the reason for each rule.

Rules read confidence intervals, not p-values: at recommendation scale every difference is
"significant", so what matters is whether the interval clears the bar.

- primary: the relative lift of the primary metric must have its CI lower bound above
  ``min_lift`` (pass); a CI entirely below ``min_lift`` fails; anything else is inconclusive.
- guardrail (non-inferiority): the relative change must not be worse than ``-margin``: the CI
  lower bound at or above ``-margin`` passes, a CI entirely below fails. Whole-run metrics have
  no CI: their point change is compared with the margin.
- gsb: the ΔGSB CI lower bound above ``min_delta`` passes; entirely below fails.

For lower-is-better metrics (gini, popularity, rmse) the change is negated first, so "improvement"
always reads the same way. Any failed rule → NO_GO; else any inconclusive → INCONCLUSIVE; else GO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.compare import PairComparison

__all__ = ["DECISIONS", "EXIT_CODES", "GateDecision", "GateSpec", "RuleResult", "decide", "worst"]

DECISIONS = ("GO", "INCONCLUSIVE", "NO_GO")  # best to worst
#: Process exit codes with ``gate.enforce=true`` (documented in the README).
EXIT_CODES = {"GO": 0, "NO_GO": 10, "INCONCLUSIVE": 11}


@dataclass(frozen=True)
class GateSpec:
    """The ``gate/`` config."""

    enabled: bool = True
    enforce: bool = False
    primary: Mapping[str, Any] | None = None  # {metric, segment="all", min_lift}
    guardrails: Sequence[Mapping[str, Any]] = ()  # [{metric, segment="all", margin}]
    gsb: Mapping[str, Any] | None = None  # {metric, min_delta}
    promote: str | None = None  # registry alias moved to a GO registered candidate (promote.py)


@dataclass(frozen=True)
class RuleResult:
    """One rule's verdict and why."""

    rule: str
    metric: str
    segment: str
    status: str  # pass | fail | inconclusive | not_applicable
    value: float
    ci: tuple[float, float]
    threshold: float
    reason: str


@dataclass(frozen=True)
class GateDecision:
    """The decision for one candidate."""

    candidate: str
    baseline: str
    decision: str
    rules: list[RuleResult] = field(default_factory=list)

    def as_tags(self) -> dict[str, str]:
        """``gate.decision`` and one ``gate.rule.<n>`` tag per rule, for MLflow."""
        tags = {"gate.decision": self.decision, "gate.baseline": self.baseline}
        for i, r in enumerate(self.rules):
            tags[f"gate.rule.{i}.{r.rule}"] = f"{r.status}: {r.reason}"
        return tags


def _improvement(row: Mapping[str, Any]) -> tuple[float, tuple[float, float]]:
    """Relative change oriented so that positive is better, and its CI (NaN when none)."""
    sign = 1.0 if row.get("higher_is_better", True) else -1.0
    lift = float(row.get("lift", np.nan)) * sign
    low, high = (
        float(row.get("lift_ci_low", np.nan)) * sign,
        float(row.get("lift_ci_high", np.nan)) * sign,
    )
    return lift, (min(low, high), max(low, high))


def _judge(value: float, ci: tuple[float, float], bar: float, *, strict: bool = False) -> str:
    """pass / fail / inconclusive of a CI against a bar; ``strict``: the CI must exceed the bar
    (a candidate identical to the baseline must not clear a "better than" rule)."""
    if np.isnan(ci[0]) or np.isnan(ci[1]):
        if np.isnan(value):
            return "not_applicable"
        return "pass" if (value > bar if strict else value >= bar) else "fail"
    if ci[0] > bar or (not strict and ci[0] == bar):
        return "pass"
    if ci[1] < bar:
        return "fail"
    return "inconclusive"


def _missing(rule: str, metric: str, segment: str, bar: float) -> RuleResult:
    nan = float("nan")
    return RuleResult(
        rule,
        metric,
        segment,
        "not_applicable",
        nan,
        (nan, nan),
        bar,
        f"{metric} ({segment}) was not compared; the rule is skipped",
    )


def decide(pair: PairComparison, spec: GateSpec) -> GateDecision:
    """Apply every rule of ``spec`` to one pair."""
    rules: list[RuleResult] = []
    conf = "CI"
    if spec.primary:
        metric, seg = str(spec.primary["metric"]), str(spec.primary.get("segment", "all"))
        bar = float(spec.primary.get("min_lift", 0.0))
        row = pair.row(metric, seg)
        if row is None:
            rules.append(_missing("primary", metric, seg, bar))
        else:
            lift, ci = _improvement(row)
            status = _judge(lift, ci, bar, strict=True)
            rules.append(
                RuleResult(
                    "primary",
                    metric,
                    seg,
                    status,
                    lift,
                    ci,
                    bar,
                    f"relative lift {lift:+.2%} ({conf} {ci[0]:+.2%} to {ci[1]:+.2%}) vs required "
                    f"{bar:+.2%}: "
                    + {
                        "pass": "the CI clears it",
                        "fail": "the CI is below it",
                        "inconclusive": "the CI straddles it",
                        "not_applicable": "no value",
                    }[status],
                )
            )
    for guard in spec.guardrails or ():
        metric, seg = str(guard["metric"]), str(guard.get("segment", "all"))
        margin = float(guard.get("margin", 0.0))
        row = pair.row(metric, seg)
        if row is None:
            rules.append(_missing("guardrail", metric, seg, -margin))
            continue
        change, ci = _improvement(row)
        status = _judge(change, ci, -margin)
        ci_text = (
            "no CI (whole-run metric)"
            if np.isnan(ci[0])
            else (f"{conf} {ci[0]:+.2%} to {ci[1]:+.2%}")
        )
        rules.append(
            RuleResult(
                "guardrail",
                metric,
                seg,
                status,
                change,
                ci,
                -margin,
                f"change {change:+.2%} ({ci_text}) vs non-inferiority margin {-margin:+.2%}: "
                + {
                    "pass": "not worse than the margin",
                    "fail": "worse than the margin",
                    "inconclusive": "cannot rule out a loss beyond the margin",
                    "not_applicable": "no value",
                }[status],
            )
        )
    if spec.gsb:
        metric = str(spec.gsb.get("metric", pair.gsb_metric))
        bar = float(spec.gsb.get("min_delta", 0.0))
        row = pair.row(metric, "all")
        if row is None or "gsb_delta" not in row or np.isnan(row["gsb_delta"]):
            rules.append(_missing("gsb", metric, "all", bar))
        else:
            ci = (float(row["gsb_ci_low"]), float(row["gsb_ci_high"]))
            value = float(row["gsb_delta"])
            status = _judge(value, ci, bar, strict=True)
            rules.append(
                RuleResult(
                    "gsb",
                    metric,
                    "all",
                    status,
                    value,
                    ci,
                    bar,
                    f"ΔGSB {value:+.3f} (good {int(row['gsb_good'])}, same {int(row['gsb_same'])}, "
                    f"bad {int(row['gsb_bad'])}; {conf} {ci[0]:+.3f} to {ci[1]:+.3f}) vs minimum "
                    f"{bar:+.3f}",
                )
            )
    statuses = {r.status for r in rules}
    decision = (
        "NO_GO" if "fail" in statuses else "INCONCLUSIVE" if "inconclusive" in statuses else "GO"
    )
    if not statuses - {"not_applicable"}:
        decision = "INCONCLUSIVE"  # nothing could be checked: never a silent GO
    return GateDecision(pair.candidate, pair.baseline, decision, rules)


def worst(decisions: Sequence[str]) -> str:
    """The worst decision (NO_GO < INCONCLUSIVE < GO); GO for an empty list."""
    return max(decisions, key=DECISIONS.index, default="GO")
