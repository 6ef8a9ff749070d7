"""Command line: ``python -m metrics QRELS RUN -m ndcg@10 -m map [--preset trec_eval]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from metrics.evaluate import Evaluation, evaluate
from metrics.io import FORMATS, read_qrels, read_run
from metrics.options import CHOICES, PRESETS
from metrics.registry import list_metrics

DEFAULT_METRICS = ["ndcg@10", "map@10", "precision@10", "recall@10", "mrr@10"]


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
    return p


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
    try:
        ev = evaluate(
            read_qrels(args.qrels, args.format),
            read_run(args.run, args.format),
            names,
            preset=args.preset,
            **options,
        )
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(format_table(ev))
    if args.per_user is not None:
        out = args.per_user
        if out.suffix.lower() in (".parquet", ".pq"):
            ev.per_user.to_parquet(out)
        else:
            ev.per_user.to_csv(out, sep="\t" if out.suffix.lower() == ".tsv" else ",")
        print(f"per-user table: {out}")
    return 0
