"""The registered metrics: one entry each, with the metadata the engines compute from."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from metrics import beyond, ranking, rating, scores
from metrics.registry import MetricDef, register

_RANKING = [
    ("precision", ranking.precision, "hits@k / k; micro: Σ hits / Σ |R_u@k|", ("p",)),
    ("recall", ranking.recall, "hits@k / |T_u|; micro: Σ hits / Σ |T_u|", ()),
    ("f1", ranking.f1, "2PR / (P + R), 0 when P + R = 0; micro from micro P and R", ()),
    ("hit_rate", ranking.hit_rate, "1 if hits@k > 0 else 0", ("hr", "success")),
    ("mrr", ranking.reciprocal_rank, "1 / rank of the first relevant item, 0 if none", ("rr",)),
    ("arhr", ranking.arhr, "Σ over hits of 1 / rank", ()),
    ("ap", ranking.average_precision, "Σ_{j<=k} P@j·rel(j) / D (D: ap_denominator)", ("map",)),
    ("cg", ranking.cg, "Σ_{i<=k} g(rel_i)", ()),
    ("dcg", ranking.dcg, "Σ_{i<=k} g(rel_i) / log2(i + 1)", ()),
    ("idcg", ranking.idcg, "dcg@k of the ideal ordering of all test relevances", ()),
    ("ndcg", ranking.ndcg, "dcg@k / idcg@k (0 when idcg = 0)", ()),
]
_UNBOUNDED = {"arhr", "cg", "dcg", "idcg"}
_kernel: Callable[..., Any]  # the loops below register kernels of different signatures

for _name, _kernel, _text, _aliases in _RANKING:
    register(
        MetricDef(
            _name, "ranking", _kernel, _text, bounded=_name not in _UNBOUNDED, aliases=_aliases
        )
    )
register(
    MetricDef(
        "r_precision",
        "ranking",
        ranking.r_precision,
        "precision at rank |T_u| (trec_eval Rprec)",
        cutoff="none",
        aliases=("rprec",),
    )
)
for _name, _kernel, _text in [
    ("num_ret", ranking.num_ret, "number of items in the list (cut at k); summed over users"),
    ("num_rel", ranking.num_rel, "number of relevant test items |T_u|; summed over users"),
    ("num_rel_ret", ranking.num_rel_ret, "relevant items retrieved (cut at k); summed over users"),
]:
    register(
        MetricDef(
            _name,
            "ranking",
            _kernel,
            _text,
            bounded=False,
            aggregation="sum",
            needs_relevant=False,
        )
    )

register(
    MetricDef(
        "auc",
        "score",
        scores.auc,
        "per user P(score of relevant > score of irrelevant), ties 1/2; mean over users",
        cutoff="none",
        needs_relevant=False,
    )
)
register(
    MetricDef(
        "gauc",
        "score",
        scores.gauc,
        "per-user AUC weighted by the user's number of scored candidates",
        cutoff="none",
        aggregation="pooled",
        needs_relevant=False,
    )
)
register(
    MetricDef(
        "global_auc",
        "score",
        scores.global_auc,
        "one AUC over all (user, item) pairs pooled",
        cutoff="none",
        aggregation="pooled",
        needs_relevant=False,
    )
)
for _name, _kernel, _text in [
    ("rmse", rating.rmse, "sqrt(mean (predicted - true)^2) over pairs in both tables"),
    ("mae", rating.mae, "mean |predicted - true| over pairs in both tables"),
]:
    register(
        MetricDef(
            _name,
            "rating",
            _kernel,
            _text,
            cutoff="none",
            higher_is_better=False,
            bounded=False,
            aggregation="pooled",
            needs_relevant=False,
        )
    )
_RUN: list[tuple[str, Callable[..., Any], str, str, bool, bool]] = [
    (
        "coverage",
        beyond.coverage,
        "distinct recommended items / catalog size",
        "pooled",
        True,
        True,
    ),
    (
        "novelty",
        beyond.novelty,
        "mean -log2 of the items' training popularity share",
        "mean",
        True,
        False,
    ),
    (
        "gini",
        beyond.gini,
        "Gini coefficient of recommendation counts over the catalog",
        "pooled",
        False,
        True,
    ),
    (
        "distributional_coverage",
        beyond.distributional_coverage,
        "entropy −Σ p_i log2 p_i of the items' shares of all recommendations",
        "pooled",
        True,
        False,
    ),
    (
        "popularity",
        beyond.popularity,
        "mean training interaction count of recommended items",
        "mean",
        False,
        False,
    ),
]
for _name, _run_kernel, _text, _agg, _hib, _bounded in _RUN:
    register(
        MetricDef(
            _name,
            "run",
            _run_kernel,
            _text,
            higher_is_better=_hib,
            bounded=_bounded,
            aggregation=_agg,
            needs_relevant=False,
        )
    )
for _name, _text, _agg, _hib, _bounded, _needs in [
    (
        "diversity",
        "intra-list diversity 1 − mean_{i<j} sim(i, j) over the top-k (cosine of item features, "
        "embeddings or training co-occurrence; NaN for lists of < 2 items)",
        "mean",
        True,
        False,
        False,
    ),
    (
        "unexpectedness",
        "share of the top-k outside the popularity top-k of training (serendipity_method="
        "'popularity'), or mean 1 − mean similarity to the user's history ('history')",
        "mean",
        True,
        False,
        False,
    ),
    (
        "serendipity",
        "mean over the top-k of unexpected(i) · relevant(i) (unexpected as in unexpectedness)",
        "mean",
        True,
        False,
        True,
    ),
    (
        "miscalibration",
        "KL(p ‖ (1 − α) q + α p) of the category distributions of the history (p) and the "
        "top-k (q), α = calibration_alpha",
        "mean",
        False,
        False,
        False,
    ),
    (
        "exposure",
        "share of position-discounted exposure Σ 1/log2(rank + 1) that an item group receives "
        "(exposure_<group>@k; groups from item_groups or popularity head/mid/tail)",
        "pooled",
        True,
        True,
        False,
    ),
]:
    register(
        MetricDef(
            _name,
            "run",
            {"diversity": beyond.intra_list_similarity}.get(_name) or getattr(beyond, _name),
            _text,
            cutoff="optional",
            higher_is_better=_hib,
            bounded=_bounded,
            aggregation=_agg,
            needs_relevant=_needs,
        )
    )
