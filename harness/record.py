"""Log an ExperimentResult to MLflow: one parent run, one child run per model.

Two steps, so a run can also be logged later from its results folder (``python -m harness.log``):
:func:`plan` turns the result into plain JSON (``record.json`` in the folder: every tag, param,
metric and input to log), :func:`replay` logs such a plan. ``replay`` is idempotent: the parent
carries the tag ``harness.folder_id``; a second call finds it and only completes what is missing.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from harness.candidates import SAMPLED_WARNING
from harness.compare import PairComparison
from harness.experiment import ExperimentResult
from harness.folders import COMPLETE, INCOMPLETE, checkpoint
from harness.gate import GateDecision
from harness.split import data_hash
from harness.tracking import Tracker, flatten, git_state, metric_key

__all__ = ["PLAN_FILE", "describe_frame", "plan", "record", "replay"]

#: The plan's file name in a results folder.
PLAN_FILE = "record.json"
#: Tag on every run logged from one results folder; ``complete`` marks a run fully logged.
FOLDER_TAG, LOGGED_TAG = "harness.folder_id", "harness.logged"


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
) -> dict[str, Any]:
    """Everything :func:`replay` logs for one run, as JSON-ready plain data.

    Each candidate's run gets its comparison numbers (``compare.<segment>.<metric>.<stat>``) and
    its ``gate.decision``; the parent gets the overall decision and the report.
    """
    decisions = decisions or {}
    by_candidate = {p.candidate: p for p in pairs}
    folder_id = folder_id or uuid.uuid4().hex
    code_repo = git_state(Path(__file__).resolve().parent)
    tags = {
        **git_state(),
        **{f"harness.{k}": v for k, v in code_repo.items() if not k.startswith("mlflow.")},
        "dataset.name": result.dataset.name,
        "dataset.source": result.dataset.source,
        "dataset.sha256": data_hash(result.dataset.frame),
        "split.method": result.split.name,
        "split.sha256": split_key,
        "results.folder": str(result.folder.resolve()),
        "candidates.kind": result.candidates.get("candidates.kind", "full"),
        FOLDER_TAG: folder_id,
    }
    if tags["candidates.kind"] == "sampled":
        tags["candidates.warning"] = SAMPLED_WARNING
    source = result.dataset.source
    source_path = str(Path(source).resolve()) if Path(source).exists() else None
    inputs = [
        {
            "name": f"{result.dataset.name}-{context}",
            "context": context,
            "digest": data_hash(part),
            "source": source_path,
            **describe_frame(part),
        }
        for part, context in ((result.split.train, "training"), (result.split.test, "test"))
    ]
    options = {f"metrics.option.{k}": v for k, v in result.options.items()}
    children = []
    for name, outcome in result.outcomes.items():
        ev = outcome.evaluation
        metrics = {
            **(ev.summary if ev else {}),
            **{f"time.{k}_seconds": v for k, v in outcome.seconds.items()},
            **_numbers(ev.counts if ev else {}, "users."),
        }
        if name in by_candidate:
            metrics |= by_candidate[name].metrics_dict()
        child_tags = {
            **tags,
            "model": name,
            "status": "ok" if outcome.ok else "failed",
            **({"error": outcome.error} if outcome.error else {}),
            **({"notes": " | ".join(outcome.notes)} if outcome.notes else {}),
            **{f"model.{k}": v for k, v in outcome.info.items()},
            **(decisions[name].as_tags() if name in decisions else {}),
        }
        children.append(
            {
                "name": name,
                "tags": _strings(child_tags),
                "params": _strings(
                    {**flatten(dict(model_params.get(name, {})), "model."), **options}
                ),
                "metrics": _finite(metrics),
                "status": "FINISHED" if outcome.ok else "FAILED",
            }
        )
    summary = {
        f"{model}.{metric}": value
        for model, row in result.table().iterrows()
        for metric, value in row.items()
    }
    return {
        "version": 1,
        "folder_id": folder_id,
        "run_name": run_name,
        "parent": {
            "tags": _strings(tags),
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


def _missing(run: Any, metrics: Mapping[str, float]) -> dict[str, float]:
    """The metrics a run does not hold yet (all of them for a new run)."""
    have = set(run.data.metrics) if run is not None else set()
    return {k: v for k, v in metrics.items() if metric_key(k) not in have}


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
    found = [r for r in tracker.find(folder_tag) if "mlflow.parentRunId" not in r.data.tags]
    parent_run = found[0] if found else None
    if parent_run is None:
        parent = tracker.start(the_plan["run_name"], spec["tags"])
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
    tracker.log(parent, params=spec["params"], metrics=_missing(parent_run, spec["metrics"]))
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
            child_id = tracker.start(name, child["tags"], parent=parent)
        else:
            child_id = run.info.run_id
            tracker.open_runs.append(child_id)
            tracker.log(child_id, tags=child["tags"])
        ids[name] = child_id
        checkpoint(f"logging {name}")  # the child run is open
        tracker.log(child_id, params=child["params"], metrics=_missing(run, child["metrics"]))
        if (folder / name).is_dir():
            tracker.log_artifacts(child_id, folder / name)
        tracker.finish(child_id, child["status"])
        tracker.log(child_id, tags={LOGGED_TAG: "complete"})
    checkpoint("logging summary")
    tracker.log(parent, metrics=_missing(parent_run, spec["summary"]))
    _artifacts(tracker, parent, folder)
    if spec["end_tags"]:
        tracker.log(parent, tags=spec["end_tags"])
    tracker.finish(parent, spec["status"])
    tracker.log(parent, tags={LOGGED_TAG: "complete"})
    return ids


def record(
    tracker: Tracker,
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
) -> dict[str, str]:
    """Log everything; return the run ids (``parent`` and one per model)."""
    the_plan = plan(
        result,
        run_name=run_name,
        config=config,
        split_key=split_key,
        model_params=model_params,
        pairs=pairs,
        decisions=decisions,
        overall=overall,
        folder_id=folder_id,
    )
    return replay(tracker, the_plan, result.folder)
