"""The run report: one self-contained HTML file and the same content as Markdown.

Both renderers read one :class:`ReportContext` and walk the same list of content blocks (headings,
tables, collapsible sections, plots), so the two formats never drift apart. Plots are drawn once
with matplotlib (Agg backend) as PNG bytes: the HTML embeds them as base64 ``data:`` URIs, the
Markdown references PNG files written next to it. Every piece of text is escaped.

Number formats (shared by both outputs): metric values and Δ with 4 decimals, relative lift as a
signed percentage with 2 decimals, p-values with 3 decimals (``<0.001`` below), effect size d_z
with 2 decimals, ΔGSB with 3 decimals; a missing value is shown as ``—``.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from harness.compare import PairComparison
from harness.gate import DECISIONS, GateDecision, worst

if TYPE_CHECKING:
    from harness.experiment import ExperimentResult

__all__ = [
    "SAMPLED_CANDIDATES_WARNING",
    "ReportContext",
    "fmt_ci",
    "fmt_lift",
    "fmt_p",
    "fmt_value",
    "render_html",
    "render_markdown",
    "write_report",
]

SAMPLED_CANDIDATES_WARNING = (
    "Sampled candidates: each test user's items are ranked among a few sampled negatives, not "
    "the full catalog. Sampled metrics are biased estimates of full-catalog metrics and may even "
    "order models differently (Krichene & Rendle, 2020); compare them only with runs that use "
    "the same candidate sampling."
)
MISSING = "—"
IMAGE_FOLDER = "report_files"
_DECISION_ICONS = {"GO": "🟢", "NO_GO": "🔴", "INCONCLUSIVE": "🟡"}


@dataclass(frozen=True)
class ReportContext:
    """Everything the report shows; built by the CLI from one run (see :meth:`of`)."""

    title: str
    experiment: str
    created: str  # ISO time
    dataset: str  # name and source
    split: str  # split method
    split_stats: dict[str, Any]
    candidates: dict[str, Any]  # candidate-set stats, e.g. {"candidates.kind": "full"}
    metric_options: dict[str, Any]
    config_yaml: str
    summary: pd.DataFrame  # model × metric means; a row of NaN = failed model
    pairs: list[PairComparison] = field(default_factory=list)
    decisions: dict[str, GateDecision] = field(default_factory=dict)  # by candidate
    overall: str | None = None
    segment_definitions: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    run_ids: dict[str, str] = field(default_factory=dict)  # model (or "parent") -> MLflow run id

    @classmethod
    def of(
        cls,
        result: ExperimentResult,
        pairs: Sequence[PairComparison],
        decisions: Mapping[str, GateDecision],
        overall: str | None,
        notes: Sequence[str],
        experiment: str,
        config_yaml: str,
        *,
        segment_definitions: Mapping[str, str] | None = None,
        run_ids: Mapping[str, str] | None = None,
        created: str | None = None,
    ) -> ReportContext:
        """The context of one :class:`~harness.experiment.ExperimentResult` and its verdicts."""
        import datetime as dt

        if segment_definitions is None:  # a pair may carry its segment definitions
            segment_definitions = next(
                (getattr(p, "segments", None) for p in pairs if getattr(p, "segments", None)), {}
            )
        events = len(result.dataset.frame)
        model_notes = [f"{n}: {note}" for n, o in result.outcomes.items() for note in o.notes]
        failures = [f"{n} failed: {o.error}" for n, o in result.outcomes.items() if o.error]
        return cls(
            title=f"Offline evaluation: {experiment}",
            experiment=experiment,
            created=created or dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            dataset=f"{result.dataset.name} ({result.dataset.source}), {events:,} events",
            split=result.split.name,
            split_stats=dict(result.split.stats),
            candidates=dict(result.candidates),
            metric_options=dict(result.options),
            config_yaml=config_yaml,
            summary=result.table(),
            pairs=list(pairs),
            decisions=dict(decisions),
            overall=overall,
            segment_definitions=dict(segment_definitions or {}),
            notes=[*notes, *failures, *model_notes],
            run_ids=dict(run_ids or {}),
        )


# ------------------------------------------------------------------------------ number formats


def _finite(*values: Any) -> bool:
    """True when every value is a real, finite number."""
    try:
        return all(value is not None and math.isfinite(float(value)) for value in values)
    except (TypeError, ValueError):
        return False


def fmt_value(x: Any, digits: int = 4, sign: bool = False) -> str:
    """A number with ``digits`` decimals (``+`` when ``sign``), or ``—`` when missing."""
    if not _finite(x):
        return MISSING
    return f"{float(x):+.{digits}f}" if sign else f"{float(x):.{digits}f}"


def fmt_lift(x: Any) -> str:
    """A relative change as a signed percentage with 2 decimals (0.1 → ``+10.00%``)."""
    return f"{float(x):+.2%}" if _finite(x) else MISSING


def fmt_p(p: Any) -> str:
    """A p-value with 3 decimals, ``<0.001`` below that."""
    if not _finite(p):
        return MISSING
    return "<0.001" if float(p) < 0.001 else f"{float(p):.3f}"


def fmt_ci(estimate: Any, low: Any, high: Any, fmt: Callable[[Any], str]) -> str:
    """``estimate [low, high]``, or just the estimate when there is no interval."""
    if not _finite(estimate):
        return MISSING
    if not _finite(low, high):
        return fmt(estimate)
    return f"{fmt(estimate)} [{fmt(low)}, {fmt(high)}]"


def _signed4(x: Any) -> str:
    return fmt_value(x, 4, sign=True)


def _signed3(x: Any) -> str:
    return fmt_value(x, 3, sign=True)


def _plain(value: Any) -> str:
    """Any stats/config value as short text."""
    if value is None:
        return MISSING
    if isinstance(value, bool | np.bool_):
        return str(bool(value)).lower()
    if isinstance(value, int | np.integer):
        return f"{int(value):,}" if abs(int(value)) >= 10_000 else str(int(value))
    if isinstance(value, float | np.floating):
        if not math.isfinite(float(value)):
            return MISSING
        return f"{float(value):.4g}"
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, default=str)
    return str(value)


def _get(row: Mapping[str, Any] | pd.Series, key: str) -> float:
    """A numeric cell of a comparison row; NaN when absent or not a number."""
    try:
        value = row.get(key, np.nan)
        return float(value) if value is not None else float("nan")
    except (TypeError, ValueError):
        return float("nan")


def _tone(low: float, high: float, higher_is_better: bool) -> str:
    """``better``/``worse`` when the CI [low, high] of b − a excludes 0, else ``""``."""
    if not _finite(low, high) or low <= 0 <= high:
        return ""
    return "better" if (low > 0) == higher_is_better else "worse"


def _conf_label(pair: PairComparison) -> str:
    conf = pair.table["confidence"].dropna() if "confidence" in pair.table else pd.Series()
    return f"{float(conf.iloc[0]):.0%} CI" if len(conf) else "95% CI"


# ------------------------------------------------------------------------------ content blocks


@dataclass
class _Cell:
    text: str
    tone: str = ""  # better | worse | best | pass | fail | inconclusive | not_applicable


@dataclass
class _Heading:
    level: int
    text: str
    anchor: str | None = None


@dataclass
class _Para:
    text: str
    kind: str = ""  # "" | note | warning | muted


@dataclass
class _Table:
    header: list[str]
    rows: list[list[_Cell]]
    attrs: dict[str, str] = field(default_factory=dict)
    text_cols: tuple[int, ...] = (0,)  # left-aligned columns; the others are numbers


@dataclass
class _Details:
    summary: str
    blocks: list[Any]


@dataclass
class _Image:
    name: str
    alt: str


@dataclass
class _Code:
    text: str
    lang: str = ""


@dataclass
class _Items:
    items: list[str]


@dataclass
class _Toc:
    entries: list[tuple[str, str]]  # (anchor, title)


@dataclass
class _Badge:
    decision: str  # GO | NO_GO | INCONCLUSIVE | anything else (grey)
    label: str
    big: bool = False


@dataclass
class _Decisions:
    """One line per candidate: badge and a short count of rule outcomes."""

    lines: list[tuple[str, str]]  # (decision, "candidate vs baseline (rule counts)")


@dataclass
class _Document:
    blocks: list[Any]
    images: dict[str, bytes]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def _pair_anchor(i: int, pair: PairComparison) -> str:
    return f"pair-{i}-{_slug(pair.candidate)}"


# ------------------------------------------------------------------------------ plots


def _pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    plt = _pyplot()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    return buf.getvalue()


_GREEN, _RED, _GREY = "#1a7f37", "#cf222e", "#8c959f"


def _lift_plot(pair: PairComparison) -> bytes | None:
    """Relative lift per metric (segment all) with horizontal CI bars and a line at 0.

    The x range follows the confidence intervals; a whole-run lift far outside it (coverage
    can change by thousands of percent) is drawn at the edge as an arrow with its value."""
    table = pair.table
    if table.empty:
        return None
    rows = [r for _, r in table[table["segment"] == "all"].iterrows() if _finite(_get(r, "lift"))]
    if not rows:
        return None
    from matplotlib.ticker import PercentFormatter

    with_ci = [r for r in rows if _finite(_get(r, "lift_ci_low"), _get(r, "lift_ci_high"))]
    span = [0.0]
    for r in with_ci or rows:
        span += [_get(r, "lift"), _get(r, "lift_ci_low"), _get(r, "lift_ci_high")]
    lo, hi = float(np.nanmin(span)), float(np.nanmax(span))
    pad = 0.08 * (hi - lo) if hi > lo else 0.05
    xmin, xmax = lo - pad, hi + pad
    if any(_get(r, "lift") > xmax for r in rows):
        xmax += 3 * pad
    if any(_get(r, "lift") < xmin for r in rows):
        xmin -= 3 * pad

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.55 * len(rows)))
    labels = []
    for y, r in enumerate(rows):
        lift, low, high = _get(r, "lift"), _get(r, "lift_ci_low"), _get(r, "lift_ci_high")
        hib = bool(r.get("higher_is_better", True))
        tone = _tone(low, high, hib)
        color = {"better": _GREEN, "worse": _RED}.get(tone, _GREY)
        run_level = r.get("kind") == "run-level" or not _finite(low, high)
        if lift > xmax or lift < xmin:  # off scale: an arrow at the edge, labelled
            right = lift > xmax
            edge = xmax - 0.5 * pad if right else xmin + 0.5 * pad
            ax.plot(edge, y, marker=">" if right else "<", color=color, markersize=9,
                    linestyle="none")
            ax.annotate(f"{lift:+.1%} (off scale)", (edge, y), textcoords="offset points",
                        xytext=(-8 if right else 8, 0), ha="right" if right else "left",
                        va="center", fontsize=8, color=color)
        else:
            if run_level:
                ax.plot(lift, y, marker="D", color=color, markersize=7, linestyle="none")
            else:
                ax.errorbar(
                    lift, y, xerr=[[max(lift - low, 0.0)], [max(high - lift, 0.0)]], fmt="o",
                    color=color, ecolor=color, elinewidth=2, capsize=4, markersize=7,
                )
            ax.annotate(f"{lift:+.1%}", (lift, y), textcoords="offset points", xytext=(0, 8),
                        ha="center", fontsize=8, color=color)
        suffix = " (run-level)" if run_level else ""
        labels.append(f"{r['metric']}{' ↓' if not hib else ''}{suffix}")
    ax.axvline(0, color="black", linewidth=1)
    ax.set_xlim(xmin, xmax)
    ax.set_yticks(range(len(rows)), labels)
    ax.set_ylim(len(rows) - 0.3, -0.7)
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("relative lift: candidate / baseline − 1  (↓: lower is better)"
                  if any(not bool(r.get("higher_is_better", True)) for r in rows)
                  else "relative lift: candidate / baseline − 1")
    ax.set_title(
        f"{pair.candidate} vs {pair.baseline}: relative lift with {_conf_label(pair)} (all users)",
        fontsize=10,
    )
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def _diff_plot(pair: PairComparison) -> bytes | None:
    """Histogram of per-user differences (b − a) of the pair's GSB metric, mean marked."""
    diffs = pair.differences.get(pair.gsb_metric)
    if diffs is None:
        return None
    values = pd.to_numeric(pd.Series(diffs), errors="coerce").dropna().to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 3.6))
    bins = int(min(40, max(5, np.unique(values).size)))
    ax.hist(values, bins=bins, color="#54aeff", edgecolor="white")
    mean = float(values.mean())
    ax.axvline(0, color="black", linewidth=1, linestyle="--", label="no difference")
    ax.axvline(mean, color=_RED if mean < 0 else _GREEN, linewidth=2,
               label=f"mean {mean:+.4f}")
    ax.set_xlabel(f"{pair.gsb_metric}: candidate − baseline, per user")
    ax.set_ylabel("users")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(
        f"Per-user {pair.gsb_metric} differences, {pair.candidate} − {pair.baseline} "
        f"(n={values.size})",
        fontsize=10,
    )
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def _gsb_plot(pairs: Sequence[PairComparison]) -> bytes | None:
    """Good / same / bad shares per pair (stacked horizontal bars), from the GSB metric's row."""
    bars: list[tuple[str, float, float, float, float]] = []
    for pair in pairs:
        row = pair.row(pair.gsb_metric)
        if row is None:
            continue
        good, same, bad = (_get(row, k) for k in ("gsb_good", "gsb_same", "gsb_bad"))
        if not _finite(good, same, bad) or good + same + bad <= 0:
            continue
        label = f"{pair.candidate} vs {pair.baseline}\n{pair.gsb_metric}"
        bars.append((label, good, same, bad, _get(row, "gsb_delta")))
    if not bars:
        return None
    plt = _pyplot()
    from matplotlib.ticker import PercentFormatter

    fig, ax = plt.subplots(figsize=(8, 1.4 + 0.7 * len(bars)))
    for y, (_, good, same, bad, delta) in enumerate(bars):
        total = good + same + bad
        left = 0.0
        for count, color, name in ((good, _GREEN, "good"), (same, _GREY, "same"),
                                   (bad, _RED, "bad")):
            share = count / total
            ax.barh(y, share, left=left, height=0.6, color=color, edgecolor="white",
                    label=name if y == 0 else None)
            if share >= 0.07:
                ax.text(left + share / 2, y, f"{count:.0f}", ha="center", va="center",
                        color="white", fontsize=9, fontweight="bold")
            left += share
        ax.text(1.01, y, f"ΔGSB {delta:+.3f}", va="center", fontsize=9)
    ax.set_yticks(range(len(bars)), [b[0] for b in bars], fontsize=9)
    ax.set_xlim(0, 1)
    ax.set_ylim(len(bars) - 0.5, -0.5)
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("share of users (candidate better / same / worse than baseline)")
    ax.set_title("Good / Same / Bad per user", fontsize=10, loc="left")
    ax.legend(ncols=3, loc="lower right", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False,
              borderaxespad=0.2)
    return _png(fig)


def _try_plot(
    images: dict[str, bytes], notes: list[str], name: str, what: str,
    draw: Callable[[], bytes | None],
) -> _Image | None:
    """Draw one plot; a plotting error becomes a note instead of a failed report."""
    try:
        data = draw()
    except Exception as err:
        notes.append(f"plot '{what}' could not be drawn: {type(err).__name__}: {err}")
        return None
    if data is None:
        return None
    images[name] = data
    return _Image(name, what)


# ------------------------------------------------------------------------------ building


def _gate_lines(ctx: ReportContext) -> list[tuple[str, str]]:
    lines = []
    for candidate, d in ctx.decisions.items():
        counts: dict[str, int] = {}
        for r in d.rules:
            counts[r.status] = counts.get(r.status, 0) + 1
        detail = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items()) or "no rules"
        lines.append((d.decision, f"{candidate} vs {d.baseline} ({detail})"))
    return lines


def _overall(ctx: ReportContext) -> str | None:
    if ctx.overall is not None:
        return ctx.overall
    if ctx.decisions:
        return worst([d.decision for d in ctx.decisions.values()])
    return None


def _rule_value(rule: str, x: float) -> str:
    return _signed3(x) if rule == "gsb" else fmt_lift(x)


def _rules_table(d: GateDecision) -> _Table:
    rows = []
    for r in d.rules:
        ci = tuple(r.ci) if r.ci is not None else (np.nan, np.nan)
        ci_text = (
            f"[{_rule_value(r.rule, ci[0])}, {_rule_value(r.rule, ci[1])}]"
            if _finite(*ci) else "no CI"
        )
        rows.append([
            _Cell(r.rule), _Cell(r.metric), _Cell(r.segment), _Cell(r.status, r.status),
            _Cell(_rule_value(r.rule, r.value)), _Cell(ci_text),
            _Cell(_rule_value(r.rule, r.threshold)), _Cell(r.reason),
        ])
    header = ["Rule", "Metric", "Segment", "Status", "Value", "CI", "Threshold", "Reason"]
    return _Table(header, rows, {"class": "rules", "data-candidate": d.candidate},
                  text_cols=(0, 1, 2, 3, 7))


def _decision_blocks(ctx: ReportContext) -> list[Any]:
    blocks: list[Any] = [_Heading(2, "Decision", "decision")]
    if not ctx.decisions:
        blocks.append(_Para("No launch gate was applied to this run (gate disabled or no "
                            "comparison).", "muted"))
        return blocks
    blocks.append(_Para(
        "Rules read confidence intervals: a rule passes when its CI clears the threshold, fails "
        "when the CI lies entirely below it and is inconclusive otherwise. Lifts of "
        "lower-is-better metrics are negated so that positive always means better. Any failed "
        "rule gives NO_GO, else any inconclusive rule gives INCONCLUSIVE, else GO.", "muted"))
    for candidate, d in ctx.decisions.items():
        blocks.append(_Heading(3, f"{candidate} vs {d.baseline}"))
        blocks.append(_Badge(d.decision, d.decision))
        if d.rules:
            blocks.append(_rules_table(d))
        else:
            blocks.append(_Para("No rule could be evaluated.", "muted"))
    return blocks


def _summary_blocks(ctx: ReportContext) -> list[Any]:
    blocks: list[Any] = [_Heading(2, "Summary", "summary")]
    summary = ctx.summary if ctx.summary is not None else pd.DataFrame()
    if summary.empty:
        blocks.append(_Para("No model results.", "muted"))
        return blocks
    metric_names = [str(c) for c in summary.columns]
    numeric = summary.apply(pd.to_numeric, errors="coerce")
    best: dict[str, float] = {}
    for name in metric_names:
        col = numeric[name].dropna()
        if len(numeric) > 1 and len(col):
            best[name] = float(col.max() if _higher_is_better(name) else col.min())
    rows = []
    for model, values in numeric.iterrows():
        failed = bool(values.isna().all())
        cells = [_Cell(f"{model} (failed)" if failed else str(model), "worse" if failed else "")]
        for name in metric_names:
            v = values[name]
            tone = "best" if name in best and _finite(v) and float(v) == best[name] else ""
            cells.append(_Cell(fmt_value(v), tone))
        rows.append(cells)
    blocks.append(_Table(["Model", *metric_names], rows, {"class": "summary"}))
    blocks.append(_Para(
        "Means over test users (whole-run metrics such as coverage are computed once per run); "
        "bold: best value per metric; — : not computed (failed model or metric skipped).",
        "muted"))
    return blocks


def _higher_is_better(name: str) -> bool:
    try:
        import metrics

        return bool(metrics.parse(name).definition.higher_is_better)
    except Exception:
        return True


def _pair_table(pair: PairComparison, segment: str) -> _Table | None:
    """The comparison table of one segment: one row per metric."""
    table = pair.table
    if table.empty or "segment" not in table:
        return None
    part = table[table["segment"] == segment]
    if part.empty:
        return None
    ci = _conf_label(pair)
    header = [
        "Metric", "n", f"Baseline: {pair.baseline}", f"Candidate: {pair.candidate}",
        f"Δ [{ci}]", f"Relative lift [{ci}]", "p (randomization)", "p adjusted",
        "Effect size d_z", "MDE (relative)", f"ΔGSB [{ci}]", "Good / Same / Bad",
    ]
    rows = []
    for _, r in part.iterrows():
        hib = bool(r.get("higher_is_better", True))
        diff_lo, diff_hi = _get(r, "diff_ci_low"), _get(r, "diff_ci_high")
        lift_lo, lift_hi = _get(r, "lift_ci_low"), _get(r, "lift_ci_high")
        gsb_lo, gsb_hi = _get(r, "gsb_ci_low"), _get(r, "gsb_ci_high")
        mde, mde_rel = _get(r, "mde"), _get(r, "mde_rel")
        mde_text = fmt_value(mde)
        if _finite(mde, mde_rel):
            mde_text += f" ({mde_rel:.1%})"
        good, same, bad = (_get(r, k) for k in ("gsb_good", "gsb_same", "gsb_bad"))
        gsb_counts = f"{good:.0f} / {same:.0f} / {bad:.0f}" if _finite(good, same, bad) else MISSING
        rows.append([
            _Cell(str(r["metric"])),
            _Cell(fmt_value(_get(r, "n"), 0)),
            _Cell(fmt_value(_get(r, "mean_a"))),
            _Cell(fmt_value(_get(r, "mean_b"))),
            _Cell(fmt_ci(_get(r, "diff"), diff_lo, diff_hi, _signed4),
                  _tone(diff_lo, diff_hi, hib)),
            _Cell(fmt_ci(_get(r, "lift"), lift_lo, lift_hi, fmt_lift),
                  _tone(lift_lo, lift_hi, hib)),
            _Cell(fmt_p(_get(r, "p_randomization"))),
            _Cell(fmt_p(_get(r, "p_adjusted"))),
            _Cell(fmt_value(_get(r, "effect_size"), 2, sign=True)),
            _Cell(mde_text),
            _Cell(fmt_ci(_get(r, "gsb_delta"), gsb_lo, gsb_hi, _signed3),
                  _tone(gsb_lo, gsb_hi, True)),
            _Cell(gsb_counts),
        ])
    attrs = {"class": "pair", "data-candidate": pair.candidate, "data-segment": segment}
    return _Table(header, rows, attrs)


def _table_footnote(pair: PairComparison, segment: str) -> _Para | None:
    part = pair.table[pair.table["segment"] == segment] if not pair.table.empty else pair.table
    notes = []
    if "kind" in part:
        run_level = part.loc[part["kind"] == "run-level", "metric"].astype(str).tolist()
        if run_level:
            notes.append(f"{', '.join(run_level)}: whole-run metric(s), no per-user values, so "
                         f"no CI, test or GSB.")
    if "higher_is_better" in part:
        lower = part.loc[~part["higher_is_better"].astype(bool), "metric"].astype(str).tolist()
        if lower:
            notes.append(f"Lower is better for {', '.join(lower)}.")
    return _Para(" ".join(notes), "muted") if notes else None


def _pair_blocks(
    i: int, pair: PairComparison, ctx: ReportContext, images: dict[str, bytes], notes: list[str]
) -> list[Any]:
    anchor = _pair_anchor(i, pair)
    blocks: list[Any] = [_Heading(2, f"{pair.candidate} vs {pair.baseline} (baseline)", anchor)]
    decision = ctx.decisions.get(pair.candidate)
    if decision is not None:
        blocks.append(_Badge(decision.decision, f"gate: {decision.decision}"))
    blocks.extend(_Para(note, "note") for note in pair.notes)
    blocks.append(_Heading(3, "All test users"))
    main = _pair_table(pair, "all")
    if main is None:
        blocks.append(_Para("No metric could be compared for this pair.", "muted"))
    else:
        blocks.append(main)
        foot = _table_footnote(pair, "all")
        if foot is not None:
            blocks.append(foot)
    segments = (
        [s for s in dict.fromkeys(pair.table["segment"].astype(str)) if s != "all"]
        if not pair.table.empty else []
    )
    definitions = {**(getattr(pair, "segments", None) or {}), **ctx.segment_definitions}
    for seg in segments:
        table = _pair_table(pair, seg)
        if table is None:
            continue
        n = _get(pair.table[pair.table["segment"] == seg].iloc[0], "n")
        title = f"Segment {seg}"
        if seg in definitions:
            title += f": {definitions[seg]}"
        if _finite(n):
            title += f" (n = {n:.0f})"
        inner: list[Any] = [table]
        foot = _table_footnote(pair, seg)
        if foot is not None:
            inner.append(foot)
        blocks.append(_Details(title, inner))
    slug = f"{i}_{_slug(pair.candidate)}"
    plots = [
        _try_plot(images, notes, f"lift_{slug}.png",
                  f"Relative lift with CI per metric, {pair.candidate} vs {pair.baseline}",
                  lambda: _lift_plot(pair)),
        _try_plot(images, notes, f"differences_{slug}.png",
                  f"Per-user {pair.gsb_metric} differences, {pair.candidate} − {pair.baseline}",
                  lambda: _diff_plot(pair)),
    ]
    if any(plots):
        blocks.append(_Heading(3, "Plots"))
        blocks.extend(p for p in plots if p is not None)
    return blocks


def _no_pairs_reason(ctx: ReportContext) -> str:
    given = [n for n in ctx.notes if "no comparison" in n.lower()]
    if given:  # the CLI says why (baseline failed, not run, ...)
        first = given[0].strip().rstrip(".")
        return first[:1].upper() + first[1:] + "."
    summary = ctx.summary if ctx.summary is not None else pd.DataFrame()
    if summary.empty:
        ok = 0
    else:
        ok = int((~summary.apply(pd.to_numeric, errors="coerce").isna().all(axis=1)).sum())
    if ok < 2:
        return (f"No comparison: only {ok} model(s) produced results, and a comparison needs a "
                f"baseline and at least one candidate.")
    return ("No comparison: no baseline was configured (compare.baseline), the baseline failed "
            "or was not among the models, or comparisons were disabled. See the notes below.")


def _split_blocks(ctx: ReportContext) -> list[Any]:
    blocks: list[Any] = [_Heading(2, "Split and config", "split")]
    blocks.append(_Para(f"Dataset: {ctx.dataset}. Split method: {ctx.split}."))
    blocks.append(_Heading(3, "Split statistics"))
    if ctx.split_stats:
        rows = [[_Cell(str(k)), _Cell(_plain(v))] for k, v in ctx.split_stats.items()]
        blocks.append(_Table(["Statistic", "Value"], rows, {"class": "kv"}, (0, 1)))
    else:
        blocks.append(_Para("No split statistics.", "muted"))
    blocks.append(_Heading(3, "Candidate set"))
    kind = str(ctx.candidates.get("candidates.kind", ctx.candidates.get("kind", "full")))
    if kind == "sampled":
        blocks.append(_Para(SAMPLED_CANDIDATES_WARNING, "warning"))
    rows = [[_Cell(str(k)), _Cell(_plain(v))] for k, v in ctx.candidates.items()]
    if rows:
        blocks.append(_Table(["Setting", "Value"], rows, {"class": "kv"}, (0, 1)))
    else:
        blocks.append(_Para("Full catalog (no candidate-set statistics recorded).", "muted"))
    blocks.append(_Heading(3, "Metric conventions"))
    if ctx.metric_options:
        rows = [[_Cell(str(k)), _Cell(_plain(v))] for k, v in ctx.metric_options.items()]
        blocks.append(_Table(["Option", "Value"], rows, {"class": "kv"}, (0, 1)))
    else:
        blocks.append(_Para("Defaults of the metrics package.", "muted"))
    definitions = dict(ctx.segment_definitions)
    for pair in ctx.pairs:
        definitions = {**(getattr(pair, "segments", None) or {}), **definitions}
    if definitions:
        blocks.append(_Heading(3, "Segments"))
        rows = [[_Cell(str(k)), _Cell(str(v))] for k, v in definitions.items()]
        blocks.append(_Table(["Segment", "Definition"], rows, {"class": "kv"}, (0, 1)))
    if ctx.run_ids:
        blocks.append(_Heading(3, "MLflow runs"))
        rows = [[_Cell(str(k)), _Cell(str(v))] for k, v in ctx.run_ids.items()]
        blocks.append(_Table(["Run", "Run id"], rows, {"class": "kv"}, (0, 1)))
    blocks.append(_Details("Resolved config (YAML)",
                           [_Code(ctx.config_yaml or "(not recorded)", "yaml")]))
    return blocks


def _build(ctx: ReportContext) -> _Document:
    """The report as a list of blocks plus the PNG bytes of its plots."""
    images: dict[str, bytes] = {}
    plot_notes: list[str] = []
    blocks: list[Any] = [_Heading(1, ctx.title or "Offline evaluation report")]
    meta = [f"Experiment: {ctx.experiment}", f"Created: {ctx.created}",
            f"Dataset: {ctx.dataset}", f"Split: {ctx.split}"]
    blocks.append(_Items(meta))
    overall = _overall(ctx)
    if overall is None:
        blocks.append(_Badge("", "NO GATE", big=True))
    else:
        blocks.append(_Badge(overall, overall, big=True))
    lines = _gate_lines(ctx)
    if lines:
        blocks.append(_Decisions(lines))
    contents = [("decision", "Decision"), ("summary", "Summary")]
    contents += [(_pair_anchor(i, p), f"{p.candidate} vs {p.baseline}")
                 for i, p in enumerate(ctx.pairs, 1)]
    if ctx.pairs:
        contents.append(("gsb", "Good / Same / Bad"))
    contents += [("split", "Split and config"), ("notes", "Notes")]
    blocks.append(_Toc(contents))
    blocks += _decision_blocks(ctx)
    blocks += _summary_blocks(ctx)
    if ctx.pairs:
        blocks.append(_Para(
            "Δ = candidate − baseline; relative lift = Δ / baseline. Bold green: the CI excludes 0 "
            "and the candidate is better; bold red: the CI excludes 0 and it is worse. p adjusted: "
            "corrected across the metrics of each segment. d_z: mean difference / SD of the "
            "differences. MDE: the smallest difference detectable with this sample.", "muted"))
        for i, pair in enumerate(ctx.pairs, 1):
            blocks += _pair_blocks(i, pair, ctx, images, plot_notes)
        blocks.append(_Heading(2, "Good / Same / Bad", "gsb"))
        gsb = _try_plot(images, plot_notes, "gsb.png", "Good / Same / Bad shares per pair",
                        lambda: _gsb_plot(ctx.pairs))
        blocks.append(gsb or _Para("No pair has GSB counts.", "muted"))
    else:
        blocks.append(_Heading(2, "Comparison", "comparison"))
        blocks.append(_Para(_no_pairs_reason(ctx), "note"))
    blocks += _split_blocks(ctx)
    blocks.append(_Heading(2, "Notes", "notes"))
    notes = [*ctx.notes, *plot_notes]
    blocks.append(_Items(notes) if notes else _Para("None.", "muted"))
    return _Document(blocks, images)


# ------------------------------------------------------------------------------ HTML

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1f2328;
  margin: 0; background: #f6f8fa; }
main { max-width: 1240px; margin: 0 auto; padding: 24px 32px 48px; background: #fff; }
h1 { font-size: 26px; margin: 0 0 8px; }
h2 { font-size: 20px; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; margin-top: 36px; }
h3 { font-size: 16px; margin: 20px 0 8px; }
ul.meta { list-style: none; padding: 0; margin: 0 0 12px; color: #57606a; }
ul.toc { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 6px 16px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: right; vertical-align: top; }
th { background: #f6f8fa; }
th.t, td.t { text-align: left; }
.nw { white-space: nowrap; }
.scroll { overflow-x: auto; }
table.rules td:last-child { max-width: 520px; }
tr:nth-child(even) td { background: #fbfcfd; }
.better { color: #1a7f37; font-weight: 700; }
.worse { color: #cf222e; font-weight: 700; }
.best { font-weight: 700; }
.pass { color: #1a7f37; font-weight: 700; }
.fail { color: #cf222e; font-weight: 700; }
.inconclusive { color: #9a6700; font-weight: 700; }
.not_applicable { color: #57606a; }
.badge { display: inline-block; color: #fff; border-radius: 6px; padding: 2px 10px;
  font-weight: 700; font-size: 13px; background: #6e7781; }
.overall { margin: 10px 0 12px; display: flex; align-items: center; gap: 14px; }
.overall .label { font-size: 15px; color: #57606a; font-weight: 600; }
.badge.big { font-size: 30px; padding: 8px 24px; letter-spacing: 1px; }
.badge.GO { background: #1a7f37; }
.badge.NO_GO { background: #cf222e; }
.badge.INCONCLUSIVE { background: #bf8700; }
ul.decisions { list-style: none; padding: 0; margin: 0 0 8px; }
ul.decisions li { margin: 4px 0; }
.muted { color: #57606a; font-size: 13px; }
.note { background: #ddf4ff; border-left: 4px solid #54aeff; padding: 8px 12px; }
.warning { background: #fff8c5; border: 1px solid #d4a72c; border-left: 6px solid #bf8700;
  padding: 10px 14px; font-weight: 600; margin: 8px 0; }
details { margin: 8px 0; border: 1px solid #d0d7de; border-radius: 6px; padding: 6px 10px; }
summary { cursor: pointer; font-weight: 600; }
pre { background: #f6f8fa; padding: 12px; overflow-x: auto; font-size: 12px; }
figure { margin: 12px 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eaeef2; }
figcaption { color: #57606a; font-size: 12px; }
""".strip()


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _html_table(t: _Table) -> str:
    attrs = "".join(f' {_e(k)}="{_e(v)}"' for k, v in t.attrs.items())

    def cls(i: int, tone: str = "") -> str:
        names = " ".join(n for n in ("t" if i in t.text_cols else "", tone) if n)
        return f' class="{_e(names)}"' if names else ""

    head = "".join(f"<th{cls(i)}>{_e(h)}</th>" for i, h in enumerate(t.header))
    body = []
    for row in t.rows:
        cells = "".join(f"<td{cls(i, c.tone)}>{_html_cell(c.text)}</td>"
                        for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    return (f'<div class="scroll"><table{attrs}><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _html_cell(text: str) -> str:
    """Cell text; ``estimate [low, high]`` may wrap before the interval, never inside it."""
    estimate, sep, interval = text.partition(" [")
    if not sep or not interval.endswith("]"):
        return _e(text)
    return f'<span class="nw">{_e(estimate)}</span> <span class="nw">[{_e(interval)}</span>'


def _html_block(b: Any, images: Mapping[str, bytes]) -> str:
    if isinstance(b, _Heading):
        anchor = f' id="{_e(b.anchor)}"' if b.anchor else ""
        return f"<h{b.level}{anchor}>{_e(b.text)}</h{b.level}>"
    if isinstance(b, _Para):
        if b.kind == "warning":
            return f'<div class="warning">⚠ Warning: {_e(b.text)}</div>'
        if b.kind == "note":
            return f'<div class="note">{_e(b.text)}</div>'
        cls = f' class="{_e(b.kind)}"' if b.kind else ""
        return f"<p{cls}>{_e(b.text)}</p>"
    if isinstance(b, _Table):
        return _html_table(b)
    if isinstance(b, _Details):
        inner = "\n".join(_html_block(x, images) for x in b.blocks)
        return f"<details><summary>{_e(b.summary)}</summary>\n{inner}\n</details>"
    if isinstance(b, _Image):
        data = base64.b64encode(images[b.name]).decode("ascii")
        return (f'<figure><img src="data:image/png;base64,{data}" alt="{_e(b.alt)}">'
                f"<figcaption>{_e(b.alt)}</figcaption></figure>")
    if isinstance(b, _Code):
        return f'<pre><code class="language-{_e(b.lang)}">{_e(b.text)}</code></pre>'
    if isinstance(b, _Badge):
        cls = "badge big" if b.big else "badge"
        if b.decision in DECISIONS:
            cls += f" {b.decision}"
        if b.big:
            return (f'<div class="overall"><span class="label">Overall decision</span>'
                    f'<span class="{cls}">{_e(b.label)}</span></div>')
        return f'<p><span class="{cls}">{_e(b.label)}</span></p>'
    if isinstance(b, _Decisions):
        items = "".join(
            f'<li><span class="badge {_e(d) if d in DECISIONS else ""}">{_e(d)}</span> '
            f"{_e(text)}</li>"
            for d, text in b.lines
        )
        return f'<ul class="decisions">{items}</ul>'
    if isinstance(b, _Toc):
        links = "".join(f'<li><a href="#{_e(a)}">{_e(t)}</a></li>' for a, t in b.entries)
        return f'<nav><ul class="toc">{links}</ul></nav>'
    if isinstance(b, _Items):
        cls = ' class="meta"' if b.items and b.items[0].startswith("Experiment:") else ""
        return f"<ul{cls}>" + "".join(f"<li>{_e(i)}</li>" for i in b.items) + "</ul>"
    raise TypeError(f"unknown report block {type(b).__name__}")


def _html(doc: _Document, title: str) -> str:
    body = "\n".join(_html_block(b, doc.images) for b in doc.blocks)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>\n{_CSS}\n</style>\n</head>\n"
        f"<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


def render_html(ctx: ReportContext) -> str:
    """The report as one self-contained HTML page (inline CSS, plots as base64 PNG)."""
    return _html(_build(ctx), ctx.title or "Offline evaluation report")


# ------------------------------------------------------------------------------ Markdown

_MD_SPECIAL = re.compile(r"([\\`*|<>])|(?<!\w)_|_(?!\w)")


def _md(text: Any) -> str:
    """Text safe inside Markdown (and table cells): special characters backslash-escaped."""
    out = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), str(text))
    return out.replace("\r", " ").replace("\n", " ")


def _md_cell(c: _Cell) -> str:
    text = _md(c.text)
    if c.tone == "better":
        return f"**{text}** ▲"
    if c.tone == "worse":
        return f"**{text}** ▼"
    if c.tone in ("best", "pass", "fail", "inconclusive"):
        return f"**{text}**"
    return text


def _md_table(t: _Table) -> str:
    align = [":---" if i in t.text_cols else "---:" for i in range(len(t.header))]
    lines = ["| " + " | ".join(_md(h) for h in t.header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
    return "\n".join(lines)


def _md_block(b: Any, images: Mapping[str, bytes], prefix: str | None) -> str:
    if isinstance(b, _Heading):
        anchor = f'<a id="{_e(b.anchor)}"></a>\n\n' if b.anchor else ""
        return f"{anchor}{'#' * b.level} {_md(b.text)}"
    if isinstance(b, _Para):
        if b.kind == "warning":
            return f"> **⚠ Warning:** {_md(b.text)}"
        if b.kind == "note":
            return f"> {_md(b.text)}"
        return f"_{_md(b.text)}_" if b.kind == "muted" else _md(b.text)
    if isinstance(b, _Table):
        return _md_table(b)
    if isinstance(b, _Details):
        inner = "\n\n".join(_md_block(x, images, prefix) for x in b.blocks)
        return f"<details>\n<summary>{_e(b.summary)}</summary>\n\n{inner}\n\n</details>"
    if isinstance(b, _Image):
        if prefix is None:
            return f"_Plot not written (no image folder): {_md(b.alt)}_"
        return f"![{_md(b.alt)}]({prefix}{b.name})"
    if isinstance(b, _Code):
        runs = [len(m) for m in re.findall(r"`+", b.text)]
        fence = "`" * max(3, max(runs, default=0) + 1)
        return f"{fence}{b.lang}\n{b.text.rstrip()}\n{fence}"
    if isinstance(b, _Badge):
        icon = _DECISION_ICONS.get(b.decision, "⚪")
        if b.big:
            return f"## {icon} Overall decision: **{_md(b.label)}**"
        return f"**{icon} {_md(b.label)}**"
    if isinstance(b, _Decisions):
        return "\n".join(f"- {_DECISION_ICONS.get(d, '⚪')} **{_md(d)}**: {_md(text)}"
                         for d, text in b.lines)
    if isinstance(b, _Toc):
        return " · ".join(f"[{_md(t)}](#{a})" for a, t in b.entries)
    if isinstance(b, _Items):
        return "\n".join(f"- {_md(i)}" for i in b.items)
    raise TypeError(f"unknown report block {type(b).__name__}")


def _markdown(doc: _Document, prefix: str | None) -> str:
    return "\n\n".join(_md_block(b, doc.images, prefix) for b in doc.blocks) + "\n"


def _write_images(images: Mapping[str, bytes], image_dir: Path) -> dict[str, Path]:
    image_dir.mkdir(parents=True, exist_ok=True)
    for stale in image_dir.glob("*.png"):  # plots of an earlier report in the same folder
        if stale.name not in images:
            stale.unlink()
    paths = {}
    for name, data in images.items():
        path = image_dir / name
        path.write_bytes(data)
        paths[name] = path
    return paths


def render_markdown(ctx: ReportContext, image_dir: Path | None = None) -> str:
    """The report as Markdown (GitHub tables); plots are written as PNG files into
    ``image_dir`` and linked relative to its parent (where the Markdown file is expected)."""
    doc = _build(ctx)
    if image_dir is None:
        return _markdown(doc, None)
    _write_images(doc.images, Path(image_dir))
    return _markdown(doc, f"{Path(image_dir).name}/")


def write_report(ctx: ReportContext, folder: Path) -> dict[str, Path]:
    """Write ``report.html``, ``report.md`` and ``report_files/*.png`` into ``folder``.

    Returns ``{"html": …, "markdown": …, "images": <report_files>}`` plus one
    ``"image:<file name>"`` entry per plot.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    doc = _build(ctx)
    image_dir = folder / IMAGE_FOLDER
    written = _write_images(doc.images, image_dir)
    html_path, md_path = folder / "report.html", folder / "report.md"
    html_path.write_text(_html(doc, ctx.title or "Offline evaluation report"), encoding="utf-8")
    md_path.write_text(_markdown(doc, f"{IMAGE_FOLDER}/"), encoding="utf-8")
    out: dict[str, Path] = {"html": html_path, "markdown": md_path, "images": image_dir}
    out.update({f"image:{name}": path for name, path in written.items()})
    return out
