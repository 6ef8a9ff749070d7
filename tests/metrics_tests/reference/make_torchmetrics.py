"""Reference numbers from torchmetrics' retrieval metrics for the preset tests.

torchmetrics needs torch; plain ``pip install torch`` pulls a CUDA build of several GB, so it runs
in its own environment with the CPU wheel, from the repository root:

    python -m venv /tmp/tm && /tmp/tm/bin/pip install torch==2.13.0
    /tmp/tm/bin/pip install torchmetrics==1.9.0 pandas
    /tmp/tm/bin/python tests/metrics_tests/reference/make_torchmetrics.py

Writes ``torchmetrics.json`` beside it: ``{dataset: {name: {"mean": m, "per_user": ...}}}``
from the module metrics (``indexes`` = user) and the functional ones per user. On tied scores only
NDCG is compared: torchmetrics averages the gains of tied items there (``ndcg_ties="average"``),
and orders equal scores by ``torch.topk`` (unspecified) elsewhere.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torchmetrics import retrieval as modular
from torchmetrics.functional import retrieval as functional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from preset_data import CUTOFFS, datasets  # noqa: E402


def _table(data: dict, tied: bool) -> dict[str, dict]:
    """Every metric at every cutoff; only NDCG on tied scores (the others' tie order is
    ``torch.topk``'s, unspecified)."""
    relevance = {(u, i): r for u, i, r in data["qrels"]}
    users = sorted({u for u, _, _ in data["run"]})
    rows = {u: [(i, s) for uu, i, s in data["run"] if uu == u] for u in users}
    index = torch.tensor([users.index(u) for u in users for _ in rows[u]])
    preds = torch.tensor([s for u in users for _, s in rows[u]], dtype=torch.float64)
    graded = torch.tensor([relevance.get((u, i), 0.0) for u in users for i, _ in rows[u]])
    binary = graded >= 1
    res: dict[str, dict] = {}

    def add(key: str, module: object, fn: object, target: torch.Tensor, **kw: object) -> None:
        mean = module(preds, target, indexes=index)  # type: ignore[operator]
        per = {}
        for u in users:
            sel = index == users.index(u)
            per[str(u)] = float(fn(preds[sel], target[sel], **kw))  # type: ignore[operator]
        res[key] = {"mean": float(mean), "per_user": per}

    for k in CUTOFFS:
        add(
            f"ndcg@{k}",
            modular.RetrievalNormalizedDCG(top_k=k),
            functional.retrieval_normalized_dcg,
            graded,
            top_k=k,
        )
        if tied:
            continue
        add(
            f"precision@{k}",
            modular.RetrievalPrecision(top_k=k),
            functional.retrieval_precision,
            binary,
            top_k=k,
        )
        add(
            f"precision@{k}|precision_denominator=list",
            modular.RetrievalPrecision(top_k=k, adaptive_k=True),
            functional.retrieval_precision,
            binary,
            top_k=k,
            adaptive_k=True,
        )
        add(
            f"recall@{k}",
            modular.RetrievalRecall(top_k=k),
            functional.retrieval_recall,
            binary,
            top_k=k,
        )
        add(
            f"ap@{k}",
            modular.RetrievalMAP(top_k=k),
            functional.retrieval_average_precision,
            binary,
            top_k=k,
        )
        add(
            f"mrr@{k}",
            modular.RetrievalMRR(top_k=k),
            functional.retrieval_reciprocal_rank,
            binary,
            top_k=k,
        )
        add(
            f"hit_rate@{k}",
            modular.RetrievalHitRate(top_k=k),
            functional.retrieval_hit_rate,
            binary,
            top_k=k,
        )
        for action, option in (("skip", "skip"), ("pos", "one")):
            module = modular.RetrievalRecall(top_k=k, empty_target_action=action)
            res[f"recall@{k}|empty_users={option}"] = {
                "mean": float(module(preds, binary, indexes=index))
            }
    return res


def main() -> None:
    """Compute the tables and write the JSON."""
    data = datasets()
    out = {
        "distinct": _table(data["distinct"], tied=False),
        "tied_candidates": _table(data["tied_candidates"], tied=True),
    }
    (HERE / "torchmetrics.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
