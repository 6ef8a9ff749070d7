"""Helpers to read trec_eval's expected outputs and map its measure names to ours."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd

REFERENCE = Path(
    os.environ.get(
        "TREC_REFERENCE", Path(__file__).resolve().parents[3] / "shared/reference/trec_eval"
    )
)

# trec_eval measure -> our metric name (None: a per-query cutoff-free measure we implement)
_CUT = {
    "P": "precision",
    "recall": "recall",
    "ndcg_cut": "ndcg",
    "map_cut": "ap",
    "success": "hit_rate",
}
_PLAIN = {
    "num_ret": "num_ret",
    "num_rel": "num_rel",
    "num_rel_ret": "num_rel_ret",
    "map": "map",
    "Rprec": "r_precision",
    "recip_rank": "mrr",
    "ndcg": "ndcg",
}


def our_name(measure: str) -> str | None:
    """Our metric name for a trec_eval measure, or None when we do not implement it."""
    if measure in _PLAIN:
        return _PLAIN[measure]
    m = re.fullmatch(r"(P|recall|ndcg_cut|map_cut|success)_(\d+)", measure)
    return f"{_CUT[m.group(1)]}@{m.group(2)}" if m else None


def read_expected(name: str) -> pd.DataFrame:
    """An expected trec_eval output as rows (measure, query, value, ours) for measures we have."""
    rows = []
    for line in (REFERENCE / name).read_text().splitlines():
        measure, query, value = line.split()
        ours = our_name(measure)
        if ours is not None:
            rows.append((measure, query, float(value), ours))
    return pd.DataFrame(rows, columns=["measure", "query", "value", "ours"])
