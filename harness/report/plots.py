"""The report's plots, drawn with matplotlib (Agg backend) as PNG bytes.

The HTML embeds them as base64 ``data:`` URIs; the Markdown links PNG files written next to it.
Each function returns None when there is nothing to draw.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from harness.compare import PairComparison
from harness.report.format import ci_label, finite, higher_is_better, number, tone

__all__ = ["best_so_far", "differences_plot", "gsb_plot", "lift_plot", "tuning_plot"]


def _figure(figsize: tuple[float, float]) -> tuple[Any, Any]:
    """A figure with one axes on the Agg canvas, built without pyplot: no pyplot import
    (startup) and no global figure registry, so plots can be drawn from any thread."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def _png(fig: Any) -> bytes:
    """The figure as PNG bytes (110 dpi)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


_GREEN, _RED, _GREY = "#1a7f37", "#cf222e", "#8c959f"


def lift_plot(pair: PairComparison) -> bytes | None:
    """Relative lift per metric (segment all) with horizontal CI bars and a line at 0.

    The x range follows the confidence intervals; a whole-run lift far outside it (coverage
    can change by thousands of percent) is drawn at the edge as an arrow with its value."""
    table = pair.table
    if table.empty:
        return None
    rows = [r for _, r in table[table["segment"] == "all"].iterrows() if finite(number(r, "lift"))]
    if not rows:
        return None
    from matplotlib.ticker import PercentFormatter

    with_ci = [r for r in rows if finite(number(r, "lift_ci_low"), number(r, "lift_ci_high"))]
    span = [0.0]
    for r in with_ci or rows:
        span += [number(r, "lift"), number(r, "lift_ci_low"), number(r, "lift_ci_high")]
    lo, hi = float(np.nanmin(span)), float(np.nanmax(span))
    pad = 0.08 * (hi - lo) if hi > lo else 0.05
    xmin, xmax = lo - pad, hi + pad
    if any(number(r, "lift") > xmax for r in rows):
        xmax += 3 * pad
    if any(number(r, "lift") < xmin for r in rows):
        xmin -= 3 * pad

    fig, ax = _figure((8, 1.2 + 0.55 * len(rows)))
    labels = []
    for y, r in enumerate(rows):
        lift, low, high = number(r, "lift"), number(r, "lift_ci_low"), number(r, "lift_ci_high")
        hib = bool(r.get("higher_is_better", True))
        color = {"better": _GREEN, "worse": _RED}.get(tone(low, high, hib), _GREY)
        run_level = r.get("kind") == "run-level" or not finite(low, high)
        if lift > xmax or lift < xmin:  # off scale: an arrow at the edge, labelled
            right = lift > xmax
            edge = xmax - 0.5 * pad if right else xmin + 0.5 * pad
            ax.plot(
                edge, y, marker=">" if right else "<", color=color, markersize=9, linestyle="none"
            )
            ax.annotate(
                f"{lift:+.1%} (off scale)",
                (edge, y),
                textcoords="offset points",
                xytext=(-8 if right else 8, 0),
                ha="right" if right else "left",
                va="center",
                fontsize=8,
                color=color,
            )
        else:
            if run_level:
                ax.plot(lift, y, marker="D", color=color, markersize=7, linestyle="none")
            else:
                ax.errorbar(
                    lift,
                    y,
                    xerr=[[max(lift - low, 0.0)], [max(high - lift, 0.0)]],
                    fmt="o",
                    color=color,
                    ecolor=color,
                    elinewidth=2,
                    capsize=4,
                    markersize=7,
                )
            ax.annotate(
                f"{lift:+.1%}",
                (lift, y),
                textcoords="offset points",
                xytext=(0, 8),
                ha="center",
                fontsize=8,
                color=color,
            )
        suffix = " (run-level)" if run_level else ""
        labels.append(f"{r['metric']}{' ↓' if not hib else ''}{suffix}")
    ax.axvline(0, color="black", linewidth=1)
    ax.set_xlim(xmin, xmax)
    ax.set_yticks(range(len(rows)), labels)
    ax.set_ylim(len(rows) - 0.3, -0.7)
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel(
        "relative lift: candidate / baseline − 1  (↓: lower is better)"
        if any(not bool(r.get("higher_is_better", True)) for r in rows)
        else "relative lift: candidate / baseline − 1"
    )
    ax.set_title(
        f"{pair.candidate} vs {pair.baseline}: relative lift with {ci_label(pair.table)} "
        "(all users)",
        fontsize=10,
    )
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def differences_plot(pair: PairComparison) -> bytes | None:
    """Histogram of per-user differences (b − a) of the pair's GSB metric, mean marked."""
    diffs = pair.differences.get(pair.gsb_metric)
    if diffs is None:
        return None
    values = pd.to_numeric(pd.Series(diffs), errors="coerce").dropna().to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    from matplotlib.ticker import MaxNLocator

    fig, ax = _figure((8, 3.6))
    bins = int(min(40, max(5, np.unique(values).size)))
    ax.hist(values, bins=bins, color="#54aeff", edgecolor="white")
    mean = float(values.mean())
    ax.axvline(0, color="black", linewidth=1, linestyle="--", label="no difference")
    better = mean > 0 if higher_is_better(pair.gsb_metric) else mean < 0
    ax.axvline(mean, color=_GREEN if better else _RED, linewidth=2, label=f"mean {mean:+.4f}")
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


def gsb_plot(pairs: Sequence[PairComparison]) -> bytes | None:
    """Good / same / bad shares per pair (stacked horizontal bars), from the GSB metric's row."""
    bars: list[tuple[str, float, float, float, float]] = []
    for pair in pairs:
        row = pair.row(pair.gsb_metric)
        if row is None:
            continue
        good, same, bad = (number(row, k) for k in ("gsb_good", "gsb_same", "gsb_bad"))
        if not finite(good, same, bad) or good + same + bad <= 0:
            continue
        label = f"{pair.candidate} vs {pair.baseline}\n{pair.gsb_metric}"
        bars.append((label, good, same, bad, number(row, "gsb_delta")))
    if not bars:
        return None
    from matplotlib.ticker import PercentFormatter

    fig, ax = _figure((8, 1.4 + 0.7 * len(bars)))
    for y, (_, good, same, bad, delta) in enumerate(bars):
        total = good + same + bad
        left = 0.0
        for count, color, name in (
            (good, _GREEN, "good"),
            (same, _GREY, "same"),
            (bad, _RED, "bad"),
        ):
            share = count / total
            ax.barh(
                y,
                share,
                left=left,
                height=0.6,
                color=color,
                edgecolor="white",
                label=name if y == 0 else None,
            )
            if share >= 0.07:
                ax.text(
                    left + share / 2,
                    y,
                    f"{count:.0f}",
                    ha="center",
                    va="center",
                    color="white",
                    fontsize=9,
                    fontweight="bold",
                )
            left += share
        ax.text(1.01, y, f"ΔGSB {delta:+.3f}", va="center", fontsize=9)
    ax.set_yticks(range(len(bars)), [b[0] for b in bars], fontsize=9)
    ax.set_xlim(0, 1)
    ax.set_ylim(len(bars) - 0.5, -0.5)
    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("share of users (candidate better / same / worse than baseline)")
    ax.set_title("Good / Same / Bad per user", fontsize=10, loc="left")
    ax.legend(
        ncols=3,
        loc="lower right",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=8,
        frameon=False,
        borderaxespad=0.2,
    )
    return _png(fig)


def best_so_far(values: Sequence[float | None], maximize: bool) -> list[float]:
    """The best objective after each trial (NaN before the first completed one)."""
    best, out = float("nan"), []
    for value in values:
        if value is not None and finite(value):
            better = value > best if maximize else value < best
            best = float(value) if not finite(best) or better else best
        out.append(best)
    return out


def tuning_plot(models: dict[str, Any], objective: str, maximize: bool) -> bytes | None:
    """Validation objective per trial (dots) and the best so far (a step line), per model."""
    series = {
        name: [(int(t["number"]), t.get("value")) for t in m.get("trials") or []]
        for name, m in models.items()
    }
    series = {n: s for n, s in series.items() if any(v is not None for _, v in s)}
    if not series:
        return None
    fig, ax = _figure((8, 3.6))
    for name, points in series.items():
        points = sorted(points)
        x = [n for n, _ in points]
        curve = best_so_far([v for _, v in points], maximize)
        (line,) = ax.step(x, curve, where="post", label=f"{name} (best so far)")
        done = [(n, v) for n, v in points if v is not None]
        ax.scatter(
            [n for n, _ in done], [v for _, v in done], s=14, alpha=0.5, color=line.get_color()
        )
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("trial")
    ax.set_ylabel(f"validation {objective}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _png(fig)
