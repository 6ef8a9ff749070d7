"""Item-bucket rows judge the saved top-k lists: with sampled candidates a metric without a
cutoff (mrr, map) read each user's whole ranked candidate list, so it gets no bucket rows (a
note says so) instead of numbers that disagree with its ``all`` row for the same truth."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.candidates import CandidateSpec, build_candidates
from harness.compare import CompareSpec, compare_models
from harness.datasets import Dataset
from harness.experiment import MetricSuite, run_models
from harness.models import PopularityModel, RandomModel
from harness.split import make_split
from harness.synthetic import generate


@pytest.mark.parametrize("kind", ["full", "sampled"])
def test_bucket_rows_only_for_metrics_the_lists_hold(tmp_path: Path, kind: str) -> None:
    frame = generate(n_users=300, n_items=120, n_events=6000, seed=2)
    split = make_split(frame, "global_time", cut=0.8)
    cands = None
    if kind == "sampled":
        cands, _ = build_candidates(CandidateSpec("sampled", 20, seed=0), split, tmp_path)
    suite = MetricSuite(k=10, names=("mrr", "map", "ndcg@10", "recall@5"))
    models = {"popularity": PopularityModel(), "random": RandomModel(seed=0)}
    result = run_models(
        Dataset("s", frame, "s"), split, models, suite, tmp_path / "out", progress=False,
        candidates=cands,
    )  # fmt: skip
    if kind == "sampled":
        result.candidates = {"candidates.kind": "sampled"}
    (pair,), _ = compare_models(result, CompareSpec(baseline="popularity", n_resamples=50))
    table = pair.table
    bucketed = set(table.loc[table["segment"].str.startswith("items:"), "metric"])
    note = (
        "item buckets: no rows of mrr, map: with candidates=sampled they read each user's whole "
        "ranked candidate list, and the buckets judge the top-k lists"
    )
    if kind == "full":
        assert bucketed == {"mrr", "map", "ndcg@10", "recall@5"}
        assert note not in pair.notes
    else:
        assert bucketed == {"ndcg@10", "recall@5"}
        assert note in pair.notes
    # every metric keeps its whole-run row
    assert set(table.loc[table["segment"] == "all", "metric"]) == set(suite.names)
    assert np.isfinite(table.loc[table["segment"] == "all", "diff"]).all()
