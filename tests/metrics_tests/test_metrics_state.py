"""``metrics.evaluate``'s aggregation is mergeable: states of disjoint user groups, merged and
finished, give the summary and counts of one evaluation over every user (what the Spark engine
relies on), for every registered metric."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import metrics


def data(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    run = pd.DataFrame(
        {"user": rng.integers(0, 60, 900), "item": rng.integers(0, 40, 900)}
    ).drop_duplicates(ignore_index=True)
    run["score"] = rng.integers(0, 5, len(run)) + 0.5 * rng.integers(0, 2, len(run))
    qrels = pd.DataFrame(
        {"user": rng.integers(0, 70, 300), "item": rng.integers(0, 40, 300)}
    ).drop_duplicates(ignore_index=True)
    qrels["relevance"] = rng.integers(0, 4, len(qrels)).astype(float)
    train = pd.DataFrame({"user": rng.integers(0, 70, 2000), "item": rng.integers(0, 45, 2000)})
    feats = pd.DataFrame({"item": np.arange(45), "genre": [f"g{i % 3}" for i in range(45)]})
    return qrels, run, train, feats


@pytest.mark.parametrize("options", [{}, {"average": "micro"}, {"preset": "trec_eval"}])
def test_merged_states_equal_one_evaluation(every_metric, options: dict) -> None:
    qrels, run, train, feats = data(3)
    names = every_metric((5,))
    kw = {"train": train, "item_features": feats, "catalog": 60, **options}
    whole = metrics.evaluate(qrels, run, names, **kw)
    parts = []
    for g in range(3):  # users split three ways, as Spark's buckets split them
        q, r = (df[df["user"] % 3 == g] for df in (qrels, run))
        parts.append(metrics.evaluate(q, r, names, **kw).state)
    summary, counts = metrics.finish_state(metrics.merge_states(parts), names, 60, **options)
    assert counts == whole.counts
    for name in names:
        x, y = whole.summary[name], summary[name]
        assert (np.isnan(x) and np.isnan(y)) or abs(x - y) <= 1e-12, (name, x, y)
    # the pooled ones, checked against a naive computation
    top = run.sort_values(["user", "score", "item"], ascending=[True, False, True])
    top = top[top["user"].isin(qrels["user"])].groupby("user").head(5)
    assert summary["coverage@5"] == pytest.approx(top["item"].nunique() / 60, abs=1e-12)


def _toy_miss_rate() -> metrics.MetricDef:
    """A metric the library does not have, declared in one place: its kernel (items in the top
    k that are not relevant) and its reduction (a ratio of sums, Σ misses / Σ list lengths,
    which is not the mean of the per-user rates)."""
    from metrics.reduce import Part, Pooled

    def misses(j: metrics.Judged, *, k: int | None) -> np.ndarray:
        return np.minimum(j.n_ret, j.cut(k)) - j.hits_at(k)

    def compute(view, spec) -> Part:  # type: ignore[no-untyped-def]
        miss = misses(view.judged, k=spec.k)
        length = np.minimum(view.judged.n_ret, view.judged.cut(spec.k)).astype(np.float64)
        rate = np.full(len(length), np.nan)
        np.divide(miss, length, out=rate, where=length > 0)
        return Part(rate, {"miss": miss, "len": length})

    return metrics.MetricDef(
        "toy_miss_rate",
        "ranking",
        misses,
        "misses in the top k / list length, pooled over users",
        needs_relevant=False,
        compute=compute,
        reduction=Pooled(("miss", "len"), lambda s: s["miss"] / s["len"]),
    )


@pytest.fixture
def toy_metric():
    """``toy_miss_rate`` registered for one test."""
    from metrics.registry import register, unregister

    register(_toy_miss_rate())
    try:
        yield "toy_miss_rate"
    finally:
        unregister("toy_miss_rate")


def test_a_new_metric_is_one_declaration(toy_metric: str) -> None:
    # top-2 lists: u1 [a (relevant), x] → 1 miss of 2; u2 [y, z] → 2 of 2; u3 [d (relevant)] →
    # 0 of 1. Pooled: 3 / 5 = 0.6 (the mean of the per-user rates would be 0.5).
    qrels = pd.DataFrame(
        {"user": [1, 1, 2, 3], "item": ["a", "b", "c", "d"], "relevance": [1, 1, 1, 1]}
    )
    run = pd.DataFrame(
        {
            "user": [1, 1, 1, 2, 2, 3],
            "item": ["a", "x", "b", "y", "z", "d"],
            "score": [0.9, 0.8, 0.7, 0.9, 0.8, 0.5],
        }
    )
    name = f"{toy_metric}@2"
    ev = metrics.evaluate(qrels, run, [name, "precision@2"])
    assert ev.summary[name] == pytest.approx(0.6, abs=1e-15)
    assert ev.per_user[name].tolist() == [0.5, 1.0, 0.0]
    parts = [
        metrics.evaluate(qrels[qrels["user"] == u], run[run["user"] == u], [name]).state
        for u in (1, 2, 3)
    ]
    summary, _ = metrics.finish_state(metrics.merge_states(parts), [name])
    assert summary[name] == pytest.approx(0.6, abs=1e-15)
