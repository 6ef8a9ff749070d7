"""``python -m harness.compare BASELINE CANDIDATE``: compare two logged evaluations again.

BASELINE and CANDIDATE are MLflow run ids of model (child) runs, or ``models:/NAME/VERSION``
URIs of registered versions evaluated earlier (the latest run that evaluated that URI is used).
The comparison is recomputed from the runs' per-user artifacts, without re-running any model,
and logged as a new run. Runs evaluated on different splits are refused.

Exit codes: 0 done (or GO with ``--enforce``), 2 bad input (unknown run, different splits),
3 MLflow unreachable, 10 NO_GO, 11 INCONCLUSIVE and 12 no decision (``--gate none``) with
``--enforce``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from harness.compare import CompareSpec, PairComparison, compare_pair, segment_data
from harness.gate import EXIT_CODES, EXIT_NO_DECISION, GateSpec, check_gate, decide

EXIT_BAD_INPUT, EXIT_TRACKING_FAILED = 2, 3


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness.compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("baseline", help="run id or models:/NAME/VERSION of the baseline")
    p.add_argument("candidate", help="run id or models:/NAME/VERSION of the candidate")
    p.add_argument("--tracking-uri", default="sqlite:///runs/mlflow.db")
    p.add_argument("--runs-dir", default="runs", help="where cached splits are (for segments)")
    p.add_argument(
        "--gate", default="default", help="a gate/ config option (default, strict, none)"
    )
    p.add_argument("--enforce", action="store_true", help="exit code reflects the gate decision")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. compare.n_resamples=2000")
    return p


def _resolve(client: Any, ref: str) -> Any:
    """The model run for a run id or a ``models:/`` URI evaluated earlier."""
    if ref.startswith("models:/"):
        found = client.search_runs(
            [e.experiment_id for e in client.search_experiments()],
            filter_string=f"tags.`model.info.model_uri` = '{ref}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        if not found:
            raise ValueError(f"no evaluation of {ref} was logged at this tracking URI")
        return found[0]
    return client.get_run(ref)


def _artifacts(client: Any, run: Any, folder: Path) -> tuple[pd.DataFrame, dict[str, Any], Any]:
    """Per-user table, result.json and top-k lists (or None) of a model run."""
    local = Path(client.download_artifacts(run.info.run_id, "", str(folder)))
    per_user = pd.read_parquet(local / "per_user.parquet")
    result = json.loads((local / "result.json").read_text())
    topk = pd.read_parquet(local / "topk.parquet") if (local / "topk.parquet").exists() else None
    return per_user, result, topk


def _specs(gate: str, baseline: str, overrides: Sequence[str]) -> tuple[CompareSpec, GateSpec, Any]:
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    with initialize_config_module(config_module="harness.configs", version_base=None):
        cfg = compose("config", overrides=[f"gate={gate}", *overrides])
    node: dict[str, Any] = OmegaConf.to_container(cfg.compare, resolve=True)  # type: ignore[assignment]
    node["baseline"] = baseline
    if node.get("metrics") is not None:
        node["metrics"] = tuple(node["metrics"])
    gate_node: dict[str, Any] = OmegaConf.to_container(cfg.gate, resolve=True)  # type: ignore[assignment]
    return CompareSpec(**node), GateSpec(**gate_node), cfg


def main(argv: Sequence[str] | None = None) -> int:
    """Recompute and log the comparison; return the exit code."""
    args = _parser().parse_intermixed_args(argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlflow import MlflowClient

    client = MlflowClient(args.tracking_uri)
    try:
        runs = [_resolve(client, r) for r in (args.baseline, args.candidate)]
        hashes = [r.data.tags.get("split.sha256") for r in runs]
        if None in hashes or hashes[0] != hashes[1]:
            raise ValueError(
                f"the runs were evaluated on different splits (split.sha256 {hashes[0]} vs "
                f"{hashes[1]}); a comparison needs the same split"
            )
        names = [r.data.tags.get("model", r.info.run_name) for r in runs]
        cspec, gspec, _ = _specs(args.gate, names[0], args.overrides)
        with tempfile.TemporaryDirectory() as tmp:
            (pu_a, res_a, top_a), (pu_b, res_b, top_b) = (
                _artifacts(client, r, Path(tmp) / str(i)) for i, r in enumerate(runs)
            )
        metric_names = list(cspec.metrics or pu_a.columns)
        gspec = check_gate(  # a rule on a metric these runs lack: one line, exit 2
            gspec,
            metric_names,
            segments=cspec.segments,
            gsb_metric=cspec.gsb_metric,
            human_labels=bool(cspec.human_labels),
        )
        split_dir = Path(args.runs_dir) / "splits" / str(hashes[0])
        segments = qrels = None
        if cspec.segments and (split_dir / "train.parquet").exists():
            train = pd.read_parquet(split_dir / "train.parquet")
            test = pd.read_parquet(split_dir / "test.parquet")
            qrels = test[["user", "item"]].drop_duplicates().assign(relevance=1.0)
            segments = segment_data(train, pu_a.index.to_numpy(), cspec)
        pair = compare_pair(
            names[0],
            names[1],
            (pu_a, pu_b),
            metric_names,
            cspec,
            summaries=(res_a.get("summary", {}), res_b.get("summary", {})),
            segments=segments,
            qrels=qrels,
            recs=(top_a, top_b) if top_a is not None and top_b is not None else None,
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if segments is None:
        pair.notes.append(f"segments skipped: split {hashes[0]} is not cached under {split_dir}")
    decision = decide(pair, gspec) if gspec.enabled else None
    _print(pair, decision)
    try:
        _log(args.tracking_uri, client, runs, pair, decision)
    except Exception as err:  # the comparison was printed; say why it was not logged
        print(
            f"error: could not log the comparison run ({type(err).__name__}: {err})",
            file=sys.stderr,
        )
        return EXIT_TRACKING_FAILED
    if args.enforce:
        return EXIT_NO_DECISION if decision is None else EXIT_CODES[decision.decision]
    return 0


def _print(pair: PairComparison, decision: Any) -> None:
    table = pair.table[pair.table["segment"] == "all"]
    cols = [
        c
        for c in (
            "metric",
            "mean_a",
            "mean_b",
            "diff",
            "diff_ci_low",
            "diff_ci_high",
            "lift",
            "p_randomization",
            "p_adjusted",
            "gsb_delta",
        )
        if c in table
    ]
    print(f"{pair.candidate} vs {pair.baseline}")
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if decision is not None:
        print(f"gate: {decision.decision}")
        for r in decision.rules:
            print(f"  {r.rule} {r.metric} ({r.segment}): {r.status} — {r.reason}")
    for note in pair.notes:
        print(f"note: {note}")


def _log(uri: str, client: Any, runs: Sequence[Any], pair: PairComparison, decision: Any) -> None:
    from harness.tracking import Tracker

    tracker = Tracker(uri, client.get_experiment(runs[1].info.experiment_id).name)
    tags = {
        "compare.baseline_run": runs[0].info.run_id,
        "compare.candidate_run": runs[1].info.run_id,
        "compare.baseline": pair.baseline,
        "compare.candidate": pair.candidate,
        "split.sha256": runs[0].data.tags.get("split.sha256", ""),
    }
    run_id = tracker.start(
        f"compare-{pair.candidate}-vs-{pair.baseline}-{time.strftime('%Y%m%d-%H%M%S')}", tags
    )
    tracker.log(
        run_id, metrics=pair.metrics_dict(), tags=decision.as_tags() if decision is not None else {}
    )
    with tempfile.TemporaryDirectory() as tmp:
        pair.table.to_csv(Path(tmp) / "comparison.csv", index=False)
        tracker.log_artifacts(run_id, tmp)
    tracker.finish(run_id)
    print(f"logged comparison run {run_id}")


if __name__ == "__main__":
    raise SystemExit(main())
