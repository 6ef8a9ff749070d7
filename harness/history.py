"""``python -m harness.history NAME``: every evaluation and decision of a registered model.

Reads the ``harness.eval.<parent run id>`` tags that ``gate.promote`` writes onto each model
version (:mod:`harness.promote`) and prints one row per evaluation, in version order then date:
version, date, decision, the headline metric with its CI and its lift over the baseline, what
happened to the alias, the parent run id. Versions never evaluated are listed too. ``--plot
FILE.png`` draws the metric with its CI across versions (one point per evaluation, coloured by
decision). Exit codes: 0 done, 2 unknown model or metric, 3 MLflow unreachable.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.progress import help_text
from harness.promote import EVAL_TAG, headline_text
from harness.tracking import require_store

__all__ = ["format_history", "history_frame", "main", "plot_history"]

EXIT_BAD_INPUT, EXIT_TRACKING_FAILED = 2, 3
_COLOURS = {"GO": "#2e7d32", "INCONCLUSIVE": "#f9a825", "NO_GO": "#c62828"}


def _evaluations(version: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The evaluation records ``gate.promote`` wrote onto one model version's tags."""
    evals = []
    for key, value in (version.get("tags") or {}).items():
        if not key.startswith(EVAL_TAG):
            continue
        try:
            evals.append(json.loads(value))
        except json.JSONDecodeError:
            continue  # a tag someone else wrote by hand: not ours to read
    return evals


def history_frame(versions: Sequence[Mapping[str, Any]], metric: str | None = None) -> pd.DataFrame:
    """One row per (version, evaluation), sorted by version number then date.

    ``versions``: ``{"version", "created" (ms since epoch), "aliases", "tags"}`` per model
    version. ``metric``: the metric shown (default: each evaluation's headline metric). A
    version without evaluation gets one row with decision ``-``.
    """
    rows: list[dict[str, Any]] = []
    for mv in versions:
        evals = _evaluations(mv)
        base = {
            "version": int(mv["version"]),
            "aliases": ",".join(sorted(mv.get("aliases") or [])),
        }
        if not evals:
            created = pd.to_datetime(mv.get("created"), unit="ms", utc=True)
            rows.append(
                base
                | {
                    "date": created.strftime("%Y-%m-%d %H:%M:%S UTC") if pd.notna(created) else "",
                    "decision": "not evaluated",
                    "metric": metric,
                    "value": np.nan,
                    "ci_low": np.nan,
                    "ci_high": np.nan,
                    "lift": np.nan,
                    "lift_ci_low": np.nan,
                    "lift_ci_high": np.nan,
                    "baseline": "",
                    "alias_action": "",
                    "run": "",
                    "shown": "-",
                }
            )
            continue
        for rec in evals:
            name = metric or rec.get("headline")
            entry = (rec.get("metrics") or {}).get(name) or {}
            ci = entry.get("ci") or [None, None]
            lift_ci = entry.get("lift_ci") or [None, None]
            rows.append(
                base
                | {
                    "date": str(rec.get("date", "")),
                    "decision": str(rec.get("decision", "")),
                    "metric": name,
                    "value": _f(entry.get("value")),
                    "ci_low": _f(ci[0]),
                    "ci_high": _f(ci[1]),
                    "lift": _f(entry.get("lift")),
                    "lift_ci_low": _f(lift_ci[0]),
                    "lift_ci_high": _f(lift_ci[1]),
                    "baseline": str(rec.get("baseline_uri") or rec.get("baseline") or ""),
                    "alias_action": f"{rec.get('action', '')} @{rec.get('alias', '')}",
                    "run": str(rec.get("run", "")),
                    "shown": headline_text(rec, name),
                }
            )
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    return frame.sort_values(["version", "date"], kind="stable").reset_index(drop=True)


def _f(value: Any) -> float:
    return float(value) if value is not None else np.nan


def format_history(frame: pd.DataFrame, name: str) -> str:
    """The readable table of :func:`history_frame`."""
    if frame.empty:
        return f"{name}: no versions"
    columns = {
        "version": frame["version"].astype(str)
        + frame["aliases"].map(lambda a: f" @{a.replace(',', ' @')}" if a else ""),
        "date": frame["date"],
        "decision": frame["decision"],
        "metric [CI], lift [CI] vs baseline": frame["shown"],
        "alias": frame["alias_action"],
        "parent run": frame["run"],
    }
    widths = {k: max(len(k), *(len(str(v)) for v in col)) for k, col in columns.items()}
    lines = ["  ".join(k.ljust(widths[k]) for k in columns).rstrip()]
    for i in range(len(frame)):
        cells = (str(col.iloc[i]).ljust(widths[k]) for k, col in columns.items())
        lines.append("  ".join(cells).rstrip())
    return f"{name}: {len(frame)} row(s)\n" + "\n".join(lines)


def version_labels(versions: pd.Series) -> list[str]:
    """``vN`` per evaluation; a version evaluated more than once: ``v2 #1``, ``v2 #2``."""
    text = versions.astype(str)
    nth = text.groupby(text).cumcount() + 1
    repeated = text.map(text.value_counts()) > 1
    return [f"v{v} #{n}" if r else f"v{v}" for v, n, r in zip(text, nth, repeated, strict=True)]


def plot_history(frame: pd.DataFrame, metric: str, path: Path) -> Path:
    """The metric with its CI per evaluation, in version order (x labels ``vN``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = frame[frame["value"].notna()].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(shown) + 2), 3.2))
    x = np.arange(len(shown))
    low = (shown["value"] - shown["ci_low"]).fillna(0).clip(lower=0)
    high = (shown["ci_high"] - shown["value"]).fillna(0).clip(lower=0)
    for decision, colour in _COLOURS.items():
        hit = (shown["decision"] == decision).to_numpy()
        if hit.any():
            ax.errorbar(
                x[hit],
                shown["value"][hit],
                yerr=[low[hit], high[hit]],
                fmt="o",
                color=colour,
                capsize=4,
                label=decision,
            )
    ax.plot(x, shown["value"], color="#9e9e9e", linewidth=0.8, zorder=0)
    ax.set_xticks(x, version_labels(shown["version"]))
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} per evaluated version (CI)", loc="left", fontsize=10)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _versions(client: Any, name: str) -> list[dict[str, Any]]:
    """Every version of ``name`` with its tags and aliases (pages of the registry search; the
    aliases come from the registered model, which a version search may leave out)."""
    aliases: dict[str, list[str]] = {}
    for alias, version in (client.get_registered_model(name).aliases or {}).items():
        aliases.setdefault(str(version), []).append(str(alias))
    found: list[Any] = []
    token = None
    while True:
        page = client.search_model_versions(f"name = '{name}'", max_results=1000, page_token=token)
        found += list(page)
        token = page.token
        if not token:
            break
    return [
        {
            "version": mv.version,
            "created": mv.creation_timestamp,
            "aliases": aliases.get(str(mv.version), []),
            "tags": dict(mv.tags or {}),
        }
        for mv in found
    ]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness.history",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", help="registered model name")
    p.add_argument("--tracking-uri", default="sqlite:///runs/mlflow.db")
    p.add_argument("--metric", default=None, help="metric shown (default: the headline metric)")
    p.add_argument("--plot", default=None, type=Path, help="write a PNG plot of the metric")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        require_store(args.tracking_uri)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException

        client = MlflowClient(tracking_uri=args.tracking_uri, registry_uri=args.tracking_uri)
        try:
            client.get_registered_model(args.name)
        except MlflowException as err:
            if getattr(err, "error_code", "") == "RESOURCE_DOES_NOT_EXIST":
                print(
                    f"error: no registered model {args.name!r} at {args.tracking_uri}",
                    file=sys.stderr,
                )
                return EXIT_BAD_INPUT
            raise
        versions = _versions(client, args.name)
    except Exception as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        print(
            f"error: could not read the registry at {args.tracking_uri} "
            f"({type(err).__name__}: {first})",
            file=sys.stderr,
        )
        return EXIT_TRACKING_FAILED
    frame = history_frame(versions, args.metric)
    evaluated = frame[frame["decision"] != "not evaluated"] if not frame.empty else frame
    if args.metric and not evaluated.empty and evaluated["value"].isna().all():
        recorded = sorted(
            {m for v in versions for e in _evaluations(v) for m in e.get("metrics") or {}}
        )
        print(
            f"error: no evaluation of {args.name!r} recorded metric {args.metric!r}; "
            f"recorded: {', '.join(recorded)}",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    print(format_history(frame, args.name))
    if args.plot is not None:
        if evaluated.empty or evaluated["value"].isna().all():
            print(
                f"note: no plot written to {args.plot}: {args.name!r} has no evaluation yet "
                "(python -m harness ... model.mlflow.uri=models:/NAME/VERSION gate.promote=ALIAS "
                "records one)",
                file=sys.stderr,
            )
        else:
            metric = args.metric or str(evaluated["metric"].iloc[-1])
            shown = evaluated[evaluated["metric"] == metric]
            print(f"plot: {plot_history(shown, metric, args.plot)}")
    return 0


if __name__ == "__main__":
    from harness.shutdown import run_and_leave

    run_and_leave(main)
