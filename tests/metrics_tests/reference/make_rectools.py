"""Reference numbers from rectools for the preset tests.

rectools 0.19 pins numpy 1.26 and pandas < 3, so it runs in its own environment, from the
repository root:

    python -m venv /tmp/rt && /tmp/rt/bin/pip install rectools==0.19.0
    /tmp/rt/bin/python tests/metrics_tests/reference/make_rectools.py

Writes ``rectools.json`` beside it: ``{dataset: {name: {"mean": m, "per_user": {u: v}}}}``.
rectools reads interactions (every row relevant: rows with relevance >= 1 are passed) and ranks
(from the scores, ties in input order, as the preset's ``tie_break="input_order"``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
from rectools import Columns
from rectools.metrics import MAP, MRR, NDCG, F1Beta, HitRate, Precision, Recall, calc_metrics

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from preset_data import CUTOFFS, datasets  # noqa: E402


def main() -> None:
    """Compute every metric at every cutoff on every data set and write the JSON."""
    out: dict[str, dict[str, dict]] = {}
    for name, data in datasets().items():
        true = pd.DataFrame(data["qrels"], columns=[Columns.User, Columns.Item, "relevance"])
        interactions = true[true["relevance"] >= 1][[Columns.User, Columns.Item]]
        reco = pd.DataFrame(data["run"], columns=[Columns.User, Columns.Item, "score"])
        reco = reco.sort_values([Columns.User, "score"], ascending=[True, False], kind="stable")
        reco[Columns.Rank] = reco.groupby(Columns.User).cumcount() + 1
        res: dict[str, dict] = {}
        for k in CUTOFFS:
            named = {
                f"precision@{k}": Precision(k=k),
                f"recall@{k}": Recall(k=k),
                f"ndcg@{k}": NDCG(k=k),
                f"ndcg@{k}|ideal_dcg=relevant": NDCG(k=k, divide_by_achievable=True),
                f"ap@{k}": MAP(k=k),
                f"ap@{k}|ap_denominator=k": MAP(k=k, divide_by_k=True),
                f"mrr@{k}": MRR(k=k),
                f"hit_rate@{k}": HitRate(k=k),
                f"f1@{k}": F1Beta(k=k, beta=1.0),
            }
            means = calc_metrics(named, reco=reco, interactions=interactions)
            for key, metric in named.items():
                per = metric.calc_per_user(reco, interactions)
                res[key] = {
                    "mean": float(means[key]),
                    "per_user": {str(u): float(v) for u, v in per.items()},
                }
        out[name] = res
    (HERE / "rectools.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
