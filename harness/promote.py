"""Act on a gate decision in the MLflow Model Registry: move an alias on GO, refuse otherwise.

Opt-in with ``gate.promote=ALIAS`` (e.g. ``champion``). For every gated candidate that is a
registered model version (``model=mlflow`` with ``model.mlflow.uri=models:/NAME/VERSION`` or
``@ALIAS``; its resolved version is in the run's ``info.name`` / ``info.version``):

- GO: the alias ``ALIAS`` of ``NAME`` is moved to the candidate's version;
- anything else: the alias is left where it is and the refusal is printed with the reason (the
  decision and the rules that did not pass). Two GO candidates of the same registered model are
  both refused (which one should win is a human's call).

Either way the evaluation is written onto the model version, so the registry is the audit trail:
one tag ``harness.eval.<parent run id>`` per evaluation (JSON: date, decision, rule outcomes,
baseline, the numbers of every compared metric on all users, the alias action) — what
``python -m harness.history NAME`` reads — plus ``harness.latest.*`` tags and a readable
description of the latest evaluation. An evaluation's date is its run's start time (the results
folder's stamp, in UTC), also when the promotion is applied later (``python -m harness.log``): a
delayed older evaluation joins the history without replacing a newer one's latest tags and
description. The parent run gets a ``registry.promotion`` tag.
The registry is the tracking store's (the default of ``model=mlflow``).
"""

from __future__ import annotations

import functools
import json
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

__all__ = [
    "DATE_FORMAT",
    "DONE_TAG",
    "EVAL_TAG",
    "LATEST_TAG",
    "PROMOTION_FILE",
    "Promotion",
    "apply_promotion",
    "check_alias",
    "check_promotion",
    "evaluation_record",
    "format_promotion",
    "mean_ci",
    "plan_promotions",
    "promotion_requests",
    "registry_notes",
    "stamp_date",
]

#: Tag key prefix of one evaluation on a model version (suffix: the parent run id).
EVAL_TAG = "harness.eval."
#: Tag key prefix of the latest evaluation's summary tags.
LATEST_TAG = "harness.latest."
#: In the results folder: what ``gate.promote`` is to do once the run is logged.
PROMOTION_FILE = "promotion.json"
#: Tag on the parent run, written last: the promotion was applied.
DONE_TAG = "registry.promotion"
EXIT_REGISTRY_FAILED = 3
_MAX_REASON = 300  # characters of a rule's reason kept in the registry record


@dataclass(frozen=True)
class Promotion:
    """What to do with one registered candidate: ``promote`` or ``refuse``, and why."""

    candidate: str
    name: str  # registered model name
    version: str
    decision: str
    action: str  # promote | refuse
    reason: str


def check_alias(alias: object, key: str = "gate.promote") -> str | None:
    """``gate.promote`` as a valid registry alias (None: off); a one-line ValueError otherwise,
    before any model runs (MLflow's rule: letters, digits, ``_`` and ``-``; ``latest`` and
    ``vN`` are reserved)."""
    if alias is None:
        return None
    text = str(alias)
    if (
        not isinstance(alias, str)
        or not re.fullmatch(r"[\w\-]{1,255}", text)
        or text.lower() == "latest"
        or re.fullmatch(r"[vV]\d+", text)
    ):
        raise ValueError(
            f"'{key}' must be a registry alias such as champion (letters, digits, _ and -; "
            f"not 'latest' or vN) (got {alias!r})"
        )
    return text


def check_promotion(
    alias: str | None,
    tracking_uri: str | None,
    candidates: Mapping[str, Any],
    baseline: tuple[str, Any] | None = None,
) -> None:
    """Before any model runs, a ``gate.promote`` that could not act is a one-line ValueError:
    no tracking store (its registry holds the alias), no gated candidate from the registry, a
    candidate read from another registry, an alias not set on the candidate's model (a typo
    would otherwise create a new alias on GO), a baseline that is not the version the alias
    points to (a GO against anything else says nothing about replacing it), or a candidate
    that is that version. ``candidates``: gated candidate → model; ``baseline``: its name and
    model. A registry that cannot be read now is left to the promotion step (exit 3)."""
    if not alias:
        return
    if not tracking_uri:
        raise ValueError(
            f"gate.promote={alias} moves an alias in the tracking store's registry, but tracking "
            "is off (tracking=none): use tracking=local or tracking=server, or drop gate.promote"
        )
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from harness.models.mlflow_model import MLflowModel, aliases_text

    registered = {n: m for n, m in candidates.items() if isinstance(m, MLflowModel)}
    if not registered:
        raise ValueError(
            f"gate.promote={alias}: no gated candidate is a registered model version (model=mlflow "
            "with model.mlflow.uri=models:/NAME/VERSION or models:/NAME@ALIAS)"
        )
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    for name, model in registered.items():
        registry = model.registry_uri or model.tracking_uri
        if registry is not None and str(registry) != tracking_uri:
            raise ValueError(
                f"gate.promote={alias}: model {name} is read from the registry at {registry}, but "
                f"the promotion moves aliases in the tracking store's registry ({tracking_uri})"
            )
        reg = model.registered_name
        try:
            client.get_model_version_by_alias(reg, alias)
        except MlflowException as err:
            if err.error_code != "INVALID_PARAMETER_VALUE":
                continue  # no such model: the model's own load says so; unreachable: see above
            have = aliases_text(client.get_registered_model(reg).aliases)
            raise ValueError(
                f"gate.promote={alias}: models:/{reg}@{alias} is not set (aliases of {reg}: "
                f"{have}); the promotion moves an alias that exists: set it once in MLflow "
                f"(MlflowClient().set_registered_model_alias('{reg}', '{alias}', VERSION)) or fix "
                "the name"
            ) from None
        except Exception:  # the registry cannot be read now (a server down): decided later
            continue
        _check_against_alias(client, alias, name, model, baseline)


def _check_against_alias(
    client: Any, alias: str, name: str, model: Any, baseline: tuple[str, Any] | None
) -> None:
    """The gate of a promotion compares the candidate with the version the alias points to
    now, and the candidate is another version (see :func:`check_promotion`)."""
    from harness.models.mlflow_model import MLflowModel

    reg = model.registered_name
    if baseline is None:  # the baseline could not be built: there is no gate decision
        return
    base_name, base = baseline
    same_model = isinstance(base, MLflowModel) and base.registered_name == reg
    try:
        current = alias_version(client, reg, alias)
        base_version = str(base.model_version(client).version) if same_model else None
        version = str(model.model_version(client).version)
    except Exception:  # a ref the registry lacks (that model's fit says so), or the registry
        return  # cannot be read now (the promotion step reports it)
    if current is None:
        return
    target = f"models:/{reg}@{alias}"
    if not same_model:
        raise ValueError(
            f"gate.promote={alias}: the baseline {base_name} is not a version of {reg}, but "
            f"a promotion replaces {target} (version {current}): compare against it, e.g. "
            f"+model.{alias}._target_=harness.models.MLflowModel +model.{alias}.uri="
            f"{target} compare.baseline={alias}"
        )
    if base_version != current:
        raise ValueError(
            f"gate.promote={alias}: the baseline {base_name} ({base.uri}) is {reg} version "
            f"{base_version}, but {target} is version {current}, the one a promotion replaces: "
            f"compare against {target}"
        )
    if version == current:
        raise ValueError(
            f"gate.promote={alias}: candidate {name} ({model.uri}) is {reg} version {version}, "
            f"which {target} already points to: nothing to promote (it would be compared with "
            "itself)"
        )


def _failing_rules(decision: Any) -> list[str]:
    """The rules of a decision that did not pass, as ``rule metric (segment): status`` (their
    reasons are printed with the gate decision and kept in the registry record)."""
    return [
        f"{r.rule} {r.metric} ({r.segment}): {r.status}"
        for r in decision.rules
        if r.status != "pass"
    ]


def plan_promotions(
    decisions: Mapping[str, Any], registered: Mapping[str, tuple[str, str]], alias: str
) -> list[Promotion]:
    """One :class:`Promotion` per gated candidate that is a registered version.

    ``decisions``: candidate → ``GateDecision``; ``registered``: candidate → (registered model
    name, version). GO promotes, unless another GO candidate is a version of the same model.
    """
    go_by_name: dict[str, list[str]] = {}
    for cand, (name, _) in registered.items():
        if cand in decisions and decisions[cand].decision == "GO":
            go_by_name.setdefault(name, []).append(cand)
    plans = []
    for cand, decision in decisions.items():
        if cand not in registered:
            continue
        name, version = registered[cand]
        if decision.decision == "GO" and len(go_by_name[name]) > 1:
            others = ", ".join(c for c in go_by_name[name] if c != cand)
            plans.append(
                Promotion(
                    cand,
                    name,
                    version,
                    decision.decision,
                    "refuse",
                    f"GO, but {others} (another version of {name}) is GO too: promote one "
                    f"of them explicitly",
                )
            )
        elif decision.decision == "GO":
            plans.append(
                Promotion(cand, name, version, "GO", "promote", f"GO against {decision.baseline}")
            )
        else:
            failing = _failing_rules(decision)
            why = "; ".join(failing) if failing else "no rule passed"
            plans.append(
                Promotion(
                    cand,
                    name,
                    version,
                    decision.decision,
                    "refuse",
                    f"{decision.decision} against {decision.baseline}: {why}",
                )
            )
    return plans


def mean_ci(mean: float, sd: float, n: float, confidence: float) -> tuple[float, float]:
    """The normal-approximation CI ``mean ± z·sd/√n`` of a mean of ``n`` per-user values with
    this sd (ddof=1); NaN when fewer than 2 values or the sd is unknown."""
    if not (n >= 2 and np.isfinite(sd)):
        return float("nan"), float("nan")
    from scipy import stats  # here, not at the top: ~0.5-1 s that every CLI start would pay

    half = float(stats.norm.ppf(0.5 + confidence / 2) * sd / np.sqrt(n))
    return mean - half, mean + half


def _num(value: Any) -> float | None:
    """A JSON-safe float (None for NaN / missing)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if np.isfinite(out) else None


def evaluation_record(
    pair: Any,
    decision: Any,
    *,
    run_id: str,
    experiment: str,
    headline: str,
    confidence: float,
    baseline_uri: str | None,
    alias: str,
    plan: Promotion,
    date: str,
) -> dict[str, Any]:
    """The JSON record of one evaluation of a registered version (tag ``harness.eval.<run>``):
    per metric on all users, the candidate's value with its CI (normal approximation over the
    compared users, from the comparison's mean, sd and count, so a Spark run's record has it
    too; whole-run metrics have none), the baseline's, and the relative lift with its CI."""
    numbers: dict[str, dict[str, Any]] = {}
    table = pair.table[pair.table["segment"] == "all"]
    for _, row in table.iterrows():
        metric = str(row["metric"])
        if row.get("kind") == "labels":
            continue
        entry: dict[str, Any] = {
            "value": _num(row.get("mean_b")),
            "baseline": _num(row.get("mean_a")),
            "lift": _num(row.get("lift")),
            "lift_ci": [_num(row.get("lift_ci_low")), _num(row.get("lift_ci_high"))],
            "ci": [None, None],
        }
        if row.get("kind") == "per-user":
            low, high = mean_ci(
                float(row["mean_b"]), float(row.get("sd_b", np.nan)), float(row["n"]), confidence
            )
            entry["ci"] = [_num(low), _num(high)]
        numbers[metric] = entry
    return {
        "date": date,
        "run": run_id,
        "experiment": experiment,
        "candidate": pair.candidate,
        "baseline": pair.baseline,
        "baseline_uri": baseline_uri,  # the registered version it was, when it is one
        "decision": decision.decision,
        "rules": [
            f"{r.rule} {r.metric} ({r.segment}): {r.status} — {r.reason[:_MAX_REASON]}"
            for r in decision.rules
        ],
        "headline": headline,
        "confidence": confidence,
        "metrics": numbers,
        "alias": alias,
        "action": "promoted" if plan.action == "promote" else "refused",
        "reason": plan.reason[: 4 * _MAX_REASON],
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2%}"


def _val(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def headline_text(record: Mapping[str, Any], metric: str | None = None) -> str:
    """``ndcg@10 0.3479 [0.3301, 0.3657], lift +22.05% [+13.76%, +31.35%] vs popularity``: the
    lift as the metric moved (``rmse (lower is better) …, lift -8.10%`` is an improvement)."""
    metric = metric or record.get("headline")
    entry = record.get("metrics", {}).get(metric)
    if not entry:
        return f"{metric} -"
    low, high = entry.get("ci") or [None, None]
    ci = f" [{_val(low)}, {_val(high)}]" if low is not None else ""
    lift_low, lift_high = entry.get("lift_ci") or [None, None]
    lift_ci = f" [{_pct(lift_low)}, {_pct(lift_high)}]" if lift_low is not None else ""
    from harness.report.format import higher_is_better

    lower = "" if higher_is_better(str(metric)) else " (lower is better)"  # the lift is as is
    return (
        f"{metric}{lower} {_val(entry.get('value'))}{ci}, lift {_pct(entry.get('lift'))}{lift_ci} "
        f"vs {record.get('baseline_uri') or record.get('baseline')}"
    )


def _description(record: Mapping[str, Any], moved: str) -> str:
    """The model version's description: the latest evaluation, readable in the registry UI."""
    lines = [
        f"**Offline evaluation {record['date']}: {record['decision']}** against "
        f"`{record['baseline_uri'] or record['baseline']}` — parent run `{record['run']}` "
        f"(experiment `{record['experiment']}`, report `runs:/{record['run']}/report.html`).",
        "",
        f"- {headline_text(record)} ({record['confidence']:.0%} CIs)",
        *[f"- {rule}" for rule in record["rules"]],
        f"- alias @{record['alias']}: {moved}",
        "",
        "Every evaluation is kept in the `harness.eval.<run id>` tags "
        "(`python -m harness.history NAME`).",
    ]
    return "\n".join(lines)


def alias_version(client: Any, name: str, alias: str) -> str | None:
    """The version ``models:/name@alias`` points to, as text (a sqlite store gives an int, a
    server a string), or None when it is not set."""
    from mlflow.exceptions import MlflowException

    try:
        return str(client.get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


def format_promotion(plan: Promotion, alias: str, before: str | None) -> str:
    """The terminal line of one promotion or refusal."""
    target = f"models:/{plan.name}@{alias}"
    if plan.action == "promote":
        was = (
            " (it already was)"
            if before == plan.version
            else f" (was version {before})"
            if before
            else ""
        )
        return f"promotion: {target} -> version {plan.version}{was}: {plan.reason}"
    if before == plan.version:  # refused, and the alias was already on this version
        return f"promotion REFUSED: {target} stays on version {before} (as it was): {plan.reason}"
    held = f"stays on version {before}" if before else "is not set"
    return f"promotion REFUSED: {target} {held}, not moved to version {plan.version}: {plan.reason}"


def _registered(result: Any) -> dict[str, tuple[str, str]]:
    """Candidate → (registered name, version) for the models that came from the registry."""
    out = {}
    for cand, outcome in result.outcomes.items():
        info = outcome.info or {}
        if info.get("info.name") is not None and info.get("info.version") is not None:
            out[cand] = (str(info["info.name"]), str(info["info.version"]))
    return out


def registry_notes(result: Any, decisions: Mapping[str, Any], alias: str | None) -> list[str]:
    """The report's notes on the registry: which version each registered model was, and what
    ``gate.promote`` is to do with the decisions (it acts after the run is logged to MLflow)."""
    notes = [
        f"{cand}: {(result.outcomes[cand].info or {}).get('info.model_uri', '')} is {name} "
        f"version {version}"
        for cand, (name, version) in _registered(result).items()
    ]
    for plan in plan_promotions(decisions, _registered(result), alias) if alias else []:
        if plan.action == "promote":
            notes.append(
                f"promotion: models:/{plan.name}@{alias} is to move to version {plan.version} "
                f"({plan.reason}) once the run is logged to MLflow; the model version records "
                f"the outcome (python -m harness.history {plan.name})"
            )
        else:
            notes.append(
                f"promotion refused: models:/{plan.name}@{alias} is not moved to version "
                f"{plan.version}: {plan.reason}"
            )
    return notes


#: The date format of evaluation records and ``harness.latest.date`` (sorts as text).
DATE_FORMAT = "%Y-%m-%d %H:%M:%S UTC"


def stamp_date(stamp: str) -> str | None:
    """A results folder's stamp (``20261202-075634``, local time, ``run.json``) as a record's
    UTC date (``2026-12-02 07:56:34 UTC``); None when it is not one."""
    try:
        seconds = time.mktime(time.strptime(str(stamp), "%Y%m%d-%H%M%S"))
    except (ValueError, OverflowError):
        return None
    return time.strftime(DATE_FORMAT, time.gmtime(seconds))


def _folder_date(folder: Any) -> str | None:
    """The start time of the run of a results folder (its ``run.json`` stamp) as a UTC date."""
    from harness.folders import run_info

    try:
        return stamp_date(str(run_info(folder).get("stamp", "")))
    except (OSError, TypeError, ValueError):
        return None


def promotion_requests(
    alias: str | None,
    result: Any,
    pairs: Sequence[Any],
    decisions: Mapping[str, Any],
    *,
    experiment: str,
    headline: str | None = None,
    confidence: float = 0.95,
    date: str | None = None,
) -> dict[str, Any] | None:
    """What ``gate.promote`` is to do, as JSON (saved in the results folder, so a run whose
    logging failed is promoted by ``python -m harness.log`` later): per registered candidate its
    plan, the baseline version it was compared with and its evaluation record (the run id is
    filled in when it is applied). ``date``: when the evaluation ran (default: the start of the
    run of ``result.folder``, else now), kept so a later promotion is dated by its run, not by
    when it was applied. None when ``gate.promote`` is off."""
    if not alias:
        return None
    folder = getattr(result, "folder", None)
    date = date or (_folder_date(folder) if folder is not None else None)
    date = date or time.strftime(DATE_FORMAT, time.gmtime())
    registered = _registered(result)
    plans = plan_promotions(decisions, registered, alias)
    nothing = None
    if not plans:
        nothing = (
            "no gate decision was taken"
            if not decisions
            else "no gated candidate is a registered model version (model=mlflow with "
            "model.mlflow.uri=models:/NAME/VERSION)"
        )
    by_candidate = {p.candidate: p for p in pairs}
    requests = []
    for plan in plans:
        pair = by_candidate[plan.candidate]
        base = result.outcomes.get(pair.baseline)
        base_info = (base.info or {}) if base is not None else {}
        base_uri = (
            f"models:/{base_info['info.name']}/{base_info['info.version']}"
            if base_info.get("info.name") is not None
            else None
        )
        record = evaluation_record(
            pair,
            decisions[plan.candidate],
            run_id="",
            experiment=experiment,
            headline=headline or pair.gsb_metric,
            confidence=confidence,
            baseline_uri=base_uri,
            alias=alias,
            plan=plan,
            date=date,
        )
        requests.append(
            {
                "plan": asdict(plan),
                "compared": str(base_info.get("info.version")),
                "baseline": pair.baseline,
                "record": record,
            }
        )
    return {"alias": alias, "nothing": nothing, "date": date, "requests": requests}


def _is_latest(version: Any, date: str) -> tuple[bool, str]:
    """Whether an evaluation of ``date`` is the version's latest (no ``harness.latest.date`` yet,
    or not newer than ``date``; a tie goes to the one applied last), and the latest's summary
    (``2026-12-02 07:57:06 UTC, run ID``) when it is not."""
    tags = version.tags or {}
    latest = tags.get(f"{LATEST_TAG}date")
    if not latest or date >= str(latest):
        return True, ""
    return False, f"{latest}, run {tags.get(f'{LATEST_TAG}run', '?')}"


def apply_promotion(
    spec: Mapping[str, Any] | None, tracking_uri: str, parent_run: str, date: str | None = None
) -> int:
    """Act on :func:`promotion_requests` once the run is logged: print one line per registered
    candidate, return 0, or 3 when the registry could not be updated (one line on stderr).

    Per candidate the evaluation record is written first, then the alias moves, then the
    ``harness.latest.*`` tags and the description — those only when this evaluation is not older
    than the version's latest (a delayed promotion of an older run is recorded in the history
    and leaves the newer one's summary); the parent run's ``registry.promotion`` tag comes last
    and marks the promotion complete. The record's date is the one :func:`promotion_requests`
    stored (the run's start); ``date`` stands in for a spec without one (an older
    ``promotion.json``), else now. Applying again (``python -m harness.log`` after a failure) is
    safe: an alias already on the candidate's version stays there."""
    if not spec:
        return 0
    alias = str(spec["alias"])
    if spec.get("nothing"):
        print(f"promotion: gate.promote={alias}: {spec['nothing']}; nothing promoted")
        return 0
    date = spec.get("date") or date or time.strftime(DATE_FORMAT, time.gmtime())
    try:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
        done: list[str] = []
        for request in spec["requests"]:
            plan = Promotion(**request["plan"])
            before = alias_version(client, plan.name, alias)
            compared = request["compared"]
            if plan.action == "promote" and before not in (compared, plan.version):
                plan = replace(  # the alias moved meanwhile, to another version than this one
                    plan,
                    action="refuse",
                    reason=f"GO against {request['baseline']} (version {compared}), but @{alias} "
                    f"is version {before} now: evaluate against models:/{plan.name}@{alias} again",
                )
            if plan.action == "promote":
                moved = f"moved here (was version {before})" if before else "set here"
                if before == plan.version:
                    moved = "already here"
            else:
                moved = f"not moved (stays on version {before}): {plan.reason}"
            record = {
                **request["record"],
                "run": parent_run,
                "date": request["record"].get("date") or date,
                "action": "promoted" if plan.action == "promote" else "refused",
                "reason": plan.reason[: 4 * _MAX_REASON],
            }
            version_tag = functools.partial(client.set_model_version_tag, plan.name, plan.version)
            version_tag(f"{EVAL_TAG}{parent_run}", json.dumps(record, ensure_ascii=False))
            if plan.action == "promote":
                client.set_registered_model_alias(plan.name, alias, plan.version)
            latest, newer = _is_latest(
                client.get_model_version(plan.name, plan.version), record["date"]
            )
            tags = {
                f"{LATEST_TAG}decision": plan.decision,
                f"{LATEST_TAG}run": parent_run,
                f"{LATEST_TAG}date": record["date"],
                f"{LATEST_TAG}baseline": str(record["baseline_uri"] or record["baseline"]),
                f"{LATEST_TAG}headline": headline_text(record),
                f"{LATEST_TAG}promotion": f"@{alias}: {moved}"[:5000],
            }
            for key, value in tags.items() if latest else ():
                version_tag(key, value)
            if latest:
                client.update_model_version(
                    plan.name, plan.version, description=_description(record, moved)[:5000]
                )  # the registry's description column holds 5,000 characters
            done.append(
                f"models:/{plan.name}/{plan.version} @{alias}: "
                + ("promoted" if plan.action == "promote" else f"refused ({plan.decision})")
            )
            print(format_promotion(plan, alias, before))
            if not latest:
                print(
                    f"note: this evaluation ({record['date']}) is older than the latest one of "
                    f"models:/{plan.name}/{plan.version} ({newer}): it is added to the history; "
                    "the version's harness.latest.* tags and description stay on the newer one"
                )
        client.set_tag(parent_run, DONE_TAG, "; ".join(done)[:5000])
    except Exception as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(
            f"error: registry promotion at {tracking_uri} failed ({type(err).__name__}: {message})",
            file=sys.stderr,
        )
        return EXIT_REGISTRY_FAILED
    return 0


if __name__ == "__main__":  # not a command: say what is
    print(
        "error: harness.promote is not a command: promotion is part of a run, "
        "python -m harness ... gate.promote=ALIAS (README: Launch workflow); "
        "python -m harness.history NAME lists a registered model's evaluations",
        file=sys.stderr,
    )
    raise SystemExit(2)
