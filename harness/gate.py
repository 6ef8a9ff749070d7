"""The launch gate: GO / NO_GO / INCONCLUSIVE for a candidate, with the reason for each rule.

Rules read confidence intervals, not p-values: at recommendation scale every difference is
"significant", so what matters is whether the interval clears the bar.

- primary: the relative lift of the primary metric must have its CI lower bound above
  ``min_lift`` (pass); a CI entirely below ``min_lift`` fails; anything else is inconclusive.
- guardrail (non-inferiority): the relative change must not be worse than ``-margin``: the CI
  lower bound at or above ``-margin`` passes, a CI entirely below fails. Whole-run metrics
  (coverage) and pooled ones (rmse, gauc, micro averages) are compared on their whole-run
  values, with no CI: their point change is compared with the margin.
- gsb: the ΔGSB CI lower bound above ``min_delta`` passes; entirely below fails.

For lower-is-better metrics (gini, popularity, rmse) the change is negated first, so "improvement"
always reads the same way. When the baseline scores exactly 0 the relative change is unbounded:
its sign is that of the difference, so the rule is judged on the difference's CI.

A rule is never skipped. One that could never be evaluated (unknown or uncomputed metric, unknown
segment, a whole-run metric on a segment) is refused by :func:`check_gate` before any model
runs; one that cannot be evaluated on this run's data (an empty segment, no value) is
``inconclusive`` with the reason. Any failed rule → NO_GO; else any inconclusive → INCONCLUSIVE;
else GO. Sanity baselines (``sanity``, e.g. ``random``) are compared and shown but never gated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import pandas as pd

import metrics
from harness.compare import PairComparison, pooled_metrics
from metrics.checks import require_int

__all__ = [
    "DECISIONS",
    "EXIT_CODES",
    "EXIT_NO_DECISION",
    "ITEM_SEGMENTS",
    "USER_SEGMENTS",
    "GateDecision",
    "GateSpec",
    "GsbRule",
    "GuardrailRule",
    "PrimaryRule",
    "RuleResult",
    "check_gate",
    "check_selection",
    "decide",
    "dropped_warning",
    "verdict_line",
    "whole_run",
    "worst",
]

DECISIONS = ("GO", "INCONCLUSIVE", "NO_GO")  # best to worst
#: Exit code with ``gate.enforce=true`` when the run took no decision (baseline failed, nothing
#: compared, no candidate to gate).
EXIT_NO_DECISION = 12
#: Process exit codes with ``gate.enforce=true`` (documented in the README).
EXIT_CODES = {"GO": 0, "NO_GO": 10, "INCONCLUSIVE": 11, "NO_DECISION": EXIT_NO_DECISION}
#: The note a run with the gate on but no decision carries (the report reads it).
NO_DECISION_NOTE = "no gate decision: "
USER_SEGMENTS = ("cold", "heavy")
#: ``gate.min_users``: a per-user rule on fewer paired users is inconclusive. Measured with no
#: true difference, the bootstrap interval excluded 0 in 25% of datasets at 3 users, 19% at 5 and
#: 10% at 8 (nominal 5%): a launch must not hang on so few.
MIN_USERS = 20
ITEM_SEGMENTS = ("items:head", "items:mid", "items:tail")


@dataclass(frozen=True)
class PrimaryRule:
    """``gate.primary``: the relative lift's CI lower bound must exceed ``min_lift``."""

    metric: str | None = None  # required (check_gate says so, naming the key)
    segment: str = "all"
    min_lift: float = 0.0


@dataclass(frozen=True)
class GuardrailRule:
    """One of ``gate.guardrails``: the relative change must not be worse than ``-margin``."""

    metric: str | None = None  # required (check_gate says so, naming the key)
    segment: str = "all"
    margin: float = 0.0


@dataclass(frozen=True)
class GsbRule:
    """``gate.gsb``: the ΔGSB CI lower bound must exceed ``min_delta``."""

    metric: str | None = None  # None: compare.gsb_metric
    min_delta: float = 0.0


Rule = PrimaryRule | GuardrailRule | GsbRule


def rule_of(cls: type, key: str, value: Any) -> Any:
    """A typed rule from a config mapping (or the rule itself): an unknown setting such as
    ``min_lfit`` or a threshold that is not a finite number is a one-line ValueError naming
    ``key``."""
    if value is None or isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"{key} must be a mapping such as {{metric: ndcg@10}} (got {value!r})")
    allowed = [f.name for f in fields(cls)]
    unknown = [str(k) for k in value if k not in allowed]
    if unknown:
        raise ValueError(
            f"{key}.{unknown[0]} is not a gate setting; {key} takes {', '.join(allowed)}"
        )
    params = {str(k): v for k, v in value.items()}
    bar = allowed[-1]  # min_lift | margin | min_delta
    if bar in params:
        try:
            number = float(params[bar])
        except (TypeError, ValueError):
            number = math.nan
        if isinstance(params[bar], bool) or not math.isfinite(number):
            raise ValueError(f"{key}.{bar} must be a finite number (got {params[bar]!r})")
        if bar == "margin" and number < 0:
            raise ValueError(
                f"{key}.margin must be >= 0 (got {params[bar]!r}): it is the loss tolerated; "
                "to require a gain use gate.primary.min_lift"
            )
        if bar == "min_delta" and not -1 <= number <= 1:
            raise ValueError(
                f"{key}.min_delta must lie in [-1, 1] (got {params[bar]!r}): ΔGSB is "
                "(good - bad) / users"
            )
        params[bar] = number
    for name in ("metric", "segment"):
        if params.get(name) is not None:
            params[name] = str(params[name])
    return cls(**params)


@dataclass(frozen=True)
class GateSpec:
    """The ``gate/`` config."""

    enabled: bool = True
    enforce: bool = False
    primary: PrimaryRule | None = None  # mappings are accepted and converted
    guardrails: Sequence[GuardrailRule] = ()
    gsb: GsbRule | None = None
    sanity: tuple[str, ...] = ("random",)  # models compared and shown, never gated
    promote: str | None = None  # registry alias moved to a GO registered candidate (promote.py)
    min_users: int = MIN_USERS  # fewer paired users on a rule's segment: inconclusive

    def __post_init__(self) -> None:
        object.__setattr__(self, "min_users", require_int("gate.min_users", self.min_users))
        sanity = self.sanity or ()
        object.__setattr__(
            self, "sanity", (sanity,) if isinstance(sanity, str) else tuple(map(str, sanity))
        )
        object.__setattr__(self, "primary", rule_of(PrimaryRule, "gate.primary", self.primary))
        guardrails = self.guardrails or ()
        if isinstance(guardrails, Mapping | str):
            raise ValueError("gate.guardrails must be a list of rules such as [{metric: ...}]")
        object.__setattr__(
            self,
            "guardrails",
            tuple(
                rule_of(GuardrailRule, f"gate.guardrails[{i}]", g) for i, g in enumerate(guardrails)
            ),
        )
        object.__setattr__(self, "gsb", rule_of(GsbRule, "gate.gsb", self.gsb))
        from harness.promote import check_alias

        object.__setattr__(self, "promote", check_alias(self.promote))


@dataclass(frozen=True)
class RuleResult:
    """One rule's verdict and why."""

    rule: str
    metric: str
    segment: str
    status: str  # pass | fail | inconclusive
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


# ------------------------------------------------------------------------------ before the run


def whole_run(metric: str) -> bool:
    """True for metrics computed once over the whole run (coverage, gini, global AUC): they have
    no per-user values, hence no CI, no GSB and no segments."""
    spec = metrics.parse(metric)
    d = spec.definition
    return (d.kind == "run" and d.aggregation == "pooled") or spec.metric == "global_auc"


def _check_rule(
    kind: str,
    key: str,
    rule: Rule,
    suite: Mapping[str, str],
    segments: bool,
    gsb_metric: str,
    human_labels: bool,
    pooled: frozenset[str],
) -> Rule:
    """One rule resolved against the compared metrics (see :func:`check_gate`)."""
    metric = rule.metric if rule.metric is not None or kind != "gsb" else gsb_metric
    if metric is None:
        raise ValueError(f"{key}.metric must be set, e.g. {key}.metric=ndcg@10")
    metric = str(metric)
    if kind == "gsb" and metric == "human_labels":
        if not human_labels:
            raise ValueError(
                "gate.gsb.metric='human_labels' needs compare.human_labels (a CSV of unit,label)"
            )
        return replace(rule, metric=metric)
    try:
        canonical = str(metrics.parse(metric))
    except ValueError as err:
        raise ValueError(f"{key}.metric={metric!r} is not a metric: {err}") from None
    if canonical not in suite:
        raise ValueError(
            f"{key}.metric={metric!r} is not computed and compared in this run (compared: "
            f"{', '.join(suite.values())}); add it to metrics.names (and compare.metrics) "
            "or fix the rule"
        )
    name = suite[canonical]
    segment = str(getattr(rule, "segment", "all"))
    known = ("all", *USER_SEGMENTS, *ITEM_SEGMENTS)
    if segment not in known:
        raise ValueError(f"{key}.segment={segment!r} is not a segment (known: {', '.join(known)})")
    if segment != "all" and not segments:
        raise ValueError(
            f"{key}.segment={segment!r} needs compare.segments=true (or drop the rule)"
        )
    if segment != "all" and whole_run(name):
        raise ValueError(
            f"{key}.segment={segment!r}: {name} is a whole-run metric (no per-user values), so "
            "it can only be gated on segment 'all'"
        )
    if segment != "all" and name in pooled:
        raise ValueError(
            f"{key}.segment={segment!r}: {name} is pooled over the run (its summary is not the "
            "mean of its per-user values), so it is compared on its whole-run value and can "
            "only be gated on segment 'all'"
        )
    if segment in ITEM_SEGMENTS and metrics.parse(name).definition.kind != "ranking":
        raise ValueError(
            f"{key}.segment={segment!r}: only ranking metrics are compared on item segments "
            f"({name} is not one)"
        )
    if kind == "gsb" and (whole_run(name) or name in pooled):
        what = "a whole-run metric" if whole_run(name) else "pooled over the run"
        raise ValueError(
            f"gate.gsb.metric={metric!r} is {what}: GSB counts per-user wins, so it "
            "needs a per-user metric such as ndcg@10"
        )
    return replace(rule, metric=name)


def check_gate(
    spec: GateSpec,
    compared: Sequence[str],
    *,
    segments: bool = True,
    gsb_metric: str = "ndcg@10",
    human_labels: bool = False,
    options: Mapping[str, Any] | None = None,
) -> GateSpec:
    """Resolve every rule against what the comparison computes, before any model runs.

    ``compared``: the compared metric names (``compare.metrics`` or ``metrics.names``). A rule
    that could never be evaluated (unknown metric such as ``ndgc@10``, one not compared such as
    ``recall@50`` with k=10, an unknown segment, a whole-run or pooled metric on a segment
    (``options``: the metric options, which say whether averages are micro), an unknown
    setting such as ``min_lfit``) is a one-line ``ValueError`` naming the gate key and value.
    Returns the spec with metric names spelled as in the suite (``P_10`` → ``precision@10``).
    """
    if not spec.enabled:
        return spec
    suite: dict[str, str] = {}
    for name in compared:
        suite.setdefault(str(metrics.parse(name)), str(name))
    pooled = pooled_metrics(list(suite.values()), options)

    def check(kind: str, key: str, rule: Any) -> Any:
        return _check_rule(kind, key, rule, suite, segments, gsb_metric, human_labels, pooled)

    return replace(
        spec,
        primary=check("primary", "gate.primary", spec.primary) if spec.primary else None,
        guardrails=tuple(
            check("guardrail", f"gate.guardrails[{i}]", g) for i, g in enumerate(spec.guardrails)
        ),
        gsb=check("gsb", "gate.gsb", spec.gsb) if spec.gsb else None,
    )


def check_selection(spec: GateSpec, baseline: str | None, models: Sequence[str]) -> None:
    """Refuse, before any model runs, a gate that could not decide: an enforced gate that is off
    or has no baseline, a baseline that is not among the selected ``models``, an enforced gate
    with no candidate besides the baseline and the sanity baselines."""
    if spec.enforce and not spec.enabled:
        raise ValueError(
            "gate.enforce=true needs gate.enabled=true (a gate that is off decides nothing)"
        )
    if not spec.enabled:
        return
    if baseline is None:
        if spec.enforce:
            raise ValueError(
                "gate.enforce=true needs a baseline: compare.baseline is null "
                "(set e.g. compare.baseline=popularity)"
            )
        return
    if baseline not in models:
        import difflib

        close = difflib.get_close_matches(baseline, list(models), n=1)
        hint = (
            f"did you mean compare.baseline={close[0]}?"
            if close
            else f"add it, e.g. 'model=[{baseline},...]', choose another with "
            "compare.baseline=NAME, or use compare=none"
        )
        raise ValueError(
            f"compare.baseline={baseline!r} is not among the selected models "
            f"({', '.join(models) or 'none'}): {hint}"
        )
    gated = [m for m in models if m != baseline and m not in spec.sanity]
    if spec.enforce and not gated:
        raise ValueError(
            f"gate.enforce=true but no candidate to gate: besides the baseline {baseline!r} the "
            f"selected models are sanity baselines (gate.sanity=[{','.join(spec.sanity)}]); "
            "add a candidate or set gate.sanity=[]"
        )


_COUNTS = ("test_dropped_events", "test_dropped_users", "n_test_events", "n_test_users")


def dropped_warning(stats: Mapping[str, Any], threshold: float) -> str | None:
    """The warning, with counts, when the split dropped at least ``threshold`` of the test events
    or test users as unseen in training (the gate then decides on the few that remain)."""
    count = {k: int(stats.get(k) or 0) for k in _COUNTS}
    events, users = count["test_dropped_events"], count["test_dropped_users"]
    kept_events, kept_users = count["n_test_events"], count["n_test_users"]
    all_events, all_users = events + kept_events, users + kept_users
    share_events = events / all_events if all_events else 0.0
    share_users = users / all_users if all_users else 0.0
    if not (events or users) or max(share_events, share_users) < threshold:
        return None
    return (
        f"the split dropped {events:,} of {all_events:,} test events ({share_events:.1%}) and "
        f"{users:,} of {all_users:,} test users ({share_users:.1%}) as unseen in training; "
        f"metrics and the gate use the remaining {kept_events:,} events of {kept_users:,} users "
        "(split.unseen=keep keeps them)"
    )


# ------------------------------------------------------------------------------ after the run


def _number(row: pd.Series, key: str) -> float:
    value = row.get(key, math.nan)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _judge(ci: tuple[float, float], bar: float, *, strict: bool = False) -> str:
    """pass / fail / inconclusive of a CI (or a point: ``(v, v)``) against a bar; ``strict``:
    the CI must exceed the bar (a candidate identical to the baseline must not clear a "better
    than" rule)."""
    if ci[0] > bar or (not strict and ci[0] == bar):
        return "pass"
    if ci[1] < bar:
        return "fail"
    return "inconclusive"


def _row(pair: PairComparison, metric: str, segment: str) -> pd.Series | None:
    """The comparison row of ``metric`` in ``segment``; None when absent (or nothing compared)."""
    if pair.table.empty or not {"metric", "segment"} <= set(pair.table.columns):
        return None
    return pair.row(metric, segment)


def _absent(pair: PairComparison, metric: str, segment: str) -> str:
    """Why ``metric`` has no row in ``segment``."""
    if segment != "all" and not pair.segments:
        return f"segments were not compared for {pair.candidate} vs {pair.baseline}"
    compared = f"{metric} was not compared for {pair.candidate} vs {pair.baseline}"
    if pair.table.empty or not {"metric", "segment"} <= set(pair.table.columns):
        return compared
    if segment != "all" and not (pair.table["segment"] == segment).any():
        what = pair.segments.get(segment, segment)
        return f"the segment {segment!r} is empty in this run ({what}): nothing to compare"
    if not (pair.table["metric"] == metric).any():
        return compared
    return (
        f"{metric} has fewer than 2 users with a value for both models on {segment!r}: "
        "it could not be compared"
    )


def _signed(x: float) -> str:
    """``+∞``, ``−∞`` or ``0``: a relative change over a zero baseline, for a reason line."""
    return "+∞" if x > 0 else "−∞" if x < 0 else "0"


def _unbounded(x: float) -> float:
    """The relative change of a difference ``x`` over a baseline of exactly 0."""
    return math.inf if x > 0 else -math.inf if x < 0 else 0.0


_WORDS = {
    "primary": {
        "pass": "the CI clears it",
        "fail": "the CI is below it",
        "inconclusive": "the CI straddles it",
    },
    "guardrail": {
        "pass": "not worse than the margin",
        "fail": "worse than the margin",
        "inconclusive": "cannot rule out a loss beyond the margin",
    },
}
_POINT = {"pass": "above it", "fail": "below it", "inconclusive": "at it"}


def _words(kind: str, status: str, ci: tuple[float, float], bar: float) -> str:
    """The end of a rule's reason: :data:`_WORDS`, except a primary CI whose low end is at the
    bar (it must be above: e.g. a zero-width CI at 0), which does not straddle it."""
    if kind == "primary" and status == "inconclusive" and ci[0] >= bar:
        return "the CI's low end is at it (it must be above it)"
    return _WORDS[kind][status]


def _too_few(row: pd.Series, segment: str, min_users: int) -> str | None:
    """Why a per-user row has too few paired users to judge, or None."""
    n = _number(row, "n")
    if str(row.get("kind", "per-user")) == "run-level" or math.isnan(n) or n >= min_users:
        return None
    return (
        f"only {int(n)} users with a value for both models on {segment!r} (fewer than "
        f"gate.min_users={min_users}): too few for a sound interval"
    )


def _relative_rule(
    pair: PairComparison,
    kind: str,
    metric: str,
    segment: str,
    bar: float,
    min_users: int = MIN_USERS,
) -> RuleResult:
    """A primary (``kind="primary"``, bar = min_lift, strict) or guardrail (bar = −margin) rule
    on the oriented relative change of ``metric`` in ``segment``."""
    strict = kind == "primary"
    nan = math.nan

    def result(status: str, value: float, ci: tuple[float, float], reason: str) -> RuleResult:
        return RuleResult(kind, metric, segment, status, value, ci, bar, reason)

    what = "relative lift" if strict else "relative change"
    against = f"required {bar:+.2%}" if strict else f"non-inferiority margin {bar:+.2%}"
    row = _row(pair, metric, segment)
    if row is None:
        return result("inconclusive", nan, (nan, nan), _absent(pair, metric, segment))
    sign = 1.0 if bool(row.get("higher_is_better", True)) else -1.0
    if sign < 0:  # the numbers below are oriented: say so where they are read
        what += f" ({metric} is better lower: a fall reads +)"
    base, cand = _number(row, "mean_a"), _number(row, "mean_b")
    if math.isnan(base) or math.isnan(cand):
        who = pair.baseline if math.isnan(base) else pair.candidate
        return result(
            "inconclusive", nan, (nan, nan), f"{who} has no value of {metric} on {segment!r}"
        )
    few = _too_few(row, segment, min_users)
    if few is not None:
        return result("inconclusive", _number(row, "lift") * sign, (nan, nan), f"{metric}: {few}")
    per_user = str(row.get("kind", "per-user")) == "per-user"
    level = _number(row, "confidence")
    ci_name = f"{level:.0%} CI" if math.isfinite(level) else "CI"
    if base == 0:
        diff = (cand - base) * sign
        lo, hi = sorted((_number(row, "diff_ci_low") * sign, _number(row, "diff_ci_high") * sign))
        if per_user and (math.isnan(lo) or math.isnan(hi)):
            return result(
                "inconclusive",
                nan,
                (nan, nan),
                f"{pair.baseline} scores 0 on {metric} ({segment}) and the difference has no CI",
            )
        value = _unbounded(diff)
        ci = (_unbounded(lo), _unbounded(hi)) if per_user else (value, value)
        status = _judge(ci, bar, strict=strict)
        spread = f" ({ci_name} {lo:+.4g} to {hi:+.4g})" if per_user else ""
        if ci == (0.0, 0.0):
            why = f"both models score 0 on {metric} ({segment}): no change"
        else:  # the bar is relative: compare the relative change the difference implies
            relative = _signed(value)
            if ci[0] != ci[1]:
                relative = f"{_signed(ci[0])} to {_signed(ci[1])}"
            elif per_user:
                relative += " over the whole CI"
            why = (
                f"{pair.baseline} scores 0 on {metric} ({segment}): the difference "
                f"{diff:+.4g}{spread} makes the {what} {relative}"
            )
        return result(status, value, ci, f"{why} vs {against}: " + _words(kind, status, ci, bar))
    lift = _number(row, "lift") * sign
    if not per_user:
        status = _judge((lift, lift), bar, strict=strict)
        return result(
            status,
            lift,
            (nan, nan),
            f"{what} {lift:+.2%} (whole-run metric: no CI, the point value is compared) vs "
            f"{against}: " + (_POINT if strict else _WORDS[kind])[status],
        )
    lo, hi = sorted((_number(row, "lift_ci_low") * sign, _number(row, "lift_ci_high") * sign))
    if math.isnan(lift) or math.isnan(lo) or math.isnan(hi):
        return result(
            "inconclusive",
            lift,
            (nan, nan),
            f"{metric} ({segment}) has no confidence interval for the {what} (too few users "
            "or no variation)",
        )
    status = _judge((lo, hi), bar, strict=strict)
    return result(
        status,
        lift,
        (lo, hi),
        f"{what} {lift:+.2%} ({ci_name} {lo:+.2%} to {hi:+.2%}) vs {against}: "
        + _words(kind, status, (lo, hi), bar),
    )


def _gsb_rule(
    pair: PairComparison, metric: str, bar: float, min_users: int = MIN_USERS
) -> RuleResult:
    """ΔGSB's CI lower bound must exceed ``bar``."""
    nan = math.nan
    row = _row(pair, metric, "all")
    value = nan if row is None else _number(row, "gsb_delta")
    if row is None or math.isnan(value):
        why = (
            _absent(pair, metric, "all")
            if row is None
            else f"{metric} has no per-user wins to count (no ΔGSB)"
        )
        return RuleResult("gsb", metric, "all", "inconclusive", nan, (nan, nan), bar, why)
    few = _too_few(row, "all", min_users)
    if few is not None:
        return RuleResult(
            "gsb", metric, "all", "inconclusive", value, (nan, nan), bar, f"ΔGSB: {few}"
        )
    lo, hi = _number(row, "gsb_ci_low"), _number(row, "gsb_ci_high")
    counts = (
        f"good {int(_number(row, 'gsb_good'))}, same {int(_number(row, 'gsb_same'))}, "
        f"bad {int(_number(row, 'gsb_bad'))}"
    )
    if math.isnan(lo) or math.isnan(hi):
        return RuleResult(
            "gsb",
            metric,
            "all",
            "inconclusive",
            value,
            (nan, nan),
            bar,
            f"ΔGSB {value:+.3f} ({counts}) has no confidence interval (too few users)",
        )
    status = _judge((lo, hi), bar, strict=True)
    return RuleResult(
        "gsb",
        metric,
        "all",
        status,
        value,
        (lo, hi),
        bar,
        f"ΔGSB {value:+.3f} ({counts}; CI {lo:+.3f} to {hi:+.3f}) vs minimum {bar:+.3f}",
    )


def decide(pair: PairComparison, spec: GateSpec) -> GateDecision:
    """Apply every rule of ``spec`` to one pair; no rule is ever skipped."""
    rules: list[RuleResult] = []
    if spec.primary:
        rules.append(
            _relative_rule(
                pair,
                "primary",
                str(spec.primary.metric),
                spec.primary.segment,
                spec.primary.min_lift,
                spec.min_users,
            )
        )
    for guard in spec.guardrails:
        rules.append(
            _relative_rule(
                pair, "guardrail", str(guard.metric), guard.segment, -guard.margin, spec.min_users
            )
        )
    if spec.gsb:
        metric = spec.gsb.metric or pair.gsb_metric
        rules.append(_gsb_rule(pair, metric, spec.gsb.min_delta, spec.min_users))
    statuses = {r.status for r in rules}
    if "fail" in statuses:
        decision = "NO_GO"
    elif "inconclusive" in statuses or not rules:  # nothing checked: never a silent GO
        decision = "INCONCLUSIVE"
    else:
        decision = "GO"
    return GateDecision(pair.candidate, pair.baseline, decision, rules)


def worst(decisions: Sequence[str]) -> str:
    """The worst decision (NO_GO < INCONCLUSIVE < GO); GO for an empty list."""
    return max(decisions, key=DECISIONS.index, default="GO")


def verdict_line(
    summary: pd.DataFrame,
    decisions: Mapping[str, GateDecision],
    overall: str | None,
    *,
    metric: str | None,
    sanity: Sequence[str] = (),
    baseline: str | None = None,
    why: str | None = None,
) -> str:
    """One line for the terminal, the report and the parent run's description: the best model
    on the headline ``metric`` (``summary``: model × metric means), each gated candidate's
    decision, the overall decision (or why there is none) and the models left ungated."""
    parts: list[str] = []
    values = summary[metric].dropna().astype(float) if metric in summary.columns else None
    if values is not None and len(values):
        higher = metrics.parse(str(metric)).definition.higher_is_better
        best = values.max() if higher else values.min()
        winners = [str(m) for m in values.index[values == best]]
        verb = "is best" if len(winners) == 1 else "tie as best"
        parts.append(f"{' and '.join(winners)} {verb} on {metric} ({best:.4f})")
    elif metric is not None:
        parts.append(f"no model has a value of {metric}")
    parts += [f"{name} {d.decision}" for name, d in decisions.items()]
    parts.append(f"overall {overall}" if overall else "no decision" + (f" ({why})" if why else ""))
    ungated = [str(m) for m in summary.index if m in sanity and m != baseline]
    tail = ""
    if ungated:
        noun = "sanity baseline" + ("s" if len(ungated) > 1 else "")
        tail = f" ({', '.join(ungated)}: {noun}, not gated)"
    return "verdict: " + "; ".join(parts) + tail
