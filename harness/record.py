"""Log an ExperimentResult to MLflow: one parent run, one child run per model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.candidates import SAMPLED_WARNING
from harness.compare import PairComparison
from harness.experiment import ExperimentResult
from harness.gate import GateDecision
from harness.split import data_hash
from harness.tracking import Tracker, flatten, git_state

__all__ = ["record"]


def _numbers(stats: Mapping[str, Any], prefix: str) -> dict[str, float]:
    return {
        f"{prefix}{k}": float(v)
        for k, v in stats.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


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
) -> dict[str, str]:
    """Log everything; return the run ids (``parent`` and one per model).

    Each candidate's run gets its comparison numbers (``compare.<segment>.<metric>.<stat>``) and
    its ``gate.decision``; the parent gets the overall decision and the report.
    """
    decisions = decisions or {}
    by_candidate = {p.candidate: p for p in pairs}
    data_digest = data_hash(result.dataset.frame)
    code_repo = git_state(Path(__file__).resolve().parent)
    tags = {
        **git_state(),
        **{f"harness.{k}": v for k, v in code_repo.items() if not k.startswith("mlflow.")},
        "dataset.name": result.dataset.name,
        "dataset.source": result.dataset.source,
        "dataset.sha256": data_digest,
        "split.method": result.split.name,
        "split.sha256": split_key,
        "results.folder": str(result.folder.resolve()),
        "candidates.kind": result.candidates.get("candidates.kind", "full"),
    }
    if tags["candidates.kind"] == "sampled":
        tags["candidates.warning"] = SAMPLED_WARNING
    parent = tracker.start(run_name, tags)
    ids = {"parent": parent}
    params = {**flatten(config), **{f"metrics.option.{k}": v for k, v in result.options.items()}}
    tracker.log(
        parent,
        params=params,
        metrics=_numbers(result.split.stats, "split.") | _numbers(result.candidates, ""),
    )
    for part, context in ((result.split.train, "training"), (result.split.test, "test")):
        tracker.log_input(
            parent,
            part,
            name=f"{result.dataset.name}-{context}",
            context=context,
            digest=data_hash(part),
            source=result.dataset.source,
        )
    for name, outcome in result.outcomes.items():
        child = tracker.start(name, {**tags, "model": name}, parent=parent)
        ids[name] = child
        tracker.log(
            child,
            params={
                **flatten(dict(model_params.get(name, {})), "model."),
                **{f"metrics.option.{k}": v for k, v in result.options.items()},
            },
            metrics={
                **(outcome.evaluation.summary if outcome.evaluation else {}),
                **{f"time.{k}_seconds": v for k, v in outcome.seconds.items()},
                **_numbers(outcome.evaluation.counts if outcome.evaluation else {}, "users."),
            },
            tags={
                "status": "ok" if outcome.ok else "failed",
                **({"error": outcome.error} if outcome.error else {}),
                **({"notes": " | ".join(outcome.notes)} if outcome.notes else {}),
                **{f"model.{k}": v for k, v in outcome.info.items()},
            },
        )
        if name in by_candidate:
            tracker.log(child, metrics=by_candidate[name].metrics_dict())
        if name in decisions:
            tracker.log(child, tags=decisions[name].as_tags())
        tracker.log_artifacts(child, result.folder / name)
        tracker.finish(child, "FINISHED" if outcome.ok else "FAILED")
    summary = {
        f"{model}.{metric}": value
        for model, row in result.table().iterrows()
        for metric, value in row.items()
    }
    tracker.log(parent, metrics=summary)
    for path in sorted(result.folder.iterdir()):
        if path.is_file():
            tracker.client.log_artifact(parent, str(path))
    if (result.folder / "report_files").is_dir():
        tracker.log_artifacts(parent, result.folder / "report_files", "report_files")
    if overall is not None:
        tracker.log(parent, tags={"gate.decision": overall})
    tracker.finish(parent, "FAILED" if result.failed else "FINISHED")
    return ids
