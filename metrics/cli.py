"""Command line: ``python -m metrics QRELS RUN [RUN_B] -m ndcg@10 -m map [--preset trec_eval]``.

One run: a summary table, trec_eval-style lines (``--output trec``, per query with ``-q``) or
JSON. Two runs: B against A per metric with the same paired statistics as the harness
(:func:`metrics.stats.compare`: bootstrap CI of the lift, randomization or t-test p-value corrected
across the metrics, GSB).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from metrics.checks import require_choice
from metrics.evaluate import Evaluation, evaluate
from metrics.io import FORMATS, align_ids, read_qrels, read_run
from metrics.options import CHOICES, PRESETS
from metrics.registry import list_metrics, parse

DEFAULT_METRICS = ["ndcg@10", "map@10", "precision@10", "recall@10", "mrr@10"]
OUTPUTS = ("table", "trec", "json")
TESTS = ("randomization", "t")
CORRECTIONS = ("holm", "bh", "none")

# our metric -> trec_eval measure (with a cutoff: name_k; without one: the plain name)
_TREC_CUT = {
    "precision": "P",
    "recall": "recall",
    "ndcg": "ndcg_cut",
    "ap": "map_cut",
    "hit_rate": "success",
}
_TREC_PLAIN = {"ap": "map", "mrr": "recip_rank", "r_precision": "Rprec"}
_COUNTS = {"num_ret", "num_rel", "num_rel_ret"}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; option flags are generated from the conventions table."""
    p = argparse.ArgumentParser(
        prog="python -m metrics",
        description="Evaluate a run against relevance judgments (TREC, CSV or Parquet).",
        epilog="metrics: " + ", ".join(list_metrics()),
    )
    p.add_argument(
        "qrels", type=Path, help="truth: TREC qrels, or CSV/Parquet with user,item,relevance"
    )
    p.add_argument("run", type=Path, help="run: TREC run, or CSV/Parquet with user,item,score")
    p.add_argument(
        "run_b",
        type=Path,
        nargs="?",
        default=None,
        help="a second run: compare it (B) with RUN (A) per metric, paired by user",
    )
    p.add_argument(
        "-m",
        "--metric",
        action="append",
        nargs="+",
        metavar="NAME",
        help=f"metric name(s), e.g. ndcg@10 map (default: {' '.join(DEFAULT_METRICS)})",
    )
    p.add_argument("--preset", choices=sorted(PRESETS), default=None)
    p.add_argument(
        "--format",
        choices=FORMATS,
        default=None,
        help="input format of both files (default: by extension; otherwise TREC)",
    )
    for name, allowed in CHOICES.items():
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, choices=allowed, default=None)
    p.add_argument(
        "--relevance-threshold",
        type=float,
        default=None,
        help="an item is relevant when relevance >= this (trec_eval -l)",
    )
    p.add_argument(
        "--per-user",
        type=Path,
        default=None,
        metavar="OUT",
        help="write the per-user table (.csv, .parquet or .tsv)",
    )
    p.add_argument(
        "--output",
        choices=OUTPUTS,
        default="table",
        help="table (default), trec (trec_eval's 'measure query value' lines) or json",
    )
    p.add_argument(
        "-q",
        "--per-query",
        action="store_true",
        help="also print each user's values (trec_eval -q), with --output trec or json",
    )
    cmp = p.add_argument_group("comparing two runs (RUN_B given)")
    cmp.add_argument("--test", choices=TESTS, default="randomization", help="p-value's test")
    cmp.add_argument("--correction", choices=CORRECTIONS, default="holm", help="across the metrics")
    cmp.add_argument("--confidence", type=float, default=0.95, help="of the bootstrap CIs")
    cmp.add_argument("--n-resamples", type=int, default=1000, help="bootstrap/randomization")
    cmp.add_argument("--seed", type=int, default=0, help="resampling seed")
    cmp.add_argument(
        "--tolerance", type=float, default=0.0, help="GSB: |Δ| <= tolerance counts as same"
    )
    return p


def trec_measure(name: str) -> str:
    """trec_eval's name for one of ours (``precision@10`` → ``P_10``), else the name itself."""
    spec = parse(name)
    if spec.k is not None and spec.metric in _TREC_CUT:
        return f"{_TREC_CUT[spec.metric]}_{spec.k}"
    if spec.k is None and spec.metric in _TREC_PLAIN:
        return _TREC_PLAIN[spec.metric]
    return str(spec)


def _trec_value(measure: str, value: float) -> str:
    if math.isnan(value):
        return "nan"
    return str(round(value)) if measure in _COUNTS else f"{value:.4f}"


def format_trec(ev: Evaluation, per_query: bool = False) -> str:
    """trec_eval-style lines ``measure<TAB>query<TAB>value`` (4 decimals), ``all`` rows last."""
    measures = {name: trec_measure(name) for name in ev.summary}
    lines = []
    if per_query:
        users = sorted(ev.per_user.index, key=str)
        table = ev.per_user.loc[users]
        for user, row in table.iterrows():
            for name, measure in measures.items():
                value = float(row[name])
                if not math.isnan(value):
                    lines.append(f"{measure:<22s}\t{user}\t{_trec_value(measure, value)}")
    lines += [f"{m:<22s}\tall\t{_trec_value(m, float(ev.summary[n]))}" for n, m in measures.items()]
    return "\n".join(lines)


def _finite(value: Any) -> Any:
    """JSON has no NaN: None instead."""
    return None if isinstance(value, float) and math.isnan(value) else value


def format_json(ev: Evaluation, per_query: bool = False) -> str:
    """``{"summary", "counts", "options"[, "per_user"]}`` as JSON (NaN → null)."""
    out: dict[str, Any] = {
        "summary": {n: _finite(float(v)) for n, v in ev.summary.items()},
        "counts": {k: int(v) for k, v in ev.counts.items()},
        "options": ev.options,
    }
    if per_query:
        out["per_user"] = {
            str(user): {n: _finite(float(v)) for n, v in row.items()}
            for user, row in ev.per_user.iterrows()
        }
    return json.dumps(out, indent=2, default=str)


def compare_runs(
    a: Evaluation,
    b: Evaluation,
    *,
    test: str = "randomization",
    correction: str = "holm",
    confidence: float = 0.95,
    n_resamples: int = 1000,
    seed: int = 0,
    tolerance: float = 0.0,
) -> pd.DataFrame:
    """B against A per metric: means, Δ, lift with its bootstrap CI, corrected p-value and GSB.

    Uses :func:`metrics.stats.compare_many` on the per-user vectors: users where either side is
    undefined are dropped and counted, and A and B are then the means over the paired users.
    Whole-run metrics have no per-user value: their summaries are shown without statistics.
    """
    from metrics import stats

    require_choice("test", test, TESTS)
    require_choice("correction", correction, CORRECTIONS)
    users = a.per_user.index.union(b.per_user.index)
    columns = {}
    for name in a.summary:
        va = a.per_user[name].reindex(users)
        vb = b.per_user[name].reindex(users)
        if va.notna().any() and vb.notna().any():
            columns[name] = (va, vb, parse(name).definition.higher_is_better)
    # one draw of resamples for every metric (each result equals stats.compare of its pair)
    compared = (
        stats.compare_many(
            columns, tolerance=tolerance, n_resamples=n_resamples, seed=seed, confidence=confidence
        )
        if columns
        else {}
    )
    rows = {}
    for name in a.summary:
        row: dict[str, Any] = {"A": a.summary[name], "B": b.summary[name]}
        if name in compared:
            c = compared[name]
            row |= {
                "A": c.mean_a,  # means over the users both runs define: what Δ compares
                "B": c.mean_b,
                "users": c.n,
                "users_dropped": c.dropped,
                "delta": c.diff,
                "lift": c.lift,
                "lift_ci_low": c.lift_ci[0],
                "lift_ci_high": c.lift_ci[1],
                "p": c.p_randomization if test == "randomization" else c.p_t,
                "gsb_good": c.gsb.good,
                "gsb_same": c.gsb.same,
                "gsb_bad": c.gsb.bad,
                "gsb_delta": c.gsb.delta,
                "method": c.method,
            }
        rows[name] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    if "p" in table:
        tested = table["p"].notna()
        table["p_adjusted"] = table["p"]
        if correction != "none" and tested.any():
            table.loc[tested, "p_adjusted"] = stats.adjust(
                table.loc[tested, "p"].to_numpy(), correction
            )
    return table


def format_comparison(table: pd.DataFrame, confidence: float) -> str:
    """The comparison as an aligned table: lift and CI in percent, GSB as counts and Δ."""

    def pct(v: float) -> str:
        return "-" if pd.isna(v) else f"{v:+.2%}"

    lines = []
    for name, r in table.iterrows():
        tested = "p" in r and not pd.isna(r.get("p"))
        lines.append(
            {
                "metric": name,
                "A": f"{r['A']:.4f}",
                "B": f"{r['B']:.4f}",
                "users": f"{int(r['users'])}" if tested else "-",
                "Δ": f"{r['delta']:+.4f}" if tested else "-",
                "lift": pct(r["lift"]) if tested else "-",
                f"{confidence:.0%} CI": (
                    f"[{pct(r['lift_ci_low'])}, {pct(r['lift_ci_high'])}]" if tested else "-"
                ),
                "p (adj.)": f"{r['p_adjusted']:.4g}" if tested else "-",
                "GSB (g/s/b)": (
                    f"{int(r['gsb_good'])}/{int(r['gsb_same'])}/{int(r['gsb_bad'])}"
                    if tested
                    else "-"
                ),
                "ΔGSB": f"{r['gsb_delta']:+.3f}" if tested else "-",
            }
        )
    return pd.DataFrame(lines).to_string(index=False)


def format_table(ev: Evaluation) -> str:
    """Summary as an aligned two-column table, followed by the user counts and the options."""
    width = max(len(n) for n in ev.summary)
    lines = [f"{'metric':<{width}}  value", f"{'-' * width}  --------"]
    lines += [
        f"{n:<{width}}  {v:.6f}" if v == v else f"{n:<{width}}  nan" for n, v in ev.summary.items()
    ]
    lines.append("")
    lines.append("users: " + ", ".join(f"{k}={v}" for k, v in ev.counts.items()))
    lines.append("options: " + ", ".join(f"{k}={v}" for k, v in ev.options.items()))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; bad input prints a one-line error and returns 2."""
    args = build_parser().parse_args(argv)
    names = [n for group in (args.metric or [DEFAULT_METRICS]) for n in group]
    options = {k: getattr(args, k) for k in (*CHOICES, "relevance_threshold")}

    def scored(run: Path) -> Evaluation:
        """``run`` evaluated; an error about the data names the file it is in."""
        try:
            truth, ranked = align_ids(qrels, read_run(run, args.format))
            return evaluate(truth, ranked, names, preset=args.preset, **options)
        except ValueError as err:
            text = str(err)
            for what, path in (("run", run), ("qrels", args.qrels)):
                if text.startswith((f"{what} ", f"{what}:")):
                    raise ValueError(f"{path}: {text}") from None
            raise

    try:
        qrels = read_qrels(args.qrels, args.format)
        ev = scored(args.run)
        if args.run_b is not None:
            ev_b = scored(args.run_b)
            table = compare_runs(
                ev,
                ev_b,
                test=args.test,
                correction=args.correction,
                confidence=args.confidence,
                n_resamples=args.n_resamples,
                seed=args.seed,
                tolerance=args.tolerance,
            )
    except (ValueError, OSError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"error: {message}", file=sys.stderr)
        return 2
    if args.run_b is not None:
        if args.output == "json":
            print(table.to_json(orient="index", indent=2))
        else:
            print(f"A: {args.run}\nB: {args.run_b}\n")
            print(format_comparison(table, args.confidence))
            methods = set(table.get("method", pd.Series(dtype=object)).dropna())
            ci = {
                "bootstrap": f"paired bootstrap over users ({args.n_resamples} resamples)",
                "normal": "normal (CLT) interval, delta method for the lift (many users)",
            }
            print(
                f"\np: {args.test} test, {args.correction} correction across the metrics; "
                f"CI: {'; '.join(ci[m] for m in sorted(methods)) or '-'}"
            )
        return 0
    if args.output == "trec":
        print(format_trec(ev, args.per_query))
    elif args.output == "json":
        print(format_json(ev, args.per_query))
    else:
        print(format_table(ev))
    if args.per_user is not None:
        out = args.per_user
        if out.suffix.lower() in (".parquet", ".pq"):
            ev.per_user.to_parquet(out)
        else:
            ev.per_user.to_csv(out, sep="\t" if out.suffix.lower() == ".tsv" else ",")
        print(f"per-user table: {out}")
    return 0
