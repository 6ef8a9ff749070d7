"""What the templates show: a :class:`ReportContext` turned into formatted text and tables.

Every number is formatted here, once, and both templates (HTML and Markdown) print the same
strings, so the two formats say the same things. Plots are drawn here too (as PNG bytes, keyed
by file name); a plotting error becomes a note instead of a failed report.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.compare import PairComparison
from harness.gate import NO_DECISION_NOTE, GateDecision
from harness.report import plots
from harness.report.context import DatasetInfo, ReportContext, Verdict
from harness.report.format import (
    MISSING,
    ci_label,
    finite,
    fmt_ci,
    fmt_count,
    fmt_date,
    fmt_lift,
    fmt_p,
    fmt_share,
    fmt_time,
    fmt_value,
    higher_is_better,
    number,
    plain,
    readable_source,
    signed3,
    signed4,
    tone,
)

__all__ = ["SAMPLED_CANDIDATES_WARNING", "Cell", "Figure", "ReportView", "Table", "build"]

SAMPLED_CANDIDATES_WARNING = (
    "Sampled candidates: each test user's items are ranked among a few sampled negatives, not "
    "the full catalog. Sampled metrics are biased estimates of full-catalog metrics and may even "
    "order models differently (Krichene & Rendle, 2020); compare them only with runs that use "
    "the same candidate sampling."
)
GATE_EXPLAINED = (
    "Rules read confidence intervals: a rule passes when its CI clears the threshold, fails "
    "when the CI lies entirely below it and is inconclusive otherwise. Lifts of lower-is-better "
    "metrics are negated so that positive always means better. Any failed rule gives NO_GO, else "
    "any inconclusive rule gives INCONCLUSIVE, else GO."
)
PAIRS_EXPLAINED = (
    "Δ = candidate − baseline; relative lift = Δ / baseline. Bold green: the CI excludes 0 and "
    "the candidate is better; bold red: the CI excludes 0 and it is worse. p adjusted: corrected "
    "across the metrics of each segment. d_z: mean difference / SD of the differences. MDE: the "
    "smallest difference detectable with this sample."
)
SUMMARY_EXPLAINED = (
    "Means over test users (whole-run metrics such as coverage are computed once per run); "
    "bold: best value per metric; — : not computed (failed model or metric skipped)."
)
#: Split statistics shown as times (epoch seconds in the stats) and those left out as duplicates.
_TIME_STATS = re.compile(r"^(cut|valid_cut|\w+_time_(min|max))$")
_DUPLICATE_STATS = {"cut_iso", "valid_cut_iso", "method"}


@dataclass(frozen=True)
class Cell:
    """One table cell: its text and a tone (better, worse, best, pass, fail, ...)."""

    text: str
    tone: str = ""


@dataclass(frozen=True)
class Table:
    """A table: header, rows of cells, HTML attributes, the left-aligned (text) columns."""

    header: list[str]
    rows: list[list[Cell]]
    attrs: dict[str, str] = field(default_factory=dict)
    text_cols: tuple[int, ...] = (0,)


@dataclass(frozen=True)
class Figure:
    """A plot: its PNG file name (in the images mapping) and its caption."""

    name: str
    alt: str


@dataclass(frozen=True)
class DecisionView:
    """One candidate's gate decision and its rules table."""

    candidate: str
    baseline: str
    decision: str
    rules: Table | None


@dataclass(frozen=True)
class SegmentView:
    """The comparison table of one segment other than all users (shown collapsed)."""

    title: str
    table: Table
    footnote: str | None


@dataclass(frozen=True)
class PairView:
    """One candidate against the baseline: tables, notes and plots."""

    anchor: str
    title: str
    decision: str | None
    not_gated: bool  # the run has a gate, but not for this candidate (a sanity baseline)
    notes: list[str]
    table: Table | None
    footnote: str | None
    segments: list[SegmentView]
    plots: list[Figure]


@dataclass
class TuningView:
    """How python -m harness.tune chose the parameters: trials per model, the validation curve,
    the chosen parameters, and that only the chosen configuration was tested."""

    objective: str
    statement: str
    table: Table
    curve: Figure | None
    notes: list[str]


@dataclass
class ReportView:
    """Everything the templates print, already formatted."""

    title: str
    overall: str | None
    headline: str
    not_gated: str | None
    no_decision: str | None  # the gate is on but took no decision: why
    decision_lines: list[tuple[str, str]]
    facts: list[tuple[str, str]]  # the report's first lines: dataset, split, dropped users, run
    warning: str | None
    toc: list[tuple[str, str]]
    decisions: list[DecisionView]
    summary: Table | None
    pairs: list[PairView]
    gsb_plot: Figure | None
    no_pairs_reason: str | None
    dataset: Table
    split_method: str
    split_parts: Table | None
    split_stats: Table | None
    candidates: Table | None
    options: Table | None
    segments: Table | None
    runs: Table | None
    config_yaml: str
    notes: list[str]
    images: dict[str, bytes] = field(default_factory=dict)
    tuning: TuningView | None = None

    gate_explained: str = GATE_EXPLAINED
    pairs_explained: str = PAIRS_EXPLAINED
    summary_explained: str = SUMMARY_EXPLAINED


# ------------------------------------------------------------------------------ the first lines


def _headline(ctx: ReportContext, v: Verdict) -> tuple[str, str | None]:
    """The verdict sentence (the run's own line when there is one) and what it leaves out."""
    line = ctx.verdict_line()
    extra = []
    if v.failed:
        extra.append(f"Failed: {', '.join(v.failed)}.")
    return line, " ".join(extra) or None


def _dataset_info(ctx: ReportContext) -> DatasetInfo | None:
    if isinstance(ctx.dataset, DatasetInfo):
        return ctx.dataset
    return None


def dataset_line(ctx: ReportContext) -> str:
    """``synthetic: 6,000 events, 300 users, 200 items; source: synthetic with seed=0``."""
    info = _dataset_info(ctx)
    if info is None:
        return str(ctx.dataset)
    sizes = [
        f"{fmt_count(n)} {what}"
        for n, what in ((info.events, "events"), (info.users, "users"), (info.items, "items"))
        if n is not None
    ]
    line = f"{info.name}: {', '.join(sizes)}" if sizes else info.name
    return f"{line}; source: {readable_source(info.source)}"


def _range(stats: Mapping[str, Any], part: str) -> str | None:
    lo, hi = stats.get(f"{part}_time_min"), stats.get(f"{part}_time_max")
    if not finite(lo, hi):
        return None
    return f"{fmt_date(lo)} → {fmt_date(hi)}"


def split_line(ctx: ReportContext) -> str:
    """The split method, its cut and each part's dates and size."""
    stats = ctx.split_stats
    line = str(ctx.split)
    if finite(stats.get("cut")):
        line += f" at {fmt_time(stats['cut'])}"
    parts = []
    for part in ("train", "valid", "test"):
        events = stats.get(f"n_{part}_events")
        span = _range(stats, part)
        if not finite(events) or (part == "valid" and not events):
            continue
        size = f"{fmt_count(events)} events"
        if finite(stats.get(f"n_{part}_users")):
            size += f", {fmt_count(stats[f'n_{part}_users'])} users"
        name = "validation" if part == "valid" else part
        parts.append(f"{name} {span} ({size})" if span else f"{name} ({size})")
    return f"{line}: {'; '.join(parts)}" if parts else line


def unseen_line(stats: Mapping[str, Any]) -> tuple[str, str] | None:
    """Test (and validation) users and events unseen in training, dropped or kept, with their
    shares: ``(label, text)``."""
    policy = stats.get("unseen_policy")
    if policy is None:
        return None

    def count(key: str) -> int:
        value = stats.get(key)
        return int(value) if value is not None and finite(value) else 0

    out, parts, unseen = [], [], 0
    for part in ("test", "valid"):
        if not finite(stats.get(f"n_{part}_users"), stats.get(f"n_{part}_events")):
            continue
        users, events = count(f"n_{part}_users"), count(f"n_{part}_events")
        if part == "valid" and not events:
            continue
        name = "validation" if part == "valid" else part
        if policy == "drop":
            du, de = count(f"{part}_dropped_users"), count(f"{part}_dropped_events")
            all_users, all_events = users + du, events + de
        else:
            du, de = count(f"{part}_unseen_users"), count(f"{part}_unseen_events")
            all_users, all_events = users, events
        parts.append(name)
        unseen += du + de
        out.append(
            f"{fmt_count(du)} of {fmt_count(all_users)} {name} users "
            f"({fmt_share(du, all_users)}) and {fmt_count(de)} of {fmt_count(all_events)} "
            f"{name} events ({fmt_share(de, all_events)})"
        )
    if not out:
        return None
    label = "Dropped (unseen in training)" if policy == "drop" else "Unseen in training, kept"
    if not unseen:
        every = " and ".join(parts)
        return label, (f"none: every {every} user and item is in training (split.unseen={policy})")
    return label, f"{'; '.join(out)}: user or item not in training (split.unseen={policy})"


def seen_pairs_line(stats: Mapping[str, Any]) -> str | None:
    """Test (user, item) pairs the user already had in training, when there are any: a model
    that excludes seen items (the default) can never hit them."""
    pairs, seen = stats.get("n_test_pairs"), stats.get("test_pairs_in_train")
    if not finite(pairs, seen) or not seen:
        return None
    return (
        f"{fmt_count(seen)} of {fmt_count(pairs)} test (user, item) pairs "
        f"({fmt_share(seen, pairs)}) were already in the user's training history: models that "
        "exclude seen items (the default) can never hit them"
    )


def filtered_line(stats: Mapping[str, Any]) -> str | None:
    """Training events/users/items removed by the interaction filters, when any were."""
    counts = [stats.get(f"train_filtered_{w}", 0) for w in ("events", "users", "items")]
    if not all(finite(c) for c in counts) or not any(counts):
        return None
    e, u, i = (fmt_count(c) for c in counts)
    return f"{e} events, {u} users, {i} items removed from training by the interaction filters"


def _facts(ctx: ReportContext) -> list[tuple[str, str]]:
    facts = [("Dataset", dataset_line(ctx)), ("Split", split_line(ctx))]
    unseen = unseen_line(ctx.split_stats)
    if unseen is not None:
        facts.append(unseen)
    seen = seen_pairs_line(ctx.split_stats)
    if seen is not None:
        facts.append(("Already in training", seen))
    filtered = filtered_line(ctx.split_stats)
    if filtered is not None:
        facts.append(("Filtered", filtered))
    facts.append(("Experiment", f"{ctx.experiment}; this report written {ctx.created}"))
    return facts


# ------------------------------------------------------------------------------ sections


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def _pair_anchor(i: int, pair: PairComparison) -> str:
    return f"pair-{i}-{_slug(pair.candidate)}"


def _decision_line(candidate: str, d: GateDecision, pairs: list[PairComparison]) -> tuple[str, str]:
    """``item_knn vs popularity (2 pass, 2 inconclusive): ndcg@10 lift +19.50% [..]``."""
    counts: dict[str, int] = {}
    for r in d.rules:
        counts[r.status] = counts.get(r.status, 0) + 1
    detail = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items()) or "no rules"
    line = f"{candidate} vs {d.baseline} ({detail})"
    primary = next((r for r in d.rules if r.rule == "primary"), None)
    pair = next((p for p in pairs if p.candidate == candidate and p.baseline == d.baseline), None)
    if primary is not None and pair is not None and not pair.table.empty:
        row = pair.row(primary.metric, primary.segment)
        if row is not None and finite(number(row, "lift")):
            where = "" if primary.segment == "all" else f" ({primary.segment})"
            lift = fmt_ci(
                number(row, "lift"),
                number(row, "lift_ci_low"),
                number(row, "lift_ci_high"),
                fmt_lift,
            )
            # the lift as the metric moved: say so where a fall is the gain
            lower = "" if higher_is_better(primary.metric) else " (lower is better)"
            line += f": {primary.metric}{where} lift {lift}{lower}"
    return d.decision, line


def _rule_value(rule: str, x: float) -> str:
    """A rule's value or bound; ±∞ for a relative change over a zero baseline."""
    if x is not None and math.isinf(x):
        return "+∞" if x > 0 else "−∞"
    return signed3(x) if rule == "gsb" else fmt_lift(x)


def _rules_table(d: GateDecision) -> Table | None:
    if not d.rules:
        return None
    rows = []
    for r in d.rules:
        ci = tuple(r.ci) if r.ci is not None else (np.nan, np.nan)
        ci_text = (
            f"[{_rule_value(r.rule, ci[0])}, {_rule_value(r.rule, ci[1])}]"
            if all(c is not None and not math.isnan(c) for c in ci)  # ±∞: over a zero baseline
            else "no CI"
        )
        rows.append(
            [
                Cell(r.rule),
                Cell(r.metric),
                Cell(r.segment),
                Cell(r.status, r.status),
                Cell(_rule_value(r.rule, r.value)),
                Cell(ci_text),
                Cell(_rule_value(r.rule, r.threshold)),
                Cell(r.reason),
            ]
        )
    header = [
        "Rule",
        "Metric",
        "Segment",
        "Status",
        "Value (+ better)",
        "CI",
        "Threshold",
        "Reason",
    ]
    return Table(
        header, rows, {"class": "rules", "data-candidate": d.candidate}, text_cols=(0, 1, 2, 3, 7)
    )


def _summary_table(summary: pd.DataFrame | None) -> Table | None:
    if summary is None or summary.empty:
        return None
    names = [str(c) for c in summary.columns]
    numeric = summary.apply(pd.to_numeric, errors="coerce")
    best: dict[str, float] = {}
    for name in names:
        col = numeric[name].dropna()
        if len(numeric) > 1 and len(col):
            best[name] = float(col.max() if higher_is_better(name) else col.min())
    rows = []
    for model, values in numeric.iterrows():
        failed = bool(values.isna().all())
        cells = [Cell(f"{model} (failed)" if failed else str(model), "worse" if failed else "")]
        for name in names:
            v = values[name]
            best_here = name in best and finite(v) and float(v) == best[name]
            cells.append(Cell(fmt_value(v), "best" if best_here else ""))
        rows.append(cells)
    return Table(["Model", *names], rows, {"class": "summary"})


def _pair_table(pair: PairComparison, segment: str) -> Table | None:
    """The comparison table of one segment: one row per metric."""
    table = pair.table
    if table.empty or "segment" not in table:
        return None
    part = table[table["segment"] == segment]
    if part.empty:
        return None
    ci = ci_label(pair.table)
    header = [
        "Metric",
        "n",
        f"Baseline: {pair.baseline}",
        f"Candidate: {pair.candidate}",
        f"Δ [{ci}]",
        f"Relative lift [{ci}]",
        "p (randomization)",
        "p adjusted",
        "Effect size d_z",
        "MDE (relative)",
        f"ΔGSB [{ci}]",
        "Good / Same / Bad",
    ]
    rows = []
    for _, r in part.iterrows():
        hib = bool(r.get("higher_is_better", True))
        diff_lo, diff_hi = number(r, "diff_ci_low"), number(r, "diff_ci_high")
        lift_lo, lift_hi = number(r, "lift_ci_low"), number(r, "lift_ci_high")
        gsb_lo, gsb_hi = number(r, "gsb_ci_low"), number(r, "gsb_ci_high")
        mde, mde_rel = number(r, "mde"), number(r, "mde_rel")
        mde_text = fmt_value(mde)
        if finite(mde, mde_rel):
            mde_text += f" ({mde_rel:.1%})"
        good, same, bad = (number(r, k) for k in ("gsb_good", "gsb_same", "gsb_bad"))
        counts = f"{good:.0f} / {same:.0f} / {bad:.0f}" if finite(good, same, bad) else MISSING
        rows.append(
            [
                Cell(str(r["metric"])),
                Cell(fmt_value(number(r, "n"), 0)),
                Cell(fmt_value(number(r, "mean_a"))),
                Cell(fmt_value(number(r, "mean_b"))),
                Cell(
                    fmt_ci(number(r, "diff"), diff_lo, diff_hi, signed4),
                    tone(diff_lo, diff_hi, hib),
                ),
                Cell(
                    fmt_ci(number(r, "lift"), lift_lo, lift_hi, fmt_lift),
                    tone(lift_lo, lift_hi, hib),
                ),
                Cell(fmt_p(number(r, "p_randomization"))),
                Cell(fmt_p(number(r, "p_adjusted"))),
                Cell(fmt_value(number(r, "effect_size"), 2, sign=True)),
                Cell(mde_text),
                Cell(
                    fmt_ci(number(r, "gsb_delta"), gsb_lo, gsb_hi, signed3),
                    tone(gsb_lo, gsb_hi, True),
                ),
                Cell(counts),
            ]
        )
    attrs = {"class": "pair", "data-candidate": pair.candidate, "data-segment": segment}
    return Table(header, rows, attrs)


def _footnote(pair: PairComparison, segment: str) -> str | None:
    part = pair.table[pair.table["segment"] == segment] if not pair.table.empty else pair.table
    notes = []
    if "kind" in part:
        run_level = part.loc[part["kind"] == "run-level", "metric"].astype(str).tolist()
        if run_level:
            notes.append(
                f"{', '.join(run_level)}: compared on whole-run values (no per-user "
                "values, or a summary pooled over the run rather than their mean, as for rmse, "
                "gauc and micro averages), so no CI, test or GSB."
            )
    if "higher_is_better" in part:
        lower = part.loc[~part["higher_is_better"].astype(bool), "metric"].astype(str).tolist()
        if lower:
            notes.append(f"Lower is better for {', '.join(lower)}.")
    return " ".join(notes) or None


class _Plotter:
    """Draws plots into ``images``; an error becomes a note instead of a failed report."""

    def __init__(self) -> None:
        self.images: dict[str, bytes] = {}
        self.notes: list[str] = []

    def __call__(self, name: str, what: str, draw: Callable[[], bytes | None]) -> Figure | None:
        try:
            data = draw()
        except Exception as err:
            self.notes.append(f"plot '{what}' could not be drawn: {type(err).__name__}: {err}")
            return None
        if data is None:
            return None
        self.images[name] = data
        return Figure(name, what)


def _pair_view(i: int, pair: PairComparison, ctx: ReportContext, plot: _Plotter) -> PairView:
    decision = ctx.decisions.get(pair.candidate)
    segments = (
        [s for s in dict.fromkeys(pair.table["segment"].astype(str)) if s != "all"]
        if not pair.table.empty
        else []
    )
    definitions = {**(getattr(pair, "segments", None) or {}), **ctx.segment_definitions}
    seg_views = []
    for seg in segments:
        table = _pair_table(pair, seg)
        if table is None:
            continue
        n = number(pair.table[pair.table["segment"] == seg].iloc[0], "n")
        title = f"Segment {seg}"
        if seg in definitions:
            title += f": {definitions[seg]}"
        if finite(n):
            title += f" (n = {n:.0f})"
        seg_views.append(SegmentView(title, table, _footnote(pair, seg)))
    slug = f"{i}_{_slug(pair.candidate)}"
    figures = [
        plot(
            f"lift_{slug}.png",
            f"Relative lift with CI per metric, {pair.candidate} vs {pair.baseline}",
            lambda: plots.lift_plot(pair),
        ),
        plot(
            f"differences_{slug}.png",
            f"Per-user {pair.gsb_metric} differences, {pair.candidate} − {pair.baseline}",
            lambda: plots.differences_plot(pair),
        ),
    ]
    main = _pair_table(pair, "all")
    return PairView(
        anchor=_pair_anchor(i, pair),
        title=f"{pair.candidate} vs {pair.baseline} (baseline)",
        decision=decision.decision if decision is not None else None,
        not_gated=decision is None and bool(ctx.decisions),
        notes=list(pair.notes),
        table=main,
        footnote=_footnote(pair, "all") if main is not None else None,
        segments=seg_views,
        plots=[f for f in figures if f is not None],
    )


def _no_pairs_reason(ctx: ReportContext) -> str:
    given = [n for n in ctx.notes if "no comparison" in n.lower()]
    if given:  # the CLI says why (baseline failed, not run, ...)
        first = given[0].strip().rstrip(".")
        return first[:1].upper() + first[1:] + "."
    summary = ctx.summary if ctx.summary is not None else pd.DataFrame()
    ok = (
        0
        if summary.empty
        else int((~summary.apply(pd.to_numeric, errors="coerce").isna().all(axis=1)).sum())
    )
    if ok < 2:
        return (
            f"No comparison: only {ok} model(s) produced results, and a comparison needs a "
            f"baseline and at least one candidate."
        )
    return (
        "No comparison: no baseline was configured (compare.baseline), the baseline failed "
        "or was not among the models, or comparisons were disabled. See the notes below."
    )


def _kv(header: list[str], items: Mapping[str, Any], attrs: str = "kv") -> Table | None:
    rows = [[Cell(str(k)), Cell(plain(v))] for k, v in items.items()]
    return Table(header, rows, {"class": attrs}, (0, 1)) if rows else None


def _dataset_table(ctx: ReportContext) -> Table:
    info = _dataset_info(ctx)
    if info is None:
        return Table(["Dataset"], [[Cell(str(ctx.dataset))]], {"class": "dataset"})
    rows = [
        [
            Cell(info.name),
            Cell(readable_source(info.source)),
            Cell(fmt_count(info.events)),
            Cell(fmt_count(info.users)),
            Cell(fmt_count(info.items)),
        ]
    ]
    return Table(["Name", "Source", "Events", "Users", "Items"], rows, {"class": "dataset"}, (0, 1))


def _split_parts(stats: Mapping[str, Any]) -> Table | None:
    rows = []
    for part in ("train", "valid", "test"):
        events = stats.get(f"n_{part}_events")
        if not finite(events) or (part == "valid" and not events):
            continue
        rows.append(
            [
                Cell("validation" if part == "valid" else part),
                Cell(fmt_count(events)),
                Cell(fmt_count(stats.get(f"n_{part}_users"))),
                Cell(fmt_count(stats.get(f"n_{part}_items"))),
                Cell(fmt_time(stats.get(f"{part}_time_min"))),
                Cell(fmt_time(stats.get(f"{part}_time_max"))),
            ]
        )
    if not rows:
        return None
    return Table(
        ["Part", "Events", "Users", "Items", "First event", "Last event"],
        rows,
        {"class": "split"},
        (0,),
    )


def _split_stats(stats: Mapping[str, Any]) -> Table | None:
    shown = {}
    for k, v in stats.items():
        if k in _DUPLICATE_STATS or re.match(r"^\w+_time_(min|max)$", k):
            continue  # in the parts table above, or the same as another entry
        shown[k] = fmt_time(v) if _TIME_STATS.match(k) else v
    return _kv(["Statistic", "Value"], shown)


TUNING_STATEMENT = (
    "The parameters of each model with a search space (the models in the table) were tuned on "
    "the validation part only: every trial was fitted on "
    "train and scored on validation, and the test part was never read. The chosen parameters "
    "were then refitted on train + validation and evaluated once on test: every test result in "
    "this report is that chosen configuration's; no other trial has a test result."
)


def fmt_param(value: Any) -> str:
    """A tuned parameter value: floats to 4 significant digits, others as written."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _best_cell(model: Mapping[str, Any]) -> str:
    """The best validation value and the trial it came from (its MLflow run is ``best_run``)."""
    if model.get("best_value") is None:
        return "-"
    trial = model.get("best_trial")
    return fmt_value(model["best_value"]) + (f" (trial {trial})" if trial is not None else "")


def _tuning_view(tuning: Mapping[str, Any], plot: _Plotter) -> TuningView | None:
    models = tuning.get("models") or {}
    if not isinstance(models, Mapping) or not models:
        return None
    objective = str(tuning.get("objective", "objective"))
    maximize = str(tuning.get("direction", "maximize")) != "minimize"
    rows, notes = [], []
    for name, m in models.items():
        trials = m.get("trials") or []
        params = m.get("best_params") or {}
        chosen = ", ".join(f"{k}={fmt_param(v)}" for k, v in params.items())
        rows.append(
            [
                Cell(str(name)),
                Cell(str(len(trials))),
                Cell(str(m.get("trials_complete", 0))),
                Cell(str(m.get("trials_failed", 0))),
                Cell(str(m.get("trials_interrupted", 0))),
                Cell(_best_cell(m)),
                Cell(chosen or "(configured parameters: no trial completed)"),
            ]
        )
        if m.get("error"):
            notes.append(f"{name}: {m['error']}; the test run used its configured parameters")
        if m.get("note"):
            notes.append(str(m["note"]))
    table = Table(
        [
            "Model",
            "Trials",
            "Completed",
            "Failed",
            "Interrupted",
            f"Best validation {objective}",
            "Chosen parameters",
        ],
        rows,
        {"class": "tuning"},
        (0, 6),
    )
    direction = "higher is better" if maximize else "lower is better"
    curve = plot(
        "tuning.png",
        f"Validation {objective} per trial and best so far ({direction})",
        lambda: plots.tuning_plot(dict(models), objective, maximize),
    )
    return TuningView(objective, TUNING_STATEMENT, table, curve, notes)


def build(ctx: ReportContext) -> ReportView:
    """The report's view: every section formatted, plots drawn."""
    plot = _Plotter()
    verdict = ctx.verdict()
    line, extra = _headline(ctx, verdict)
    toc = [("decision", "Decision"), ("summary", "Summary")]
    toc += [
        (_pair_anchor(i, p), f"{p.candidate} vs {p.baseline}") for i, p in enumerate(ctx.pairs, 1)
    ]
    if ctx.pairs:
        toc.append(("gsb", "Good / Same / Bad"))
    tuning = _tuning_view(ctx.tuning, plot) if ctx.tuning else None
    if tuning is not None:
        toc.append(("tuning", "Tuning"))
    toc += [("split", "Data, split and config"), ("notes", "Notes")]
    pairs = [_pair_view(i, p, ctx, plot) for i, p in enumerate(ctx.pairs, 1)]
    gsb = (
        plot("gsb.png", "Good / Same / Bad shares per pair", lambda: plots.gsb_plot(ctx.pairs))
        if ctx.pairs
        else None
    )
    definitions = dict(ctx.segment_definitions)
    for pair in ctx.pairs:
        definitions = {**(getattr(pair, "segments", None) or {}), **definitions}
    kind = str(ctx.candidates.get("candidates.kind", ctx.candidates.get("kind", "full")))
    return ReportView(
        title=ctx.title or "Offline evaluation report",
        overall=verdict.overall,
        headline=line,
        not_gated=extra,
        no_decision=next(
            (n.removeprefix(NO_DECISION_NOTE) for n in ctx.notes if n.startswith(NO_DECISION_NOTE)),
            None,
        ),
        decision_lines=[_decision_line(c, d, ctx.pairs) for c, d in ctx.decisions.items()],
        facts=_facts(ctx),
        warning=SAMPLED_CANDIDATES_WARNING if kind == "sampled" else None,
        toc=toc,
        decisions=[
            DecisionView(c, d.baseline, d.decision, _rules_table(d))
            for c, d in ctx.decisions.items()
        ],
        summary=_summary_table(ctx.summary),
        pairs=pairs,
        gsb_plot=gsb,
        no_pairs_reason=None if ctx.pairs else _no_pairs_reason(ctx),
        dataset=_dataset_table(ctx),
        split_method=str(ctx.split),
        split_parts=_split_parts(ctx.split_stats),
        split_stats=_split_stats(ctx.split_stats),
        candidates=_kv(["Setting", "Value"], ctx.candidates),
        options=_kv(["Option", "Value"], ctx.metric_options),
        segments=_kv(["Segment", "Definition"], {k: str(v) for k, v in definitions.items()}),
        runs=_kv(["Run", "Run id"], {k: str(v) for k, v in ctx.run_ids.items()}),
        config_yaml=ctx.config_yaml or "(not recorded)",
        notes=[*ctx.notes, *plot.notes],
        images=plot.images,
        tuning=tuning,
    )
