"""``metrics.evaluate`` against independent implementations on random data.

1. A deliberately naive pure-Python implementation written here from the METRICS.md definitions
   (loops over users and ranks, no numpy), for every ranking metric and option combination.
2. pytrec_eval-terrier (trec_eval 9.0.x bundled) with the ``trec_eval`` preset.
3. scikit-learn: ``roc_auc_score`` for per-user AUC (ties count 1/2) and ``ndcg_score`` for
   linear-gain NDCG@k.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import pandas as pd
import pytest
import pytrec_eval
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.metrics import ndcg_score, roc_auc_score

import metrics

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

RANKING = [
    "precision",
    "recall",
    "f1",
    "hit_rate",
    "mrr",
    "arhr",
    "ap",
    "cg",
    "dcg",
    "idcg",
    "ndcg",
]
COUNTING = ["num_ret", "num_rel", "num_rel_ret"]
MICRO = {"precision", "recall", "f1"}


# ---------------------------------------------------------------------------------------------
# Random inputs
# ---------------------------------------------------------------------------------------------
@dataclass
class Data:
    qrels: list[tuple]  # (user, item, relevance)
    run: list[tuple]  # (user, item, score), in arrival order

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        return (
            pd.DataFrame(self.qrels, columns=["user", "item", "relevance"]),
            pd.DataFrame(self.run, columns=["user", "item", "score"]),
        )


INT_ITEM_IDS = {
    "small": lambda i: 7 * i + 2,
    "negative": lambda i: -7 * i - 5,
    "near_max": lambda i: 2**63 - 1 - 3 * i,
    "near_min": lambda i: -(2**63) + 5 * i,
    "spread": lambda i: i * 10**17,
}


@st.composite
def data(
    draw,
    *,
    ties: bool = True,
    string_ids: bool | None = None,
    max_users: int = 5,
    max_items: int = 12,
    full_truth_in_run: bool = False,
    min_list: int = 0,
) -> Data:
    """Random small qrels/run: graded relevance 0-3, variable list lengths, users missing from
    either table, users without relevant items; with or without tied scores."""
    if string_ids is None:
        string_ids = draw(st.booleans())
    n_users = draw(st.integers(1, max_users))
    n_items = draw(st.integers(max(1, min_list), max_items))

    # int ids: small, negative, near the int64 limits, or spread wide (each takes another
    # encoding path in the engine); string ids sort differently from numbers ("d10" < "d2")
    scheme = draw(st.sampled_from(list(INT_ITEM_IDS)))

    def uid(u: int):
        return f"u{u}" if string_ids else (3 * u + 1 if scheme != "negative" else -11 * u)

    def iid(i: int):
        return f"d{i}" if string_ids else INT_ITEM_IDS[scheme](i)

    items = st.lists(st.integers(0, n_items - 1), unique=True, max_size=n_items)
    qrels, run = [], []
    for u in range(n_users):
        in_truth, in_run = draw(
            st.sampled_from([(True, True), (True, True), (True, False), (False, True)])
        )
        judged: list[int] = []
        if in_truth:
            judged = draw(items)
            for i in judged:
                qrels.append((uid(u), iid(i), draw(st.integers(0, 3))))
        if in_run:
            listed = draw(items)
            if full_truth_in_run:
                listed = listed + [i for i in judged if i not in listed]
            if len(listed) < min_list:
                listed += [i for i in range(n_items) if i not in listed][: min_list - len(listed)]
            if ties:
                scores = [float(draw(st.integers(0, 3))) for _ in listed]
            else:
                scores = [float(s) for s in draw(st.permutations(range(len(listed))))]
                scores = [s + 0.5 for s in scores]
            run += [(uid(u), iid(i), s) for i, s in zip(listed, scores, strict=True)]
    # at least one user in both tables (no common user at all is tested on its own)
    if not any(row[0] == uid(0) for row in qrels):
        qrels.append((uid(0), iid(0), 1))
    if not any(row[0] == uid(0) for row in run):
        run.append((uid(0), iid(0), 1.0))
    if draw(st.booleans()):  # rows of users interleaved (the arrival order input_order keeps)
        run = draw(st.permutations(run))
        qrels = draw(st.permutations(qrels))
    return Data(qrels, run)


option_sets = st.fixed_dictionaries(
    {
        "gain": st.sampled_from(["exponential", "linear"]),
        "ap_denominator": st.sampled_from(["min_k_relevant", "relevant", "hits"]),
        "tie_break": st.sampled_from(["item_asc", "item_desc", "input_order"]),
        "empty_users": st.sampled_from(["skip", "zero"]),
        "user_set": st.sampled_from(["truth", "intersection"]),
        "average": st.sampled_from(["macro", "micro"]),
        "relevance_threshold": st.sampled_from([1, 2]),
    }
)


# ---------------------------------------------------------------------------------------------
# The naive reference implementation (from METRICS.md, loops only)
# ---------------------------------------------------------------------------------------------
class Naive:
    def __init__(self, d: Data, opts: dict):
        self.opts = opts
        self.thr = opts["relevance_threshold"]
        self.truth: dict = {}
        for u, i, r in d.qrels:
            self.truth.setdefault(u, {})[i] = r
        self.rows: dict = {}
        for u, i, s in d.run:
            self.rows.setdefault(u, []).append((i, s))
        if opts["user_set"] == "truth":
            self.users = sorted(self.truth)
        else:
            self.users = sorted(u for u in self.truth if u in self.rows)

    def gain(self, rel: float) -> float:
        rel = max(rel, 0)
        return rel if self.opts["gain"] == "linear" else 2**rel - 1

    def ranked(self, u) -> list:
        rows = list(self.rows.get(u, []))  # arrival order
        tb = self.opts["tie_break"]
        if tb == "item_asc":
            rows.sort(key=lambda r: r[0])
        elif tb == "item_desc":
            rows.sort(key=lambda r: r[0], reverse=True)
        rows.sort(key=lambda r: -r[1])  # stable: ties keep the order above
        return [i for i, _ in rows]

    def n_rel(self, u) -> int:
        return sum(1 for r in self.truth[u].values() if r >= self.thr)

    def lst(self, u, k):
        full = self.ranked(u)
        return full if k is None else full[:k]

    def is_rel(self, u, i) -> bool:
        return self.truth[u].get(i, 0) >= self.thr

    def per_user(self, metric: str, u, k):
        t = self.truth[u]
        lst = self.lst(u, k)
        n_rel = self.n_rel(u)
        hits = sum(1 for i in lst if self.is_rel(u, i))
        if metric == "num_ret":
            return len(lst)
        if metric == "num_rel":
            return n_rel
        if metric == "num_rel_ret":
            return hits
        if metric == "precision":
            den = k if k is not None else len(lst)
            return hits / den if den else 0.0
        if metric == "recall":
            return hits / n_rel if n_rel else 0.0
        if metric == "f1":
            p = self.per_user("precision", u, k)
            r = self.per_user("recall", u, k)
            return 2 * p * r / (p + r) if p + r > 0 else 0.0
        if metric == "hit_rate":
            return 1.0 if hits > 0 else 0.0
        if metric == "mrr":
            for rank, i in enumerate(lst, 1):
                if self.is_rel(u, i):
                    return 1 / rank
            return 0.0
        if metric == "arhr":
            return sum(1 / rank for rank, i in enumerate(lst, 1) if self.is_rel(u, i))
        if metric == "ap":
            total, seen = 0.0, 0
            for rank, i in enumerate(lst, 1):
                if self.is_rel(u, i):
                    seen += 1
                    total += seen / rank
            den = {
                "relevant": n_rel,
                "min_k_relevant": n_rel if k is None else min(k, n_rel),
                "hits": hits,
            }[self.opts["ap_denominator"]]
            return total / den if den else 0.0
        if metric == "cg":
            return sum(self.gain(t.get(i, 0)) for i in lst)
        if metric == "dcg":
            return sum(
                self.gain(t.get(i, 0)) / math.log2(rank + 1) for rank, i in enumerate(lst, 1)
            )
        if metric == "idcg":
            ideal = sorted((self.gain(r) for r in t.values()), reverse=True)
            if k is not None:
                ideal = ideal[:k]
            return sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, 1))
        if metric == "ndcg":
            idcg = self.per_user("idcg", u, k)
            return self.per_user("dcg", u, k) / idcg if idcg > 0 else 0.0
        if metric == "r_precision":
            top = self.ranked(u)[:n_rel]
            return sum(1 for i in top if self.is_rel(u, i)) / n_rel if n_rel else 0.0
        raise AssertionError(metric)

    def included(self, u) -> bool:
        return self.opts["empty_users"] == "zero" or self.n_rel(u) > 0

    def evaluate(self, metric: str, k) -> tuple[float, dict]:
        per = {}
        for u in self.users:
            if metric in COUNTING or self.included(u):
                per[u] = self.per_user(metric, u, k)
            else:
                per[u] = float("nan")
        if metric in COUNTING:
            return float(sum(per.values())), per
        users = [u for u in self.users if self.included(u)]
        if self.opts["average"] == "micro" and metric in MICRO:
            hits = sum(self.per_user("num_rel_ret", u, k) for u in users)
            ret = sum(len(self.lst(u, k)) for u in users)
            rel = sum(self.n_rel(u) for u in users)
            p = hits / ret if ret else 0.0
            r = hits / rel if rel else 0.0
            pooled = {"precision": p, "recall": r, "f1": 2 * p * r / (p + r) if p + r else 0.0}
            return pooled[metric], per
        vals = [per[u] for u in users]
        return (sum(vals) / len(vals) if vals else float("nan")), per

    # score metrics ---------------------------------------------------------------------------
    def auc_user(self, u):
        cand = self.rows.get(u, [])
        pos = [s for i, s in cand if self.is_rel(u, i)]
        neg = [s for i, s in cand if not self.is_rel(u, i)]
        if not pos or not neg:
            return float("nan"), len(cand)
        wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
        return wins / (len(pos) * len(neg)), len(cand)

    def scores(self) -> dict:
        per = {u: self.auc_user(u) for u in self.users}
        ok = [(a, n) for a, n in per.values() if not math.isnan(a)]
        auc = sum(a for a, _ in ok) / len(ok) if ok else float("nan")
        w = sum(n for _, n in ok)
        gauc = sum(a * n for a, n in ok) / w if w else float("nan")
        pos, neg = [], []
        for u in self.users:
            for i, s in self.rows.get(u, []):
                (pos if self.is_rel(u, i) else neg).append(s)
        wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
        g = wins / (len(pos) * len(neg)) if pos and neg else float("nan")
        errs = [
            (s - self.truth[u][i])
            for u in self.users
            for i, s in self.rows.get(u, [])
            if i in self.truth[u]
        ]
        rmse = math.sqrt(sum(e * e for e in errs) / len(errs)) if errs else float("nan")
        mae = sum(abs(e) for e in errs) / len(errs) if errs else float("nan")
        return {
            "auc": auc,
            "gauc": gauc,
            "global_auc": g,
            "rmse": rmse,
            "mae": mae,
            "per_user_auc": {u: a for u, (a, _) in per.items()},
        }


def same(a: float, b: float, tol: float = 1e-9) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= tol * max(1.0, abs(b))


# ---------------------------------------------------------------------------------------------
# 1. naive implementation
# ---------------------------------------------------------------------------------------------
@SETTINGS
@given(d=data(), opts=option_sets, k=st.integers(1, 6))
def test_ranking_metrics_match_naive(d, opts, k):
    qrels, run = d.frames()
    names = [f"{m}@{k}" for m in RANKING + COUNTING] + RANKING + COUNTING + ["r_precision"]
    ev = metrics.evaluate(qrels, run, names, **opts)
    ref = Naive(d, opts)
    assert list(ev.per_user.index) == ref.users
    for name in names:
        metric, _, cut = name.partition("@")
        kk = int(cut) if cut else None
        summary, per = ref.evaluate(metric, kk)
        assert same(ev.summary[name], summary), (name, ev.summary[name], summary)
        for u, v in per.items():
            assert same(float(ev.per_user.loc[u, name]), v), (name, u, ev.per_user.loc[u, name], v)
    assert ev.counts["users_without_relevant"] == sum(1 for u in ref.users if ref.n_rel(u) == 0)
    assert ev.counts["users_missing_from_run"] == sum(1 for u in ref.users if u not in ref.rows)


@SETTINGS
@given(d=data(), opts=option_sets, k=st.integers(1, 4), batch=st.integers(1, 9))
def test_small_batches_match_naive(d, opts, k, batch):
    qrels, run = d.frames()
    names = [f"ndcg@{k}", f"ap@{k}", f"recall@{k}", "mrr", "r_precision"]
    ev = metrics.evaluate(qrels, run, names, batch_cells=batch, **opts)
    ref = Naive(d, opts)
    for name in names:
        metric, _, cut = name.partition("@")
        summary, per = ref.evaluate(metric, int(cut) if cut else None)
        assert same(ev.summary[name], summary), name
        for u, v in per.items():
            assert same(float(ev.per_user.loc[u, name]), v), (name, u)


@SETTINGS
@given(
    d=data(),
    threshold=st.sampled_from([1, 2, 3]),
    user_set=st.sampled_from(["truth", "intersection"]),
)
def test_score_and_rating_metrics_match_naive(d, threshold, user_set):
    qrels, run = d.frames()
    opts = {"relevance_threshold": threshold, "user_set": user_set}
    names = ["auc", "gauc", "global_auc", "rmse", "mae"]
    ev = metrics.evaluate(qrels, run, names, **opts)
    ref = Naive(
        d,
        {
            **opts,
            "gain": "linear",
            "ap_denominator": "relevant",
            "tie_break": "item_asc",
            "empty_users": "skip",
            "average": "macro",
        },
    )
    expected = ref.scores()
    for name in names:
        assert same(ev.summary[name], expected[name]), (name, ev.summary[name], expected[name])
    for u, a in expected["per_user_auc"].items():
        assert same(float(ev.per_user.loc[u, "auc"]), a), u


# ---------------------------------------------------------------------------------------------
# 2. pytrec_eval (trec_eval 9.0.x)
# ---------------------------------------------------------------------------------------------
TREC_MEASURES = [
    "map",
    "ndcg",
    "P_5",
    "recall_10",
    "recip_rank",
    "ndcg_cut_10",
    "map_cut_10",
    "Rprec",
    "success_10",
]


def _pytrec(d: Data) -> dict:
    qrels: dict = {}
    for u, i, r in d.qrels:
        qrels.setdefault(str(u), {})[str(i)] = int(r)
    run: dict = {}
    for u, i, s in d.run:
        run.setdefault(str(u), {})[str(i)] = float(s)
    evaluator = pytrec_eval.RelevanceEvaluator(
        qrels,
        {
            "map",
            "ndcg",
            "P_5",
            "recall_10",
            "recip_rank",
            "ndcg_cut_10",
            "map_cut_10",
            "Rprec",
            "success_10",
        },
    )
    return evaluator.evaluate(run)


def _check_against_pytrec(d: Data, **options):
    expected = _pytrec(d)
    qrels, run = d.frames()
    ev = metrics.evaluate(qrels, run, TREC_MEASURES, preset="trec_eval", **options)
    ours = {str(u): u for u in ev.per_user.index}
    assert sorted(ours) == sorted(expected)
    for query, values in expected.items():
        for measure in TREC_MEASURES:
            got = float(ev.per_user.loc[ours[query], measure])
            assert abs(got - values[measure]) <= 1e-9, (query, measure, got, values[measure])
    for measure in TREC_MEASURES:
        mean = sum(v[measure] for v in expected.values()) / len(expected)
        assert abs(ev.summary[measure] - mean) <= 1e-9, measure


@SETTINGS
@given(d=data(ties=False, string_ids=False, max_items=15))
def test_pytrec_eval_without_ties(d):
    # int ids for us, their decimal strings for pytrec_eval; no ties, so id order is irrelevant
    _check_against_pytrec(d)


@SETTINGS
@given(d=data(ties=True, string_ids=True, max_items=15))
def test_pytrec_eval_with_ties_string_ids(d):
    # trec_eval breaks ties by doc id descending as strings: the preset's item_desc on str ids
    _check_against_pytrec(d)


@SETTINGS
@given(d=data(ties=True, string_ids=False, max_items=15))
def test_pytrec_eval_with_ties_int_ids(d):
    # integer ids tie as their decimal strings in trec_eval ("9" > "10" > "-5"): the preset's
    # id_order="string", whatever the id encoding (small, negative, near the int64 limits)
    _check_against_pytrec(d)


# ---------------------------------------------------------------------------------------------
# 3. scikit-learn
# ---------------------------------------------------------------------------------------------
@SETTINGS
@given(d=data(ties=True), threshold=st.sampled_from([1, 2]))
def test_auc_matches_sklearn(d, threshold):
    qrels, run = d.frames()
    ev = metrics.evaluate(qrels, run, ["auc"], relevance_threshold=threshold)
    truth: dict = {}
    for u, i, r in d.qrels:
        truth.setdefault(u, {})[i] = r
    checked = 0
    for u in ev.per_user.index:
        cand = [(i, s) for uu, i, s in d.run if uu == u]
        y = [1 if truth[u].get(i, 0) >= threshold else 0 for i, _ in cand]
        got = float(ev.per_user.loc[u, "auc"])
        if 0 < sum(y) < len(y):
            assert abs(got - roc_auc_score(y, [s for _, s in cand])) <= 1e-12, u
            checked += 1
        else:
            assert math.isnan(got), u
    assert ev.counts["auc_undefined_users"] == len(ev.per_user) - checked


@SETTINGS
@given(d=data(ties=False, full_truth_in_run=True, min_list=2), k=st.integers(1, 8))
def test_ndcg_matches_sklearn(d, k):
    # every judged item of a user is in the run, so sklearn's ideal (from the given candidates
    # only) equals ours (from all test relevances)
    qrels, run = d.frames()
    ev = metrics.evaluate(qrels, run, [f"ndcg@{k}", "ndcg"], gain="linear", empty_users="zero")
    truth: dict = {}
    for u, i, r in d.qrels:
        truth.setdefault(u, {})[i] = r
    for u in ev.per_user.index:
        cand = [(i, s) for uu, i, s in d.run if uu == u]
        if len(cand) < 2:
            continue  # sklearn needs more than one document
        y_true = [[truth[u].get(i, 0) for i, _ in cand]]
        y_score = [[s for _, s in cand]]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exp_k = ndcg_score(y_true, y_score, k=k)
            exp_all = ndcg_score(y_true, y_score)
        assert abs(float(ev.per_user.loc[u, f"ndcg@{k}"]) - exp_k) <= 1e-12, u
        assert abs(float(ev.per_user.loc[u, "ndcg"]) - exp_all) <= 1e-12, u


@pytest.mark.parametrize("seed", range(3))
def test_naive_on_seeded_larger_input(seed):
    """A larger seeded case (many ties, 40 users) through every option combination."""
    import itertools
    import random

    rnd = random.Random(seed)
    qrels, run = [], []
    for u in range(40):
        for i in rnd.sample(range(30), rnd.randint(0, 8)):
            qrels.append((u, i, rnd.randint(0, 3)))
        if rnd.random() < 0.9:
            for i in rnd.sample(range(30), rnd.randint(1, 25)):
                run.append((u, i, float(rnd.randint(0, 5))))
    d = Data(qrels, run)
    q, r = d.frames()
    names = ["ndcg@5", "ap@10", "ap", "precision@3", "recall@10", "f1@5", "mrr@10", "r_precision"]
    for gain, den, tie, empty, uset, avg in itertools.product(
        ["exponential", "linear"],
        ["min_k_relevant", "relevant", "hits"],
        ["item_asc", "item_desc", "input_order"],
        ["skip", "zero"],
        ["truth", "intersection"],
        ["macro", "micro"],
    ):
        opts = {
            "gain": gain,
            "ap_denominator": den,
            "tie_break": tie,
            "empty_users": empty,
            "user_set": uset,
            "average": avg,
            "relevance_threshold": 1,
        }
        ev = metrics.evaluate(q, r, names, **opts)
        ref = Naive(d, opts)
        for name in names:
            metric, _, cut = name.partition("@")
            summary, _ = ref.evaluate(metric, int(cut) if cut else None)
            assert same(ev.summary[name], summary), (name, opts)
