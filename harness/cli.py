"""``python -m harness``: compose the Hydra config, build the objects, run, track, report.

The only module that sees a ``DictConfig``: it instantiates models and hands typed objects to
:mod:`harness.experiment`. Exit codes: 0 success, 1 a model failed, 2 bad input or config,
3 results saved locally but MLflow logging failed; with ``gate.enforce=true``, 10 for NO_GO and
11 for INCONCLUSIVE (even when a model or the logging failed) and 12 when no decision was taken;
130 interrupted by SIGINT, 143 by SIGTERM (open MLflow runs ended as KILLED, an unfinished
results folder left marked INCOMPLETE).
"""

from __future__ import annotations

import inspect
import json
import math
import re
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import hydra
import pandas as pd
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException

import metrics
from harness import folders
from harness import progress as stage_log
from harness.candidates import SAMPLED_WARNING, CandidateSpec, build_candidates, short_warning
from harness.compare import (
    CompareSpec,
    PairComparison,
    compare_models,
    compared_metrics,
    read_labels,
)
from harness.compare.sizing import format_sizing, sizing_notes, sizing_of
from harness.data import _first_line, release_arrow_memory
from harness.datasets import load_dataset
from harness.errors import DataError
from harness.experiment import (
    Evaluator,
    ExperimentResult,
    MetricSuite,
    ModelOutcome,
    run_models,
)
from harness.folders import allocate, checkpoint, is_complete, mark_complete, run_info
from harness.gate import (
    EXIT_CODES,
    EXIT_NO_DECISION,
    NO_DECISION_NOTE,
    GateDecision,
    GateSpec,
    check_gate,
    check_selection,
    decide,
    dropped_warning,
    verdict_line,
    worst,
)
from harness.models import Recommender, check_options, model_class, without_search_space
from harness.promote import (
    PROMOTION_FILE,
    apply_promotion,
    check_promotion,
    promotion_requests,
    registry_notes,
)
from harness.record import failed_job_row, job_row, plan, replay, save_plan, sweep_jobs
from harness.report import ReportContext, write_report
from harness.resume import (
    check_folder,
    drop_moved_aliases,
    finished,
    record_input_files,
    record_resumption,
    resume,
)
from harness.schema import (
    SparkEngine,
    config_error,
    one_line_config_errors,
    register,
    share_config_store,
)
from harness.spark.io import malformed_csv
from harness.spark.pipeline import (
    build_candidates_spark,
    compare_result_spark,
    load_spark,
    run_models_spark,
    split_spark,
)
from harness.split import (
    check_split_has_time,
    check_usable,
    load_or_make_split,
    save_split,
    split_cache_key,
    without_times,
)
from harness.tracking import check_store_uri, configure_http
from metrics.checks import require_int, require_range

EXIT_MODEL_FAILED, EXIT_BAD_INPUT, EXIT_TRACKING_FAILED = 1, 2, 3
register()  # the typed config schemas (harness/schema.py), before Hydra composes
share_config_store()  # --help lists the groups ~120 times, each deep-copying Hydra's store


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
            cls = model_class(str(name), target)
            check_options(str(name), cls, node)
            accepted = inspect.signature(cls).parameters
        except ValueError as err:  # a wrong class path or option: the others still run
            if cfg.get("debug"):
                raise
            errors[str(name)] = str(err)
            continue
        try:
            extra = {k: v for k, v in shared.items() if k in accepted and k not in node}
            models[str(name)] = instantiate(without_search_space(node), **extra)
        except MissingMandatoryValue:
            raise
        except Exception as err:  # one model's bad params must not stop the others
            if cfg.get("debug"):
                raise
            cause = err.__cause__ or err  # Hydra's InstantiationException wraps the model's own
            errors[str(name)] = (
                f"could not build {target} (model.{name}): {type(cause).__name__}: "
                f"{_first_line(cause)}"
            )
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


def _fit_table(table: pd.DataFrame, width: int) -> str:
    """``table`` as text; models as columns (metrics as rows) when models as rows would be wider
    than ``width`` characters (``metrics=full``: 28 metrics, over 300 characters)."""
    text = table.to_string(float_format=lambda v: f"{v:.4f}", na_rep="-")
    if max(map(len, text.splitlines()), default=0) <= width:
        return text
    return table.T.to_string(float_format=lambda v: f"{v:.4f}", na_rep="-")


def format_summary(result: ExperimentResult) -> str:
    """The model × metric table, the split in one line and failures, for the terminal."""
    stats = result.split.stats
    lines = [
        f"dataset {result.dataset.name}: {result.dataset.events:,} events | split "
        f"{result.split.name}: train {stats.get('n_train_events', 0):,} / test "
        f"{stats.get('n_test_events', 0):,} events, {stats.get('n_test_users', 0):,} test users",
        "",
        _fit_table(result.table(), max(shutil.get_terminal_size((160, 24)).columns, 100)),
    ]
    lines += [f"note: {note}" for note in evaluation_notes(result)]
    for name, outcome in result.outcomes.items():
        lines += [f"note ({name}): {note}" for note in outcome.notes]
    for name in result.failed:
        lines.append(f"\nmodel {name!r} FAILED: {result.outcomes[name].error}")
    return "\n".join(lines)


def evaluation_notes(result: ExperimentResult) -> list[str]:
    """What every model's metrics share and the table does not show: test users without a
    relevant item (``metrics.relevance=rating`` below the threshold), left out of the means
    under ``empty_users=skip`` or scored 0 / 1 otherwise; sampled users short of negatives."""
    short = short_warning(result.candidates)
    counts = next((o.evaluation.counts for o in result.outcomes.values() if o.evaluation), {})
    without, users = int(counts.get("users_without_relevant", 0)), int(counts.get("users", 0))
    if not without:
        return [short] if short else []
    suite = result.suite
    why = (
        f"none of their test ratings reaches metrics.relevance_threshold="
        f"{suite.relevance_threshold:g}"
        if suite.relevance == "rating"
        else "no test item has a positive relevance"
    )
    empty = metrics.resolve_options(**suite.evaluate_options()).empty_users
    treated = {
        "skip": f"the ranking metrics average over the other {users - without:,}",
        "zero": "they count as 0 in the ranking metrics",
        "one": "they count as 1 in the ranking metrics",
    }[empty]
    return [
        f"{without:,} of {users:,} test users have no relevant test item ({why}): {treated} "
        f"(metrics.options.empty_users={empty})",
        *([short] if short else []),
    ]


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


def checked_gate(
    cfg: DictConfig, cspec: CompareSpec, gspec: GateSpec, suite: MetricSuite
) -> GateSpec:
    """The gate with every rule resolved against the compared metrics and segments, and the
    baseline and candidates checked against the selected models: a rule or selection that
    could never be evaluated is a one-line ValueError before any model is fitted."""
    compared = compared_metrics(suite.names, cspec.metrics)
    if cspec.baseline:
        gspec = check_gate(
            gspec,
            compared,
            segments=cspec.segments,
            gsb_metric=cspec.gsb_metric,
            human_labels=bool(cspec.human_labels),
            options=suite.evaluate_options(),
        )
    check_selection(gspec, cspec.baseline, [str(name) for name in cfg.get("model") or {}])
    return gspec


def dropped_share_of(cfg: DictConfig) -> float:
    """``warn_dropped_share``: the share of test events or users dropped as unseen in training
    from which the run warns (default 0.5)."""
    value = cfg.get("warn_dropped_share", 0.5)
    try:
        share = float(0.5 if value is None else value)
    except (TypeError, ValueError):
        share = float("nan")
    if not 0 <= share <= 1:
        raise ValueError(f"'warn_dropped_share' must lie in [0, 1] (got {value!r})")
    return share


def _no_decision(
    result: ExperimentResult, cspec: CompareSpec, gspec: GateSpec, pairs: list[PairComparison]
) -> str:
    """Why the run took no gate decision, in a few words."""
    base = result.outcomes.get(cspec.baseline) if cspec.baseline else None
    candidates = [n for n in result.outcomes if n != cspec.baseline and n not in gspec.sanity]
    if not gspec.enabled:
        return "the gate is off"
    if not cspec.baseline:
        return "no baseline to compare with (compare.baseline is null)"
    if base is None:
        return f"the baseline {cspec.baseline!r} was not run"
    if base.evaluation is None:
        return f"the baseline {cspec.baseline!r} failed"
    if not candidates:
        return "no candidate besides the baseline and sanity baselines"
    if not any(p.candidate in candidates for p in pairs):
        return "every candidate failed"
    return "nothing was compared"


def _verdicts(
    result: ExperimentResult,
    cspec: CompareSpec,
    gspec: GateSpec,
    evaluate: Evaluator = metrics.evaluate,
) -> tuple[list[PairComparison], dict[str, GateDecision], str | None, list[str], str]:
    """Compare every model with the baseline and gate the candidates (sanity baselines such as
    ``random`` are compared, never gated); the last item is the one-line verdict."""
    on_spark = compare_result_spark(result, cspec)  # engine=spark: from its Spark tables
    pairs, notes = on_spark if on_spark is not None else compare_models(result, cspec, evaluate)
    gated = [p for p in pairs if p.candidate not in gspec.sanity]
    decisions = {p.candidate: decide(p, gspec) for p in gated} if gspec.enabled else {}
    overall = worst([d.decision for d in decisions.values()]) if decisions else None
    why = None if overall else _no_decision(result, cspec, gspec, pairs)
    if gspec.enabled and why:
        notes.append(f"{NO_DECISION_NOTE}{why}")
    headline: str | None = (gspec.primary.metric if gspec.primary else None) or cspec.gsb_metric
    if headline not in result.suite.names:
        headline = result.suite.names[0] if result.suite.names else None
    verdict = verdict_line(
        result.table(),
        decisions,
        overall,
        metric=headline,
        sanity=gspec.sanity,
        baseline=cspec.baseline,
        why=why,
    )
    return pairs, decisions, overall, notes, verdict


def format_verdicts(
    pairs: list[PairComparison],
    decisions: dict[str, GateDecision],
    overall: str | None,
    *,
    sanity: tuple[str, ...] = (),
) -> str:
    """Per candidate: ΔGSB and the primary lift with CIs, then the gate decision and reasons
    (``sanity`` baselines: marked as not gated)."""
    lines = []
    for pair in pairs:
        row = pair.row(pair.gsb_metric) if "metric" in pair.table.columns else None
        head = f"{pair.candidate} vs {pair.baseline}"
        if row is not None and math.isfinite(float(row.get("gsb_delta", math.nan))):
            head += (
                f": ΔGSB({pair.gsb_metric}) {row['gsb_delta']:+.3f} "
                f"[{row['gsb_ci_low']:+.3f}, {row['gsb_ci_high']:+.3f}], "
            )
            lift = [float(row.get(k, math.nan)) for k in ("lift", "lift_ci_low", "lift_ci_high")]
            head += (
                f"lift {lift[0]:+.2%} [{lift[1]:+.2%}, {lift[2]:+.2%}]"
                if all(map(math.isfinite, lift))
                else "lift undefined (the baseline scores 0)"
                if row.get("mean_a") == 0
                else "no lift CI"
            )
            if not bool(row.get("higher_is_better", True)):  # ΔGSB is oriented, the lift is not
                head += " (lower is better)"
        if pair.candidate in sanity:
            head += " (sanity baseline, not gated)"
        lines.append(head)
        lines += [f"  note: {note}" for note in pair.notes]
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


@contextmanager
def engine_of(cfg: DictConfig) -> Iterator[Evaluator]:
    """The metric engine of ``engine/``: numpy in-process, or Spark (session stopped after)."""
    engine = cfg.get("engine") or {}
    spark = spark_of(cfg)
    if spark is None:
        yield metrics.evaluate
        return
    from harness.spark import evaluate_spark

    try:
        yield partial(evaluate_spark, spark=spark, buckets=engine.get("buckets"))
    finally:
        spark.stop()


def check_engine(cfg: DictConfig) -> None:
    """The ``engine`` settings checked once, before the data is read: a one-line ValueError
    naming the key (``engine.driver_rows=0`` read as the 2,000,000 default before)."""
    engine = cfg.get("engine") or {}
    require_int("engine.batch_users", engine.get("batch_users", SparkEngine.batch_users))
    if engine.get("name", "numpy") != "spark":
        return
    for key, least in (("shuffle_partitions", 1), ("buckets", 1), ("driver_rows", 0)):
        require_int(f"engine.{key}", engine.get(key, getattr(SparkEngine, key)), minimum=least)
    if engine.get("fit_sample") is not None:
        require_range("engine.fit_sample", engine.get("fit_sample"), 0, 1, closed="right")


def driver_rows_of(cfg: DictConfig) -> int:
    """``engine.driver_rows``: the largest table ``engine=spark`` copies to the driver (0: none)."""
    return int((cfg.get("engine") or {}).get("driver_rows", SparkEngine.driver_rows))


def spark_of(cfg: DictConfig) -> Any:
    """The SparkSession of ``engine=spark`` (getOrCreate: the one ``engine_of`` stops), else
    None."""
    engine = cfg.get("engine") or {}
    if engine.get("name", "numpy") != "spark":
        return None
    from harness.spark import spark_session

    ours = signal.getsignal(signal.SIGINT)
    try:
        return spark_session(
            master=str(engine.get("master", "local[*]")),
            config={"spark.sql.shuffle.partitions": str(engine.get("shuffle_partitions", 8))},
        )
    finally:  # PySpark installs its own Ctrl-C handler: Ctrl-C stops the run as without Spark
        signal.signal(signal.SIGINT, ours)


def _job_overrides() -> list[str]:
    """This job's Hydra overrides as typed (none when not run by Hydra: harness.tune, tests)."""
    try:
        # a sweep's jobs get Hydra's re-written overrides, booleans as Python's: "progress=False"
        return [
            re.sub(r"=(True|False)$", lambda m: "=" + m.group(1).lower(), o)
            for o in HydraConfig.get().overrides.task
        ]
    except ValueError:
        return []


def _job_row(
    cfg: DictConfig,
    folder: Path,
    result: ExperimentResult,
    gspec: GateSpec,
    cspec: CompareSpec,
    overall: str | None,
    parent: str | None,
) -> dict[str, Any]:
    """This run as one row of a multirun's table (its Hydra overrides, headline, decision)."""
    tracked = cfg.tracking.get("enabled", True) and cfg.tracking.get("uri")
    return job_row(
        _job_overrides(),
        folder,
        result.table(),
        (gspec.primary.metric if gspec.primary else None) or cspec.gsb_metric,
        overall,
        parent,
        str(cfg.tracking.uri) if tracked else None,
        str(cfg.name),
    )


def run(cfg: DictConfig, tuning: Mapping[str, Any] | None = None) -> int:
    """Run one experiment from a composed config; return the process exit code. ``tuning``:
    the tuning that chose the parameters (python -m harness.tune), saved as the results
    folder's ``tuning.json`` and shown in the report."""
    _active.clear()
    stage_log.quiet(bool(cfg.get("debug")))  # no third-party INFO lines unless debug=true
    if cfg.tracking.get("enabled", True) and cfg.tracking.get("uri"):  # a bad value: exit 2 now
        check_store_uri(str(cfg.tracking.uri))
        configure_http(cfg.tracking.get("retries"), cfg.tracking.get("timeout"))
    show = bool(cfg.get("progress", True))
    stages = stage_log.stages = stage_log.Stages(show=show)
    progress = stage_log.bars_on(show)  # bars on a terminal only; a log gets status lines
    runs_dir = Path(cfg.runs_dir)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    suite = suite_of(cfg)
    cspec, gspec = compare_spec_of(cfg), gate_spec_of(cfg)
    gspec = checked_gate(cfg, cspec, gspec, suite)  # bad gate rules: exit 2 before any fit
    if cspec.human_labels:  # a bad labels file: exit 2 before any fit, not after every model
        read_labels(cspec.human_labels)
    warn_share = dropped_share_of(cfg)
    cand_spec = CandidateSpec(**_plain(cfg.get("candidates") or {"kind": "full"}))
    models, load_errors = build_models(cfg, progress)
    check_promotion(  # gate.promote that could not act: exit 2 before any fit
        gspec.promote,
        str(cfg.tracking.uri)
        if cfg.tracking.get("enabled", True) and cfg.tracking.get("uri")
        else None,
        {n: m for n, m in models.items() if n != cspec.baseline and n not in gspec.sanity},
        (cspec.baseline, models[cspec.baseline]) if cspec.baseline in models else None,
    )
    resume_spec = str(cfg.resume) if cfg.get("resume") else None
    check_folder(resume_spec)  # a folder that cannot be resumed: exit 2 before the data is read
    check_engine(cfg)
    spark = spark_of(cfg)  # engine=spark: load, split, models and metrics run on Spark
    events: Any = None  # engine=spark: the events and the split as Spark tables
    spark_split: Any = None
    engine = cfg.get("engine") or {}
    driver_rows = driver_rows_of(cfg)
    check_split_has_time(str(cfg.split.method), _plain(cfg.dataset))  # before reading the data
    checkpoint("load")
    with stages.stage("load", "loading the dataset"):
        if spark is None:
            dataset = load_dataset(_plain(cfg.dataset))
        else:
            events, dataset = load_spark(spark, _plain(cfg.dataset), driver_rows)
    split_params = _plain(cfg.split)
    method = split_params.pop("method")
    checkpoint("split")
    with stages.stage("split", f"splitting {len(dataset.frame):,} events ({method})"):
        if spark is None:
            split = load_or_make_split(
                dataset.frame,
                method,
                split_params,
                runs_dir / "splits",
                digest=dataset.sha256,
                coded=dataset.coded,
            )
        else:
            spark_split, split = split_spark(events, method, split_params, driver_rows)
    dataset = dataset.without_codes()  # the split's ids codes: not needed any more
    split = without_times(split, _plain(cfg.dataset))  # no time column: no dates to show
    check_usable(split, dataset.frame)  # empty train/test: data error, exit 2, before any fit
    dropped = dropped_warning(split.stats, warn_share)
    if dropped:
        print(f"WARNING: {dropped}", file=sys.stderr)
    else:  # below the warning's share: still said, once, as a note
        unseen = dropped_warning(split.stats, 0.0)
        if unseen:
            print(f"note: {unseen}")
    n_valid = int(split.stats.get("n_valid_events") or 0)
    if n_valid:  # a plain run with a validation part: those events are in neither side
        print(
            f"note: the split's {n_valid:,} validation events are neither trained on nor tested "
            "in this run; they serve tuning (python -m harness.tune), whose final run trains "
            "on train + validation"
        )
    key = split_cache_key(dataset.frame, method, split_params, digest=dataset.sha256)
    if spark is not None and len(split.train) == int(split.stats.get("n_train_events", -1)):
        # the driver copy (at most engine.driver_rows events) where harness.compare finds it
        save_split(split, runs_dir / "splits", key, dataset.sha256)
    if spark is None:  # the split's parts hold what the run reads: the events' memory goes
        dataset = dataset.released(split.stats)
        release_arrow_memory()  # the events' Arrow text goes back to the OS, not to Arrow's pool
    reused: dict[str, ModelOutcome] = {}
    if resume_spec:  # the interrupted run's folder and the models it finished
        taken = resume(resume_spec, runs_dir, str(cfg.name), key, _plain(cfg))
        folder, reused = taken.folder, taken.reused
        for line in drop_moved_aliases(folder, reused, models):  # an alias moved since
            print(f"note: {line}")
        stages.say(
            f"… resuming {folder}: {len(reused)} finished model(s) reused"
            + (f" ({', '.join(reused)})" if reused else "")
        )
    else:
        folder = allocate(runs_dir, str(cfg.name), key, stamp)  # this run's own, new folder
    _active["folder"] = folder
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    record_input_files(folder, _plain(cfg))  # a resume compares the files the config names
    if tuning is not None:
        (folder / "tuning.json").write_text(json.dumps(tuning, indent=2, default=str))
    checkpoint("candidates", folder)
    with stages.stage("candidates", f"building the candidates ({cand_spec.kind})"):
        if spark is None:
            candidates, cand_stats = build_candidates(cand_spec, split, runs_dir / "splits" / key)
        else:  # built and kept in Spark
            candidates, cand_stats = build_candidates_spark(cand_spec, spark_split)
    sampled = SAMPLED_WARNING if cand_spec.kind == "sampled" else None
    for warning in (sampled, short_warning(cand_stats)):  # short: sampled users or a file's
        if warning:
            print(f"WARNING: {warning}", file=sys.stderr)
    checkpoint("models", folder)
    stages.say(f"… {len(models)} model(s): fit, rank, metrics")
    with engine_of(cfg) as evaluate:
        if spark is None:
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
                reused=reused,
            )
        else:
            result = run_models_spark(
                spark,
                dataset,
                events,
                spark_split,
                split,
                models,
                suite,
                folder,
                candidates=candidates,
                load_errors=load_errors,
                buckets=engine.get("buckets"),
                batch_users=int(engine.get("batch_users") or 4096),
                fit_sample=engine.get("fit_sample"),
                seed=int(cfg.seed),
                tables_uri=engine.get("tables"),
                driver_rows=driver_rows,
                reused=reused,
            )
        models.clear()  # fitted models (item-kNN's neighbours, factors): their results are out
        result.candidates = cand_stats
        if resume_spec:
            record_resumption(folder, result.outcomes)
        print(format_summary(result))
        # segments are evaluated by the same engine, so it stays open for the comparison
        checkpoint("comparison", folder)
        with stages.stage("comparison", "comparing with the baseline (bootstrap, segments)"):
            pairs, decisions, overall, notes, verdict = _verdicts(result, cspec, gspec, evaluate)
    sizing = sizing_of(pairs, decisions, cspec, gspec)  # online A/B test sizing
    notes = notes + sizing_notes(sizing, cspec) + registry_notes(result, decisions, gspec.promote)
    checkpoint("report", folder)
    with stages.stage("report", "writing the report"):
        report = write_report(
            ReportContext.of(
                result,
                pairs,
                decisions,
                overall,
                [
                    verdict,
                    *([f"WARNING: {dropped}"] if dropped else []),
                    *evaluation_notes(result),
                    *notes,
                ],
                str(cfg.name),
                OmegaConf.to_yaml(cfg, resolve=True),
            ),
            folder,
        )
    print()
    print(format_verdicts(pairs, decisions, overall, sanity=gspec.sanity) or "\n".join(notes))
    print(verdict)
    if not sizing.empty:
        print(format_sizing(sizing, cspec))
    the_plan = plan(  # what MLflow gets, saved so `python -m harness.log` can log it later
        result,
        run_name=f"{dataset.name}-{split.name}-{stamp}",
        config=_plain(cfg),
        split_key=key,
        model_params={n: _plain(v) for n, v in cfg.model.items()},
        pairs=pairs,
        decisions=decisions,
        overall=overall,
        folder_id=run_info(folder)["id"],
        verdict=verdict,
        headline=(gspec.primary.metric if gspec.primary else None) or cspec.gsb_metric,
        sanity=gspec.sanity,
        sizing=sizing,
    )
    save_plan(the_plan, folder)
    promotion = promotion_requests(  # gate.promote, applied once the run is logged
        gspec.promote,
        result,
        pairs,
        decisions,
        experiment=str(cfg.name),
        headline=(gspec.primary.metric if gspec.primary else None),
        confidence=cspec.confidence,
    )
    (folder / PROMOTION_FILE).unlink(missing_ok=True)  # a resumed folder's earlier one
    if promotion is not None:
        (folder / PROMOTION_FILE).write_text(json.dumps(promotion, indent=1))
    (folder / "stages.json").write_text(json.dumps(stages.as_json(), indent=1))
    mark_complete(folder)
    split = result.split = split.released()  # logging reads the plan and the folder
    release_arrow_memory()
    print(f"\nresults: {folder}\nreport:  {report['html']}")
    code = EXIT_MODEL_FAILED if result.failed else 0
    if result.failed:
        print(
            f"note: {len(result.failed)} model(s) failed ({', '.join(result.failed)}); once fixed, "
            f"run only them with the same command and resume={folder}",
            file=sys.stderr,
        )
    if cfg.tracking.get("enabled", True) and cfg.tracking.get("uri"):
        try:
            from harness.tracking import Tracker

            checkpoint("logging")  # opening the store takes seconds before any run exists
            with stages.stage("logging", f"logging to MLflow ({cfg.tracking.uri})"):
                tracker = Tracker(
                    str(cfg.tracking.uri), str(cfg.name), cfg.tracking.get("artifacts")
                )
                _active["tracker"] = tracker
                ids = replay(tracker, the_plan, folder)
            (folder / "stages.json").write_text(json.dumps(stages.as_json(), indent=1))
            tracker.client.log_artifact(ids["parent"], str(folder / "stages.json"))
        except Exception as err:
            if "tracker" in _active:  # end what was started (best effort: the store may be gone)
                _active["tracker"].abort("FAILED")
            if cfg.get("debug"):
                raise
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            waits = f" (and apply gate.promote={gspec.promote})" if promotion else ""
            print(
                f"error: MLflow logging to {cfg.tracking.uri} failed ({type(err).__name__}: "
                f"{first}); results are kept in {folder}; log them later{waits} with: "
                f"python -m harness.log {folder}",
                file=sys.stderr,
            )
            failed = f"MLflow logging failed; python -m harness.log {folder}"
            row = _job_row(cfg, folder, result, gspec, cspec, overall, None)
            sweep_jobs.append({**row, "error": failed})
            return EXIT_TRACKING_FAILED
        print(f"\n{stages.table()}")
        sweep_jobs.append(_job_row(cfg, folder, result, gspec, cspec, overall, ids["parent"]))
        print(f"MLflow: {cfg.tracking.uri} experiment {cfg.name!r}, parent run {ids['parent']}")
        uri_is_local = str(cfg.tracking.uri).startswith("sqlite:///")
        if uri_is_local:
            print(f"  open with: mlflow ui --backend-store-uri {cfg.tracking.uri}")
        base = "http://127.0.0.1:5000" if uri_is_local else str(cfg.tracking.uri).rstrip("/")
        if base.startswith("http"):
            print(f"  runs: {tracker.runs_link(base)}")
        # gate.promote: move a registry alias on GO, record the decision on the version
        code = max(code, apply_promotion(promotion, str(cfg.tracking.uri), ids["parent"]))
    else:
        print(f"\n{stages.table()}")
        sweep_jobs.append(_job_row(cfg, folder, result, gspec, cspec, overall, None))
    if gspec.enforce:  # a CI job: no decision is never a pass, and NO_GO / INCONCLUSIVE say so
        # whatever else failed; a GO keeps a failed model's 1 or a logging failure's 3
        code = EXIT_NO_DECISION if overall is None else EXIT_CODES[overall] or code
    return code


_worst = {"code": 0}
#: Exit codes from the least to the most serious, for a multirun's worst job: the gate's codes
#: above the failures (as in one run), and NO_GO (10) above INCONCLUSIVE (11) and no decision
#: (12), though its number is lower.
_SEVERITY = (0, EXIT_MODEL_FAILED, EXIT_BAD_INPUT, EXIT_TRACKING_FAILED, 11, 12, 10)


def severity(code: int) -> int:
    """Rank of an exit code for :data:`_SEVERITY` (others, e.g. 130 interrupted, rank above)."""
    return _SEVERITY.index(code) if code in _SEVERITY else len(_SEVERITY) + code


#: The current run's results folder and tracker, for a clean stop on SIGINT/SIGTERM.
_active: dict[str, Any] = {}


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived (a BaseException, so no ``except Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


def _stop(signum: int) -> NoReturn:
    """End the run's open MLflow runs as KILLED, mark an unfinished results folder INCOMPLETE,
    print one line and exit 128 + the signal number (130 SIGINT, 143 SIGTERM)."""
    code = 128 + signum
    for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal ends the process at once
        signal.signal(sig, lambda *_: sys.exit(code))
    name, stage = signal.Signals(signum).name, folders.current["stage"]
    parts = [f"interrupted by {name} during {stage}"]
    tracker = _active.get("tracker")
    if tracker is not None and tracker.open_runs:
        n = len(tracker.open_runs)
        left = tracker.abort("KILLED")
        parts.append(
            f"{n} MLflow run(s) ended as KILLED"
            if not left
            else f"{len(left)} of {n} MLflow run(s) could not be ended (store unreachable)"
        )
    folder = _active.get("folder")
    if folder is not None and is_complete(folder):
        parts.append(f"local results are complete in {folder}")
        parts.append(f"log them with: python -m harness.log {folder}")
    elif folder is not None:
        with suppress(OSError):
            folders.mark_incomplete(folder, stage, f"interrupted by {name}")
        parts.append(f"results folder {folder} is marked INCOMPLETE")
        parts.append(_resume_hint(folder))
    print("error: " + "; ".join(parts), file=sys.stderr, flush=True)
    sys.exit(code)


def _resume_hint(folder: Path) -> str:
    """How to finish an INCOMPLETE run without losing what it computed."""
    done = finished(folder)
    kept = f"{len(done)} finished model(s) kept ({', '.join(done)})" if done else "none finished"
    return f"{kept}; finish it with the same command and resume={folder}"


def _failed(reason: str) -> None:
    """Say in the run's unfinished results folder (if any) why it stopped, and how to resume."""
    folder = _active.get("folder")
    if folder is not None and not is_complete(folder):
        with suppress(OSError):
            folders.mark_incomplete(folder, folders.current["stage"], f"failed: {reason}")
        if finished(folder):
            print(f"note: results folder {folder}: {_resume_hint(folder)}", file=sys.stderr)


def _os_error(err: OSError, runs_dir: str) -> str:
    """One line for an unusable folder or file: the path and what is wrong with it."""
    where = err.filename if err.filename is not None else f"under {runs_dir}"
    if isinstance(err, FileExistsError | NotADirectoryError):
        return f"cannot create a folder at {where}: a file is in the way ({err.strerror})"
    return f"cannot write {where}: {err.strerror or err} (check runs_dir and free disk space)"


@hydra.main(version_base=None, config_path="configs", config_name="config")
def main(cfg: DictConfig) -> None:
    """Hydra entry point; one-line errors and exit code 2 for bad input unless ``debug=true``."""
    handlers = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    rows, failure, code = len(sweep_jobs), "", 0
    try:
        code = run(cfg)
    except Interrupted as stop:
        _stop(stop.signum)
    except (DataError, ValueError, FileNotFoundError, MissingMandatoryValue, ConfigKeyError) as err:
        if cfg.get("debug"):
            raise
        message = str(err).splitlines()[0]
        if isinstance(err, MissingMandatoryValue):
            message = f"'{err.full_key}' must be set, e.g. python -m harness {err.full_key}=..."
        elif isinstance(err, OmegaConfBaseException):  # a value its schema refuses, read late
            message = config_error(err)
        print(f"error: {message}", file=sys.stderr)
        _failed(message)
        code, failure = EXIT_BAD_INPUT, message
    except OSError as err:  # read-only or full disk, a file where a folder should be
        if cfg.get("debug"):
            raise
        failure = _os_error(err, str(cfg.runs_dir))
        print(f"error: {failure}", file=sys.stderr)
        _failed(failure)
        code = EXIT_BAD_INPUT
    except Exception as err:  # a bug: its traceback follows, the folder says what is kept
        failure = malformed_csv(err) or ""  # Spark's strict CSV reading: bad input, one line
        if not failure or cfg.get("debug"):
            _failed(f"{type(err).__name__}: {_first_line(err)}")
            raise
        print(f"error: {failure}", file=sys.stderr)
        _failed(failure)
        code = EXIT_BAD_INPUT
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if failure and len(sweep_jobs) == rows:  # a job that stopped is still a row of the sweep
            sweep_jobs.append(failed_job_row(_job_overrides(), _active.get("folder"), failure))
        if len(sweep_jobs) > rows:
            sweep_jobs[-1]["code"] = code
        _active.clear()  # a signal between multirun jobs concerns no job's folder
        folders.current["stage"] = "between runs"
    _worst["code"] = max(_worst["code"], code, key=severity)
    if code and HydraConfig.get().mode != RunMode.MULTIRUN:
        sys.exit(code)


def entry() -> None:
    """Run :func:`main`; a multirun exits with the worst code of its jobs."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # also while Hydra composes the config
        signal.signal(sig, _interrupt)
    try:
        with one_line_config_errors(EXIT_BAD_INPUT):  # unknown or mistyped key: one line, exit 2
            main()
    except Interrupted as stop:
        _stop(stop.signum)
    sys.exit(_worst["code"])
