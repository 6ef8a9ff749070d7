"""``python -m harness.tune``: tune every selected model on validation, then test the best once.

For each selected model with a ``search_space`` (``int(low, high[, log])``,
``float(low, high[, log])`` or ``choice(a, b, ...)`` per parameter), one sweep of Hydra's Optuna
sweeper (``hydra-optuna-sweeper`` 1.3.0) runs in a subprocess, ``python -m harness.trial -m``,
on a config written next to the study: the composed experiment, the search space as
``hydra.sweeper.params`` and the study's storage, name, direction, trial count and seed. Each
trial (a Hydra job) fits on the split's *train* part and is scored on its *validation* part only
(the test part is never read). The objective is a metric of the suite (``tune.objective``),
maximized or minimized as the metric's ``higher_is_better`` says; the budget is ``tune.trials``
and/or ``tune.timeout`` seconds per model, the same for every model. Every trial is an MLflow
run nested under the model's tuning parent run (experiment ``<name>-tuning``), with its
parameters and validation metrics; the parent holds the validation curve (step = trial number)
and the study's best trial.

Studies live in sqlite under ``tune.storage`` (one file per model, split, data and search space),
so rerunning an interrupted command resumes it: before a sweep starts, the finished trials are
counted against the budget (the sweeper is asked for the rest only) and a trial a killed sweep
left running is marked failed (``interrupted``) and queued again with the same parameters, once.

Then (``tune.refit=true``) the best parameters are written into the model configs, the split is
made again without validation (so training = train + validation) and the normal experiment runs
once: that run is the one compared, gated, reported and logged, with the tuning results under
its ``tune.result`` parameters.

Exit codes: 0; 1 when every trial of some model failed (its line says the last error; the test
run, if any, uses its configured parameters); 2 for bad input; 130 when interrupted or a sweep
stopped before its budget, 143 on SIGTERM (``kill PID``: the sweep subprocess is stopped with
it); rerun the same command to resume.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import logging
import math
import re
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from omegaconf import DictConfig, OmegaConf

import metrics
from harness.models import SEARCH_SPACE_KEY, model_class, without_search_space
from harness.promote import _num
from harness.split import Split
from metrics.checks import require_choice, require_int

__all__ = [
    "VALIDATION_OFF",
    "Dimension",
    "TuneOutcome",
    "TuneSpec",
    "parse_dimension",
    "search_space_of",
    "sweeper_params",
    "tune",
    "tune_one",
    "tuning_record",
    "validation_view",
]

#: Split parameters that turn validation off, per method: the final split's training part is
#: then the tuning split's train + validation (same cut, same test).
VALIDATION_OFF: dict[str, dict[str, Any]] = {
    "global_time": {"valid_cut": None},
    "leave_one_out": {"valid": False},
    "user_time": {"valid_ratio": 0.0},
    "random": {"valid_ratio": 0.0},
}
_VALIDATION_HINT = {
    "global_time": "split.valid_cut=0.7 (a quantile or date before split.cut)",
    "leave_one_out": "split.valid=true",
    "user_time": "split.valid_ratio=0.1",
    "random": "split.valid_ratio=0.1",
}
SAMPLERS = ("tpe", "random")
_GRAMMAR = "int(low, high[, log]), float(low, high[, log]) or choice(a, b, ...)"


# ------------------------------------------------------------------------------ search spaces


@dataclass(frozen=True)
class Dimension:
    """One tuned parameter: an int or float range (optionally log-scaled) or a set of choices."""

    name: str
    kind: str  # "int" | "float" | "choice"
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()

    def suggest(self, trial: Any) -> Any:
        """The trial's value for this parameter."""
        if self.kind == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)  # type: ignore[arg-type]
        if self.kind == "float":
            return trial.suggest_float(self.name, self.low, self.high, log=self.log)
        return trial.suggest_categorical(self.name, list(self.choices))

    def text(self) -> str:
        """The grammar form, e.g. ``int(10, 200, log)``."""
        if self.kind == "choice":
            return f"choice({', '.join(map(str, self.choices))})"
        low, high = (int(v) if self.kind == "int" else v for v in (self.low, self.high))  # type: ignore[arg-type]
        return f"{self.kind}({low}, {high}{', log' if self.log else ''})"


def _scalar(text: str) -> Any:
    """A scalar as Hydra's override grammar reads it (the trials' overrides are read so; else as
    YAML): ``10`` → 10, ``1e-3`` → 0.001, ``true`` → True, ``cosine`` → 'cosine', ``'1'`` → '1'."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not text.strip():
        return ""
    try:
        value = OverridesParser.create().parse_override(f"k={text.strip()}").value()
    except Exception:  # not Hydra's grammar (YAML's quoting, 'it''s'): read as YAML
        value = yaml.safe_load(text)
    return value if isinstance(value, str | int | float | bool) or value is None else text.strip()


def parse_dimension(name: str, text: Any, where: str = "search_space") -> Dimension:
    """Parse one search-space entry: ``int(low, high[, log])``, ``float(low, high[, log])`` or
    ``choice(a, b, ...)`` (choices are scalars as Hydra reads them: numbers, booleans, strings).

    >>> parse_dimension("k", "int(10, 200, log)")
    Dimension(name='k', kind='int', low=10, high=200, log=True, choices=())
    >>> parse_dimension("s", "choice(cosine, jaccard)").choices
    ('cosine', 'jaccard')
    """
    bad = f"{where}.{name}: {text!r} is not a search space; use {_GRAMMAR}"
    match = re.fullmatch(r"\s*(int|float|choice)\s*\((.*)\)\s*", str(text))
    if not isinstance(text, str) or match is None:
        raise ValueError(bad)
    kind, inner = match.group(1), match.group(2)
    args = [a.strip() for a in inner.split(",")] if inner.strip() else []
    if kind == "choice":
        if not args or any(a == "" for a in args):
            raise ValueError(bad)
        choices = tuple(_scalar(a) for a in args)
        if len(set(map(repr, choices))) != len(choices):
            raise ValueError(f"{where}.{name}: {text!r} repeats a choice")
        return Dimension(name, kind, choices=choices)
    log = len(args) == 3 and args[2] == "log"
    if len(args) not in (2, 3) or (len(args) == 3 and not log):
        raise ValueError(bad)
    low, high = _scalar(args[0]), _scalar(args[1])
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high))
    if not numeric or (kind == "int" and not all(isinstance(v, int) for v in (low, high))):
        raise ValueError(f"{where}.{name}: bounds of {text!r} must be {kind}s")
    if not low < high:
        raise ValueError(f"{where}.{name}: {text!r} needs low < high")
    if log and low <= 0:
        raise ValueError(f"{where}.{name}: {text!r} is log-scaled, so low must be > 0")
    return Dimension(name, kind, low=low, high=high, log=log)


def search_space_of(
    model: str, node: Mapping[str, Any], accepted: Mapping[str, Any] | None = None
) -> dict[str, Dimension]:
    """The parsed ``search_space`` of one model config (empty when it has none).

    ``accepted`` (the constructor's parameters) catches misspelled parameter names.
    """
    space = node.get(SEARCH_SPACE_KEY) or {}
    where = f"model.{model}.{SEARCH_SPACE_KEY}"
    if not isinstance(space, Mapping):
        raise ValueError(f"{where} must be a mapping of parameter: range (got {space!r})")
    dims = {str(k): parse_dimension(str(k), v, where) for k, v in space.items()}
    if accepted is not None:
        takes_any = any(getattr(p, "kind", None) == 4 for p in accepted.values())  # **kwargs
        unknown = sorted(set(dims) - set(accepted))
        if unknown and not takes_any:
            raise ValueError(
                f"{where}: {unknown[0]!r} is not a parameter of {node.get('_target_')} "
                f"(parameters: {', '.join(p for p in accepted if p != 'self')})"
            )
    return dims


# --------------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class TuneSpec:
    """What to optimize and with what budget (the ``tune/`` config group)."""

    objective: str = "ndcg@10"
    trials: int | None = 20
    timeout: float | None = None
    sampler: str = "tpe"
    seed: int = 0
    storage: str = "runs/tuning"
    refit: bool = True

    def __post_init__(self) -> None:
        try:
            metrics.parse(self.objective)
        except ValueError as err:  # an unknown metric name: one line naming the key
            raise ValueError(f"tune.objective: {err}") from None
        if self.trials is None and self.timeout is None:
            raise ValueError("tune.trials and tune.timeout are both null: set a budget")
        require_int("tune.trials", self.trials, none_ok=True)
        if self.timeout is not None and not (
            isinstance(self.timeout, int | float) and self.timeout > 0
        ):
            raise ValueError(f"'tune.timeout' must be seconds > 0 or null (got {self.timeout!r})")
        require_choice("tune.sampler", self.sampler, SAMPLERS)

    @property
    def maximize(self) -> bool:
        """True when a larger objective is better (from the metric's definition)."""
        return bool(metrics.parse(self.objective).definition.higher_is_better)


@dataclass
class TuneOutcome:
    """One model's study: the best parameters and value, and every trial."""

    model: str
    study: str
    storage: str
    best_params: dict[str, Any] = field(default_factory=dict)
    best_value: float | None = None
    best_trial: int | None = None  # the Optuna trial number of the best parameters
    best_run: str | None = None  # that trial's MLflow run (immutable: its params and value)
    trials: pd.DataFrame = field(default_factory=pd.DataFrame)
    parent_run: str | None = None
    error: str | None = None
    stopped: str | None = None  # the sweep was cut off before its budget: rerun to resume
    note: str | None = None  # the study holds more trials than the budget: only the first used

    def within_budget(self) -> pd.DataFrame:
        """The trials of this invocation's budget: not those an earlier, larger budget added
        after the first ``tune.trials`` (they did not take part in the choice)."""
        frame = self.trials
        if not len(frame) or "used" not in frame:
            return frame
        return frame[~(frame["counts"].astype(bool) & ~frame["used"].astype(bool))]

    def summary(self) -> dict[str, Any]:
        """Plain values for the final run's ``tune.result.<model>`` config node (trials
        within the budget)."""
        trials = self.within_budget()
        states = trials["state"] if len(trials) else pd.Series(dtype=object)
        if len(trials) and "interrupted" in trials:  # cut short: run again, not failed
            states = states.where(~trials["interrupted"].astype(bool), "INTERRUPTED")
        return {
            "study": self.study,
            "storage": self.storage,
            "best_params": dict(self.best_params),
            "best_value": self.best_value,
            "best_trial": self.best_trial,
            "best_run": self.best_run,
            "trials_complete": int((states == "COMPLETE").sum()),
            "trials_failed": int((states == "FAIL").sum()),
            "trials_interrupted": int((states == "INTERRUPTED").sum()),
            "trials_used": int(self.trials["used"].sum()) if "used" in self.trials else 0,
            "mlflow_run": self.parent_run,
            "error": self.error,
        }


# ---------------------------------------------------------------------------- the validation


def validation_view(split: Split) -> Split:
    """The split as tuning sees it: train, and validation in the place of test.

    Reads only ``split.train`` and ``split.valid``; raises a one-line error when there is no
    validation data, naming the split parameter that makes some.
    """
    if split.valid is None or len(split.valid) == 0:
        hint = _VALIDATION_HINT.get(split.name, "a validation part")
        raise ValueError(
            f"tuning needs validation data but split {split.name!r} has "
            f"{'none' if split.valid is None else 'an empty one'}: set {hint}"
        )
    stats = {k: v for k, v in split.stats.items() if not k.startswith(("test_", "n_test_"))}
    stats |= {
        k.replace("valid", "test", 1): v
        for k, v in split.stats.items()
        if k.startswith(("valid_", "n_valid_"))
    }
    return Split(
        train=split.train,
        test=split.valid,
        valid=None,
        stats=stats,
        name=f"{split.name}:validation",
        params=dict(split.params),
    )


def _study_name(model: str, split_name: str, split_key: str, payload: Mapping[str, Any]) -> str:
    """``<model>-<split>-<hash>``: the hash covers the data and split (``split_key``), the
    objective, sampler and its seed, suite, fixed parameters and search space, so any change
    starts a new study."""
    text = json.dumps({"split": split_key, **payload}, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return re.sub(r"[^\w.-]", "_", f"{model}-{split_name}-{digest}")


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``lock_path`` (released when the process dies, too)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(
                f"study {lock_path.stem!r} is being tuned by another process "
                f"(lock {lock_path}); wait for it or stop it"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise ImportError(
            "tuning needs the optional packages of Hydra's Optuna sweeper: "
            "pip install 'recsys-harness[tune]'"
        ) from None
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna


def _resume(optuna: Any, study: Any, storage: Any) -> tuple[int, list[int]]:
    """Prepare a stored study for more trials; return how many count against the budget and
    the numbers of the trials found interrupted now.

    Trials left ``RUNNING`` (a killed sweep: the lock says no other process is tuning) are
    marked failed and ``interrupted``; those are queued again with the same parameters, once
    (the sweeper asks the queued trial first). Complete and failed trials count.
    """
    states = optuna.trial.TrialState
    requeued = set(study.user_attrs.get("requeued", []))
    again = []
    counted = 0
    stale = []
    for t in study.get_trials(deepcopy=False):
        interrupted = t.state == states.RUNNING or (
            t.state == states.FAIL and t.user_attrs.get("interrupted")
        )
        if t.state == states.RUNNING:
            storage.set_trial_user_attr(t._trial_id, "interrupted", True)
            storage.set_trial_state(t._trial_id, states.FAIL)
            stale.append(t.number)
        if interrupted and t.number not in requeued and t.params:
            again.append(t)
        elif not interrupted and t.state in (states.COMPLETE, states.FAIL, states.PRUNED):
            counted += 1
    for t in again:
        with warnings.catch_warnings():  # "experimental" in optuna 2.10
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.enqueue_trial(dict(t.params))  # optuna 2.10: no user_attrs here
        waiting = study.get_trials(deepcopy=False, states=(states.WAITING,))[-1]
        storage.set_trial_user_attr(waiting._trial_id, "retry_of", t.number)
        requeued.add(t.number)
    if again:
        study.set_user_attr("requeued", sorted(requeued))
    return counted, stale


def _trials_frame(study: Any, name: str, budget: int | None) -> pd.DataFrame:
    """One row per finished or running trial: number, state, value, seconds, params
    (``param.<name>``, the model's parameter names), error, ``counts`` (complete or failed, not
    interrupted) and ``used``: among the first ``budget`` trials that count (all without a
    budget), so a study grown by an earlier, larger budget gives every model the same budget."""
    prefix = f"model.{name}."
    rows = []
    counted = 0
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if t.state.name == "WAITING":  # queued again, not run yet
            continue
        seconds = (
            (t.datetime_complete - t.datetime_start).total_seconds()
            if t.datetime_complete and t.datetime_start
            else None
        )
        rows.append(
            {
                "number": t.number,
                "state": t.state.name,
                "value": t.value,
                "seconds": seconds,
                **{f"param.{k.removeprefix(prefix)}": v for k, v in t.params.items()},
                "error": t.user_attrs.get("error"),
                "interrupted": bool(t.user_attrs.get("interrupted", False)),
            }
        )
        counts = t.state.name in ("COMPLETE", "FAIL", "PRUNED") and not rows[-1]["interrupted"]
        rows[-1] |= {"counts": counts, "used": counts and (budget is None or counted < budget)}
        counted += counts
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- the sweeper


def _override_value(value: Any) -> str:
    """A choice as Hydra's override grammar reads it back as the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if re.fullmatch(r"[A-Za-z_][\w-]*", text) and text.lower() not in (
        "true",
        "false",
        "null",
        "nan",
        "inf",
    ):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sweeper_params(name: str, space: Mapping[str, Dimension]) -> dict[str, str]:
    """``hydra.sweeper.params`` of model ``name``'s search space: ``model.<name>.<param>``.

    >>> sweeper_params("als", {"factors": parse_dimension("factors", "int(8, 256, log)")})
    {'model.als.factors': 'tag(log, int(interval(8, 256)))'}
    >>> sweeper_params("als", {"reg": parse_dimension("reg", "float(1, 10)")})
    {'model.als.reg': 'interval(1.0, 10.0)'}
    """
    out = {}
    for key, dim in space.items():
        if dim.kind == "choice":
            text = f"choice({', '.join(_override_value(c) for c in dim.choices)})"
        elif dim.kind == "int":
            text = f"int(interval({int(dim.low)}, {int(dim.high)}))"  # type: ignore[arg-type]
        else:  # float bounds always: whole-number bounds would make an int range
            text = f"interval({float(dim.low)!r}, {float(dim.high)!r})"  # type: ignore[arg-type]
        out[f"model.{name}.{key}"] = f"tag(log, {text})" if dim.log else text
    return out


@dataclass(frozen=True)
class _Sweep:
    """One model's study as the sweep subprocess needs it."""

    name: str
    study: str
    db: Path
    space: Mapping[str, Dimension]
    parent_run: str | None


def sweep_config(
    cfg: DictConfig, sweep: _Sweep, spec: TuneSpec, n_trials: int, seed: int, tracking: Any
) -> dict[str, Any]:
    """The primary config of ``python -m harness.trial -m``: the experiment, the ``trial`` node
    (model, study, objective, MLflow parent) and the Optuna sweeper in its ``hydra`` node."""
    node = _plain_dict(cfg, "config")
    node.pop("hydra", None)
    model = node["model"][sweep.name]
    for key in sweep.space:  # a key must exist for the sweeper's override (each trial sets it)
        model.setdefault(key, None)
    node["trial"] = {
        "model": sweep.name,
        "study": sweep.study,
        "objective": spec.objective,
        "tuned": sorted(sweep.space),
        "parent_run": sweep.parent_run,
        "tracking_uri": None if tracking is None else tracking.uri,
        "experiment": f"{cfg.name}-tuning",
        "artifacts": None if tracking is None else tracking.artifacts,
    }
    node["defaults"] = [
        {"override hydra/sweeper": "optuna"},
        {"override hydra/sweeper/sampler": spec.sampler},
        {"override hydra/job_logging": "disabled"},
        {"override hydra/hydra_logging": "disabled"},  # no "[HYDRA] Launching" lines per trial
        "_self_",
    ]
    node["hydra"] = {
        "sweeper": {
            "storage": f"sqlite:///{sweep.db.resolve()}",
            "study_name": sweep.study,
            "direction": "maximize" if spec.maximize else "minimize",
            "n_trials": n_trials,
            "n_jobs": 1,  # one trial at a time: a killed sweep leaves one trial to run again
            "max_failure_rate": 1.0,  # a failed trial is recorded; the others go on
            "custom_search_space": "harness.trial.remember_trial",
            "sampler": {"seed": seed},
            "params": sweeper_params(sweep.name, sweep.space),
        },
        # Hydra's sweep folder: one per invocation (a resumed sweep numbers its jobs from 0 again)
        "sweep": {"dir": str(sweep.db.with_suffix("").resolve()) + "-hydra/${now:%Y%m%d-%H%M%S}"},
        "job": {"chdir": False},
    }
    return node


@dataclass(frozen=True)
class _Tracking:
    uri: str
    artifacts: str | None


def _run_sweep(config: dict[str, Any], sweep: _Sweep, timeout: float | None) -> tuple[int, str]:
    """Run the sweep subprocess; return its exit code (-1: stopped by the time budget) and the
    last line of its stderr (kept in ``<study>-hydra.err`` next to the study)."""
    folder = sweep.db.parent
    name = f"{sweep.study}-sweep"
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    err_path = folder / f"{sweep.study}-hydra.err"
    command = [
        sys.executable,
        "-m",
        "harness.trial",
        "--config-dir",
        str(folder.resolve()),
        "--config-name",
        name,
        "-m",
    ]
    with err_path.open("w") as err:
        try:
            code = subprocess.run(command, stderr=err, timeout=timeout, check=False).returncode
        except subprocess.TimeoutExpired:
            code = -1
    lines = [ln for ln in err_path.read_text(errors="replace").splitlines() if ln.strip()]
    return code, (lines[-1].strip() if lines else "")


def _parent_run(
    tracker: Any,
    spec: TuneSpec,
    study: Any,
    name: str,
    space: Mapping[str, Dimension],
    info: Mapping[str, Any],
) -> str | None:
    """The model's tuning parent run: the study's own (resumed) or a new one."""
    if tracker is None:
        return None
    known = study.user_attrs.get("mlflow_parent_run")
    if known:
        try:
            tracker.client.update_run(known, status="RUNNING")
            tracker.open_runs.append(known)
            return str(known)
        except Exception:  # deleted, or another tracking store: start a new parent
            pass
    run_id = tracker.start(
        f"tune {name}",
        tags={
            "harness.kind": "tuning",
            "tune.model": name,
            "tune.study": study.study_name,
            "tune.objective": spec.objective,
            "tune.direction": "maximize" if spec.maximize else "minimize",
        },
    )
    tracker.log(
        run_id,
        params={
            "model": name,
            "objective": spec.objective,
            "sampler": spec.sampler,
            "split": info["split"],
            "dataset": info["dataset"],
            "sweeper": "hydra-optuna-sweeper",
            **{f"space.{k}": d.text() for k, d in space.items()},
        },
        metrics={k: v for k, v in info.items() if k.startswith("n_")},
    )
    study.set_user_attr("mlflow_parent_run", run_id)
    return run_id


def _end_killed_trial_runs(tracker: Any, sweep: _Sweep, study: Any, numbers: list[int]) -> None:
    """Trial runs a killed sweep left ``RUNNING`` in MLflow are ended as ``KILLED``; a trial
    killed before its run was started gets one, ``KILLED``, with its parameters, so every
    trial the study holds has a run."""
    if tracker is None or not numbers:
        return
    from harness.trial import trial_tags

    client = tracker.client
    wanted = {str(n) for n in numbers}
    found = set()
    query = f"tags.`tune.study` = '{sweep.study}'"
    for run in client.search_runs([tracker.experiment_id], query, max_results=50_000):
        number = run.data.tags.get("tune.trial")
        if number in wanted:
            found.add(number)
            if run.info.status == "RUNNING":
                client.set_terminated(run.info.run_id, "KILLED")
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    prefix = f"model.{sweep.name}."
    for n in numbers:
        if str(n) in found or n not in trials:
            continue
        run_id = tracker.start(
            f"{sweep.name} trial {n}", trial_tags(sweep.name, sweep.study, n), sweep.parent_run
        )
        params = {k.removeprefix(prefix): v for k, v in trials[n].params.items()}
        tracker.log(run_id, params=params, tags={"error": "interrupted before it started"})
        tracker.finish(run_id, "KILLED")


def _best(trials: Sequence[Any], numbers: set[int], maximize: bool) -> Any:
    """The best complete trial among ``numbers`` (as Optuna's ``best_trial``: the first of equal
    values), or None."""
    complete = sorted(
        (t for t in trials if t.state.name == "COMPLETE" and t.number in numbers),
        key=lambda t: t.number,
    )
    if not complete:
        return None
    return (max if maximize else min)(complete, key=lambda t: t.value)


def _close_parent(
    tracker: Any, spec: TuneSpec, parent: str, outcome: TuneOutcome, best: Any
) -> None:
    """The study's record on its parent run, then finish it: the parent is the whole study,
    which later invocations resume and may grow, so ``best``, its tags and the best value
    (logged at step = trials counted, a history of the study's growth) are over every trial
    of the study, and ``best.run`` is that trial's own run. Which trial one invocation's budget
    chose is in its final run's tuning record; ``budget.*``: the latest invocation's."""
    frame = outcome.trials
    counted = frame[frame["counts"].astype(bool)] if len(frame) else frame
    prefix = f"model.{outcome.model}."
    tags = {
        "budget.trials": str(spec.trials),  # tags, not params: they change with the invocation
        "budget.timeout": str(spec.timeout),
    }
    if best is not None:
        tags |= {f"best.{k.removeprefix(prefix)}": v for k, v in best.params.items()}
        tags["best.trial"] = best.number
        if "mlflow_run" in best.user_attrs:
            tags["best.run"] = best.user_attrs["mlflow_run"]
    tracker.log(
        parent,
        metrics={
            "trials_complete": int((counted["state"] == "COMPLETE").sum()) if len(frame) else 0,
            "trials_failed": int((counted["state"] != "COMPLETE").sum()) if len(frame) else 0,
        },
        tags=tags | ({"error": outcome.error} if outcome.error else {}),
    )
    if best is not None:
        tracker.log(parent, metrics={f"best.valid.{spec.objective}": best.value}, step=len(counted))
    status = "KILLED" if outcome.stopped else "FINISHED" if outcome.error is None else "FAILED"
    tracker.finish(parent, status)


def _storage(optuna: Any, db: Path) -> Any:
    """The study's sqlite storage; a file whose schema this Optuna cannot read (written by
    another Optuna version) is a one-line error naming it."""
    try:
        return optuna.storages.RDBStorage(f"sqlite:///{db}")
    except RuntimeError as err:
        if "table schema" not in str(err):
            raise
        raise ValueError(
            f"{db}: this study was written by another Optuna version than the installed "
            f"{optuna.__version__} (the one hydra-optuna-sweeper 1.3 supports); move the file "
            "away to start a new study"
        ) from None


def tune_one(
    cfg: DictConfig,
    sweep: _Sweep,
    spec: TuneSpec,
    tracker: Any,
    info: Mapping[str, Any],
    tracking: _Tracking | None = None,
) -> TuneOutcome:
    """Run (or resume) one model's study to its budget with Hydra's Optuna sweeper."""
    optuna = _optuna()
    folder = sweep.db.parent
    folder.mkdir(parents=True, exist_ok=True)
    outcome = TuneOutcome(sweep.name, sweep.study, str(sweep.db))
    with _exclusive(folder / f"{sweep.study}.lock"):
        storage = _storage(optuna, sweep.db)
        study = optuna.create_study(
            study_name=sweep.study,
            storage=storage,
            direction="maximize" if spec.maximize else "minimize",
            load_if_exists=True,
        )
        done, stale = _resume(optuna, study, storage)
        parent = _parent_run(tracker, spec, study, sweep.name, sweep.space, info)
        outcome.parent_run = parent
        sweep = replace(sweep, parent_run=parent)
        _end_killed_trial_runs(tracker, sweep, study, stale)
        remaining = 10**9 if spec.trials is None else max(spec.trials - done, 0)
        stopped = ""
        if remaining:
            # a resumed study draws new parameters: the sampler's seed moves on with the trials
            seed = spec.seed + len(study.trials)
            config = sweep_config(cfg, sweep, spec, remaining, seed, tracking)
            code, last = _run_sweep(config, sweep, spec.timeout)
            study = optuna.load_study(study_name=sweep.study, storage=storage)
            if code != 0:  # the time budget, or the sweep died: its running trial runs again
                counted, cut = _resume(optuna, study, storage)
                _end_killed_trial_runs(tracker, sweep, study, cut)
                if code != -1 and (spec.trials is None or counted < spec.trials):
                    stopped = (
                        f"the sweep of {sweep.name} stopped (exit code {code}) after {counted} "
                        f"of {spec.trials} trials{f': {last}' if last else ''}"
                    )
                    outcome.stopped = stopped
        outcome.trials = frame = _trials_frame(study, sweep.name, spec.trials)
        used = set(frame.loc[frame["used"], "number"]) if len(frame) else set()
        finished = int(frame["counts"].sum()) if len(frame) else 0
        if finished > len(used):
            outcome.note = (
                f"the study of {sweep.name} holds {finished} trials from earlier runs; the best of "
                f"its first {len(used)} (tune.trials={spec.trials}) is used, so every model has "
                "the same budget"
            )
        trials = study.get_trials(deepcopy=False)
        best = _best(trials, used, spec.maximize)
        if best is not None:
            prefix = f"model.{sweep.name}."
            outcome.best_params = {k.removeprefix(prefix): v for k, v in best.params.items()}
            outcome.best_value = float(best.value)
            outcome.best_trial = best.number
            outcome.best_run = best.user_attrs.get("mlflow_run")
        else:
            errors = [e for e in outcome.trials.get("error", pd.Series()).dropna()]
            outcome.error = f"no trial of {sweep.name} completed" + (
                f" (last error: {errors[-1]})" if errors else f" ({stopped})" if stopped else ""
            )
        if tracker is not None and parent is not None:
            every = set(frame.loc[frame["counts"], "number"]) if len(frame) else set()
            _close_parent(tracker, spec, parent, outcome, _best(trials, every, spec.maximize))
    return outcome


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def format_outcome(outcome: TuneOutcome, spec: TuneSpec) -> str:
    """One model's tuning result, for the terminal."""
    s = outcome.summary()
    head = (
        f"tuned {outcome.model}: {_count(s['trials_complete'], 'trial')} complete, "
        f"{s['trials_failed']} failed"
        + (f", {s['trials_interrupted']} interrupted" if s["trials_interrupted"] else "")
        + f" (study {outcome.study}, {outcome.storage})"
    )
    if outcome.error:
        return f"{head}\n  {outcome.error}"
    params = ", ".join(f"{k}={_fmt(v)}" for k, v in outcome.best_params.items())
    note = f"\n  note: {outcome.note}" if outcome.note else ""
    return (
        f"{head}\n  best validation {spec.objective} {outcome.best_value:.4f} with {params}{note}"
    )


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# ------------------------------------------------------------------------------- the command


def spec_of(cfg: DictConfig) -> TuneSpec:
    """The typed ``tune/`` config."""
    node = _plain_dict(cfg.tune, "tune") if cfg.get("tune") is not None else {}
    node.pop("result", None)
    known = set(TuneSpec.__dataclass_fields__)
    unknown = sorted(set(node) - known)
    if unknown:
        raise ValueError(f"unknown key 'tune.{unknown[0]}'; allowed: {sorted(known)}")
    return TuneSpec(**node)


def _plain_dict(node: Any, where: str) -> dict[str, Any]:
    """A config node as a plain dict (interpolations resolved, ``???`` an error)."""
    plain = OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
    if not isinstance(plain, dict):
        raise ValueError(f"'{where}' must be a mapping (got {plain!r})")
    return {str(k): v for k, v in plain.items()}


def _model_nodes(cfg: DictConfig) -> dict[str, dict[str, Any]]:
    """Every selected model's config as plain values (interpolations resolved)."""
    out = {}
    for name, node in (cfg.get("model") or {}).items():
        plain = _plain_dict(node, f"model.{name}")
        if not plain.get("_target_"):
            raise ValueError(f"model {name!r} has no _target_ (the class to build)")
        out[str(name)] = plain
    if not out:
        raise ValueError("no model selected: use e.g. model=[popularity,item_knn]")
    return out


def tune(cfg: DictConfig) -> int:
    """Tune every selected model with a search space (one sweep of Hydra's Optuna sweeper each,
    the same budget for every model), then (``tune.refit``) run the experiment once with the
    best parameters on train + validation vs test; return the exit code."""
    from harness.cli import suite_of
    from harness.datasets import load_dataset
    from harness.progress import NOISY_LOGGERS, quiet
    from harness.split import check_split_has_time, load_or_make_split, split_cache_key

    quiet(bool(cfg.get("debug")))  # MLflow's and alembic's set-up lines (as python -m harness)
    if not cfg.get("debug"):
        for name in (*NOISY_LOGGERS, "alembic.runtime.plugins"):
            logging.getLogger(name).setLevel(logging.WARNING)
    spec = spec_of(cfg)
    suite = suite_of(cfg)
    cutoff = metrics.parse(spec.objective).k
    if cutoff is not None and cutoff > suite.k:  # trials score lists of metrics.k, as the test
        raise ValueError(
            f"tune.objective {spec.objective} needs lists of {cutoff} items but 'metrics.k' is "
            f"{suite.k} (the length of every list, in trials as in the test run); raise "
            "metrics.k or lower the cutoff"
        )
    if spec.refit:  # what would stop the test run (e.g. a baseline not selected): before tuning
        from harness.cli import checked_gate, compare_spec_of, gate_spec_of

        checked_gate(cfg, compare_spec_of(cfg), gate_spec_of(cfg), suite)
    nodes = _model_nodes(cfg)
    spaces = {}
    for name, node in nodes.items():
        space = search_space_of(name, node, _parameters(model_class(name, node["_target_"])))
        if space:
            spaces[name] = space
    if not spaces:
        raise ValueError(
            "no selected model has a search_space to tune (see README, 'Tuning'); "
            "e.g. model=[popularity,item_knn]"
        )
    _optuna()
    runs_dir = Path(cfg.runs_dir)
    split_params = _plain_dict(cfg.split, "split")
    method = split_params.pop("method")
    check_split_has_time(method, _plain_dict(cfg.dataset, "dataset"))
    dataset = load_dataset(_plain_dict(cfg.dataset, "dataset"))
    # made (and cached under runs_dir/splits) here, so a split without validation is refused
    # before any sweep starts, and every trial reads the cached split
    split = load_or_make_split(
        dataset.frame, method, split_params, runs_dir / "splits", digest=dataset.sha256
    )
    vsplit = validation_view(split)
    for name in [n for n in nodes if n not in spaces]:  # after every check that could stop here
        print(f"note: {name} has no search_space: used with its configured parameters")
    key = split_cache_key(dataset.frame, method, split_params, digest=dataset.sha256)
    payload = {
        "objective": spec.objective,
        "sampler": spec.sampler,
        "suite": [suite.k, suite.relevance, suite.relevance_threshold, dict(suite.options)],
        # another tune.seed draws other trials: its own study (seed 0 adds no key, so the studies
        # tuned before the seed counted keep their names)
        **({"seed": spec.seed} if spec.seed else {}),
    }
    names = {
        n: _study_name(
            n,
            method,
            key,
            {
                **payload,
                "model": dict(without_search_space(nodes[n])),
                "space": {k: d.text() for k, d in spaces[n].items()},
            },
        )
        for n in spaces
    }
    tracker, tracking = None, None
    if cfg.tracking.get("enabled", True) and cfg.tracking.get("uri"):
        from harness.tracking import Tracker

        artifacts = cfg.tracking.get("artifacts")
        tracker = Tracker(str(cfg.tracking.uri), f"{cfg.name}-tuning", artifacts)
        tracking = _Tracking(str(cfg.tracking.uri), None if artifacts is None else str(artifacts))
        _active["tracker"] = tracker
    cand = (cfg.get("candidates") or {}).get("kind", "full")
    if cand != "full":
        print(f"note: tuning ranks the full catalog; the final test run uses candidates={cand}")
    info = {
        "split": vsplit.name,
        "dataset": f"{dataset.name}:validation",
        "n_train_events": vsplit.stats.get("n_train_events", 0),
        "n_valid_events": vsplit.stats.get("n_test_events", 0),
    }
    folder = Path(spec.storage)
    outcomes = {}
    for name, space in spaces.items():
        sweep = _Sweep(name, names[name], folder / f"{names[name]}.db", space, None)
        outcomes[name] = tune_one(cfg, sweep, spec, tracker, info, tracking)
        print(format_outcome(outcomes[name], spec), flush=True)
    _active.clear()
    stopped = [o.stopped for o in outcomes.values() if o.stopped]
    if stopped:
        for line in stopped:
            print(f"error: {line}", file=sys.stderr)
        print(
            "error: tuning is incomplete (no test run); rerun the same command to resume",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    failed = [o.model for o in outcomes.values() if o.error]
    if failed:
        its = "its" if len(failed) == 1 else "their"
        then = f"the test run uses {its} configured parameters" if spec.refit else "not refitted"
        print(f"WARNING: tuning failed for {', '.join(failed)}: {then}", file=sys.stderr)
    if not spec.refit:
        return EXIT_TUNING_FAILED if failed else 0
    final = final_config(cfg, outcomes, method)
    print("\nrefit with the best parameters on train + validation, evaluated once on test:")
    from harness.cli import run

    code = run(final, tuning=tuning_record(outcomes, spec, split.name))
    return code or (EXIT_TUNING_FAILED if failed else 0)


def final_config(cfg: DictConfig, outcomes: Mapping[str, TuneOutcome], method: str) -> DictConfig:
    """The experiment config of the test run: tuned parameters in the model configs, the split
    without validation, and the tuning results under ``tune.result``."""
    final = copy.deepcopy(cfg)
    OmegaConf.set_struct(final, False)
    for name, outcome in outcomes.items():
        for key, value in outcome.best_params.items():
            final.model[name][key] = value
    for key, value in VALIDATION_OFF.get(method, {}).items():
        final.split[key] = value
    final.tune = OmegaConf.merge(
        final.get("tune") or {}, {"result": {n: o.summary() for n, o in outcomes.items()}}
    )
    return final


def tuning_record(
    outcomes: Mapping[str, TuneOutcome], spec: TuneSpec, split_name: str
) -> dict[str, Any]:
    """What the final run's report shows of the tuning (written as its ``tuning.json``): per
    model every trial (number, state, validation objective, parameters), the counts, the best
    value and the chosen parameters."""
    models = {}
    for name, outcome in outcomes.items():
        frame = outcome.within_budget()
        trials = []
        for row in frame.to_dict("records") if len(frame) else []:
            params = {
                k.removeprefix("param."): v
                for k, v in row.items()
                if k.startswith("param.") and not (isinstance(v, float) and math.isnan(v))
            }
            trials.append(
                {
                    "number": int(row["number"]),
                    "state": str(row["state"]),
                    "value": _num(row.get("value")),
                    "params": params,
                }
            )
        summary = outcome.summary()
        models[name] = {
            "study": outcome.study,
            "storage": outcome.storage,
            "trials": trials,
            "trials_complete": summary["trials_complete"],
            "trials_failed": summary["trials_failed"],
            "trials_interrupted": summary["trials_interrupted"],
            "note": outcome.note,
            "best_value": _num(outcome.best_value),
            "best_params": dict(outcome.best_params),
            "best_trial": outcome.best_trial,
            "best_run": outcome.best_run,
            "error": outcome.error,
            "mlflow_run": outcome.parent_run,
        }
    return {
        "objective": spec.objective,
        "direction": "maximize" if spec.maximize else "minimize",
        "sampler": spec.sampler,
        "budget": {"trials": spec.trials, "timeout": spec.timeout},
        "validation": f"{split_name}: fitted on train, scored on the validation part",
        "models": models,
    }


def _parameters(cls: type) -> Mapping[str, Any]:
    import inspect

    return inspect.signature(cls).parameters


def _default_group(argv: list[str]) -> list[str]:
    """Command-line overrides with the ``tune`` group selected when none is given."""
    if any(re.match(r"^[+~]*tune(@[\w.]+)?=", a) for a in argv):
        return argv
    return [*argv, "tune=default"]  # after any --config-dir DIR (argparse: overrides last)


#: The tuning tracker, so an interrupt can end its open runs as KILLED.
_active: dict[str, Any] = {}
EXIT_TUNING_FAILED, EXIT_INTERRUPTED, EXIT_TERMINATED = 1, 130, 143


class _Terminated(KeyboardInterrupt):
    """SIGTERM (``kill PID``), stopped as Ctrl-C is: the sweep subprocess is ended with it."""


def _terminate(signum: int, frame: Any) -> None:
    raise _Terminated


def usage() -> str:
    """``--help``: what the command does, the ``tune/`` keys with their defaults (the config
    file itself, whose comments document them), and where every other option is listed."""
    from harness.progress import help_text

    keys = (Path(__file__).parent / "configs" / "tune" / "default.yaml").read_text()
    keys = "\n".join(
        line
        for line in keys.splitlines()
        if not line.startswith(("#", "defaults:", "  - "))  # the header is the docstring's
    )
    return (
        "usage: python -m harness.tune [GROUP=OPTION ...] [KEY=VALUE ...]\n\n"
        f"{help_text(__doc__)}\n== tune/ keys (tune.KEY=VALUE), with their defaults ==\n{keys}\n\n"
        "Every other option (dataset, split, model, metrics, compare, gate, tracking) is that of\n"
        "python -m harness: python -m harness --help lists them; docs/config-reference.md has all."
    )


def main() -> None:
    """Hydra entry point of ``python -m harness.tune``; one-line errors, exit code 2."""
    import hydra
    from omegaconf.errors import MissingMandatoryValue

    from harness.cli import EXIT_BAD_INPUT
    from harness.errors import DataError

    if any(a in ("--help", "-h") for a in sys.argv[1:]):
        print(usage())
        return
    sys.argv[1:] = _default_group(sys.argv[1:])
    holder = {"code": 0}

    @hydra.main(version_base=None, config_path="configs", config_name="config")
    def _main(cfg: DictConfig) -> None:
        try:
            holder["code"] = tune(cfg)
        except (
            DataError,
            ValueError,
            ImportError,
            FileNotFoundError,
            MissingMandatoryValue,
        ) as err:
            if cfg.get("debug"):
                raise
            message = str(err).splitlines()[0]
            if isinstance(err, MissingMandatoryValue):
                message = f"'{err.full_key}' must be set, e.g. {err.full_key}=..."
            print(f"error: {message}", file=sys.stderr)
            holder["code"] = EXIT_BAD_INPUT
        except KeyboardInterrupt as stop:  # the sweep subprocess was ended with it
            tracker = _active.pop("tracker", None)
            if tracker is not None:
                tracker.abort("KILLED")
            by = " by SIGTERM" if isinstance(stop, _Terminated) else ""
            print(
                f"error: interrupted{by}; finished trials are stored: rerun the same command to "
                "resume",
                file=sys.stderr,
            )
            holder["code"] = EXIT_TERMINATED if by else EXIT_INTERRUPTED

    from harness.schema import one_line_config_errors, register

    register()  # the typed config schemas the option files extend
    signal.signal(signal.SIGTERM, _terminate)  # else the sweep subprocess outlives ``kill PID``
    with one_line_config_errors(EXIT_BAD_INPUT):  # an unknown or mistyped key: one line, exit 2
        _main()
    sys.exit(holder["code"])


if __name__ == "__main__":
    from harness.shutdown import run_and_leave

    run_and_leave(main)
