"""Evaluation conventions: every choice on which libraries disagree is a named, logged option."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

__all__ = ["CHOICES", "PRESETS", "Options", "resolve_options"]

#: Allowed values of each categorical option, default first.
CHOICES: dict[str, tuple[str, ...]] = {
    "ap_denominator": ("min_k_relevant", "relevant", "hits", "k"),
    "gain": ("exponential", "linear", "binary"),
    "ideal_dcg": ("relevant", "k"),
    "precision_denominator": ("k", "list"),
    "ndcg_ties": ("ordered", "average"),
    "tie_break": ("item_asc", "item_desc", "input_order"),
    "id_order": ("natural", "string"),
    "user_set": ("truth", "intersection"),
    "empty_users": ("skip", "zero", "one"),
    "average": ("macro", "micro"),
    "gauc_weight": ("candidates", "positives"),
    "diversity_similarity": ("cosine", "jaccard"),
    "serendipity_method": ("popularity", "history"),
}


@dataclass(frozen=True)
class Options:
    """The conventions one evaluation uses; ``asdict`` of it is what gets logged next to numbers."""

    ap_denominator: str = "min_k_relevant"
    gain: str = "exponential"
    ideal_dcg: str = "relevant"
    precision_denominator: str = "k"
    ndcg_ties: str = "ordered"
    tie_break: str = "item_asc"
    id_order: str = "natural"
    user_set: str = "truth"
    empty_users: str = "skip"
    average: str = "macro"
    gauc_weight: str = "candidates"
    relevance_threshold: float = 1.0
    diversity_similarity: str = "cosine"
    serendipity_method: str = "popularity"
    calibration_alpha: float = 0.01
    preset: str = "default"

    def __post_init__(self) -> None:
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(
                    f"option {name!r} must be one of {', '.join(map(repr, allowed))} "
                    f"(got {value!r})"
                )
        thr = self.relevance_threshold
        if isinstance(thr, bool) or not isinstance(thr, int | float) or not thr > 0:
            raise ValueError(f"option 'relevance_threshold' must be a number > 0 (got {thr!r})")
        alpha = self.calibration_alpha
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha <= 1:
            raise ValueError(
                f"option 'calibration_alpha' must be a number in (0, 1] (got {alpha!r})"
            )

    def as_dict(self) -> dict[str, Any]:
        """Plain dict of every option (preset resolved), for logging."""
        return asdict(self)


#: Named bundles of options reproducing a library's conventions. Every preset names every
#: ranking convention (a library that has no such metric keeps the project's default, marked
#: "n/a"); beyond-accuracy options only where the library differs from the default.
#: Evidence: the file (version or commit) and line of the library's source each value follows;
#: tests/metrics_tests/test_metrics_presets.py checks each preset against that library's numbers.
PRESETS: dict[str, dict[str, Any]] = {
    "default": {
        "ap_denominator": "min_k_relevant",
        "gain": "exponential",
        "ideal_dcg": "relevant",
        "precision_denominator": "k",
        "ndcg_ties": "ordered",
        "tie_break": "item_asc",
        "id_order": "natural",
        "user_set": "truth",
        "empty_users": "skip",
        "average": "macro",
        "gauc_weight": "candidates",
    },
    # trec_eval 10.0 without -c; pass user_set="truth" on top for `trec_eval -c`.
    "trec_eval": {
        "ap_denominator": "relevant",
        "gain": "linear",
        "tie_break": "item_desc",
        "id_order": "string",  # trec_eval compares docnos with strcmp, also when they are numbers
        "user_set": "intersection",
        "empty_users": "zero",
        "average": "macro",
        "ideal_dcg": "relevant",  # ndcg_cut: ideal ordering of all judged relevances, cut at k
        "precision_denominator": "k",  # P_k: relevant retrieved in the top k / k
        "ndcg_ties": "ordered",
        "gauc_weight": "candidates",  # n/a: trec_eval has no GAUC
    },
    # RecBole 1.x, recbole/evaluator/metrics.py (commit 025bef6b) and evaluator/collector.py:
    "recbole": {
        "ap_denominator": "min_k_relevant",  # MAP.metric_info: actual_len = min(pos_len, K)
        "gain": "binary",  # NDCG.metric_info: dcg from pos_index (hit or not), no grades
        "ideal_dcg": "relevant",  # NDCG.metric_info: idcg_len = min(pos_len, K) ones
        "precision_denominator": "k",  # Precision.metric_info: cumsum(pos_index) / arange(1, K+1)
        "ndcg_ties": "ordered",
        # Collector.eval_batch_collect: torch.topk over internal item ids; its order of equal
        # scores is unspecified, item_asc is the nearest fixed rule
        "tie_break": "item_asc",
        "id_order": "natural",
        "user_set": "truth",  # full ranking: every test user gets a list
        "empty_users": "skip",  # only users with test positives are evaluated (Recall / pos_len)
        "average": "macro",  # TopkMetric.topk_result: mean over users
        "gauc_weight": "positives",  # GAUC.metric_info: (user_auc * pos_len).sum() / pos_len.sum()
    },
    # Microsoft Recommenders 1.2.1, recommenders/evaluation/python_evaluation.py (:line):
    "ms_recommenders": {
        "ap_denominator": "min_k_relevant",  # :833 map_at_k: rr / min(actual, k) (`map`: relevant)
        "gain": "binary",  # :611,657 ndcg_at_k: score_type="binary" (rel = 1) by default
        "ideal_dcg": "relevant",  # :676-688 ndcg_at_k: idcg over the user's true rows, head(k)
        "precision_denominator": "k",  # :496 precision_at_k: hit / k, also for shorter lists
        "ndcg_ties": "ordered",
        # :864-870 get_top_k_items: sort_values([user, prediction]), head(k); equal predictions
        # keep their input order (pandas' multi-column sort is stable; checked on tied scores)
        "tie_break": "input_order",
        "id_order": "natural",
        "user_set": "intersection",  # :409-412 common_users (ndcg_at_k :653 outer-joins: truth)
        # every rating_true row counts as relevant, so each evaluated user has one
        "empty_users": "skip",
        "average": "macro",  # Σ per-user value / n_users
        "gauc_weight": "candidates",  # n/a: only a pooled `auc`
        # user_serendipity: mean over the list of (1 - mean cosine to the user's train items)
        # times relevance; user_diversity: cosine of co-occurrence or item feature vectors
        "serendipity_method": "history",
    },
    # ranx 0.3.21, ranx/metrics/*.py and ranx/data_structures/*.py:
    "ranx": {
        "ap_denominator": "relevant",  # average_precision.py:42: / qrels.shape[0]
        "gain": "linear",  # ndcg.py:36,186: Järvelin (rel / log2(i + 1)); ndcg_burges = exponential
        "ideal_dcg": "relevant",  # ndcg.py:52: _idcg = _dcg(qrels, qrels, k)
        "precision_denominator": "k",  # precision.py:17: hits / k
        "ndcg_ties": "ordered",
        # common.py:59,82: np.argsort on -score inside numba: stable (input order) for lists of
        # fewer than 16 items, unspecified beyond
        "tie_break": "input_order",
        "id_order": "natural",
        "user_set": "truth",  # run.py:142-147 make_comparable: missing queries get empty runs
        "empty_users": "zero",  # average_precision.py:14 / ndcg.py:63: no relevant → 0.0
        "average": "macro",  # meta/evaluate.py:167: np.mean over queries
        "gauc_weight": "candidates",  # n/a
    },
    # torchmetrics 1.9, src/torchmetrics/functional/retrieval/*.py and retrieval/base.py:
    "torchmetrics": {
        "ap_denominator": "hits",  # average_precision.py:62: mean over the hit positions
        "gain": "linear",  # ndcg.py: raw target values as gains
        "ideal_dcg": "relevant",  # ndcg.py:106: _dcg_sample_scores(target, target, top_k)
        "precision_denominator": "k",  # precision.py:59,71: / top_k; adaptive_k=True → "list"
        "ndcg_ties": "average",  # ndcg.py:67,105: _tie_average_dcg (ignore_ties=False)
        # precision.py:69 topk / recall.py:63 argsort: order of equal scores unspecified
        "tie_break": "input_order",
        "id_order": "natural",
        "user_set": "intersection",  # only queries with predictions exist
        "empty_users": "zero",  # base.py:107,175: empty_target_action="neg" → 0 ("pos" → one)
        "average": "macro",  # base.py:33: values.mean()
        "gauc_weight": "candidates",  # n/a
    },
    # rectools 0.19, rectools/metrics/ranking.py, classification.py, base.py:
    "rectools": {
        "ap_denominator": "relevant",  # ranking.py:286: / n_relevant_items (divide_by_k → "k")
        "gain": "binary",  # ranking.py:444: (rank <= k) / log2(rank + 1)
        "ideal_dcg": "k",  # ranking.py:380,463: divide_by_achievable=False → all k positions
        "precision_denominator": "k",  # classification.py:291: tp / k (r_precision: min(k, liked))
        "ndcg_ties": "ordered",
        "tie_break": "input_order",  # reco carries ranks, taken as given
        "id_order": "natural",
        "user_set": "truth",  # base.py:101: interactions left-join reco
        "empty_users": "skip",  # interactions are relevant pairs only
        "average": "macro",  # ranking.py:64: per_user.mean()
        "gauc_weight": "candidates",  # n/a
    },
}


def resolve_options(preset: str | None = None, **overrides: Any) -> Options:
    """Build :class:`Options` from a preset plus explicit overrides (overrides win).

    >>> resolve_options("trec_eval").gain
    'linear'
    >>> resolve_options("trec_eval", user_set="truth").user_set
    'truth'
    """
    name = "default" if preset is None else preset
    if name not in PRESETS:
        raise ValueError(
            f"option 'preset' must be one of {', '.join(map(repr, PRESETS))} (got {name!r})"
        )
    known = {f.name for f in fields(Options)} - {"preset"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"unknown option {unknown[0]!r}; known options: {', '.join(sorted(known))}, preset"
        )
    values = {**PRESETS[name], **{k: v for k, v in overrides.items() if v is not None}}
    return replace(Options(preset=name), **values)
