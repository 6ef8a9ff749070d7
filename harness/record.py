"""Log an ExperimentResult to MLflow: one parent run, one child run per model.

Two steps, so a run can also be logged later from its results folder (``python -m harness.log``):
:func:`plan` turns the result into plain JSON (``record.json`` in the folder: every tag, param,
metric and input to log), :func:`replay` logs such a plan. ``replay`` is idempotent: the parent
carries the tag ``harness.folder_id``; a second call finds it and only completes what is missing.
"""

from __future__ import annotations

import getpass
import json
import math
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from harness.candidates import SAMPLED_WARNING
from harness.compare import PairComparison
from harness.data import plain
from harness.experiment import ExperimentResult
from harness.folders import COMPLETE, INCOMPLETE, checkpoint
from harness.gate import GateDecision
from harness.split import part_digest
from harness.tracking import Tracker, flatten, git_state, metric_keys

__all__ = [
    "PLAN_FILE",
    "SweepRun",
    "describe_frame",
    "failed_job_row",
    "job_row",
    "jobs_line",
    "plan",
    "record",
    "replay",
    "sweep_jobs",
    "sweep_table",
]

#: The plan's file name in a results folder.
PLAN_FILE = "record.json"
#: Tag on every run logged from one results folder; ``complete`` marks a run fully logged.
FOLDER_TAG, LOGGED_TAG = "harness.folder_id", "harness.logged"
#: Comparison statistics logged as metrics: measurements only. Settings (``confidence``,
#: ``n_resamples``), properties (``higher_is_better``) and derived counts (``df``, ``n``, ...) are
#: in the run's ``comparison.json`` artifact with every other number of the comparison.
MEASURED_ALL = (
    "mean_a",
    "mean_b",
    "diff",
    "diff_ci_low",
    "diff_ci_high",
    "lift",
    "lift_ci_low",
    "lift_ci_high",
    "p_adjusted",
    "gsb_delta",
    "gsb_ci_low",
    "gsb_ci_high",
)
#: In the other segments (cold, heavy, head, tail): the lift and its CI.
MEASURED_SEGMENT = ("lift", "lift_ci_low", "lift_ci_high")
#: The comparison's settings, one value per pair: child run params, typed as in the config
#: (the parent's ``compare.n_resamples`` is ``1000``, so the child's is too, not ``1000.0``).
SETTINGS: dict[str, type] = {"confidence": float, "n_resamples": int}
#: MLflow's own tags for where a run comes from (shown as "Source" and "User").
SOURCE = {"mlflow.source.name": "python -m harness", "mlflow.source.type": "LOCAL"}


def _numbers(stats: Mapping[str, Any], prefix: str) -> dict[str, float]:
    return {
        f"{prefix}{k}": float(v)
        for k, v in stats.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def _finite(values: Mapping[str, Any]) -> dict[str, float]:
    """Metrics that MLflow can hold: numbers, NaN and None dropped."""
    out = {}
    for k, v in values.items():
        if v is None or isinstance(v, bool) or not isinstance(v, int | float):
            continue
        if not math.isnan(float(v)):
            out[str(k)] = float(v)
    return out


def _strings(values: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in values.items()}


def _comparison_metrics(pair: PairComparison) -> dict[str, float]:
    """The measurements of a comparison (``compare.<segment>.<metric>.<stat>``): every
    :data:`MEASURED_ALL` stat on all users, the lift and its CI in the other segments."""
    out: dict[str, float] = {}
    for _, r in pair.table.iterrows():
        wanted = MEASURED_ALL if r["segment"] == "all" else MEASURED_SEGMENT
        for stat in wanted:
            value = r.get(stat)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[f"compare.{r['segment']}.{r['metric']}.{stat}"] = float(value)
    return out


def _comparison_settings(pair: PairComparison) -> dict[str, str]:
    """The comparison's settings (confidence, resamples) as params: one value per pair."""
    out = {"compare.baseline": pair.baseline, "compare.gsb_metric": pair.gsb_metric}
    for stat, kind in SETTINGS.items():
        if stat in pair.table.columns and len(pair.table):
            values = pair.table[stat].dropna().unique()
            if len(values) == 1:
                out[f"compare.{stat}"] = str(kind(plain(values[0])))
    return out


def _fairness_metrics(pairs: Sequence[PairComparison]) -> dict[str, dict[str, float]]:
    """Model → the user-group gap of the GSB metric (``compare.user_groups``) as metrics:
    ``fairness.gap``, its CI and each group's mean, as the comparison computed them for its
    note, for every model of a compared pair."""
    out: dict[str, dict[str, float]] = {}
    for pair in pairs:
        for model, gap in pair.group_gaps.items():
            out.setdefault(
                model,
                {
                    "fairness.gap": gap.gap,
                    "fairness.gap_ci_low": gap.ci[0],
                    "fairness.gap_ci_high": gap.ci[1],
                    **{f"fairness.group.{g}": m for g, m in gap.means.items()},
                    **{f"fairness.group_users.{g}": n for g, n in gap.sizes.items()},
                },
            )
    return out


def _sizing_metrics(
    pairs: Sequence[PairComparison],
    decisions: Mapping[str, GateDecision],
    cspec: Any,
    gspec: Any,
    sizing: pd.DataFrame | None = None,
) -> dict[str, tuple[dict[str, float], str]]:
    """Candidate → (the online A/B test sizing as metrics ``ab.*``, the sized metric), as the
    console and report print it (:func:`harness.compare.sizing.sizing_of`); NaN (not
    detectable, no ``compare.daily_users``) is left out."""
    from harness.compare.sizing import sizing_of

    if sizing is None:  # the run's own table when given (the console printed it)
        sizing = sizing_of(pairs, decisions, cspec, gspec)
    wanted = ("lift", "users_per_arm", "days", "lift_ci_low", "users_per_arm_ci_low", "days_ci_low")
    return {
        str(row["candidate"]): (
            _finite({f"ab.{c}": row[c] for c in wanted}),
            str(row["metric"]),
        )
        for row in sizing.to_dict(orient="records")
    }


def _specs_of(config: Mapping[str, Any]) -> tuple[Any, Any] | None:
    """The run's typed compare and gate specs from its resolved config (None: no comparison)."""
    if not isinstance(config.get("compare"), Mapping):
        return None
    from omegaconf import OmegaConf

    from harness.cli import compare_spec_of, gate_spec_of

    cfg = OmegaConf.create(dict(config))
    return compare_spec_of(cfg), gate_spec_of(cfg)


def _json_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    """A table as JSON-ready rows at full precision (pandas' ``to_json`` keeps 10 decimals: a
    p-value of 9.8e-14 read 0.0), NaN and infinities as null."""

    def cell(value: Any) -> Any:
        value = plain(value)
        return None if isinstance(value, float) and not math.isfinite(value) else value

    rows = table.astype(object).to_dict(orient="records")
    return [{str(k): cell(v) for k, v in row.items()} for row in rows]


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return "unknown"


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, int | float) and math.isfinite(value) else "-"


def describe_run(result: ExperimentResult, verdict: str | None, headline: str | None) -> str:
    """The parent run's description (markdown): the verdict line and the model × metric table."""
    table = result.table()
    cols = list(table.columns)
    if headline in cols:  # the headline metric first
        cols = [headline, *[c for c in cols if c != headline]]
    lines = [verdict or "", "", "| model | " + " | ".join(cols) + " |"]
    lines.append("|---" * (len(cols) + 1) + "|")
    lines += [
        f"| {model} | " + " | ".join(_fmt(row[c]) for c in cols) + " |"
        for model, row in table.iterrows()
    ]
    lines += ["", f"dataset {result.dataset.name}, split {result.split.name}"]
    return "\n".join(lines).strip()


def _decision_of(
    name: str, decisions: Mapping[str, GateDecision], baseline: str | None, sanity: Sequence[str]
) -> str:
    """What the runs table shows in the ``decision`` column for one model."""
    if name in decisions:
        return decisions[name].decision
    if name == baseline:
        return "baseline"
    if name in sanity:
        return "sanity (not gated)"
    return "-"


def describe_frame(df: pd.DataFrame) -> dict[str, Any]:
    """What MLflow records of a dataset input, without the data: row count and column dtypes."""
    return {"num_rows": len(df), "dtypes": {str(c): str(df[c].dtype) for c in df.columns}}


def plan(
    result: ExperimentResult,
    *,
    run_name: str,
    config: Mapping[str, Any],
    split_key: str,
    model_params: Mapping[str, Mapping[str, Any]],
    pairs: Sequence[PairComparison] = (),
    decisions: Mapping[str, GateDecision] | None = None,
    overall: str | None = None,
    folder_id: str | None = None,
    verdict: str | None = None,
    headline: str | None = None,
    sanity: Sequence[str] = (),
    sizing: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """Everything :func:`replay` logs for one run, as JSON-ready plain data.

    Run names say model, split and dataset (``item_knn · global_time · synthetic``; the parent
    ``synthetic · global_time · 3 models``, ``run_name`` kept as the tag ``harness.run``). Each
    candidate's run gets its comparison measurements (``compare.<segment>.<metric>.<stat>``;
    settings as params, the whole table as ``comparison.json``), its ``gate.decision`` and a
    short ``decision`` tag; the parent gets the overall decision, the verdict and the table as
    its description, and the report.
    """
    decisions = decisions or {}
    by_candidate = {p.candidate: p for p in pairs}
    folder_id = folder_id or uuid.uuid4().hex
    code_repo = git_state(Path(__file__).resolve().parent)
    here = git_state()
    names = result.suite.names
    headline = headline if headline in names else (names[0] if names else None)
    tags = {
        **SOURCE,
        "mlflow.user": _user(),
        **({"mlflow.source.git.commit": code_repo["git.commit"]} if code_repo else {}),
        **here,
        **{f"harness.{k}": v for k, v in code_repo.items() if not k.startswith("mlflow.")},
        "dataset.name": result.dataset.name,
        "dataset.source": result.dataset.source,
        "dataset.sha256": result.dataset.sha256,
        "split.method": result.split.name,
        "split.sha256": split_key,
        "results.folder": str(result.folder.resolve()),
        "candidates.kind": result.candidates.get("candidates.kind", "full"),
        FOLDER_TAG: folder_id,
        "harness.run": run_name,
        **({"headline": headline} if headline else {}),
    }
    if tags["candidates.kind"] == "sampled":
        tags["candidates.warning"] = SAMPLED_WARNING
    source = result.dataset.source
    source_path = str(Path(source).resolve()) if Path(source).exists() else None
    inputs = [
        {
            "name": f"{result.dataset.name}-{context}",
            "context": context,
            "digest": part_digest(result.split, "train" if context == "training" else "test"),
            "source": source_path,
            **describe_frame(part),
        }
        for part, context in ((result.split.train, "training"), (result.split.test, "test"))
    ]
    options = {f"metrics.option.{k}": v for k, v in result.options.items()}
    specs = _specs_of(config)
    # the configured baseline is tagged "baseline" also when every candidate failed (no pair)
    baseline = pairs[0].baseline if pairs else specs[0].baseline if specs else None
    fairness = _fairness_metrics(pairs)
    by_sizing = _sizing_metrics(pairs, decisions, *specs, sizing) if specs and pairs else {}
    children = []
    for name, outcome in result.outcomes.items():
        ev = outcome.evaluation
        metrics = {
            **(ev.summary if ev else {}),
            **{f"time.{k}_seconds": v for k, v in outcome.seconds.items()},
            **_numbers(ev.counts if ev else {}, "users."),
        }
        settings: dict[str, str] = {}
        comparison = None
        if name in by_candidate:
            metrics |= _comparison_metrics(by_candidate[name])
            settings = _comparison_settings(by_candidate[name])
            comparison = _json_rows(by_candidate[name].table)
        if name in fairness:
            metrics |= fairness[name]
            settings["fairness.metric"] = by_candidate.get(name, pairs[0]).gsb_metric
        if name in by_sizing:
            metrics |= by_sizing[name][0]
            settings["ab.metric"] = by_sizing[name][1]
        decision = _decision_of(name, decisions, baseline, sanity)
        child_tags = {
            **tags,
            "model": name,
            "mlflow.runType": "evaluation",  # MLflow's runs table opens its parent expanded
            "decision": decision if outcome.ok else "failed",
            "status": "ok" if outcome.ok else "failed",
            **({"error": outcome.error} if outcome.error else {}),
            **({"notes": " | ".join(outcome.notes)} if outcome.notes else {}),
            **{f"model.{k}": v for k, v in outcome.info.items()},
            **(decisions[name].as_tags() if name in decisions else {}),
        }
        if name in decisions:
            note = [f"{name}: {decisions[name].decision}", ""]
            note += [
                f"- {r.rule} {r.metric} ({r.segment}): {r.status} — {r.reason}"
                for r in decisions[name].rules
            ]
            child_tags["mlflow.note.content"] = "\n".join(note)
        elif outcome.error:
            child_tags["mlflow.note.content"] = f"{name} FAILED: {outcome.error}"
        children.append(
            {
                "name": name,
                "run_name": f"{name} · {result.split.name} · {result.dataset.name}",
                "tags": _strings(child_tags),
                "params": _strings(
                    {**flatten(dict(model_params.get(name, {})), "model."), **options, **settings}
                ),
                "metrics": _finite(metrics),
                "comparison": comparison,
                "status": "FINISHED" if outcome.ok else "FAILED",
            }
        )
    summary = {
        f"{model}.{metric}": value
        for model, row in result.table().iterrows()
        for metric, value in row.items()
    }
    n_models = len(result.outcomes)
    parent_tags = {
        **tags,
        "decision": overall or "none",
        "mlflow.note.content": describe_run(result, verdict, headline),
    }
    return {
        "version": 1,
        "folder_id": folder_id,
        "run_name": (
            f"{result.dataset.name} · {result.split.name} · {n_models} "
            f"model{'s' if n_models != 1 else ''}"
        ),
        "parent": {
            "tags": _strings(parent_tags),
            "params": _strings({**flatten(dict(config)), **options}),
            "metrics": _finite(
                _numbers(result.split.stats, "split.") | _numbers(result.candidates, "")
            ),
            "summary": _finite(summary),
            "end_tags": {} if overall is None else {"gate.decision": overall},
            "status": "FAILED" if result.failed else "FINISHED",
        },
        "inputs": inputs,
        "children": children,
    }


def save_plan(the_plan: Mapping[str, Any], folder: Path) -> Path:
    """Write the plan as ``record.json`` in the results folder."""
    path = Path(folder) / PLAN_FILE
    path.write_text(json.dumps(the_plan, indent=1))
    return path


def _missing(run: Any, metrics: Mapping[str, float], among: Sequence[str] = ()) -> dict[str, float]:
    """The metrics a run does not hold yet (all of them for a new run), by the keys
    :meth:`Tracker.log` gives them among the run's other metric names ``among``."""
    keys = metric_keys([*among, *metrics])
    have = set(run.data.metrics) if run is not None else set()
    return {k: v for k, v in metrics.items() if keys[k] not in have}


def _done(run: Any) -> bool:
    return run is not None and run.data.tags.get(LOGGED_TAG) == "complete"


def _artifacts(tracker: Tracker, run_id: str, folder: Path) -> None:
    """Upload the folder's top-level files (not the marks) and its ``report_files``."""
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.name not in (COMPLETE, INCOMPLETE) and path.name[0] != ".":
            tracker.client.log_artifact(run_id, str(path))
    if (folder / "report_files").is_dir():
        tracker.log_artifacts(run_id, folder / "report_files", "report_files")


def replay(tracker: Tracker, the_plan: Mapping[str, Any], folder: Path) -> dict[str, str]:
    """Log a plan (parent run, inputs, one child per model, artifacts from ``folder``); return
    the run ids. Runs already logged from this folder are reused: only what is missing is added.
    """
    folder = Path(folder)
    checkpoint("logging")
    folder_tag = {FOLDER_TAG: the_plan["folder_id"]}
    spec = the_plan["parent"]
    from_folder = tracker.find(folder_tag)
    ids_here = {r.info.run_id for r in from_folder}  # a job's parent may sit under a sweep run
    found = [r for r in from_folder if r.data.tags.get("mlflow.parentRunId") not in ids_here]
    parent_run = found[0] if found else None
    if parent_run is None:
        parent = tracker.start(the_plan["run_name"], spec["tags"])
        tracker.share_view(spec["tags"].get("headline"))
    else:
        parent = parent_run.info.run_id
    ids = {"parent": parent}
    existing = {
        r.data.tags.get("model"): r
        for r in tracker.find(folder_tag, parent=parent)
        if r.data.tags.get("model")
    }
    if _done(parent_run):
        ids |= {name: run.info.run_id for name, run in existing.items()}
        return ids
    if parent_run is not None:
        tracker.open_runs.append(parent)
        tracker.log(parent, tags=spec["tags"])
    every = [*spec["metrics"], *spec["summary"]]  # the parent's metrics, logged in two steps
    first = _missing(parent_run, spec["metrics"], every)
    tracker.log(parent, params=spec["params"], metrics=first, among=every)
    logged = {i.dataset.digest for i in parent_run.inputs.dataset_inputs} if parent_run else set()
    for item in the_plan["inputs"]:
        if item["digest"][:36] not in logged:
            tracker.log_input_described(parent, **item)
    for child in the_plan["children"]:
        name = child["name"]
        run = existing.get(name)
        if run is not None and _done(run):
            ids[name] = run.info.run_id
            continue
        if run is None:
            child_id = tracker.start(child.get("run_name", name), child["tags"], parent=parent)
        else:
            child_id = run.info.run_id
            tracker.open_runs.append(child_id)
            tracker.log(child_id, tags=child["tags"])
        ids[name] = child_id
        checkpoint(f"logging {name}")  # the child run is open
        tracker.log(child_id, params=child["params"], metrics=_missing(run, child["metrics"]))
        if (folder / name).is_dir():
            tracker.log_artifacts(child_id, folder / name)
        if child.get("comparison"):
            tracker.client.log_dict(child_id, child["comparison"], "comparison.json")
        tracker.finish(child_id, child["status"])
        tracker.log(child_id, tags={LOGGED_TAG: "complete"})
    checkpoint("logging summary")
    tracker.log(parent, metrics=_missing(parent_run, spec["summary"], every), among=every)
    _artifacts(tracker, parent, folder)
    if spec["end_tags"]:
        tracker.log(parent, tags=spec["end_tags"])
    tracker.finish(parent, spec["status"])
    tracker.log(parent, tags={LOGGED_TAG: "complete"})
    return ids


def record(tracker: Tracker, result: ExperimentResult, **plan_kwargs: Any) -> dict[str, str]:
    """Log everything (``plan_kwargs`` as :func:`plan` takes them); return the run ids
    (``parent`` and one per model)."""
    return replay(tracker, plan(result, **plan_kwargs), result.folder)


# ------------------------------------------------------------------------------------ multirun

#: One row per finished job of this process (a Hydra multirun runs its jobs in turn, in-process).
sweep_jobs: list[dict[str, Any]] = []


def job_row(
    overrides: Sequence[str],
    folder: Path,
    summary: pd.DataFrame,
    headline: str | None,
    overall: str | None,
    parent: str | None,
    uri: str | None,
    experiment: str,
) -> dict[str, Any]:
    """A multirun job as one row: its overrides, each model's headline metric (or, for a job
    that stopped, its ``error``), its decision, exit ``code``, results folder and parent run."""
    values = (
        {str(m): float(v) for m, v in summary[headline].items()}
        if headline in summary.columns
        else {}
    )
    return {
        "overrides": " ".join(overrides) or "(none)",
        "headline": headline,
        "values": values,
        "decision": overall or "none",
        "folder": str(folder),
        "parent": parent,
        "uri": uri,
        "experiment": experiment,
        "code": 0,
        "error": None,
    }


def failed_job_row(overrides: Sequence[str], folder: Path | None, error: str) -> dict[str, Any]:
    """A multirun job that stopped before its results (a bad config or data): a row all the
    same, so the table lists every job of the sweep."""
    row = job_row(overrides, folder or Path("-"), pd.DataFrame(), None, None, None, None, "")
    return {**row, "decision": "FAILED", "error": error}


def jobs_line(n: int) -> str:
    """``multirun: 3 jobs`` (``1 job``)."""
    return f"{n} job{'' if n == 1 else 's'}"


def sweep_table(jobs: Sequence[Mapping[str, Any]]) -> str:
    """The table across a multirun's jobs, as plain text (also the sweep run's description)."""
    header = ["job", "overrides", "headline", "decision", "exit", "results"]
    rows = [
        [
            str(i),
            job["overrides"],
            f"error: {job['error']}"
            if job.get("error")
            else ", ".join(f"{m} {_fmt(v)}" for m, v in job["values"].items())
            + (f" ({job['headline']})" if job["headline"] else ""),
            job["decision"],
            str(job.get("code", 0)),
            job["folder"],
        ]
        for i, job in enumerate(jobs)
    ]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )


def group_sweep(jobs: Sequence[Mapping[str, Any]], sweep_id: str) -> dict[tuple[str, str], str]:
    """One MLflow run per (store, experiment) grouping the jobs' parent runs under it (tag
    ``mlflow.parentRunId`` on each, and ``harness.sweep_id``); return the sweep run ids."""
    from harness.gate import worst

    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for job in jobs:
        if job.get("parent") and job.get("uri"):
            groups.setdefault((str(job["uri"]), str(job["experiment"])), []).append(job)
    out = {}
    for (uri, experiment), members in groups.items():
        tracker = Tracker(uri, experiment)
        decisions = [j["decision"] for j in members if j["decision"] != "none"]
        tags = {
            **SOURCE,
            "mlflow.user": _user(),
            "harness.sweep_id": sweep_id,
            "decision": worst(decisions) if decisions else "none",
            "mlflow.note.content": f"multirun of {jobs_line(len(members))}\n\n```\n"
            + sweep_table(members)
            + "\n```",
        }
        run = tracker.start(f"sweep · {experiment} · {jobs_line(len(members))}", tags)
        for job in members:
            tracker.log(
                job["parent"],
                tags={"mlflow.parentRunId": run, "harness.sweep_id": sweep_id},
            )
        tracker.finish(run)
        out[(uri, experiment)] = run
    return out


try:  # Hydra is a dependency of the runner, not of logging a folder later
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover
    Callback = object  # type: ignore[assignment,misc]


class SweepRun(Callback):  # type: ignore[misc,valid-type]
    """Hydra callback: a multirun ends with one table across its jobs and one MLflow run that
    groups the jobs' parent runs (registered in ``configs/config.yaml``)."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        """Forget jobs of an earlier multirun in this process."""
        sweep_jobs.clear()

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        """Print the table; create the sweep run (MLflow errors: one line, jobs stay logged)."""
        if not sweep_jobs:
            return
        print(f"\nmultirun: {jobs_line(len(sweep_jobs))}\n{sweep_table(sweep_jobs)}")
        try:
            runs = group_sweep(sweep_jobs, uuid.uuid4().hex)
        except Exception as err:  # the jobs are logged: a missing group is not worth a traceback
            first = (str(err).strip().splitlines() or [""])[0]
            print(f"warning: the sweep run was not logged ({type(err).__name__}: {first})")
            return
        for (uri, experiment), run in runs.items():
            print(f"MLflow sweep run: {uri} experiment {experiment!r}, run {run}")
        sweep_jobs.clear()
