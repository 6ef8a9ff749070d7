"""``python -m harness``: compose the Hydra config, build the objects, run, track, report.

The only module that sees a ``DictConfig``: it instantiates models and hands typed objects to
:mod:`harness.experiment`. Exit codes: 0 success, 1 a model failed, 2 bad input or config,
3 results saved locally but MLflow logging failed; with ``gate.enforce=true`` and an otherwise
successful run, 10 for NO_GO and 11 for INCONCLUSIVE.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

import metrics
from harness.candidates import SAMPLED_WARNING, CandidateSpec, build_candidates
from harness.compare import CompareSpec, PairComparison, compare_models
from harness.datasets import load_dataset
from harness.errors import DataError
from harness.experiment import Evaluator, ExperimentResult, MetricSuite, run_models
from harness.gate import EXIT_CODES, GateDecision, GateSpec, decide, worst
from harness.models import Recommender, without_search_space
from harness.report import ReportContext, write_report
from harness.split import load_or_make_split, split_cache_key

EXIT_MODEL_FAILED, EXIT_BAD_INPUT, EXIT_TRACKING_FAILED = 1, 2, 3


def build_models(cfg: DictConfig, progress: bool) -> tuple[dict[str, Recommender], dict[str, str]]:
    """Instantiate every selected model (``model=[a,b]``), passing the run-wide ``progress`` and
    ``engine.batch_users`` where accepted; a model that cannot be built is returned as an error
    so the others still run."""
    shared = {"progress": progress, "batch_size": cfg.get("engine", {}).get("batch_users")}
    models: dict[str, Recommender] = {}
    errors: dict[str, str] = {}
    for name, node in (cfg.get("model") or {}).items():
        target = node.get("_target_") if isinstance(node, DictConfig) else None
        if not target:
            raise ValueError(f"model {name!r} has no _target_ (the class to build)")
        try:
            accepted = inspect.signature(get_class(target)).parameters
            extra = {k: v for k, v in shared.items() if k in accepted and k not in node}
            models[str(name)] = instantiate(without_search_space(node), **extra)
        except MissingMandatoryValue:
            raise
        except Exception as err:  # one model's bad class or params must not stop the others
            if cfg.get("debug"):
                raise
            errors[str(name)] = f"could not build {target}: {type(err).__name__}: {err}"
    if not models and not errors:
        raise ValueError("no model selected: use e.g. model=[popularity,item_knn]")
    return models, errors


def suite_of(cfg: DictConfig) -> MetricSuite:
    """The typed metric suite of the ``metrics/`` config group."""
    m = cfg.metrics
    return MetricSuite(
        k=int(m.k),
        names=tuple(str(n) for n in m.names),
        relevance=str(m.get("relevance", "binary")),
        relevance_threshold=float(m.get("relevance_threshold", 1)),
        options=OmegaConf.to_container(m.get("options", {}), resolve=True),  # type: ignore[arg-type]
    )


def format_summary(result: ExperimentResult) -> str:
    """The model × metric table, the split in one line and failures, for the terminal."""
    stats = result.split.stats
    lines = [
        f"dataset {result.dataset.name}: {len(result.dataset.frame):,} events | split "
        f"{result.split.name}: train {stats.get('n_train_events', 0):,} / test "
        f"{stats.get('n_test_events', 0):,} events, {stats.get('n_test_users', 0):,} test users",
        "",
        result.table().to_string(float_format=lambda v: f"{v:.4f}", na_rep="-"),
    ]
    for name, outcome in result.outcomes.items():
        lines += [f"note ({name}): {note}" for note in outcome.notes]
    for name in result.failed:
        lines.append(f"\nmodel {name!r} FAILED: {result.outcomes[name].error}")
    return "\n".join(lines)


def _plain(node: Any) -> Any:
    """A config node as plain containers, interpolations resolved, ``???`` an error."""
    return OmegaConf.to_container(node, resolve=True, throw_on_missing=True)


def compare_spec_of(cfg: DictConfig) -> CompareSpec:
    """The typed ``compare/`` config (absent group: no comparison)."""
    node = _plain(cfg.get("compare") or {"baseline": None})
    if node.get("metrics") is not None:
        node["metrics"] = tuple(node["metrics"])
    return CompareSpec(**node)


def gate_spec_of(cfg: DictConfig) -> GateSpec:
    """The typed ``gate/`` config (absent group: no gate)."""
    return GateSpec(**_plain(cfg.get("gate") or {"enabled": False}))


def _verdicts(
    result: ExperimentResult, cspec: CompareSpec, gspec: GateSpec
) -> tuple[list[PairComparison], dict[str, GateDecision], str | None, list[str]]:
    """Compare every candidate with the baseline and apply the gate."""
    pairs, notes = compare_models(result, cspec)
    decisions = {p.candidate: decide(p, gspec) for p in pairs} if gspec.enabled else {}
    overall = worst([d.decision for d in decisions.values()]) if decisions else None
    return pairs, decisions, overall, notes


def format_verdicts(
    pairs: list[PairComparison], decisions: dict[str, GateDecision], overall: str | None
) -> str:
    """Per candidate: ΔGSB and the primary lift with CIs, then the gate decision and reasons."""
    lines = []
    for pair in pairs:
        row = pair.row(pair.gsb_metric)
        head = f"{pair.candidate} vs {pair.baseline}"
        if row is not None and "gsb_delta" in row:
            head += (
                f": ΔGSB({pair.gsb_metric}) {row['gsb_delta']:+.3f} "
                f"[{row['gsb_ci_low']:+.3f}, {row['gsb_ci_high']:+.3f}], "
                f"lift {row['lift']:+.2%} [{row['lift_ci_low']:+.2%}, {row['lift_ci_high']:+.2%}]"
            )
        lines.append(head)
        decision = decisions.get(pair.candidate)
        if decision is not None:
            lines.append(f"  gate: {decision.decision}")
            lines += [
                f"    {r.rule} {r.metric} ({r.segment}): {r.status} — {r.reason}"
                for r in decision.rules
            ]
    if overall is not None:
        lines.append(f"overall gate decision: {overall}")
    return "\n".join(lines)


def report_context(
    result: ExperimentResult,
    pairs: list[PairComparison],
    decisions: dict[str, GateDecision],
    overall: str | None,
    notes: list[str],
    experiment: str,
    config_yaml: str,
) -> ReportContext:
    """Everything the report shows, from one run's results and verdicts."""
    events = len(result.dataset.frame)
    return ReportContext(
        title=f"Offline evaluation: {experiment}",
        experiment=experiment,
        created=time.strftime("%Y-%m-%d %H:%M:%S"),
        dataset=f"{result.dataset.name} ({result.dataset.source}), {events:,} events",
        split=result.split.name,
        split_stats=result.split.stats,
        candidates=result.candidates,
        metric_options=result.options,
        config_yaml=config_yaml,
        summary=result.table(),
        pairs=pairs,
        decisions=decisions,
        overall=overall,
        segment_definitions=pairs[0].segments if pairs else {},
        notes=notes + [f"{n}: {note}" for n, o in result.outcomes.items() for note in o.notes],
        run_ids={},
    )


@contextmanager
def engine_of(cfg: DictConfig) -> Iterator[Evaluator]:
    """The metric engine of ``engine/``: numpy in-process, or Spark (session stopped after)."""
    engine = cfg.get("engine") or {}
    if engine.get("name", "numpy") != "spark":
        yield metrics.evaluate
        return
    from harness.spark_engine import evaluate_spark, spark_session

    spark = spark_session(
        master=str(engine.get("master", "local[*]")),
        config={"spark.sql.shuffle.partitions": str(engine.get("shuffle_partitions", 8))},
    )
    try:
        yield partial(evaluate_spark, spark=spark, buckets=engine.get("buckets"))
    finally:
        spark.stop()


def run(cfg: DictConfig) -> int:
    """Run one experiment from a composed config; return the process exit code."""
    progress = bool(cfg.get("progress", True))
    runs_dir = Path(cfg.runs_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    suite = suite_of(cfg)
    cspec, gspec = compare_spec_of(cfg), gate_spec_of(cfg)
    cand_spec = CandidateSpec(**_plain(cfg.get("candidates") or {"kind": "full"}))
    models, load_errors = build_models(cfg, progress)
    dataset = load_dataset(_plain(cfg.dataset))
    split_params = _plain(cfg.split)
    method = split_params.pop("method")
    split = load_or_make_split(dataset.frame, method, split_params, runs_dir / "splits")
    key = split_cache_key(dataset.frame, method, split_params)
    folder = runs_dir / "results" / str(cfg.name) / f"{stamp}-{key[:8]}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    candidates, cand_stats = build_candidates(cand_spec, split, runs_dir / "splits" / key)
    if cand_spec.kind == "sampled":
        print(f"WARNING: {SAMPLED_WARNING}", file=sys.stderr)
    with engine_of(cfg) as evaluate:
        result = run_models(
            dataset,
            split,
            models,
            suite,
            folder,
            progress=progress,
            candidates=candidates,
            load_errors=load_errors,
            evaluate=evaluate,
        )
    result.candidates = cand_stats
    print(format_summary(result))
    pairs, decisions, overall, notes = _verdicts(result, cspec, gspec)
    report = write_report(
        ReportContext.of(
            result,
            pairs,
            decisions,
            overall,
            notes,
            str(cfg.name),
            OmegaConf.to_yaml(cfg, resolve=True),
        ),
        folder,
    )
    print()
    print(format_verdicts(pairs, decisions, overall) or "\n".join(notes))
    print(f"\nresults: {folder}\nreport:  {report['html']}")
    code = EXIT_MODEL_FAILED if result.failed else 0
    if cfg.tracking.get("enabled", True) and cfg.tracking.get("uri"):
        try:
            from harness.record import record
            from harness.tracking import Tracker

            tracker = Tracker(str(cfg.tracking.uri), str(cfg.name), cfg.tracking.get("artifacts"))
            ids = record(
                tracker,
                result,
                run_name=f"{dataset.name}-{split.name}-{stamp}",
                config=_plain(cfg),
                split_key=key,
                model_params={n: _plain(v) for n, v in cfg.model.items()},
                pairs=pairs,
                decisions=decisions,
                overall=overall,
            )
        except Exception as err:
            if cfg.get("debug"):
                raise
            print(
                f"error: MLflow logging to {cfg.tracking.uri} failed ({type(err).__name__}: "
                f"{err}); results are kept in {folder}",
                file=sys.stderr,
            )
            return EXIT_TRACKING_FAILED
        print(f"MLflow: {cfg.tracking.uri} experiment {cfg.name!r}, parent run {ids['parent']}")
        if str(cfg.tracking.uri).startswith("sqlite:///"):
            print(f"  open with: mlflow ui --backend-store-uri {cfg.tracking.uri}")
    if code == 0 and gspec.enforce and overall is not None:
        code = EXIT_CODES[overall]
    return code


_worst = {"code": 0}


@hydra.main(version_base=None, config_path="configs", config_name="config")
def main(cfg: DictConfig) -> None:
    """Hydra entry point; one-line errors and exit code 2 for bad input unless ``debug=true``."""
    try:
        code = run(cfg)
    except (DataError, ValueError, FileNotFoundError, MissingMandatoryValue) as err:
        if cfg.get("debug"):
            raise
        message = str(err).splitlines()[0]
        if isinstance(err, MissingMandatoryValue):
            message = f"'{err.full_key}' must be set, e.g. python -m harness {err.full_key}=..."
        print(f"error: {message}", file=sys.stderr)
        code = EXIT_BAD_INPUT
    _worst["code"] = max(_worst["code"], code)
    if code and HydraConfig.get().mode != RunMode.MULTIRUN:
        sys.exit(code)


def entry() -> None:
    """Run :func:`main`; a multirun exits with the worst code of its jobs."""
    main()
    sys.exit(_worst["code"])
