"""The registered metrics: one entry each, with how it is computed per batch of users and how its
per-user values reduce (:mod:`metrics.reduce`); the engines run these entries and name no metric."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from metrics import beyond, ranking, rating, scores
from metrics.reduce import (
    BatchView,
    Counted,
    Finish,
    Mean,
    Micro,
    Part,
    Pooled,
    Sum,
    Weighted,
)
from metrics.registry import MetricDef, MetricSpec, register


def _with_micro_pieces(view: BatchView, spec: MetricSpec) -> Part:
    """The kernel's values and the pieces a micro average pools (hits, list length, relevant
    items)."""
    j, d = view.judged, spec.definition
    pieces = {
        "hits": ranking.hits_at(j, k=spec.k),
        "nret": ranking.num_ret(j, k=spec.k),
        "nrel": np.asarray(j.n_rel, dtype=np.float64),
    }
    return Part(d.kernel(j, k=spec.k, **d.kernel_options(view.opts)), pieces)


def _micro_precision(s: Mapping[str, float]) -> float:
    return s["hits"] / max(s["nret"], 1)


def _micro_recall(s: Mapping[str, float]) -> float:
    return s["hits"] / max(s["nrel"], 1)


def _micro_f1(s: Mapping[str, float]) -> float:
    p, r = _micro_precision(s), _micro_recall(s)
    return 2 * p * r / (p + r) if p + r else 0.0


_MICRO = {
    "precision": Micro(Pooled(("hits", "nret"), _micro_precision)),
    "recall": Micro(Pooled(("hits", "nrel"), _micro_recall)),
    "f1": Micro(Pooled(("hits", "nret", "nrel"), _micro_f1)),
}
_OPTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "precision": (("denominator", "precision_denominator"),),
    "f1": (("denominator", "precision_denominator"),),
    "ap": (("denominator", "ap_denominator"),),
    "idcg": (("ideal", "ideal_dcg"),),
    "ndcg": (("ideal", "ideal_dcg"),),
}

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
            _name,
            "ranking",
            _kernel,
            _text,
            bounded=_name not in _UNBOUNDED,
            aliases=_aliases,
            options=_OPTIONS.get(_name, ()),
            compute=_with_micro_pieces if _name in _MICRO else None,
            reduction=_MICRO.get(_name, Mean()),
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
        depth="relevant",
    )
)
for _name, _kernel, _text, _depth in [
    (
        "num_ret",
        ranking.num_ret,
        "number of items in the list (cut at k); summed over users",
        "cutoff",
    ),
    ("num_rel", ranking.num_rel, "number of relevant test items |T_u|; summed over users", "none"),
    (
        "num_rel_ret",
        ranking.num_rel_ret,
        "relevant items retrieved (cut at k); summed over users",
        "cutoff",
    ),
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
            reduction=Sum(),
            depth=_depth,
        )
    )


# ---------------------------------------------------------------------------------- scores
_AUC_COUNTS = (("auc_undefined_users", "auc_undefined"),)


def _auc_part(view: BatchView, spec: MetricSpec) -> Part:
    """Per-user AUC of the batch's candidates."""
    values = scores.user_auc(view.auc)
    return Part(values, {"auc_undefined": np.isnan(values)})


def _gauc_part(view: BatchView, spec: MetricSpec) -> Part:
    """Per-user AUC and its weight (``gauc_weight``)."""
    values = scores.user_auc(view.auc)
    weight = scores.gauc_weights(view.auc, view.opts.gauc_weight)
    return Part(values, {"auc_undefined": np.isnan(values), "weight": weight})


def _global_auc_part(view: BatchView, spec: MetricSpec) -> Part:
    """No per-user value; the batch's relevant / irrelevant candidates per distinct score."""
    _, score, relevant = view.candidates
    distinct, inverse = np.unique(score, return_inverse=True)
    table = pd.DataFrame(
        {
            "pos": np.bincount(inverse[relevant], minlength=len(distinct)),
            "neg": np.bincount(inverse[~relevant], minlength=len(distinct)),
        },
        index=pd.Index(distinct, name="score"),
    ).astype(np.int64)
    undefined = np.isnan(scores.user_auc(view.auc))
    return Part(np.full(len(view.users), np.nan), {"auc_undefined": undefined}, table)


def _pooled_auc(hist: pd.DataFrame | None, name: str, env: Finish) -> float:
    """AUC over every pooled (relevant, irrelevant) pair from a score histogram (ties 1/2).

    Integer counts: the numerator ``2 · wins`` is exact."""
    if hist is None:
        return float("nan")
    hist = hist.sort_index()
    pos = hist["pos"].to_numpy(dtype=np.int64)
    neg = hist["neg"].to_numpy(dtype=np.int64)
    neg_before = np.cumsum(neg) - neg
    wins2 = int((pos * (2 * neg_before + neg)).sum())
    pairs = float(pos.sum()) * float(neg.sum())
    return float(wins2 / 2) / pairs if pairs > 0 else float("nan")


register(
    MetricDef(
        "auc",
        "score",
        scores.auc,
        "per user P(score of relevant > score of irrelevant), ties 1/2; mean over users",
        cutoff="none",
        needs_relevant=False,
        compute=_auc_part,
        depth="none",
        inputs=frozenset({"candidates"}),
        counts=_AUC_COUNTS,
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
        compute=_gauc_part,
        reduction=Weighted("weight"),
        depth="none",
        inputs=frozenset({"candidates"}),
        counts=_AUC_COUNTS,
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
        compute=_global_auc_part,
        reduction=Counted(lambda spec: "scores", _pooled_auc),
        depth="none",
        inputs=frozenset({"candidates"}),
        counts=_AUC_COUNTS,
    )
)


# ---------------------------------------------------------------------------------- rating
def _errors_part(which: int, root: bool) -> Callable[[BatchView, MetricSpec], Part]:
    """Per-user error (``which``: 0 squared, 1 absolute; ``root``: square root of the mean)
    and the pooled pieces ``err`` (the sum) and ``n`` (the pairs)."""

    def compute(view: BatchView, spec: MetricSpec) -> Part:
        errors, n = view.errors[which], view.errors[2]
        with np.errstate(invalid="ignore", divide="ignore"):
            per = errors / n
        values = np.where(n > 0, np.sqrt(per) if root else per, np.nan)
        return Part(values, {"err": errors, "n": n})

    return compute


def _pooled_error(root: bool) -> Callable[[Mapping[str, float]], float]:
    def value(s: Mapping[str, float]) -> float:
        mean = s["err"] / s["n"] if s["n"] else float("nan")
        return float(np.sqrt(mean)) if root else float(mean)

    return value


for _name, _kernel, _text, _which, _root in [
    ("rmse", rating.rmse, "sqrt(mean (predicted - true)^2) over pairs in both tables", 0, True),
    ("mae", rating.mae, "mean |predicted - true| over pairs in both tables", 1, False),
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
            compute=_errors_part(_which, _root),
            reduction=Pooled(("err", "n"), _pooled_error(_root)),
            depth="none",
            inputs=frozenset({"candidates"}),
            counts=(("rating_pairs", "n"),),
        )
    )


# ------------------------------------------------------------------------------ whole run
def _top_key(spec: MetricSpec) -> str:
    return f"top@{spec.k}" if spec.k is not None else "top"


def _top_counts(view: BatchView, spec: MetricSpec) -> Part:
    """No per-user value; how often each item is in the batch's top-k lists."""
    valid, top = view.top(spec.k)
    distinct, freq = np.unique(top[valid], return_counts=True)
    table = pd.DataFrame(
        {"n": freq.astype(np.int64)},
        index=pd.Index(view.prep.item_ids(distinct), name="item"),
    )
    return Part(np.full(len(view.users), np.nan), table=table)


def _freq(table: pd.DataFrame | None) -> np.ndarray:
    freq = np.zeros(0) if table is None else table["n"].to_numpy(dtype=np.float64)
    return freq[freq > 0]


def _catalog_freq(table: pd.DataFrame | None, name: str, env: Finish) -> tuple[np.ndarray, int]:
    """The recommendation counts and the catalog size (which must hold every counted item)."""
    freq = _freq(table)
    size = env.catalog_size(name)
    if len(freq) > size:
        raise ValueError(
            f"'catalog' has {size} items but the run recommends {len(freq)} "
            "distinct items; pass the full catalog"
        )
    return freq, size


def _coverage(table: pd.DataFrame | None, name: str, env: Finish) -> float:
    freq, size = _catalog_freq(table, name, env)
    return beyond.coverage(np.arange(len(freq)), size)


def _gini(table: pd.DataFrame | None, name: str, env: Finish) -> float:
    freq, size = _catalog_freq(table, name, env)
    return beyond.gini(np.concatenate([freq, np.zeros(size - len(freq))]))


def _entropy(table: pd.DataFrame | None, name: str, env: Finish) -> float:
    return beyond.distributional_coverage(_freq(table))  # needs no catalog


def _popularity_part(novelty: bool) -> Callable[[BatchView, MetricSpec], Part]:
    """Per-user mean training popularity (count) of the top-k, or novelty (−log2 share)."""

    def compute(view: BatchView, spec: MetricSpec) -> Part:
        valid, top = view.top(spec.k)
        popularity = view.popularity
        if popularity is None:
            raise ValueError(f"metric {str(spec)!r} needs train= for item popularity")
        count = np.zeros(top.shape)
        count[valid] = popularity.reindex(view.prep.item_ids(top[valid]), fill_value=0).to_numpy()
        if not novelty:
            return Part(beyond.popularity(count, valid))
        share = np.maximum(count, 1) / float(popularity.sum())
        return Part(beyond.novelty(share, valid))

    return compute


def _side_part(view: BatchView, spec: MetricSpec) -> Part:
    """A beyond-accuracy metric that reads side inputs (``metrics.side``)."""
    valid, top = view.top(spec.k)
    if view.side is None:
        raise ValueError(f"metric {str(spec)!r} needs its side inputs")
    c = top.shape[1]
    value = view.side.per_user(
        spec,
        view.prep.item_ids(top[valid]),
        valid,
        view.judged.hits[:, :c],
        view.prep.users[view.users],
    )
    return Part(np.asarray(value, dtype=np.float64))


def _exposure_part(view: BatchView, spec: MetricSpec) -> Part:
    """A group's share of the list's exposure, per user, and the two exposures pooled."""
    valid, top = view.top(spec.k)
    if view.side is None:
        raise ValueError(f"metric {str(spec)!r} needs its side inputs")
    num, den = view.side.per_user(
        spec,
        view.prep.item_ids(top[valid]),
        valid,
        view.judged.hits[:, : top.shape[1]],
        view.prep.users[view.users],
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        values = np.where(den > 0, num / den, np.nan)
    return Part(values, {"num": num, "den": den})


def _share(s: Mapping[str, float]) -> float:
    return float(s["num"] / s["den"]) if s["den"] > 0 else float("nan")


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
_RUN_STEPS: dict[str, dict[str, Any]] = {
    "coverage": {"compute": _top_counts, "reduction": Counted(_top_key, _coverage)},
    "gini": {"compute": _top_counts, "reduction": Counted(_top_key, _gini)},
    "distributional_coverage": {"compute": _top_counts, "reduction": Counted(_top_key, _entropy)},
    "novelty": {"compute": _popularity_part(True), "inputs": frozenset({"popularity"})},
    "popularity": {"compute": _popularity_part(False), "inputs": frozenset({"popularity"})},
}
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
            **_RUN_STEPS[_name],
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
            compute=_exposure_part if _name == "exposure" else _side_part,
            reduction=Pooled(("num", "den"), _share) if _name == "exposure" else Mean(),
            inputs=frozenset({"side"}),
            counts=(("{name}.undefined_users", "undefined"),),
        )
    )
