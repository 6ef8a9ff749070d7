"""Hypothesis properties of ``metrics.evaluate`` on random small qrels/run tables."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import metrics
from metrics.registry import get

SETTINGS = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
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
ALL_CUTOFF = [*RANKING, "num_ret", "num_rel", "num_rel_ret", "coverage", "gini"]
NO_CUTOFF = ["r_precision", "auc", "gauc", "global_auc", "rmse", "mae"]


@st.composite
def tables(
    draw,
    *,
    ties: bool | None = None,
    string_ids: bool | None = None,
    max_users: int = 6,
    max_items: int = 10,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Random qrels (graded 0-3, some users without relevant items) and run (variable list
    lengths, tied scores or not, users missing from either table); ids int or str."""
    ties = draw(st.booleans()) if ties is None else ties
    string_ids = draw(st.booleans()) if string_ids is None else string_ids
    n_users = draw(st.integers(1, max_users))
    n_items = draw(st.integers(1, max_items))

    def uid(u):
        return f"u{u}" if string_ids else 5 * u + 2

    def iid(i):
        return f"i{i}" if string_ids else 3 * i + 1

    subset = st.lists(st.integers(0, n_items - 1), unique=True, max_size=n_items)
    qrels, run = [], []
    for u in range(n_users):
        judged = draw(subset) if u == 0 or draw(st.integers(0, 4)) else []
        qrels += [(uid(u), iid(i), draw(st.integers(0, 3))) for i in judged]
        listed = draw(subset) if u == 0 or draw(st.integers(0, 4)) else []
        if ties:
            scores = [float(draw(st.integers(0, 2))) for _ in listed]
        else:
            scores = [0.25 * s for s in draw(st.permutations(range(len(listed))))]
        run += [(uid(u), iid(i), s) for i, s in zip(listed, scores, strict=True)]
    if not any(r[0] == uid(0) for r in qrels):
        qrels.append((uid(0), iid(0), 1))
    if not any(r[0] == uid(0) for r in run):
        run.append((uid(0), iid(0), 0.5))
    return (
        pd.DataFrame(qrels, columns=["user", "item", "relevance"]),
        pd.DataFrame(run, columns=["user", "item", "score"]),
    )


options = st.fixed_dictionaries(
    {
        "gain": st.sampled_from(["exponential", "linear"]),
        "ap_denominator": st.sampled_from(["min_k_relevant", "relevant", "hits"]),
        "tie_break": st.sampled_from(["item_asc", "item_desc"]),
        "empty_users": st.sampled_from(["skip", "zero"]),
        "user_set": st.sampled_from(["truth", "intersection"]),
        "average": st.sampled_from(["macro", "micro"]),
        "relevance_threshold": st.sampled_from([1, 2]),
    }
)


def all_names(k: int) -> list[str]:
    return [f"{m}@{k}" for m in ALL_CUTOFF] + [*RANKING, *NO_CUTOFF]


def assert_same(a: metrics.Evaluation, b: metrics.Evaluation) -> None:
    assert a.summary.keys() == b.summary.keys()
    for name, value in a.summary.items():
        other = b.summary[name]
        assert (np.isnan(value) and np.isnan(other)) or abs(value - other) <= 1e-12 * max(
            1, abs(value)
        ), (name, value, other)
    pd.testing.assert_frame_equal(a.per_user, b.per_user, check_exact=False, rtol=1e-12, atol=1e-12)
    assert a.counts == b.counts


# ---------------------------------------------------------------------------------------------
# perfect ranking
# ---------------------------------------------------------------------------------------------
@st.composite
def perfect(draw):
    """Each user's run lists every judged item with score = relevance, plus unjudged items
    scored below every judged one."""
    string_ids = draw(st.booleans())
    n_users = draw(st.integers(1, 5))
    qrels, run = [], []
    for u in range(n_users):
        user = f"u{u}" if string_ids else u
        rels = draw(st.lists(st.integers(0, 3), min_size=1, max_size=8))
        extra = draw(st.integers(0, 3))
        for i, r in enumerate(rels):
            item = f"i{i}" if string_ids else i
            qrels.append((user, item, r))
            run.append((user, item, float(r)))
        for e in range(extra):
            item = f"x{e}" if string_ids else 100 + e
            run.append((user, item, -1.0))
    return (
        pd.DataFrame(qrels, columns=["user", "item", "relevance"]),
        pd.DataFrame(run, columns=["user", "item", "score"]),
    )


@SETTINGS
@given(
    t=perfect(),
    k=st.integers(1, 10),
    gain=st.sampled_from(["exponential", "linear"]),
    threshold=st.sampled_from([1, 2, 3]),
    tie=st.sampled_from(["item_asc", "item_desc"]),
)
def test_perfect_ranking(t, k, gain, threshold, tie):
    qrels, run = t
    names = [f"ndcg@{k}", "ndcg", f"recall@{k}", "mrr", "r_precision", f"hit_rate@{k}", "map"]
    opts = {"gain": gain, "relevance_threshold": threshold, "tie_break": tie}
    ev = {
        d: metrics.evaluate(qrels, run, [*names, f"ap@{k}"], ap_denominator=d, **opts)
        for d in ("min_k_relevant", "relevant", "hits")
    }
    n_rel = qrels.assign(rel=qrels["relevance"] >= threshold).groupby("user")["rel"].sum()
    has_gain = qrels.assign(g=qrels["relevance"] > 0).groupby("user")["g"].any()
    for user, t_u in n_rel.items():
        row = ev["min_k_relevant"].per_user.loc[user]
        if t_u == 0:
            assert row.isna().all()  # empty_users=skip
            continue
        assert has_gain[user]
        assert abs(row[f"ndcg@{k}"] - 1) <= 1e-12
        assert abs(row["ndcg"] - 1) <= 1e-12
        assert row["mrr"] == 1.0
        assert row["r_precision"] == 1.0
        assert row[f"hit_rate@{k}"] == 1.0
        # AP@k = Σ_{j <= min(k, |T|)} 1 / D: 1 under min_k_relevant and hits for every k
        assert abs(row[f"ap@{k}"] - 1) <= 1e-12
        assert abs(ev["hits"].per_user.loc[user, f"ap@{k}"] - 1) <= 1e-12
        # relevant: min(k, |T|) / |T|
        expected = min(k, t_u) / t_u
        assert abs(ev["relevant"].per_user.loc[user, f"ap@{k}"] - expected) <= 1e-12
        for d in ev:  # whole list: every relevant item retrieved first
            assert abs(ev[d].per_user.loc[user, "map"] - 1) <= 1e-12
        if k >= t_u:
            assert row[f"recall@{k}"] == 1.0
        else:
            assert abs(row[f"recall@{k}"] - k / t_u) <= 1e-12


# ---------------------------------------------------------------------------------------------
# bounds and orderings
# ---------------------------------------------------------------------------------------------
BOUNDED = [
    m
    for m in (
        "precision",
        "recall",
        "f1",
        "hit_rate",
        "mrr",
        "ap",
        "ndcg",
        "r_precision",
        "auc",
        "gauc",
        "global_auc",
        "coverage",
        "gini",
    )
]


def test_bounded_list_agrees_with_registry():
    for name in BOUNDED:
        assert get(name).bounded, name
    for name in ("arhr", "cg", "dcg", "idcg", "rmse", "mae", "num_ret"):
        assert not get(name).bounded, name


@SETTINGS
@given(t=tables(), opts=options, k=st.integers(1, 8))
def test_bounded_metrics_in_unit_interval(t, opts, k):
    qrels, run = t
    names = [f"{m}@{k}" if get(m).cutoff != "none" else m for m in BOUNDED]
    names += [m for m in BOUNDED if get(m).cutoff == "optional"]
    ev = metrics.evaluate(qrels, run, names, **opts)
    for name in names:
        value = ev.summary[name]
        assert np.isnan(value) or 0.0 <= value <= 1.0, (name, value)
        col = ev.per_user[name].dropna()
        assert ((col >= 0.0) & (col <= 1.0)).all(), name


@SETTINGS
@given(t=tables(), opts=options)
def test_dcg_at_most_idcg(t, opts):
    qrels, run = t
    ks = [1, 2, 3, 5, 10]
    names = [f"dcg@{k}" for k in ks] + [f"idcg@{k}" for k in ks] + ["dcg", "idcg"]
    pu = metrics.evaluate(qrels, run, names, **opts).per_user
    for k in [*(f"@{k}" for k in ks), ""]:
        dcg, idcg = pu[f"dcg{k}"], pu[f"idcg{k}"]
        ok = dcg.notna()
        assert (dcg[ok] <= idcg[ok] * (1 + 1e-12) + 1e-12).all(), k
        assert (dcg[ok] >= 0).all()


@SETTINGS
@given(t=tables(), opts=options)
def test_recall_never_falls_as_k_grows(t, opts):
    qrels, run = t
    ks = list(range(1, 12))
    names = [f"recall@{k}" for k in ks] + [f"hit_rate@{k}" for k in ks] + ["recall"]
    ev = metrics.evaluate(qrels, run, names, **opts)
    recall = ev.per_user[[f"recall@{k}" for k in ks] + ["recall"]].to_numpy()
    hit = ev.per_user[[f"hit_rate@{k}" for k in ks]].to_numpy()
    ok = ~np.isnan(recall[:, 0])
    assert (np.diff(recall[ok], axis=1) >= -1e-15).all()
    assert (np.diff(hit[ok], axis=1) >= 0).all()
    summary = [ev.summary[f"recall@{k}"] for k in ks]
    if not np.isnan(summary[0]):
        assert all(b >= a - 1e-15 for a, b in itertools.pairwise(summary))


# ---------------------------------------------------------------------------------------------
# invariances
# ---------------------------------------------------------------------------------------------
@SETTINGS
@given(t=tables(), opts=options, k=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_permuting_rows_changes_nothing(t, opts, k, seed):
    qrels, run = t
    names = all_names(k)
    ref = metrics.evaluate(qrels, run, names, **opts)
    rng = np.random.default_rng(seed)
    q2 = qrels.iloc[rng.permutation(len(qrels))].reset_index(drop=True)
    r2 = run.iloc[rng.permutation(len(run))].reset_index(drop=True)
    assert_same(ref, metrics.evaluate(q2, r2, names, **opts))


@SETTINGS
@given(
    t=tables(string_ids=False), opts=options, k=st.integers(1, 6), seed=st.integers(0, 2**32 - 1)
)
def test_permuting_user_ids_changes_nothing(t, opts, k, seed):
    qrels, run = t
    names = all_names(k)
    ref = metrics.evaluate(qrels, run, names, **opts)
    users = np.unique(np.concatenate([qrels["user"], run["user"]]))
    mapping = dict(zip(users, np.random.default_rng(seed).permutation(users), strict=True))
    q2 = qrels.assign(user=qrels["user"].map(mapping))
    r2 = run.assign(user=run["user"].map(mapping))
    got = metrics.evaluate(q2, r2, names, **opts)
    back = got.per_user.rename(index={v: u for u, v in mapping.items()}).sort_index()
    pd.testing.assert_frame_equal(ref.per_user, back, check_exact=False, rtol=1e-12, atol=1e-12)
    for name, value in ref.summary.items():
        assert (np.isnan(value) and np.isnan(got.summary[name])) or abs(
            value - got.summary[name]
        ) <= 1e-12, name
    assert ref.counts == got.counts


@SETTINGS
@given(t=tables(), opts=options, k=st.integers(1, 6), cells=st.sampled_from([1, 3, 7, 20]))
def test_batching_invariance(t, opts, k, cells):
    qrels, run = t
    names = all_names(k)
    assert_same(
        metrics.evaluate(qrels, run, names, **opts),
        metrics.evaluate(qrels, run, names, batch_cells=cells, **opts),
    )


@SETTINGS
@given(t=tables(), opts=options, k=st.integers(1, 6))
def test_monotone_item_relabelling_under_item_asc(t, opts, k):
    qrels, run = t
    opts = {**opts, "tie_break": "item_asc"}
    names = [n for n in all_names(k) if not n.startswith(("coverage", "gini"))]
    ref = metrics.evaluate(qrels, run, names, **opts)

    def relabel(items: pd.Series) -> pd.Series:
        if items.dtype.kind in "iu":
            return items * 3 + 1
        return "z" + items.astype(str)  # a common prefix keeps the string order

    got = metrics.evaluate(
        qrels.assign(item=relabel(qrels["item"])),
        run.assign(item=relabel(run["item"])),
        names,
        **opts,
    )
    assert_same(ref, got)


@SETTINGS
@given(
    t=tables(ties=True),
    opts=options,
    k=st.integers(1, 6),
    a=st.sampled_from([0.5, 2.0, 10.0]),
    b=st.sampled_from([-3.0, 0.0, 7.5]),
)
def test_increasing_score_transform_changes_no_ranking_metric(t, opts, k, a, b):
    qrels, run = t
    names = [n for n in all_names(k) if n not in ("rmse", "mae")]
    ref = metrics.evaluate(qrels, run, names, **opts)
    assert_same(ref, metrics.evaluate(qrels, run.assign(score=run["score"] * a + b), names, **opts))


@SETTINGS
@given(t=tables())
def test_negating_scores_mirrors_auc(t):
    qrels, run = t
    ev = metrics.evaluate(qrels, run, ["auc", "global_auc"])
    flipped = metrics.evaluate(qrels, run.assign(score=-run["score"]), ["auc", "global_auc"])
    ok = ev.per_user["auc"].notna()
    assert np.allclose(ev.per_user["auc"][ok] + flipped.per_user["auc"][ok], 1.0, atol=1e-12)
    assert (ev.per_user["auc"].isna() == flipped.per_user["auc"].isna()).all()
    if not np.isnan(ev.summary["global_auc"]):
        assert abs(ev.summary["global_auc"] + flipped.summary["global_auc"] - 1) <= 1e-12


# ---------------------------------------------------------------------------------------------
# micro vs macro
# ---------------------------------------------------------------------------------------------
@st.composite
def uniform_users(draw):
    """Every user has the same list length L >= k and the same |T_u| > 0."""
    k = draw(st.integers(1, 5))
    length = draw(st.integers(k, 8))
    n_rel = draw(st.integers(1, 6))
    n_items = max(length, n_rel) + draw(st.integers(0, 4))
    qrels, run = [], []
    for u in range(draw(st.integers(1, 6))):
        truth = draw(st.permutations(range(n_items)))[:n_rel]
        listed = draw(st.permutations(range(n_items)))[:length]
        qrels += [(u, i, draw(st.integers(1, 3))) for i in truth]
        run += [(u, i, float(draw(st.integers(0, 3)))) for i in listed]
    return k, (
        pd.DataFrame(qrels, columns=["user", "item", "relevance"]),
        pd.DataFrame(run, columns=["user", "item", "score"]),
    )


@SETTINGS
@given(case=uniform_users())
def test_micro_equals_macro_for_uniform_users(case):
    k, (qrels, run) = case
    names = [f"precision@{k}", f"recall@{k}"]
    macro = metrics.evaluate(qrels, run, names, average="macro").summary
    micro = metrics.evaluate(qrels, run, names, average="micro").summary
    for name in names:
        assert abs(macro[name] - micro[name]) <= 1e-12, name


# ---------------------------------------------------------------------------------------------
# GSB
# ---------------------------------------------------------------------------------------------
@SETTINGS
@given(
    values=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=20),
    tol=st.sampled_from([0.0, 0.01, 0.1]),
    relative=st.booleans(),
)
def test_gsb_antisymmetric_and_bounded(values, tol, relative):
    a = [x for x, _ in values]
    b = [y for _, y in values]
    ab = metrics.gsb(a, b, tol, relative=relative)
    assert ab.good + ab.same + ab.bad == len(values)
    assert -1.0 <= ab.delta <= 1.0
    if not relative:  # relative tolerance is measured against A, so it is not symmetric
        ba = metrics.gsb(b, a, tol)
        assert (ba.good, ba.same, ba.bad) == (ab.bad, ab.same, ab.good)
        assert ba.delta == -ab.delta


@pytest.mark.parametrize("n_users", [1, 4])
def test_identical_runs_give_all_same(n_users):
    qrels = pd.DataFrame(
        {"user": list(range(n_users)), "item": [1] * n_users, "relevance": [1] * n_users}
    )
    run = pd.DataFrame(
        {"user": list(range(n_users)), "item": [1] * n_users, "score": [1.0] * n_users}
    )
    pu = metrics.evaluate(qrels, run, ["ndcg@5"]).per_user["ndcg@5"]
    res = metrics.gsb(pu, pu)
    assert (res.good, res.same, res.bad, res.delta) == (0, n_users, 0, 0.0)
