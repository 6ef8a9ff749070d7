"""``python -m harness.compare BASELINE CANDIDATE``: compare two logged evaluations again.

BASELINE and CANDIDATE are MLflow run ids of model (child) runs, or ``models:/NAME/VERSION``
URIs of registered versions evaluated earlier (the latest run that evaluated that URI is used).
The comparison is recomputed from the runs' per-user artifacts, without re-running any model,
printed like the main run's (the model × metric table, the comparison per metric, each
candidate's gate lines and the verdict), written as a report (``report.html``, ``report.md``)
into ``--out`` (default: a new folder under ``runs/results/compare/``) and logged as a new run.
Runs evaluated on different splits are refused. A parent run id (one whole evaluation) is
refused too, with its model runs listed: pass two of them.

Exit codes: 0 done (or GO with ``--enforce``), 2 bad input (unknown run, parent run, different
splits, bad labels file, bad option), 3 MLflow unreachable or logging failed, 10 NO_GO,
11 INCONCLUSIVE and 12 no decision (``--gate none``) with ``--enforce``.
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

from harness.compare import (
    CompareSpec,
    PairComparison,
    compare_pair,
    labels_row,
    read_labels,
    segment_data,
)
from harness.data import _first_line
from harness.folders import safe_component
from harness.gate import (
    EXIT_CODES,
    EXIT_NO_DECISION,
    GateDecision,
    GateSpec,
    check_gate,
    decide,
    verdict_line,
)

EXIT_BAD_INPUT, EXIT_TRACKING_FAILED = 2, 3


class TrackingError(Exception):
    """The tracking server or store could not be read (exit 3)."""


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
        "--out",
        default=None,
        help="folder for report.html, report.md and comparison.csv "
        "(default: RUNS_DIR/results/compare/<time>-<candidate>-vs-<baseline>)",
    )
    p.add_argument(
        "--gate", default="default", help="a gate/ config option (default, strict, none)"
    )
    p.add_argument("--enforce", action="store_true", help="exit code reflects the gate decision")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. compare.n_resamples=2000")
    return p


def _resolve(client: Any, ref: str, uri: str) -> Any:
    """The model run for a run id or a ``models:/`` URI evaluated earlier; an unknown id or a
    parent run (a whole evaluation, whose children are the model runs) is a ValueError."""
    from mlflow.exceptions import MlflowException

    try:
        if ref.startswith("models:/"):
            found = client.search_runs(
                [e.experiment_id for e in client.search_experiments()],
                filter_string=f"tags.`model.info.model_uri` = '{ref}'",
                order_by=["attributes.start_time DESC"],
                max_results=1,
            )
            if not found:
                raise ValueError(f"no evaluation of {ref} was logged at {uri}")
            return found[0]
        try:
            run = client.get_run(ref)
        except MlflowException as err:
            if err.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                raise ValueError(f"no run with id {ref!r} at {uri}") from None
            raise
        children = client.search_runs(
            [run.info.experiment_id],
            filter_string=f"tags.`mlflow.parentRunId` = '{run.info.run_id}'",
            order_by=["attributes.start_time ASC"],
        )
    except ValueError:
        raise
    except Exception as err:  # MlflowException, a database or connection error
        raise TrackingError(f"MLflow at {uri} could not be read ({_first_line(err)})") from None
    if children:
        listing = ", ".join(
            f"{c.data.tags.get('model', c.info.run_name)} {c.info.run_id}" for c in children
        )
        raise ValueError(
            f"{ref} is a parent run (one whole evaluation), not a model run; compare two of its "
            f"model runs: {listing}"
        )
    return run


def _artifacts(client: Any, run: Any, folder: Path) -> tuple[pd.DataFrame, dict[str, Any], Any]:
    """Per-user table, result.json and top-k lists (or None) of a model run."""
    local = Path(client.download_artifacts(run.info.run_id, "", str(folder)))
    if not (local / "per_user.parquet").is_file() or not (local / "result.json").is_file():
        raise ValueError(
            f"run {run.info.run_id} ({run.info.run_name}) has no per_user.parquet and "
            "result.json: not a model run of the harness"
        )
    per_user = pd.read_parquet(local / "per_user.parquet")
    result = json.loads((local / "result.json").read_text())
    topk = pd.read_parquet(local / "topk.parquet") if (local / "topk.parquet").exists() else None
    return per_user, result, topk


def _specs(gate: str, baseline: str, overrides: Sequence[str]) -> tuple[CompareSpec, GateSpec, Any]:
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_module(config_module="harness.configs", version_base=None):
            cfg = compose("config", overrides=[f"gate={gate}", *overrides])
    except (HydraException, OmegaConfBaseException) as err:
        raise ValueError(f"bad option: {_first_line(err)}") from None
    node: dict[str, Any] = OmegaConf.to_container(cfg.compare, resolve=True)  # type: ignore[assignment]
    node["baseline"] = baseline
    if node.get("metrics") is not None:
        node["metrics"] = tuple(node["metrics"])
    gate_node: dict[str, Any] = OmegaConf.to_container(cfg.gate, resolve=True)  # type: ignore[assignment]
    return CompareSpec(**node), GateSpec(**gate_node), cfg


def _summary(names: Sequence[str], results: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The model × metric means of both runs (as the main run's table; the header line starts
    with "model", so no line but the comparison rows starts with a metric name)."""
    frame = pd.DataFrame([r.get("summary", {}) for r in results], index=list(names))
    frame.columns.name = "model"
    return frame.astype(float)


def main(argv: Sequence[str] | None = None) -> int:
    """Recompute, print, report and log the comparison; return the exit code."""
    args = _parser().parse_intermixed_args(argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlflow import MlflowClient

    client = MlflowClient(args.tracking_uri)
    try:
        runs = [_resolve(client, r, args.tracking_uri) for r in (args.baseline, args.candidate)]
        hashes = [r.data.tags.get("split.sha256") for r in runs]
        if None in hashes or hashes[0] != hashes[1]:
            raise ValueError(
                f"the runs were evaluated on different splits (split.sha256 {hashes[0]} vs "
                f"{hashes[1]}); a comparison needs the same split"
            )
        names = [r.data.tags.get("model", r.info.run_name) for r in runs]
        if names[0] == names[1]:
            names = [f"{n} ({r.info.run_id[:8]})" for n, r in zip(names, runs, strict=True)]
        cspec, gspec, cfg = _specs(args.gate, names[0], args.overrides)
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
        labels = read_labels(cspec.human_labels) if cspec.human_labels else None
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
        if labels is not None:
            if "candidate" in labels.columns:
                labels = labels[labels["candidate"].astype(str) == names[1]]
            if len(labels):
                row = pd.DataFrame([labels_row(labels["label"], cspec)])
                pair.table = pd.concat([pair.table, row], ignore_index=True)
    except ValueError as err:
        print(f"error: {_first_line(err)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (TrackingError, OSError) as err:
        print(f"error: {_first_line(err)}", file=sys.stderr)
        return EXIT_TRACKING_FAILED
    if segments is None and cspec.segments:
        pair.notes.append(f"segments skipped: split {hashes[0]} is not cached under {split_dir}")
    decision = decide(pair, gspec) if gspec.enabled else None
    decisions = {pair.candidate: decision} if decision is not None else {}
    overall = decision.decision if decision is not None else None
    summary = _summary(names, (res_a, res_b))
    headline = (gspec.primary.metric if gspec.primary else None) or cspec.gsb_metric
    verdict = verdict_line(
        summary,
        decisions,
        overall,
        metric=headline if headline in summary.columns else None,
        baseline=names[0],
        why=None if decision is not None else "the gate is off",
    )
    print(format_comparison(pair, summary, decisions, overall, verdict))
    out = Path(args.out) if args.out else _default_out(Path(args.runs_dir), pair)
    try:
        report = _report(out, pair, summary, decisions, overall, verdict, runs, cfg, cspec)
    except OSError as err:
        print(f"error: could not write the report into {out} ({_first_line(err)})", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"\nreport:  {report}")
    try:
        _log(args.tracking_uri, client, runs, pair, decision, out)
    except Exception as err:  # the comparison was printed; say why it was not logged
        print(
            f"error: could not log the comparison run ({type(err).__name__}: {_first_line(err)})",
            file=sys.stderr,
        )
        return EXIT_TRACKING_FAILED
    if args.enforce:
        return EXIT_NO_DECISION if decision is None else EXIT_CODES[decision.decision]
    return 0


def format_comparison(
    pair: PairComparison,
    summary: pd.DataFrame,
    decisions: dict[str, GateDecision],
    overall: str | None,
    verdict: str,
) -> str:
    """The terminal output, as the main run's: the model × metric table, the comparison per
    metric (all users; lift in percent, "-" where there is no value), the candidate's head
    and gate lines (:func:`harness.cli.format_verdicts`), notes and the verdict line."""
    from harness.cli import format_verdicts

    lines = [
        summary.to_string(float_format=lambda v: f"{v:.4f}", na_rep="-"),
        "",
        f"{pair.candidate} vs {pair.baseline}, all users:",
        comparison_table(pair),
        "",
        format_verdicts([pair], decisions, overall),
    ]
    lines += [f"note: {note}" for note in pair.notes]
    lines.append(verdict)
    return "\n".join(lines)


def comparison_table(pair: PairComparison, segment: str = "all") -> str:
    """One line per metric of ``segment``: means, difference and lift with their CIs, p-value
    (raw and adjusted) and ΔGSB; "-" where a value does not exist (e.g. no CI of a whole-run
    metric, no lift over a zero baseline)."""
    from harness.report import fmt_ci, fmt_lift, fmt_p, fmt_value

    def dash(text: str) -> str:
        return "-" if text in ("", "—") else text

    def signed(x: Any) -> str:
        return fmt_value(x, 4, sign=True)

    table = pair.table[pair.table["segment"] == segment] if len(pair.table) else pair.table
    rows = []
    for _, r in table.iterrows():
        get = r.get
        rows.append(
            {
                "metric": r["metric"],
                pair.baseline: dash(fmt_value(get("mean_a"))),
                pair.candidate: dash(fmt_value(get("mean_b"))),
                "diff [CI]": dash(
                    fmt_ci(get("diff"), get("diff_ci_low"), get("diff_ci_high"), signed)
                ),
                "lift [CI]": dash(
                    fmt_ci(get("lift"), get("lift_ci_low"), get("lift_ci_high"), fmt_lift)
                ),
                "p": dash(fmt_p(get("p_randomization"))),
                "p adj.": dash(fmt_p(get("p_adjusted"))),
                "ΔGSB": dash(signed(get("gsb_delta"))),
            }
        )
    if not rows:
        return "(no metric to compare)"
    return pd.DataFrame(rows).to_string(index=False)


def _default_out(runs_dir: Path, pair: PairComparison) -> Path:
    """A new folder under ``runs/results/compare/`` named by time and the two models."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe, base = safe_component(pair.candidate), safe_component(pair.baseline)
    folder = runs_dir / "results" / "compare" / f"{stamp}-{safe}-vs-{base}"
    n = 1
    while folder.exists():
        n += 1
        folder = folder.with_name(f"{stamp}-{safe}-vs-{base}-{n}")
    return folder


def _report(
    out: Path,
    pair: PairComparison,
    summary: pd.DataFrame,
    decisions: dict[str, GateDecision],
    overall: str | None,
    verdict: str,
    runs: Sequence[Any],
    cfg: Any,
    cspec: CompareSpec,
) -> Path:
    """Write report.html, report.md and comparison.csv into ``out``; the HTML path."""
    from omegaconf import OmegaConf

    from harness.report import ReportContext, write_report

    ctx = ReportContext(
        title=f"Comparison: {pair.candidate} vs {pair.baseline}",
        experiment="compare",
        created=time.strftime("%Y-%m-%d %H:%M:%S"),
        dataset=f"split {runs[0].data.tags.get('split.sha256', '-')[:12]} (from the logged runs)",
        split=str(runs[0].data.tags.get("split", runs[0].data.tags.get("split.method", "-"))),
        split_stats={},
        candidates={},
        metric_options={},
        config_yaml=OmegaConf.to_yaml(
            {k: OmegaConf.to_container(cfg[k], resolve=True) for k in ("compare", "gate")}
        ),
        summary=summary,
        pairs=[pair],
        decisions=decisions,
        overall=overall,
        segment_definitions=pair.segments,
        notes=[verdict, *pair.notes],
        run_ids={pair.baseline: runs[0].info.run_id, pair.candidate: runs[1].info.run_id},
        verdict_text=verdict,
    )
    written = write_report(ctx, out)
    pair.table.to_csv(out / "comparison.csv", index=False)
    return Path(written["html"])


def _log(
    uri: str,
    client: Any,
    runs: Sequence[Any],
    pair: PairComparison,
    decision: Any,
    out: Path,
) -> None:
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
    tracker.log_artifacts(run_id, out)
    tracker.finish(run_id)
    print(f"logged comparison run {run_id}")


if __name__ == "__main__":
    raise SystemExit(main())
