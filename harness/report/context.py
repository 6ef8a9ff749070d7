"""What the report shows: :class:`ReportContext`, built from one run by :meth:`ReportContext.of`.

Also the facts the report opens with, computed here rather than in the templates: the dataset
(:class:`DatasetInfo`) and the verdict (:class:`Verdict`: which version is best on the primary
metric, each candidate's decision, the overall decision).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from harness import gate
from harness.compare import PairComparison
from harness.gate import GateDecision, worst
from harness.report.format import finite, fmt_ci, fmt_lift, fmt_value, higher_is_better

if TYPE_CHECKING:
    from harness.experiment import ExperimentResult

__all__ = [
    "TUNING_FILE",
    "VERDICT_PREFIX",
    "DatasetInfo",
    "ReportContext",
    "Verdict",
    "higher_is_better",
    "read_tuning",
]

VERDICT_PREFIX = "verdict: "


@dataclass(frozen=True)
class DatasetInfo:
    """The evaluated data: its name, where it came from and its size."""

    name: str
    source: str
    events: int | None = None
    users: int | None = None
    items: int | None = None


@dataclass(frozen=True)
class Verdict:
    """The report's headline: the best version on the primary metric and every decision."""

    metric: str | None  # the gate's primary metric, else the first metric of the summary
    best: list[str]  # model(s) with the best mean on ``metric`` (several when tied)
    value: float  # that best mean (NaN when no model has one)
    baseline: str | None  # the models' common baseline, when there is one
    lift: tuple[float, float, float] | None  # best vs baseline on ``metric``: lift, CI low, high
    decisions: list[tuple[str, str]]  # (candidate, decision), in the gate's order
    not_gated: list[str]  # models that ran but got no decision (none listed without a gate)
    failed: list[str]  # models without results
    overall: str | None  # the overall decision (None: no gate)

    def sentence(self) -> str:
        """``item_knn is best on ndcg@10 (0.3614; +19.50% [+5.14%, +36.58%] vs popularity)``:
        the report's own verdict sentence, when the gate cannot give one."""
        if self.metric is None or not self.best:
            return "no model has results to rank"
        value = fmt_value(self.value)
        if len(self.best) > 1:
            return f"{' and '.join(self.best)} tie as best on {self.metric} ({value})"
        if self.baseline is not None and self.best == [self.baseline]:
            return (
                f"{self.best[0]}, the baseline, is best on {self.metric} ({value}): no "
                "candidate beats it"
            )
        if self.lift is not None and finite(self.lift[0]):
            value += f"; {fmt_ci(*self.lift, fmt_lift)} vs {self.baseline}"
        return f"{self.best[0]} is best on {self.metric} ({value})"


TUNING_FILE = "tuning.json"


def read_tuning(folder: Any) -> dict[str, Any] | None:
    """The results folder's ``tuning.json`` (written by the final run of python -m harness.tune),
    None when there is none or it cannot be read."""
    if folder is None:
        return None
    path = Path(folder) / TUNING_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def now() -> str:
    """This moment as the report shows it: ISO 8601 with the UTC offset."""
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


@dataclass(frozen=True)
class ReportContext:
    """Everything the report shows; built by the CLI from one run (see :meth:`of`)."""

    title: str
    experiment: str
    created: str  # ISO time
    dataset: DatasetInfo | str  # a plain string: shown as given
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
    primary_metric: str | None = None  # None: the gate's primary rule, else the first metric
    verdict_text: str | None = None  # the run's one-line verdict (as printed); None: computed
    tuning: dict[str, Any] | None = None  # the tuning.json of python -m harness.tune's final run

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
        primary_metric: str | None = None,
        verdict: str | None = None,
    ) -> ReportContext:
        """The context of one :class:`~harness.experiment.ExperimentResult` and its verdicts.

        ``verdict`` is the run's one-line verdict; when not given, a note starting with
        ``verdict:`` is taken as it (and leaves the notes), so the report repeats the terminal.
        """
        notes = list(notes)
        if verdict is None:
            verdict = next((n for n in notes if str(n).startswith(VERDICT_PREFIX)), None)
        notes = [n for n in notes if n != verdict]
        if segment_definitions is None:  # a pair may carry its segment definitions
            segment_definitions = next(
                (getattr(p, "segments", None) for p in pairs if getattr(p, "segments", None)), {}
            )
        data = result.dataset
        dataset = DatasetInfo(
            name=str(data.name),
            source=str(data.source),
            events=data.events,
            users=data.distinct("user", result.split.stats),
            items=data.distinct("item", result.split.stats),
        )
        tuning = read_tuning(getattr(result, "folder", None))
        model_notes = [f"{n}: {note}" for n, o in result.outcomes.items() for note in o.notes]
        failures = [f"{n} failed: {o.error}" for n, o in result.outcomes.items() if o.error]
        return cls(
            title=f"Offline evaluation: {experiment}",
            experiment=experiment,
            created=created or now(),
            dataset=dataset,
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
            primary_metric=primary_metric,
            verdict_text=verdict,
            tuning=tuning,
        )

    def overall_decision(self) -> str | None:
        """The overall decision: as given, else the worst over the decisions (None: no gate)."""
        if self.overall is not None:
            return self.overall
        if self.decisions:
            return worst([d.decision for d in self.decisions.values()])
        return None

    def headline_metric(self) -> str | None:
        """The metric the verdict ranks by: explicit, else the gate's primary rule, else the
        first metric of the summary."""
        if self.primary_metric:
            return self.primary_metric
        for d in self.decisions.values():
            for r in d.rules:
                if r.rule == "primary":
                    return str(r.metric)
        summary = self.summary if self.summary is not None else pd.DataFrame()
        return str(summary.columns[0]) if len(summary.columns) else None

    def verdict(self) -> Verdict:
        """Which version is best on the headline metric, and each candidate's decision."""
        metric = self.headline_metric()
        best: list[str] = []
        value = float("nan")
        summary = self.summary if self.summary is not None else pd.DataFrame()
        if metric is not None and metric in summary.columns:
            means = pd.to_numeric(summary[metric], errors="coerce").dropna()
            means = means[means.map(math.isfinite)]
            if len(means):
                value = float(means.max() if higher_is_better(metric) else means.min())
                best = [str(m) for m, v in means.items() if float(v) == value]
        baselines = {p.baseline for p in self.pairs} | {d.baseline for d in self.decisions.values()}
        baseline = next(iter(baselines)) if len(baselines) == 1 else None
        lift = None
        if metric is not None and len(best) == 1 and best[0] != baseline:
            pair = next((p for p in self.pairs if p.candidate == best[0]), None)
            row = pair.row(metric) if pair is not None and not pair.table.empty else None
            if row is not None:
                lift = tuple(
                    float(row.get(k, math.nan)) for k in ("lift", "lift_ci_low", "lift_ci_high")
                )
        decisions = [(c, d.decision) for c, d in self.decisions.items()]
        numeric = summary.apply(pd.to_numeric, errors="coerce")
        failed = [str(m) for m, row in numeric.iterrows() if bool(row.isna().all())]
        not_gated = []
        if self.decisions:  # models neither gated nor the baseline (e.g. sanity baselines)
            not_gated = [
                str(m)
                for m in summary.index
                if str(m) not in self.decisions and str(m) != baseline and str(m) not in failed
            ]
        return Verdict(
            metric,
            best,
            value,
            baseline,
            lift,  # type: ignore[arg-type]
            decisions,
            not_gated,
            failed,
            self.overall_decision(),
        )

    def verdict_line(self) -> str:
        """The one-line verdict without its ``verdict:`` prefix: as given by the run, else
        :func:`harness.gate.verdict_line` on this context (the same words as the terminal)."""
        text = self.verdict_text
        if text is None:
            v = self.verdict()
            summary = self.summary if self.summary is not None else pd.DataFrame()
            try:
                text = gate.verdict_line(
                    summary.apply(pd.to_numeric, errors="coerce"),
                    self.decisions,
                    v.overall,
                    metric=v.metric,
                    sanity=tuple(v.not_gated),
                    baseline=v.baseline,
                )
            except (ValueError, KeyError, TypeError):  # e.g. a metric name the gate cannot parse
                text = v.sentence()
        text = str(text)
        return text[len(VERDICT_PREFIX) :] if text.startswith(VERDICT_PREFIX) else text
