"""Reference values from METRICS.md, written out as arithmetic (relevance at each rank in comments).

Every number here comes from the spec or from the arithmetic next to it, never from running the
library. Ranked lists are passed through ``metrics.evaluate`` as runs whose scores produce the
listed order.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

import metrics
from metrics import ranking, scores, stats
from metrics.judged import Judged

TOL = 1e-9


def log2(x: float) -> float:
    return math.log2(x)


def run_of(lists: dict, *, start: float = 100.0) -> pd.DataFrame:
    """A run whose scores rank each user's items in the given order (best first)."""
    rows = [
        (user, item, start - rank)
        for user, items in lists.items()
        for rank, item in enumerate(items)
    ]
    return pd.DataFrame(rows, columns=["user", "item", "score"])


def qrels_of(truth: dict) -> pd.DataFrame:
    """Qrels from {user: {item: relevance}}."""
    rows = [(user, item, rel) for user, items in truth.items() for item, rel in items.items()]
    return pd.DataFrame(rows, columns=["user", "item", "relevance"])


# ---------------------------------------------------------------------------------------------
# Worked example 1: AP, seed 000
# ---------------------------------------------------------------------------------------------
# list e, b, a, d, c; relevant {b, d}
# rank: 1  2  3  4  5
# rel:  0  1  0  1  0      P@2 = 1/2, P@4 = 2/4
EX1_AP = (1 / 2 + 2 / 4) / 2


@pytest.mark.parametrize("denominator", ["relevant", "min_k_relevant", "hits"])
def test_example1_ap_seed000(denominator):
    assert EX1_AP == 0.5
    qrels = qrels_of({"u": {"b": 1, "d": 1}})
    run = run_of({"u": ["e", "b", "a", "d", "c"]})
    ev = metrics.evaluate(qrels, run, ["ap@5", "map@5", "map"], ap_denominator=denominator)
    for name in ("ap@5", "map@5", "map"):
        assert abs(ev.summary[name] - 0.5) < TOL
    assert abs(ev.per_user.loc["u", "ap@5"] - 0.5) < TOL


@pytest.mark.parametrize("denominator", ["relevant", "min_k_relevant", "hits"])
def test_example1_ap_kernel(denominator):
    j = Judged.from_lists([[0, 1, 0, 1, 0]])
    got = ranking.average_precision(j, k=5, denominator=denominator)
    assert got.shape == (1,)
    assert abs(got[0] - 0.5) < TOL


# ---------------------------------------------------------------------------------------------
# Worked example 2: MAP of APs 0.4, 0.5, 0.6, 0.9 = 0.6 (seed 000)
# Every relevant item is in the list and k >= |T|, so all three denominators agree.
# ---------------------------------------------------------------------------------------------
def _ranks_to_list(user: str, hit_ranks: list[int], length: int):
    items = [f"{user}_{r}" for r in range(1, length + 1)]
    truth = {f"{user}_{r}": 1 for r in hit_ranks}
    return items, truth


EX2 = {
    # hits at ranks 2, 5, 10: (1/2 + 2/5 + 3/10) / 3 = 1.2 / 3 = 0.4
    "u1": ([2, 5, 10], (1 / 2 + 2 / 5 + 3 / 10) / 3),
    # seed 000 example: hits at 2, 4: (1/2 + 2/4) / 2 = 0.5
    "u2": ([2, 4], (1 / 2 + 2 / 4) / 2),
    # hits at 1, 10: (1/1 + 2/10) / 2 = 0.6
    "u3": ([1, 10], (1 / 1 + 2 / 10) / 2),
    # hits at 1, 2, 3, 4, 10: (1 + 1 + 1 + 1 + 5/10) / 5 = 0.9
    "u4": ([1, 2, 3, 4, 10], (1 + 1 + 1 + 1 + 5 / 10) / 5),
}


@pytest.mark.parametrize("denominator", ["relevant", "min_k_relevant", "hits"])
def test_example2_map_seed000(denominator):
    expected_ap = {"u1": 0.4, "u2": 0.5, "u3": 0.6, "u4": 0.9}
    lists, truth = {}, {}
    for user, (hit_ranks, ap) in EX2.items():
        assert abs(ap - expected_ap[user]) < TOL
        lists[user], truth[user] = _ranks_to_list(user, hit_ranks, 10)
    ev = metrics.evaluate(
        qrels_of(truth), run_of(lists), ["map", "map@10"], ap_denominator=denominator
    )
    assert abs(ev.summary["map"] - 0.6) < TOL
    assert abs(ev.summary["map@10"] - 0.6) < TOL
    for user, ap in expected_ap.items():
        assert abs(ev.per_user.loc[user, "map"] - ap) < TOL


# ---------------------------------------------------------------------------------------------
# Worked examples 3 and 4: NDCG of 7, 2, 5, 10, 1 (seed 000)
# ---------------------------------------------------------------------------------------------
EX3_REL = [7, 2, 5, 10, 1]
# linear: DCG = 7/log2(2) + 2/log2(3) + 5/log2(4) + 10/log2(5) + 1/log2(6)
EX3_DCG_LIN = 7 / log2(2) + 2 / log2(3) + 5 / log2(4) + 10 / log2(5) + 1 / log2(6)
# ideal 10, 7, 5, 2, 1
EX3_IDCG_LIN = 10 / log2(2) + 7 / log2(3) + 5 / log2(4) + 2 / log2(5) + 1 / log2(6)
# exponential: gains 2^rel - 1 = 127, 3, 31, 1023, 1
EX4_DCG_EXP = 127 / log2(2) + 3 / log2(3) + 31 / log2(4) + 1023 / log2(5) + 1 / log2(6)
EX4_IDCG_EXP = 1023 / log2(2) + 127 / log2(3) + 31 / log2(4) + 3 / log2(5) + 1 / log2(6)


def _ex3_inputs():
    items = list("abcde")
    qrels = qrels_of({"u": dict(zip(items, EX3_REL, strict=True))})
    return qrels, run_of({"u": items})


def test_example3_arithmetic_matches_spec():
    assert abs(EX3_DCG_LIN - 15.455477895) < TOL
    assert abs(EX3_IDCG_LIN - 18.164714198) < TOL
    assert abs(EX3_DCG_LIN / EX3_IDCG_LIN - 0.850851697) < TOL
    assert abs(EX4_DCG_EXP - 585.361760977) < TOL
    assert abs(EX4_IDCG_EXP - 1120.306961185) < TOL
    assert abs(EX4_DCG_EXP / EX4_IDCG_EXP - 0.522501226) < TOL


@pytest.mark.parametrize(
    ("gain", "dcg", "idcg", "ndcg"),
    [
        ("linear", 15.455477895, 18.164714198, 0.850851697),
        ("exponential", 585.361760977, 1120.306961185, 0.522501226),
    ],
)
def test_examples3_4_ndcg_seed000(gain, dcg, idcg, ndcg):
    qrels, run = _ex3_inputs()
    ev = metrics.evaluate(qrels, run, ["dcg@5", "idcg@5", "ndcg@5", "ndcg", "cg@5"], gain=gain)
    assert abs(ev.summary["dcg@5"] - dcg) < TOL
    assert abs(ev.summary["idcg@5"] - idcg) < TOL
    assert abs(ev.summary["ndcg@5"] - ndcg) < TOL
    assert abs(ev.summary["ndcg"] - ndcg) < TOL
    cg = 7 + 2 + 5 + 10 + 1 if gain == "linear" else 127 + 3 + 31 + 1023 + 1
    assert abs(ev.summary["cg@5"] - cg) < TOL


@pytest.mark.parametrize(("gain", "ndcg"), [("linear", 0.850851697), ("exponential", 0.522501226)])
def test_examples3_4_kernel(gain, ndcg):
    j = Judged.from_lists([EX3_REL], gain=gain)
    assert abs(ranking.ndcg(j, k=5)[0] - ndcg) < TOL


def test_example4_seed_rounding_is_not_copied():
    # seed 000 prints 0.53; the exact value is 0.5225 (METRICS.md)
    qrels, run = _ex3_inputs()
    ev = metrics.evaluate(qrels, run, ["ndcg@5"], gain="exponential")
    assert round(ev.summary["ndcg@5"], 4) == 0.5225


# ---------------------------------------------------------------------------------------------
# Worked example 5: 3, 2, 3, 0, 1, 2 (seed 002 / 003)
# ---------------------------------------------------------------------------------------------
EX5_REL = [3, 2, 3, 0, 1, 2]
EX5_CG = 3 + 2 + 3 + 0 + 1 + 2
EX5_DCG_LIN = 3 / log2(2) + 2 / log2(3) + 3 / log2(4) + 0 / log2(5) + 1 / log2(6) + 2 / log2(7)
# ideal: 3, 3, 2, 2, 1, 0
EX5_IDCG_LIN = 3 / log2(2) + 3 / log2(3) + 2 / log2(4) + 2 / log2(5) + 1 / log2(6) + 0 / log2(7)
# exponential gains: 7, 3, 7, 0, 1, 3; ideal 7, 7, 3, 3, 1, 0
EX5_DCG_EXP = 7 / log2(2) + 3 / log2(3) + 7 / log2(4) + 0 / log2(5) + 1 / log2(6) + 3 / log2(7)
EX5_IDCG_EXP = 7 / log2(2) + 7 / log2(3) + 3 / log2(4) + 3 / log2(5) + 1 / log2(6) + 0 / log2(7)


def test_example5_arithmetic_matches_spec():
    assert EX5_CG == 11
    assert abs(EX5_DCG_LIN - 6.861126689) < TOL
    assert abs(EX5_IDCG_LIN - 7.140995184) < TOL
    assert abs(EX5_DCG_LIN / EX5_IDCG_LIN - 0.960808194) < TOL
    assert abs(EX5_DCG_EXP - 13.848263629) < TOL
    assert abs(EX5_IDCG_EXP - 14.595390756) < TOL
    assert abs(EX5_DCG_EXP / EX5_IDCG_EXP - 0.948810749) < TOL


@pytest.mark.parametrize("zero_row", [True, False], ids=["rel0-in-qrels", "rel0-unjudged"])
@pytest.mark.parametrize(
    ("gain", "cg", "dcg", "idcg", "ndcg"),
    [
        ("linear", 11, 6.861126689, 7.140995184, 0.960808194),
        ("exponential", 7 + 3 + 7 + 0 + 1 + 3, 13.848263629, 14.595390756, 0.948810749),
    ],
)
def test_example5_ndcg_seed002(gain, cg, dcg, idcg, ndcg, zero_row):
    items = list("abcdef")
    truth = dict(zip(items, EX5_REL, strict=True))
    if not zero_row:
        del truth["d"]  # the rank-4 item (relevance 0) is simply not judged
    ev = metrics.evaluate(
        qrels_of({"u": truth}),
        run_of({"u": items}),
        ["cg@6", "dcg@6", "idcg@6", "ndcg@6"],
        gain=gain,
    )
    assert abs(ev.summary["cg@6"] - cg) < TOL
    assert abs(ev.summary["dcg@6"] - dcg) < TOL
    assert abs(ev.summary["idcg@6"] - idcg) < TOL
    assert abs(ev.summary["ndcg@6"] - ndcg) < TOL


def test_example5_kernels():
    j = Judged.from_lists([EX5_REL], gain="linear")
    assert abs(ranking.cg(j, k=6)[0] - 11) < TOL
    assert abs(ranking.dcg(j, k=6)[0] - 6.861126689) < TOL
    assert abs(ranking.idcg(j, k=6)[0] - 7.140995184) < TOL
    assert abs(ranking.ndcg(j, k=6)[0] - 0.960808194) < TOL
    j = Judged.from_lists([EX5_REL], gain="exponential")
    assert abs(ranking.ndcg(j, k=6)[0] - 0.948810749) < TOL


def test_idcg_uses_all_test_relevances_not_only_listed():
    # list: rel 1, 0 ; the user also has an unlisted item of relevance 3
    # linear: DCG@2 = 1/log2(2) = 1 ; IDCG@2 = 3/log2(2) + 1/log2(3)
    qrels = qrels_of({"u": {"a": 1, "z": 3}})
    run = run_of({"u": ["a", "b"]})
    ev = metrics.evaluate(qrels, run, ["ndcg@2", "idcg@2", "idcg@1"], gain="linear")
    assert abs(ev.summary["idcg@2"] - (3 + 1 / log2(3))) < TOL
    assert abs(ev.summary["idcg@1"] - 3) < TOL
    assert abs(ev.summary["ndcg@2"] - 1 / (3 + 1 / log2(3))) < TOL


# ---------------------------------------------------------------------------------------------
# Worked example 6: micro vs macro (seed 003 "HR", seed 002 formulas 3 and 4)
# ---------------------------------------------------------------------------------------------
def _ex6():
    # |T| = 10, 12, 8 ; hits in top 10 = 6, 5, 4 ; every list has exactly 10 items
    spec = {"u1": (10, 6), "u2": (12, 5), "u3": (8, 4)}
    truth, lists = {}, {}
    for user, (n_rel, hits) in spec.items():
        listed = [f"{user}_hit{i}" for i in range(hits)] + [
            f"{user}_miss{i}" for i in range(10 - hits)
        ]
        relevant = [f"{user}_hit{i}" for i in range(hits)] + [
            f"{user}_unlisted{i}" for i in range(n_rel - hits)
        ]
        truth[user] = dict.fromkeys(relevant, 1)
        lists[user] = listed
    return qrels_of(truth), run_of(lists)


def test_example6_micro_recall_and_precision():
    qrels, run = _ex6()
    ev = metrics.evaluate(qrels, run, ["recall@10", "precision@10", "f1@10"], average="micro")
    # recall: (6 + 5 + 4) / (10 + 12 + 8) = 15 / 30
    assert abs(ev.summary["recall@10"] - 15 / 30) < TOL
    # precision: (6 + 5 + 4) / (10 + 10 + 10) = 15 / 30
    assert abs(ev.summary["precision@10"] - 15 / 30) < TOL
    # micro F1 from micro P and R: 2 * 0.5 * 0.5 / (0.5 + 0.5)
    assert abs(ev.summary["f1@10"] - 0.5) < TOL
    assert ev.options["average"] == "micro"


def test_example6_macro_differs():
    qrels, run = _ex6()
    ev = metrics.evaluate(qrels, run, ["recall@10", "precision@10", "f1@10"])
    recalls = [6 / 10, 5 / 12, 4 / 8]
    precisions = [6 / 10, 5 / 10, 4 / 10]
    f1s = [2 * p * r / (p + r) for p, r in zip(precisions, recalls, strict=True)]
    assert abs(ev.summary["recall@10"] - sum(recalls) / 3) < TOL
    assert abs(ev.summary["precision@10"] - sum(precisions) / 3) < TOL
    assert abs(ev.summary["f1@10"] - sum(f1s) / 3) < TOL
    assert ev.options["average"] == "macro"


def test_micro_precision_uses_list_length_when_shorter_than_k():
    # u1 lists 2 items (1 hit), u2 lists 4 items (2 hits); k = 5
    qrels = qrels_of({"u1": {"a": 1}, "u2": {"b": 1, "c": 1}})
    run = run_of({"u1": ["a", "x"], "u2": ["b", "c", "y", "z"]})
    ev = metrics.evaluate(qrels, run, ["precision@5"], average="micro")
    # Σ hits / Σ |R_u| = (1 + 2) / (2 + 4)
    assert abs(ev.summary["precision@5"] - 3 / 6) < TOL
    ev = metrics.evaluate(qrels, run, ["precision@5"])
    # macro: hits / k per user = (1/5 + 2/5) / 2
    assert abs(ev.summary["precision@5"] - (1 / 5 + 2 / 5) / 2) < TOL


# ---------------------------------------------------------------------------------------------
# Worked example 7: GSB (seed 001)
# ---------------------------------------------------------------------------------------------
def test_example7_gsb_from_labels():
    res = metrics.gsb_from_labels(["good", "same", "bad", "bad"])
    assert (res.good, res.same, res.bad) == (1, 1, 2)
    assert abs(res.delta - (1 - 2) / (1 + 1 + 2)) < TOL
    assert abs(res.delta - (-0.25)) < TOL


def test_example7_gsb_from_vectors():
    a = [0.5, 0.5, 0.5, 0.5]
    b = [0.9, 0.5, 0.1, 0.2]  # good, same, bad, bad
    res = metrics.gsb(a, b)
    assert (res.good, res.same, res.bad) == (1, 1, 2)
    assert abs(res.delta + 0.25) < TOL
    good, same, bad, delta = res
    assert (good, same, bad) == (1, 1, 2)
    assert abs(delta + 0.25) < TOL


def test_gsb_from_label_series():
    labels = pd.Series(["good", "same", "bad", "bad"], index=["q1", "q2", "q3", "q4"])
    assert abs(metrics.gsb_from_labels(labels).delta + 0.25) < TOL


def test_gsb_tolerance_absolute():
    a = [0.5, 0.5, 0.5, 0.5]
    b = [0.75, 0.5625, 0.4375, 0.25]
    # diffs +0.25 (good), +0.0625 (same), -0.0625 (same), -0.25 (bad) with tolerance 0.125
    res = metrics.gsb(a, b, tolerance=0.125)
    assert (res.good, res.same, res.bad) == (1, 2, 1)
    assert res.delta == 0.0
    # without tolerance: good, good, bad, bad
    res = metrics.gsb(a, b)
    assert (res.good, res.same, res.bad) == (2, 0, 2)


def test_gsb_tolerance_relative():
    a = [2.0, 2.0, 4.0, 4.0]
    b = [3.0, 2.25, 3.5, 5.5]
    # relative 0.25: margins 0.5, 0.5, 1.0, 1.0; diffs +1 good, +0.25 same, -0.5 same, +1.5 good
    res = metrics.gsb(a, b, tolerance=0.25, relative=True)
    assert (res.good, res.same, res.bad) == (2, 2, 0)
    assert abs(res.delta - 2 / 4) < TOL
    # absolute 0.25: +1 good, +0.25 same (not more than), -0.5 bad, +1.5 good
    res = metrics.gsb(a, b, tolerance=0.25)
    assert (res.good, res.same, res.bad) == (2, 1, 1)
    assert abs(res.delta - 1 / 4) < TOL


def test_gsb_difference_of_exactly_the_tolerance_is_same_whatever_its_rounding():
    """Found by an audit: precision@10 moves in steps of 0.1, and with tolerance 0.1 a one-hit
    gain counted "good" or "same" by its binary rounding (0.4 − 0.3 = 0.10000000000000003,
    0.3 − 0.2 = 0.09999999999999998). By hand: every one-step change is exactly the tolerance
    (same), a two-step one is beyond it; relative 10% of 0.3 is 0.03 (0.33: same, 0.34: good)."""
    a = [0.3, 0.7, 0.2, 0.6, 0.2, 0.4]
    b = [0.4, 0.8, 0.3, 0.5, 0.4, 0.1]
    res = metrics.gsb(a, b, tolerance=0.1)
    assert (res.good, res.same, res.bad) == (1, 4, 1)
    res = metrics.gsb([0.3, 0.3, 0.3], [0.33, 0.34, 0.27], tolerance=0.1, relative=True)
    assert (res.good, res.same, res.bad) == (1, 2, 0)
    # the comparison's bootstrap counts by the same rule
    one = stats.compare(np.array(a), np.array(b), tolerance=0.1, n_resamples=50)
    assert (one.gsb.good, one.gsb.same, one.gsb.bad) == (1, 4, 1)
    assert metrics.gsb([0.0], [1e-300]).good == 1  # no tolerance: any difference counts


def test_gsb_at_tolerance_0_does_not_count_rounding():
    """Found by an audit: two models with equal average precision 0.2 for a user got 0.2 and
    0.19999999999999998 (sums in another order), counted "bad" at tolerance 0. Rounding (within
    1e-12 of the larger value) is "same"; a real difference, however small, still counts."""
    a = [0.2, 0.5, 1 / 3, 0.2, 0.0]
    b = [0.19999999999999998, 0.5000000000000001, 0.1 + 0.2 + 1 / 3 - 0.3, 0.2000001, 1e-9]
    res = metrics.gsb(a, b)
    assert (res.good, res.same, res.bad) == (2, 3, 0)
    one = stats.compare(np.array(a), np.array(b), n_resamples=50)
    assert (one.gsb.good, one.gsb.same, one.gsb.bad) == (2, 3, 0)


def test_gsb_lower_is_better():
    # for RMSE-like metrics a decrease is good
    res = metrics.gsb([1.0, 1.0, 1.0], [0.5, 1.0, 2.0], higher_is_better=False)
    assert (res.good, res.same, res.bad) == (1, 1, 1)


def test_gsb_series_aligned_on_index():
    a = pd.Series([0.2, 0.5, 0.8], index=["u1", "u2", "u3"])
    b = pd.Series([0.9, 0.1, 0.6], index=["u3", "u1", "u2"])
    # aligned: u1 0.1 < 0.2 bad, u2 0.6 > 0.5 good, u3 0.9 > 0.8 good → (2 - 1) / 3
    # (positional pairing would give good, bad, bad → -1/3)
    res = metrics.gsb(a, b)
    assert (res.good, res.same, res.bad) == (2, 0, 1)
    assert abs(res.delta - 1 / 3) < TOL


def test_gsb_series_mismatched_index_raises():
    a = pd.Series([0.2, 0.5], index=["u1", "u2"])
    b = pd.Series([0.9, 0.1], index=["u1", "u3"])
    with pytest.raises(ValueError, match="different units"):
        metrics.gsb(a, b)


def test_gsb_nan_units_excluded():
    res = metrics.gsb([0.5, np.nan, 0.5], [0.6, 0.7, 0.4])
    assert (res.good, res.same, res.bad, res.excluded) == (1, 0, 1, 1)
    assert res.delta == 0.0


def test_gsb_from_per_user_of_two_runs():
    # model A ranks the relevant item 2nd for both users, B ranks it 1st for u1 and 3rd for u2
    qrels = qrels_of({"u1": {"a": 1}, "u2": {"a": 1}})
    run_a = run_of({"u1": ["x", "a", "y"], "u2": ["x", "a", "y"]})
    run_b = run_of({"u1": ["a", "x", "y"], "u2": ["x", "y", "a"]})
    pa = metrics.evaluate(qrels, run_a, ["mrr"]).per_user["mrr"]
    pb = metrics.evaluate(qrels, run_b, ["mrr"]).per_user["mrr"]
    res = metrics.gsb(pa, pb)  # u1: 1 > 1/2 good ; u2: 1/3 < 1/2 bad
    assert (res.good, res.same, res.bad) == (1, 0, 1)


# ---------------------------------------------------------------------------------------------
# Worked example 8: leave-one-out NDCG (seed 002 formula 15)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rank", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("gain", ["linear", "exponential"])
def test_example8_leave_one_out(rank, gain):
    items = [f"i{r}" for r in range(1, 11)]
    qrels = qrels_of({"u": {f"i{rank}": 1}})
    ev = metrics.evaluate(qrels, run_of({"u": items}), ["ndcg@10", "ndcg"], gain=gain)
    expected = 1 / log2(rank + 1)
    assert abs(ev.summary["ndcg@10"] - expected) < TOL
    assert abs(ev.summary["ndcg"] - expected) < TOL
    if rank == 3:
        assert abs(ev.summary["ndcg@10"] - 0.5) < TOL


# ---------------------------------------------------------------------------------------------
# AP@3: 0.333 / 0.556 / 0.833 under the three denominators
# ---------------------------------------------------------------------------------------------
# list a, x, b ; relevant {a, b, c, d, e} (|T| = 5)
# rank: 1  2  3
# rel:  1  0  1     Σ P@j·rel(j) = 1/1 + 2/3 = 5/3
#   relevant:        (5/3) / 5          = 1/3  = 0.333
#   min_k_relevant:  (5/3) / min(3, 5)  = 5/9  = 0.556
#   hits:            (5/3) / 2          = 5/6  = 0.833
AP3 = {"relevant": (1 + 2 / 3) / 5, "min_k_relevant": (1 + 2 / 3) / 3, "hits": (1 + 2 / 3) / 2}


@pytest.mark.parametrize(
    ("denominator", "rounded"), [("relevant", 0.333), ("min_k_relevant", 0.556), ("hits", 0.833)]
)
def test_ap_at_3_three_denominators(denominator, rounded):
    qrels = qrels_of({"u": dict.fromkeys("abcde", 1)})
    run = run_of({"u": ["a", "x", "b", "c", "d"]})
    ev = metrics.evaluate(qrels, run, ["ap@3"], ap_denominator=denominator)
    assert abs(ev.summary["ap@3"] - AP3[denominator]) < TOL
    assert round(ev.summary["ap@3"], 3) == rounded
    assert ev.options["ap_denominator"] == denominator
    j = Judged.from_lists([[1, 0, 1, 1, 1]], [[1, 1, 1, 1, 1]])
    assert (
        abs(ranking.average_precision(j, k=3, denominator=denominator)[0] - AP3[denominator]) < TOL
    )


def test_ap_default_denominator_is_min_k_relevant():
    qrels = qrels_of({"u": dict.fromkeys("abcde", 1)})
    run = run_of({"u": ["a", "x", "b", "c", "d"]})
    ev = metrics.evaluate(qrels, run, ["ap@3"])
    assert abs(ev.summary["ap@3"] - 5 / 9) < TOL
    assert ev.options["ap_denominator"] == "min_k_relevant"


@pytest.mark.parametrize("denominator", ["relevant", "min_k_relevant", "hits"])
def test_ap_without_hit_is_zero(denominator):
    qrels = qrels_of({"u": {"a": 1}})
    run = run_of({"u": ["x", "y", "z"]})
    ev = metrics.evaluate(qrels, run, ["ap@3", "map"], ap_denominator=denominator)
    assert ev.summary["ap@3"] == 0.0
    assert ev.summary["map"] == 0.0


# ---------------------------------------------------------------------------------------------
# empty_users, user_set and counts
# ---------------------------------------------------------------------------------------------
def _empty_user_case():
    # u1: relevant a at rank 1 → every metric 1 ; u2: judged items all relevance 0 (T empty)
    qrels = qrels_of({"u1": {"a": 1}, "u2": {"b": 0, "c": 0}})
    run = run_of({"u1": ["a", "x"], "u2": ["b", "c"]})
    return qrels, run


def test_empty_users_skip():
    qrels, run = _empty_user_case()
    names = ["ndcg@2", "map@2", "recall@2", "mrr"]
    ev = metrics.evaluate(qrels, run, names)
    for name in names:
        assert abs(ev.summary[name] - 1.0) < TOL
        assert np.isnan(ev.per_user.loc["u2", name])
    assert ev.counts["users_without_relevant"] == 1
    assert ev.options["empty_users"] == "skip"


def test_empty_users_zero():
    qrels, run = _empty_user_case()
    names = ["ndcg@2", "map@2", "recall@2", "mrr"]
    ev = metrics.evaluate(qrels, run, names, empty_users="zero")
    for name in names:
        assert abs(ev.summary[name] - (1.0 + 0.0) / 2) < TOL
        assert ev.per_user.loc["u2", name] == 0.0
    assert ev.counts["users_without_relevant"] == 1


def _user_set_case():
    # u1 is in both tables (relevant a at rank 2 → mrr 1/2); u2 only in the truth;
    # u3 only in the run
    qrels = qrels_of({"u1": {"a": 1}, "u2": {"b": 1}})
    run = run_of({"u1": ["x", "a"], "u3": ["b"]})
    return qrels, run


def test_user_set_truth():
    qrels, run = _user_set_case()
    ev = metrics.evaluate(qrels, run, ["mrr", "recall@2"], user_set="truth")
    assert list(ev.per_user.index) == ["u1", "u2"]
    assert ev.per_user.loc["u2", "mrr"] == 0.0
    assert abs(ev.summary["mrr"] - (1 / 2 + 0) / 2) < TOL
    assert abs(ev.summary["recall@2"] - (1 + 0) / 2) < TOL
    assert ev.counts["users"] == 2
    assert ev.counts["users_missing_from_run"] == 1
    assert ev.counts["run_users_not_in_truth"] == 1
    assert ev.counts["truth_users_not_evaluated"] == 0


def test_user_set_intersection():
    qrels, run = _user_set_case()
    ev = metrics.evaluate(qrels, run, ["mrr", "recall@2"], user_set="intersection")
    assert list(ev.per_user.index) == ["u1"]
    assert abs(ev.summary["mrr"] - 1 / 2) < TOL
    assert abs(ev.summary["recall@2"] - 1.0) < TOL
    assert ev.counts["users"] == 1
    assert ev.counts["truth_users_not_evaluated"] == 1
    assert ev.counts["users_missing_from_run"] == 0
    assert ev.counts["run_users_not_in_truth"] == 1


def test_user_set_default_is_truth_and_trec_preset_intersection():
    qrels, run = _user_set_case()
    assert metrics.evaluate(qrels, run, ["mrr"]).options["user_set"] == "truth"
    ev = metrics.evaluate(qrels, run, ["mrr"], preset="trec_eval")
    assert ev.options["user_set"] == "intersection"
    assert list(ev.per_user.index) == ["u1"]


# ---------------------------------------------------------------------------------------------
# tie_break
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tie_break", "expected_rr"),
    [
        ("item_asc", 1 / 2),  # top, then tied a, b, c → relevant a at rank 2
        ("item_desc", 1 / 4),  # top, c, b, a → rank 4
        ("input_order", 1 / 3),  # rows arrive top, b, a, c → rank 3
    ],
)
def test_tie_break_string_ids(tie_break, expected_rr):
    qrels = qrels_of({"u": {"a": 1}})
    run = pd.DataFrame(
        {"user": ["u"] * 4, "item": ["top", "b", "a", "c"], "score": [2.0, 1.0, 1.0, 1.0]}
    )
    ev = metrics.evaluate(qrels, run, ["mrr"], tie_break=tie_break)
    assert abs(ev.summary["mrr"] - expected_rr) < TOL
    assert ev.options["tie_break"] == tie_break


@pytest.mark.parametrize(
    ("tie_break", "expected_rr"),
    [
        ("item_asc", 1 / 3),  # numeric 2, 9, 10 → relevant 10 at rank 3
        ("item_desc", 1 / 1),  # 10, 9, 2 → rank 1
        ("input_order", 1 / 2),  # rows arrive 2, 10, 9 → rank 2
    ],
)
def test_tie_break_int_ids(tie_break, expected_rr):
    qrels = pd.DataFrame({"user": [1], "item": [10], "relevance": [1]})
    run = pd.DataFrame({"user": [1, 1, 1], "item": [2, 10, 9], "score": [0.5, 0.5, 0.5]})
    ev = metrics.evaluate(qrels, run, ["mrr"], tie_break=tie_break)
    assert abs(ev.summary["mrr"] - expected_rr) < TOL


def test_tie_break_item_desc_compares_strings():
    # trec_eval: ties by doc id descending as strings: "9" > "10"
    qrels = qrels_of({"q": {"10": 1}})
    run = pd.DataFrame({"user": ["q", "q"], "item": ["10", "9"], "score": [1.0, 1.0]})
    ev = metrics.evaluate(qrels, run, ["mrr"], tie_break="item_desc")
    assert abs(ev.summary["mrr"] - 1 / 2) < TOL  # "9", "10"
    ev = metrics.evaluate(qrels, run, ["mrr"], tie_break="item_asc")
    assert abs(ev.summary["mrr"] - 1 / 1) < TOL  # "10", "9"


@pytest.mark.parametrize("tie_break", ["item_asc", "item_desc"])
def test_tie_break_ignores_row_order(tie_break):
    qrels = qrels_of({"u": {"c": 1, "e": 1}})
    items = ["a", "b", "c", "d", "e", "f"]
    score = [1.0, 2.0, 1.0, 2.0, 1.0, 3.0]
    base = pd.DataFrame({"user": ["u"] * 6, "item": items, "score": score})
    ref = metrics.evaluate(qrels, base, ["ndcg@4", "map"], tie_break=tie_break).summary
    for seed in range(5):
        shuffled = base.sample(frac=1.0, random_state=seed)
        got = metrics.evaluate(qrels, shuffled, ["ndcg@4", "map"], tie_break=tie_break).summary
        assert got == ref


def test_tie_break_within_top_k_boundary():
    # 5 tied items, k = 2: item_asc keeps a, b ; the relevant d is outside the cut
    qrels = qrels_of({"u": {"d": 1}})
    run = pd.DataFrame({"user": ["u"] * 5, "item": list("edcba"), "score": [1.0] * 5})
    ev = metrics.evaluate(qrels, run, ["hit_rate@2", "hit_rate@4", "mrr@5"])
    assert ev.summary["hit_rate@2"] == 0.0
    assert ev.summary["hit_rate@4"] == 1.0
    assert abs(ev.summary["mrr@5"] - 1 / 4) < TOL  # a, b, c, d
    ev = metrics.evaluate(qrels, run, ["hit_rate@2", "mrr@5"], tie_break="item_desc")
    assert ev.summary["hit_rate@2"] == 1.0  # e, d
    assert abs(ev.summary["mrr@5"] - 1 / 2) < TOL


# ---------------------------------------------------------------------------------------------
# relevance_threshold, r_precision, arhr, f1, hit_rate, precision, recall
# ---------------------------------------------------------------------------------------------
def test_relevance_threshold():
    # list a, b, c, d with graded relevance 1, 3, 2, 0 ; unlisted e has relevance 2
    qrels = qrels_of({"u": {"a": 1, "b": 3, "c": 2, "d": 0, "e": 2}})
    run = run_of({"u": ["a", "b", "c", "d"]})
    names = ["precision@4", "recall@4", "mrr", "ndcg@4", "map@4"]
    ev = metrics.evaluate(qrels, run, names, relevance_threshold=2, gain="linear")
    # relevant (rel >= 2): b, c, e → |T| = 3 ; hits at ranks 2, 3
    assert abs(ev.summary["precision@4"] - 2 / 4) < TOL
    assert abs(ev.summary["recall@4"] - 2 / 3) < TOL
    assert abs(ev.summary["mrr"] - 1 / 2) < TOL
    # AP@4, D = min(4, 3): (1/2 + 2/3) / 3
    assert abs(ev.summary["map@4"] - (1 / 2 + 2 / 3) / 3) < TOL
    # gains stay graded: DCG = 1/log2(2) + 3/log2(3) + 2/log2(4) + 0
    # ideal over all test relevances 3, 2, 2, 1: 3 + 2/log2(3) + 2/log2(4) + 1/log2(5)
    dcg = 1 + 3 / log2(3) + 2 / log2(4)
    idcg = 3 + 2 / log2(3) + 2 / log2(4) + 1 / log2(5)
    assert abs(ev.summary["ndcg@4"] - dcg / idcg) < TOL
    assert ev.options["relevance_threshold"] == 2
    # default threshold 1: relevant a, b, c, e → hits at 1, 2, 3
    ev = metrics.evaluate(qrels, run, ["precision@4", "recall@4"])
    assert abs(ev.summary["precision@4"] - 3 / 4) < TOL
    assert abs(ev.summary["recall@4"] - 3 / 4) < TOL


def test_r_precision():
    # |T| = 4 (a, b, c, d) ; list a, x, b, y, c → top 4 holds a, b → 2 / 4
    qrels = qrels_of({"u1": dict.fromkeys("abcd", 1), "u2": {"p": 1}})
    run = run_of({"u1": ["a", "x", "b", "y", "c"], "u2": ["q", "p"]})
    ev = metrics.evaluate(qrels, run, ["r_precision", "Rprec", "ndcg@1"])
    # u2: |T| = 1, top 1 is q → 0
    assert abs(ev.per_user.loc["u1", "r_precision"] - 2 / 4) < TOL
    assert ev.per_user.loc["u2", "r_precision"] == 0.0
    assert abs(ev.summary["r_precision"] - (2 / 4 + 0) / 2) < TOL
    assert abs(ev.summary["Rprec"] - ev.summary["r_precision"]) < TOL


def test_r_precision_list_shorter_than_t():
    # |T| = 4 ; list a, b (both relevant) → 2 / 4
    qrels = qrels_of({"u": dict.fromkeys("abcd", 1)})
    ev = metrics.evaluate(qrels, run_of({"u": ["a", "b"]}), ["r_precision"])
    assert abs(ev.summary["r_precision"] - 2 / 4) < TOL


def test_arhr_seed003():
    # rank: 1 2 3 4 ; rel: 1 0 1 0 → 1/1 + 1/3 = 4/3 (seed 003: "1 and 3 hit → 1/1 + 1/3")
    qrels = qrels_of({"u": {"a": 1, "c": 1}})
    ev = metrics.evaluate(qrels, run_of({"u": ["a", "b", "c", "d"]}), ["arhr@4", "arhr@2"])
    assert abs(ev.summary["arhr@4"] - (1 / 1 + 1 / 3)) < TOL
    assert abs(ev.summary["arhr@2"] - 1 / 1) < TOL
    j = Judged.from_lists([[1, 0, 1, 0]])
    assert abs(ranking.arhr(j, k=None)[0] - 4 / 3) < TOL


def test_f1_and_components():
    # |T| = 5 ; list rel: 1 0 1 0 → P@4 = 2/4, R@4 = 2/5, F1 = 2PR/(P+R)
    qrels = qrels_of({"u": dict.fromkeys("abcde", 1)})
    run = run_of({"u": ["a", "x", "b", "y"]})
    ev = metrics.evaluate(qrels, run, ["f1@4", "precision@4", "recall@4"])
    p, r = 2 / 4, 2 / 5
    assert abs(ev.summary["precision@4"] - p) < TOL
    assert abs(ev.summary["recall@4"] - r) < TOL
    assert abs(ev.summary["f1@4"] - 2 * p * r / (p + r)) < TOL
    assert abs(ev.summary["f1@4"] - 4 / 9) < TOL


def test_f1_zero_when_no_hit():
    qrels = qrels_of({"u": {"a": 1}})
    ev = metrics.evaluate(qrels, run_of({"u": ["x", "y"]}), ["f1@2"])
    assert ev.summary["f1@2"] == 0.0


def test_hit_rate_and_alias():
    # u1: rel 0 1 0 → hit ; u2: rel 0 0 0 → no hit ; u3: rel 0 0 1 → hit only at k >= 3
    qrels = qrels_of({"u1": {"b": 1}, "u2": {"z": 1}, "u3": {"c": 1}})
    lists = {"u1": ["a", "b", "c"], "u2": ["a", "b", "c"], "u3": ["a", "b", "c"]}
    ev = metrics.evaluate(qrels, run_of(lists), ["hit_rate@2", "hr@3", "success_1"])
    assert abs(ev.summary["hit_rate@2"] - 1 / 3) < TOL
    assert abs(ev.summary["hr@3"] - 2 / 3) < TOL
    assert ev.summary["success_1"] == 0.0


def test_precision_divides_by_k_even_for_short_lists():
    # list of 2 items with 1 hit ; P@5 = 1/5 (trec_eval), whole-list precision = 1/2
    qrels = qrels_of({"u": {"a": 1}})
    ev = metrics.evaluate(qrels, run_of({"u": ["a", "b"]}), ["precision@5", "precision"])
    assert abs(ev.summary["precision@5"] - 1 / 5) < TOL
    assert abs(ev.summary["precision"] - 1 / 2) < TOL


def test_counting_metrics_are_summed():
    # u1: 3 listed, |T| = 2, 1 retrieved in top 2 ; u2: 2 listed, |T| = 1, 1 retrieved
    qrels = qrels_of({"u1": {"a": 1, "z": 1}, "u2": {"q": 1}})
    run = run_of({"u1": ["x", "a", "y"], "u2": ["q", "w"]})
    ev = metrics.evaluate(qrels, run, ["num_ret", "num_rel", "num_rel_ret", "num_ret@2"])
    assert ev.summary["num_ret"] == 3 + 2
    assert ev.summary["num_rel"] == 2 + 1
    assert ev.summary["num_rel_ret"] == 1 + 1
    assert ev.summary["num_ret@2"] == 2 + 2


def test_whole_list_metrics_without_cutoff():
    # rel: 0 0 0 0 0 0 0 0 0 0 0 1 (relevant at rank 12) → recall = 1, mrr = 1/12 without @k
    qrels = qrels_of({"u": {"i12": 1}})
    items = [f"i{r}" for r in range(1, 13)]
    ev = metrics.evaluate(qrels, run_of({"u": items}), ["recall", "mrr", "recall@10", "mrr@10"])
    assert ev.summary["recall"] == 1.0
    assert abs(ev.summary["mrr"] - 1 / 12) < TOL
    assert ev.summary["recall@10"] == 0.0
    assert ev.summary["mrr@10"] == 0.0


# ---------------------------------------------------------------------------------------------
# AUC family (ties count 1/2)
# ---------------------------------------------------------------------------------------------
def _auc_case():
    # u1: relevant scores 0.9, 0.5 ; irrelevant 0.5 (judged 0), 0.1 (unjudged)
    #     pairs: 0.9>0.5 1, 0.9>0.1 1, 0.5=0.5 1/2, 0.5>0.1 1 → 3.5 / 4
    # u2: relevant 0.2 ; irrelevant 0.8, 0.2 → 0 + 1/2 → 0.5 / 2
    # u3: only relevant candidates → AUC undefined (left out, counted)
    qrels = qrels_of(
        {
            "u1": {"r1": 1, "r2": 1, "n1": 0},
            "u2": {"r3": 1},
            "u3": {"r4": 1},
        }
    )
    run = pd.DataFrame(
        [
            ("u1", "r1", 0.9),
            ("u1", "r2", 0.5),
            ("u1", "n1", 0.5),
            ("u1", "n2", 0.1),
            ("u2", "r3", 0.2),
            ("u2", "n3", 0.8),
            ("u2", "n4", 0.2),
            ("u3", "r4", 0.7),
        ],
        columns=["user", "item", "score"],
    )
    return qrels, run


def test_auc_gauc_global_auc():
    qrels, run = _auc_case()
    ev = metrics.evaluate(qrels, run, ["auc", "gauc", "global_auc"])
    u1, u2 = 3.5 / 4, 0.5 / 2
    assert abs(ev.per_user.loc["u1", "auc"] - u1) < TOL
    assert abs(ev.per_user.loc["u2", "auc"] - u2) < TOL
    assert np.isnan(ev.per_user.loc["u3", "auc"])
    assert abs(ev.summary["auc"] - (u1 + u2) / 2) < TOL
    # weighted by the number of scored candidates: 4 and 3
    assert abs(ev.summary["gauc"] - (4 * u1 + 3 * u2) / 7) < TOL
    # pooled: relevant 0.9, 0.5, 0.2, 0.7 vs irrelevant 0.5, 0.1, 0.8, 0.2
    #   0.9: beats all 4 → 4 ; 0.5: tie 0.5, beats 0.1 and 0.2 → 2.5
    #   0.2: beats 0.1, ties 0.2 → 1.5 ; 0.7: beats 0.5, 0.1, 0.2 → 3
    assert abs(ev.summary["global_auc"] - (4 + 2.5 + 1.5 + 3) / 16) < TOL
    assert ev.per_user["global_auc"].isna().all()  # pooled: no per-user value


@pytest.mark.parametrize("names", [["auc"], ["gauc"], ["global_auc", "auc"]])
def test_auc_undefined_users_counted(names):
    qrels, run = _auc_case()
    assert metrics.evaluate(qrels, run, names).counts["auc_undefined_users"] == 1  # u3


@pytest.mark.parametrize("names", [["global_auc"], ["auc", "global_auc"]])
def test_auc_undefined_users_counted_with_global_auc_last(names):
    qrels, run = _auc_case()
    # only u3 (no irrelevant candidate) has an undefined AUC; u1 and u2 are fine
    assert metrics.evaluate(qrels, run, names).counts["auc_undefined_users"] == 1


def test_auc_kernels():
    got = scores.auc(
        np.array([0, 0, 0, 0]),
        np.array([0.9, 0.5, 0.5, 0.1]),
        np.array([True, True, False, False]),
        1,
    )
    assert abs(got[0] - 3.5 / 4) < TOL
    assert abs(scores.global_auc(np.array([0.3, 0.3]), np.array([True, False])) - 0.5) < TOL
    assert (
        abs(
            scores.gauc(np.array([1.0, 0.5, np.nan]), np.array([1, 3, 5])) - (1 * 1.0 + 3 * 0.5) / 4
        )
        < TOL
    )


def test_auc_relevance_threshold():
    # graded: r (rel 2) 0.9, m (rel 1) 0.8, n (unjudged) 0.1 ; threshold 2 → m counts as irrelevant
    qrels = qrels_of({"u": {"r": 2, "m": 1}})
    run = pd.DataFrame({"user": ["u"] * 3, "item": ["r", "m", "n"], "score": [0.5, 0.8, 0.1]})
    ev = metrics.evaluate(qrels, run, ["auc"], relevance_threshold=2)
    # relevant r (0.5) vs irrelevant m (0.8), n (0.1) → 0 + 1 → 1/2
    assert abs(ev.summary["auc"] - 1 / 2) < TOL
    ev = metrics.evaluate(qrels, run, ["auc"])
    # threshold 1: relevant r (0.5), m (0.8) vs n (0.1) → 2/2
    assert ev.summary["auc"] == 1.0


# ---------------------------------------------------------------------------------------------
# RMSE / MAE (seed 002 formulas 1 and 2), over pairs present in both tables
# ---------------------------------------------------------------------------------------------
def test_rmse_mae():
    qrels = qrels_of({"u1": {"a": 4, "b": 2, "z": 1}, "u2": {"c": 5}})
    run = pd.DataFrame(
        [("u1", "a", 3.0), ("u1", "b", 4.0), ("u1", "d", 1.0), ("u2", "c", 5.5), ("u3", "x", 1.0)],
        columns=["user", "item", "score"],
    )
    ev = metrics.evaluate(qrels, run, ["rmse", "mae"])
    # pairs in both: (u1,a) 3-4 = -1, (u1,b) 4-2 = +2, (u2,c) 5.5-5 = +0.5
    assert abs(ev.summary["rmse"] - math.sqrt((1 + 4 + 0.25) / 3)) < TOL
    assert abs(ev.summary["mae"] - (1 + 2 + 0.5) / 3) < TOL
    assert ev.counts["rating_pairs"] == 3
    assert abs(ev.per_user.loc["u1", "rmse"] - math.sqrt((1 + 4) / 2)) < TOL
    assert abs(ev.per_user.loc["u2", "mae"] - 0.5) < TOL


# ---------------------------------------------------------------------------------------------
# Beyond accuracy: coverage, gini, novelty, popularity
# ---------------------------------------------------------------------------------------------
def _beyond_case():
    # train popularity: 1:4, 2:2, 3:1, 4:1 (total 8)
    train = pd.DataFrame({"user": [9] * 8, "item": [1, 1, 1, 1, 2, 2, 3, 4]})
    qrels = pd.DataFrame({"user": [10, 20], "item": [1, 3], "relevance": [1, 1]})
    # top 2: u10 → 1, 2 ; u20 → 1, 3 (item 4 is ranked 3rd for both, outside k = 2)
    run = pd.DataFrame(
        {
            "user": [10, 10, 10, 20, 20, 20],
            "item": [1, 2, 4, 1, 3, 4],
            "score": [3.0, 2.0, 1.0, 3.0, 2.0, 1.0],
        }
    )
    return train, qrels, run


def test_coverage_with_catalog():
    train, qrels, run = _beyond_case()
    ev = metrics.evaluate(qrels, run, ["coverage@2", "coverage"], catalog=10)
    assert abs(ev.summary["coverage@2"] - 3 / 10) < TOL  # {1, 2, 3}
    assert abs(ev.summary["coverage"] - 4 / 10) < TOL  # {1, 2, 3, 4}
    ev = metrics.evaluate(qrels, run, ["coverage@2"], catalog=[1, 2, 3, 4, 5])
    assert abs(ev.summary["coverage@2"] - 3 / 5) < TOL
    # default catalog: every item of qrels, run and train: {1, 2, 3, 4} (+ 7 from train)
    train7 = pd.concat([train, pd.DataFrame({"user": [9], "item": [7]})], ignore_index=True)
    ev = metrics.evaluate(qrels, run, ["coverage@2"], train=train7)
    assert abs(ev.summary["coverage@2"] - 3 / 5) < TOL


def test_default_catalog_counts_every_item_seen_under_intersection():
    # item 99 appears only in the qrels of u2, who has no run; the docstring of evaluate says
    # the default catalog is "every item seen in any table": {10, 11, 99}
    qrels = pd.DataFrame({"user": [1, 2], "item": [10, 99], "relevance": [1, 1]})
    run = pd.DataFrame({"user": [1, 1], "item": [10, 11], "score": [2.0, 1.0]})
    ev = metrics.evaluate(qrels, run, ["coverage@2"], user_set="intersection")
    assert abs(ev.summary["coverage@2"] - 2 / 3) < TOL


def test_default_catalog_under_truth():
    qrels = pd.DataFrame({"user": [1, 2], "item": [10, 99], "relevance": [1, 1]})
    run = pd.DataFrame({"user": [1, 1], "item": [10, 11], "score": [2.0, 1.0]})
    ev = metrics.evaluate(qrels, run, ["coverage@2"])
    assert abs(ev.summary["coverage@2"] - 2 / 3) < TOL  # {10, 11} of {10, 11, 99}


def test_gini_with_catalog():
    _, qrels, run = _beyond_case()
    ev = metrics.evaluate(qrels, run, ["gini@2"], catalog=[1, 2, 3, 4, 5])
    # counts over the catalog: 1→2, 2→1, 3→1, 4→0, 5→0 ; sorted x = 0, 0, 1, 1, 2 ; n = 5, Σ = 4
    # G = Σ (2i − n − 1) x_i / (n Σ x) = (0·1 + 2·1 + 4·2) / (5·4) = 10 / 20
    assert abs(ev.summary["gini@2"] - 10 / 20) < TOL
    # even spread → 0
    even = pd.DataFrame({"user": [10, 20], "item": [1, 2], "score": [1.0, 1.0]})
    ev = metrics.evaluate(qrels, even, ["gini@1"], catalog=[1, 2])
    assert ev.summary["gini@1"] == 0.0


def test_novelty_and_popularity_with_train():
    train, qrels, run = _beyond_case()
    ev = metrics.evaluate(qrels, run, ["novelty@2", "popularity@2"], train=train)
    # novelty: u10 → (−log2(4/8) − log2(2/8)) / 2 = (1 + 2) / 2 ; u20 → (1 + 3) / 2
    assert abs(ev.per_user.loc[10, "novelty@2"] - 1.5) < TOL
    assert abs(ev.per_user.loc[20, "novelty@2"] - 2.0) < TOL
    assert abs(ev.summary["novelty@2"] - (1.5 + 2.0) / 2) < TOL
    # popularity: u10 → (4 + 2) / 2 ; u20 → (4 + 1) / 2
    assert abs(ev.summary["popularity@2"] - (3.0 + 2.5) / 2) < TOL


def test_novelty_string_ids_unequal_list_lengths():
    # train popularity a:2, b:1, c:1, d:1 (total 5)
    train = pd.DataFrame({"user": ["t"] * 5, "item": ["a", "a", "b", "c", "d"]})
    qrels = qrels_of({"u1": {"a": 1}, "u2": {"b": 1}})
    # u1 lists 3 items, u2 lists 4 (same length class, so one padded batch); k = 4
    run = pd.DataFrame(
        {
            "user": ["u1"] * 3 + ["u2"] * 4,
            "item": ["a", "b", "c", "a", "b", "c", "d"],
            "score": [3.0, 2.0, 1.0, 4.0, 3.0, 2.0, 1.0],
        }
    )
    ev = metrics.evaluate(qrels, run, ["popularity@4", "novelty@4"], train=train)
    # popularity: u1 (2 + 1 + 1) / 3 ; u2 (2 + 1 + 1 + 1) / 4
    assert abs(ev.summary["popularity@4"] - (4 / 3 + 5 / 4) / 2) < TOL
    # novelty: u1 (log2(5/2) + 2 log2(5)) / 3 ; u2 (log2(5/2) + 3 log2(5)) / 4
    nov1 = (log2(5 / 2) + 2 * log2(5)) / 3
    nov2 = (log2(5 / 2) + 3 * log2(5)) / 4
    assert abs(ev.summary["novelty@4"] - (nov1 + nov2) / 2) < TOL


def test_novelty_int_ids_unequal_list_lengths():
    # same case with int ids (1 = a, 2 = b, 3 = c, 4 = d)
    train = pd.DataFrame({"user": [0] * 5, "item": [1, 1, 2, 3, 4]})
    qrels = pd.DataFrame({"user": [1, 2], "item": [1, 2], "relevance": [1, 1]})
    run = pd.DataFrame(
        {
            "user": [1] * 3 + [2] * 4,
            "item": [1, 2, 3, 1, 2, 3, 4],
            "score": [3.0, 2.0, 1.0, 4.0, 3.0, 2.0, 1.0],
        }
    )
    ev = metrics.evaluate(qrels, run, ["popularity@4", "novelty@4"], train=train)
    assert abs(ev.summary["popularity@4"] - (4 / 3 + 5 / 4) / 2) < TOL
    nov1 = (log2(5 / 2) + 2 * log2(5)) / 3
    nov2 = (log2(5 / 2) + 3 * log2(5)) / 4
    assert abs(ev.summary["novelty@4"] - (nov1 + nov2) / 2) < TOL


# ---------------------------------------------------------------------------------------------
# Evaluation object: options, per_user, counts
# ---------------------------------------------------------------------------------------------
def test_options_hold_resolved_preset():
    qrels, run = _user_set_case()
    ev = metrics.evaluate(qrels, run, ["mrr"], preset="trec_eval")
    assert ev.options == {
        "ap_denominator": "relevant",
        "gain": "linear",
        "ideal_dcg": "relevant",
        "precision_denominator": "k",
        "ndcg_ties": "ordered",
        "tie_break": "item_desc",
        "id_order": "string",
        "user_set": "intersection",
        "empty_users": "zero",
        "average": "macro",
        "gauc_weight": "candidates",
        "relevance_threshold": 1.0,
        "diversity_similarity": "cosine",
        "serendipity_method": "popularity",
        "calibration_alpha": 0.01,
        "preset": "trec_eval",
    }
    ev = metrics.evaluate(qrels, run, ["mrr"], preset="trec_eval", user_set="truth")
    assert ev.options["user_set"] == "truth"
    assert ev.options["gain"] == "linear"
    ev = metrics.evaluate(qrels, run, ["mrr"])
    assert ev.options == {
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
        "relevance_threshold": 1.0,
        "diversity_similarity": "cosine",
        "serendipity_method": "popularity",
        "calibration_alpha": 0.01,
        "preset": "default",
    }


def test_per_user_table_uses_requested_spelling():
    qrels = qrels_of({"b": {"x": 1}, "a": {"y": 1}})
    run = run_of({"a": ["y", "z"], "b": ["z", "x"]})
    names = ["map@10", "P_5", "ndcg", "recip_rank"]
    ev = metrics.evaluate(qrels, run, names)
    assert list(ev.per_user.columns) == names
    assert list(ev.summary) == names
    assert ev.per_user.index.name == "user"
    assert sorted(ev.per_user.index) == ["a", "b"]
    # a: relevant at rank 1 ; b: at rank 2
    assert ev.per_user.loc["a", "recip_rank"] == 1.0
    assert ev.per_user.loc["b", "recip_rank"] == 0.5
    assert abs(ev.per_user.loc["b", "P_5"] - 1 / 5) < TOL
    assert abs(ev.per_user.loc["b", "map@10"] - 1 / 2) < TOL
    assert abs(ev.per_user.loc["b", "ndcg"] - 1 / log2(3)) < TOL


def test_summary_is_mean_of_per_user():
    qrels = qrels_of({"u1": {"a": 1}, "u2": {"b": 1}, "u3": {"c": 1}})
    run = run_of({"u1": ["a"], "u2": ["x", "b"], "u3": ["x", "y", "c"]})
    ev = metrics.evaluate(qrels, run, ["mrr"])
    assert abs(ev.summary["mrr"] - (1 + 1 / 2 + 1 / 3) / 3) < TOL
    assert abs(ev.per_user["mrr"].mean() - ev.summary["mrr"]) < TOL


def test_unsorted_ungrouped_run():
    # rows of two users interleaved and in no score order: u1 list a (0.9), b (0.5), c (0.1)
    qrels = qrels_of({"u1": {"b": 1}, "u2": {"e": 1}})
    run = pd.DataFrame(
        [("u2", "d", 0.3), ("u1", "c", 0.1), ("u1", "a", 0.9), ("u2", "e", 0.8), ("u1", "b", 0.5)],
        columns=["user", "item", "score"],
    )
    ev = metrics.evaluate(qrels, run, ["mrr"])
    assert abs(ev.per_user.loc["u1", "mrr"] - 1 / 2) < TOL
    assert ev.per_user.loc["u2", "mrr"] == 1.0


def test_repr_lists_metrics():
    qrels = qrels_of({"u": {"a": 1}})
    ev = metrics.evaluate(qrels, run_of({"u": ["a"]}), ["mrr"])
    assert "mrr" in repr(ev)


# ---------------------------------------------------------------------------------------------
# Edge cases that currently misbehave (see the reasons)
# ---------------------------------------------------------------------------------------------
def test_rmse_user_without_judged_pair_is_nan_without_warning():
    # u1: one pair (a: 3 vs 4) ; u2: its listed item is not judged → no pair, NaN
    qrels = qrels_of({"u1": {"a": 4}, "u2": {"b": 5}})
    run = pd.DataFrame({"user": ["u1", "u2"], "item": ["a", "c"], "score": [3.0, 1.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ev = metrics.evaluate(qrels, run, ["rmse", "mae"])
    assert ev.summary["rmse"] == 1.0
    assert ev.summary["mae"] == 1.0
    assert np.isnan(ev.per_user.loc["u2", "rmse"])


def test_micro_with_no_common_user():
    qrels = qrels_of({"u1": {"a": 1}})
    run = run_of({"u2": ["a"]})
    try:
        ev = metrics.evaluate(qrels, run, ["precision@1"], user_set="intersection", average="micro")
    except ValueError:
        return  # a clear error is an acceptable answer
    assert ev.counts["users"] == 0
    assert "precision@1" in ev.summary


def test_macro_with_no_common_user_is_nan():
    qrels = qrels_of({"u1": {"a": 1}})
    run = run_of({"u2": ["a"]})
    ev = metrics.evaluate(qrels, run, ["precision@1", "ndcg"], user_set="intersection")
    assert ev.counts["users"] == 0
    assert np.isnan(ev.summary["precision@1"])
    assert np.isnan(ev.summary["ndcg"])
    assert len(ev.per_user) == 0


def test_single_name_string():
    qrels = qrels_of({"u": {"b": 1}})
    ev = metrics.evaluate(qrels, run_of({"u": ["a", "b"]}), "mrr@5")
    assert list(ev.summary) == ["mrr@5"]
    assert ev.summary["mrr@5"] == 0.5  # rel: 0 1
