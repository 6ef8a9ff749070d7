"""Reference numbers from Microsoft Recommenders' python evaluation for the preset tests.

Run in its own environment (it pins its own numpy/pandas), from the repository root:

    python -m venv /tmp/msr && /tmp/msr/bin/pip install recommenders==1.2.1
    /tmp/msr/bin/python tests/metrics_tests/reference/make_ms_recommenders.py

Writes ``tests/metrics_tests/reference/ms_recommenders.json``: ``{dataset: {name: mean}}``. Every
``rating_true`` row counts as relevant there, so only rows with relevance >= 1 are passed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
from recommenders.evaluation import python_evaluation as pe

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from preset_data import CUTOFFS, datasets  # noqa: E402


def main() -> None:
    """Compute every metric at every cutoff on every data set and write the JSON."""
    out: dict[str, dict[str, float]] = {}
    for name, data in datasets().items():
        true = pd.DataFrame(data["qrels"], columns=["userID", "itemID", "rating"])
        true = true[true["rating"] >= 1].reset_index(drop=True)
        pred = pd.DataFrame(data["run"], columns=["userID", "itemID", "prediction"])
        res: dict[str, float] = {}
        for k in CUTOFFS:
            args = {"rating_true": true, "rating_pred": pred, "k": k}
            res[f"precision@{k}"] = float(pe.precision_at_k(**args))
            res[f"recall@{k}"] = float(pe.recall_at_k(**args))
            res[f"ndcg@{k}"] = float(pe.ndcg_at_k(**args))
            res[f"ap@{k}"] = float(pe.map_at_k(**args))
            res[f"ap@{k}|ap_denominator=relevant"] = float(pe.map(**args))
        out[name] = res
    (HERE / "ms_recommenders.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
