"""AUC family over the full ranked catalog (issue 11, defect 2).

With ``candidates=full`` the harness must compute ``auc``/``gauc``/``global_auc`` over every item
the model ranks (the catalog minus the user's seen items), ties counting 1/2, not over the saved
top-k list. References are independent: ``sklearn.metrics.roc_auc_score`` on each user's full
score vector (scores from the model's formula or ``score_items``, candidates and labels built here
from the train and test frames), naive weighted means and pooled AUCs, and hand-computed values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from harness.candidates import sample_negatives
from harness.datasets import Dataset
from harness.experiment import MetricSuite, run_models
from harness.models import BaseRecommender, ImplicitItemCosine, PopularityModel, PrecomputedScores
from harness.split import Split, make_split
from harness.synthetic import generate
from metrics.scores import matrix_auc_counts, pooled_wins2, score_metric, user_auc

TOL = 1e-12


class TiedModel(BaseRecommender):
    """Scores in {0, 1, 2}: ``(7 * user id + item id) % 3`` (massive ties)."""

    def _score(self, user_codes: np.ndarray) -> np.ndarray:
        u = self.user_ids_[user_codes].astype(np.int64)
        return ((7 * u[:, None] + self.item_ids_[None, :]) % 3).astype(np.float64)


def tied_score(user: int, item: int) -> float:
    return float((7 * user + item) % 3)


def reference(
    train: pd.DataFrame, test: pd.DataFrame, users: np.ndarray, score_of, exclude_seen: bool = True
) -> tuple[dict[int, float], dict[int, int], float]:
    """Per-user sklearn AUC over the catalog minus seen items, candidates per user, pooled AUC.

    ``score_of(user, items) -> scores`` is the model's full score vector for one user.
    """
    catalog = np.sort(train["item"].unique())
    seen = train.groupby("user")["item"].agg(set).to_dict()
    truth = test.groupby("user")["item"].agg(set).to_dict()
    per_user, n_cand, all_y, all_s = {}, {}, [], []
    for user in users:
        excluded = seen.get(user, set()) if exclude_seen else set()
        items = np.array([i for i in catalog if i not in excluded])
        s = np.asarray(score_of(user, items), dtype=float)
        y = np.array([i in truth.get(user, set()) for i in items])
        all_y.append(y)
        all_s.append(s)
        n_cand[user] = len(items)
        per_user[user] = roc_auc_score(y, s) if 0 < y.sum() < len(y) else np.nan
    pooled = roc_auc_score(np.concatenate(all_y), np.concatenate(all_s))
    return per_user, n_cand, pooled


def naive_gauc(per_user: dict[int, float], n_cand: dict[int, int]) -> float:
    num = den = 0.0
    for user, value in per_user.items():
        if not np.isnan(value):
            num += value * n_cand[user]
            den += n_cand[user]
    return num / den


# ----------------------------------------------------------------------------- the kernels


def test_matrix_counts_match_sklearn_on_tied_rows() -> None:
    rng = np.random.default_rng(0)
    for _ in range(100):
        n_rows, n_cols = rng.integers(1, 7), rng.integers(1, 50)
        scores = rng.integers(0, 4, (n_rows, n_cols)).astype(float)
        scores[rng.random((n_rows, n_cols)) < 0.2] = -np.inf  # not candidates (seen)
        relevant = rng.random((n_rows, n_cols)) < 0.3  # some at -inf: must be ignored
        rows, cols = np.nonzero(relevant)
        counts = matrix_auc_counts(scores, rows, cols)
        got = user_auc(counts)
        pos, neg = [], []
        for r in range(n_rows):
            cand = np.isfinite(scores[r])
            y, s = relevant[r][cand], scores[r][cand]
            expected = roc_auc_score(y, s) if 0 < y.sum() < y.size else np.nan
            np.testing.assert_allclose(got[r], expected, atol=TOL)
            assert counts.n_pos[r] == y.sum() and counts.n_neg[r] == (~y).sum()
            pos.append(s[y])
            neg.append(s[~y])
        p, n = np.concatenate(pos), np.concatenate(neg)
        if p.size and n.size:
            expected = roc_auc_score(np.r_[np.ones(p.size), np.zeros(n.size)], np.r_[p, n])
            assert abs(pooled_wins2(p, n) / 2 / (p.size * n.size) - expected) < TOL


def test_score_metric_aggregates_by_hand() -> None:
    # user 0: 2 positives, 1 negative, wins 2 -> 1.0; user 1: 1 positive, 3 negatives, wins 0.5
    counts = matrix_auc_counts(
        np.array([[3.0, 2.0, 1.0, -np.inf], [1.0, 1.0, 2.0, 3.0]]),
        np.array([0, 0, 1]),
        np.array([0, 1, 0]),
    )
    np.testing.assert_allclose(user_auc(counts), [1.0, 0.5 / 3])
    assert score_metric("auc", counts)[1] == pytest.approx((1.0 + 0.5 / 3) / 2)
    # gauc weights: candidates per user (3 and 4)
    assert score_metric("gauc", counts)[1] == pytest.approx((3 * 1.0 + 4 * 0.5 / 3) / 7)
    # RecBole's weights: relevant candidates per user (2 and 1)
    by_positives = score_metric("gauc", counts, gauc_weight="positives")[1]
    assert by_positives == pytest.approx((2 * 1.0 + 1 * 0.5 / 3) / 3)
    with pytest.raises(ValueError, match="gauc_weight"):
        score_metric("gauc", counts, gauc_weight="users")
    with pytest.raises(ValueError, match="not a score metric"):
        score_metric("ndcg", counts)


# ---------------------------------------------------------------------------- the models


@pytest.fixture(scope="module")
def split() -> Split:
    frame = generate(n_users=60, n_items=40, n_events=1000, seed=3)
    base = make_split(frame, "global_time", cut=0.8)
    items = np.sort(base.train["item"].unique())
    known = base.test["user"].iloc[0]
    extra = pd.DataFrame(  # a user unknown to training, and an item unknown to training
        {"user": [10_000, 10_000, 10_000, known], "item": [*items[[0, 3, 5]], 10_000]}
    )
    test = pd.concat([base.test[["user", "item"]], extra], ignore_index=True)
    return Split(base.train, test.drop_duplicates(), None, {}, "manual", {})


def _popularity_of(train: pd.DataFrame):
    pop = train.groupby("item")["user"].nunique()
    return lambda user, items: pop.reindex(items).to_numpy()


@pytest.mark.parametrize("exclude_seen", [True, False])
@pytest.mark.parametrize("kind", ["popularity", "tied", "item_knn"])
def test_recommend_with_auc_matches_sklearn_on_full_score_vectors(
    split: Split, kind: str, exclude_seen: bool
) -> None:
    train, test = split.train, split.test
    users = np.sort(test["user"].unique())
    known = set(train["user"])
    assert any(u not in known for u in users)  # unknown users use the fallback scores
    if kind == "popularity":
        model = PopularityModel(batch_size=7, exclude_seen=exclude_seen).fit(train)
        score_of = _popularity_of(train)
    elif kind == "tied":
        model = TiedModel(batch_size=7, exclude_seen=exclude_seen).fit(train)
        pop = _popularity_of(train)

        def score_of(user, items):
            if user not in known:  # fallback of unknown users: popularity
                return pop(user, items)
            return [tied_score(user, i) for i in items]
    else:
        model = ImplicitItemCosine(batch_size=7, exclude_seen=exclude_seen).fit(train)

        def score_of(user, items):
            return model.score_items(np.array([user]), np.asarray(items)[None, :])[0]

    ids, scores, counts = model.recommend_with_auc(
        users, 5, test["user"].to_numpy(), test["item"].to_numpy(), pooled=True
    )
    plain_ids, plain_scores = model.recommend(users, 5)
    np.testing.assert_array_equal(ids, plain_ids)
    np.testing.assert_array_equal(scores, plain_scores)

    # Unknown test items and seen test items are not candidates: the reference drops them too.
    truth = test[test["item"].isin(train["item"])]
    per_user, n_cand, pooled = reference(train, truth, users, score_of, exclude_seen)
    expected = np.array([per_user[u] for u in users])
    np.testing.assert_allclose(user_auc(counts), expected, atol=TOL)
    np.testing.assert_array_equal(counts.n_pos + counts.n_neg, [n_cand[u] for u in users])
    assert score_metric("auc", counts)[1] == pytest.approx(np.nanmean(expected), abs=TOL)
    assert score_metric("gauc", counts)[1] == pytest.approx(naive_gauc(per_user, n_cand), abs=TOL)
    assert score_metric("global_auc", counts)[1] == pytest.approx(pooled, abs=TOL)


def test_recommend_with_auc_rejects_bad_input(split: Split) -> None:
    model = PopularityModel().fit(split.train)
    with pytest.raises(ValueError, match="distinct"):
        model.recommend_with_auc(np.array([1, 1]), 3, np.array([1]), np.array([2]))
    with pytest.raises(ValueError, match="one length"):
        model.recommend_with_auc(np.array([1]), 3, np.array([1, 2]), np.array([2]))


class OwnRanking(PopularityModel):
    """Overrides ``recommend`` (its lists may differ from the base ranking of ``_score``), so
    the catalog path, which ranks with the base class, must not be used for it."""

    def recommend(self, users, k, *, exclude_seen=None):
        return super().recommend(users, k, exclude_seen=exclude_seen)


def test_only_models_ranking_from_score_count_the_catalog(split: Split, tmp_path: Path) -> None:
    assert PopularityModel().scores_catalog and ImplicitItemCosine().scores_catalog
    assert not OwnRanking().scores_catalog
    path = tmp_path / "s.csv"
    pd.DataFrame({"user": [1], "item": [2], "score": [1.0]}).to_csv(path, index=False)
    model = PrecomputedScores(path).fit(split.train)
    assert not model.scores_catalog
    with pytest.raises(TypeError, match="does not score the whole catalog"):
        model.recommend_with_auc(np.array([1]), 3, np.array([1]), np.array([2]))


# --------------------------------------------------------------------------- the harness

# Hand-made data: popularity 10:3, 11:2, 12:2, 13:2, 14:1, 15:1, 16:1.
TRAIN = pd.DataFrame(
    {
        "user": [1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 4],
        "item": [10, 11, 10, 11, 12, 10, 12, 13, 14, 15, 16, 13],
    }
)
TEST = pd.DataFrame({"user": [1, 1, 4, 4], "item": [12, 14, 10, 11]})
SUITE = MetricSuite(k=2, names=("precision@2", "auc", "gauc", "global_auc"))


def _run(models: dict, tmp_path: Path, candidates: pd.DataFrame | None = None, suite=SUITE):
    split = Split(TRAIN, TEST, None, {}, "manual", {})
    frame = pd.concat([TRAIN, TEST], ignore_index=True)
    return run_models(
        Dataset("hand", frame, "hand"),
        split,
        models,
        suite,
        tmp_path,
        progress=False,
        candidates=candidates,
    )


def test_harness_full_catalog_auc_by_hand(tmp_path: Path) -> None:
    # user 4 ranks 10, 11, 12 (scores 3, 2, 2; 13-16 seen): relevant 10, 11 -> (1 + 1/2) / 2.
    # Its top-2 [10, 11] is all hits, so the old top-k AUC was NaN; rank order would say 1.0.
    # user 1 ranks 12..16 (scores 2, 2, 1, 1, 1): relevant 12, 14 -> (2.5 + 1) / 6.
    result = _run({"pop": PopularityModel()}, tmp_path)
    outcome = result.outcomes["pop"]
    assert outcome.ok, outcome.error
    recs = outcome.recommendations
    assert recs[recs["user"] == 4]["item"].tolist() == [10, 11]
    ev = outcome.evaluation
    u1, u4 = 3.5 / 6, 0.75
    assert ev.per_user.loc[4, "auc"] == pytest.approx(u4, abs=TOL)
    assert ev.per_user.loc[1, "auc"] == pytest.approx(u1, abs=TOL)
    assert ev.summary["auc"] == pytest.approx((u1 + u4) / 2, abs=TOL)
    assert ev.summary["gauc"] == pytest.approx((5 * u1 + 3 * u4) / 8, abs=TOL)
    # pooled positives 3, 2 | 2, 1 against negatives 2 | 2, 1, 1: 11 wins of 16 pairs
    assert ev.summary["global_auc"] == pytest.approx(11 / 16, abs=TOL)
    assert ev.per_user["global_auc"].isna().all()
    assert ev.summary["precision@2"] == pytest.approx((0.5 + 1.0) / 2)
    assert list(ev.per_user.columns) == list(SUITE.names)
    assert ev.counts["auc_undefined_users"] == 0
    assert outcome.info["auc_scope"] == "catalog"
    assert outcome.info["auc_relevant_unranked"] == 0
    assert not outcome.notes


def test_harness_only_score_metrics_and_unranked_relevant(tmp_path: Path) -> None:
    # Item 99 is unknown to the model and item 13 is user 4's training item: neither is ranked.
    test = pd.concat([TEST, pd.DataFrame({"user": [4, 1], "item": [13, 99]})], ignore_index=True)
    split = Split(TRAIN, test, None, {}, "manual", {})
    result = run_models(
        Dataset("hand", pd.concat([TRAIN, test]), "hand"),
        split,
        {"pop": PopularityModel()},
        MetricSuite(k=2, names=("auc",)),
        tmp_path,
        progress=False,
    )
    outcome = result.outcomes["pop"]
    assert outcome.ok, outcome.error
    assert outcome.evaluation.summary["auc"] == pytest.approx((3.5 / 6 + 0.75) / 2, abs=TOL)
    assert outcome.info["auc_relevant_unranked"] == 2


def test_harness_matches_sklearn_on_synthetic_data(split: Split, tmp_path: Path) -> None:
    suite = MetricSuite(k=5, names=("ndcg@5", "auc", "gauc", "global_auc"))
    frame = pd.concat([split.train, split.test], ignore_index=True)
    result = run_models(
        Dataset("s", frame, "s"),
        split,
        {"pop": PopularityModel(batch_size=9), "tied": TiedModel(batch_size=9)},
        suite,
        tmp_path,
        progress=False,
    )
    train = split.train
    truth = split.test[split.test["item"].isin(train["item"])]
    users = np.sort(split.test["user"].unique())
    known = set(train["user"])
    pop = _popularity_of(train)
    refs = {
        "pop": pop,
        "tied": lambda u, items: (
            pop(u, items) if u not in known else [tied_score(u, i) for i in items]
        ),
    }
    for name, score_of in refs.items():
        outcome = result.outcomes[name]
        assert outcome.ok, outcome.error
        ev = outcome.evaluation
        per_user, n_cand, pooled = reference(train, truth, users, score_of)
        got = ev.per_user["auc"].reindex(users).to_numpy()
        np.testing.assert_allclose(got, [per_user[u] for u in users], atol=TOL)
        assert ev.summary["auc"] == pytest.approx(np.nanmean(list(per_user.values())), abs=TOL)
        assert ev.summary["gauc"] == pytest.approx(naive_gauc(per_user, n_cand), abs=TOL)
        assert ev.summary["global_auc"] == pytest.approx(pooled, abs=TOL)
        # users whose top-5 list is all hits or has none still get an AUC
        recs = outcome.recommendations
        hits = recs.merge(truth, on=["user", "item"]).groupby("user").size()
        shown = recs.groupby("user").size()
        extreme = [u for u in users if hits.get(u, 0) in (0, shown.get(u, 0))]
        defined = [u for u in extreme if np.isfinite(per_user[u])]
        assert defined  # the top-k AUC of these users was NaN
        got = ev.per_user.loc[defined, "auc"].to_numpy()
        np.testing.assert_allclose(got, [per_user[u] for u in defined], atol=TOL)
        assert outcome.info["auc_scope"] == "catalog"


def test_harness_topk_scope_for_a_model_without_catalog_scoring(tmp_path: Path) -> None:
    path = tmp_path / "scores.csv"
    pd.DataFrame(
        {"user": [1, 1, 1, 4, 4], "item": [12, 13, 14, 10, 12], "score": [0.9, 0.8, 0.7, 0.5, 0.5]}
    ).to_csv(path, index=False)
    result = _run({"file": PrecomputedScores(path)}, tmp_path / "out")
    outcome = result.outcomes["file"]
    assert outcome.ok, outcome.error
    assert outcome.info["auc_scope"] == "topk"
    assert any("top-2 list only" in note and "auc" in note for note in outcome.notes)
    # user 1's list [12, 13]: relevant 12 above 13 -> 1.0; user 4's [10, 12]: relevant 10 tied
    # with 12 -> 1/2 (its rank would say 1.0)
    assert outcome.evaluation.per_user["auc"].to_dict() == pytest.approx({1: 1.0, 4: 0.5})
    assert outcome.evaluation.summary["auc"] == pytest.approx(0.75)
    assert outcome.evaluation.summary["precision@2"] == pytest.approx(0.5)
    saved = (tmp_path / "out" / "file" / "result.json").read_text()
    assert '"auc_scope": "topk"' in saved


def test_harness_candidates_scope_matches_sklearn(split: Split, tmp_path: Path) -> None:
    cand = sample_negatives(split.train, split.test, 10, "uniform", seed=0)
    suite = MetricSuite(k=5, names=("auc", "gauc"))
    frame = pd.concat([split.train, split.test], ignore_index=True)
    result = run_models(
        Dataset("s", frame, "s"),
        split,
        {"pop": PopularityModel()},
        suite,
        tmp_path,
        progress=False,
        candidates=cand,
    )
    outcome = result.outcomes["pop"]
    assert outcome.ok, outcome.error
    assert outcome.info["auc_scope"] == "candidates"
    pop = split.train.groupby("item")["user"].nunique()
    truth = set(zip(split.test["user"], split.test["item"], strict=True))
    cand = cand[cand["user"].isin(split.test["user"]) & cand["item"].isin(pop.index)]
    expected = {}
    for user, rows in cand.groupby("user"):
        y = np.array([(user, i) in truth for i in rows["item"]])
        if 0 < y.sum() < y.size:
            expected[user] = roc_auc_score(y, pop.reindex(rows["item"]).to_numpy())
    got = outcome.evaluation.per_user["auc"].dropna()
    assert set(got.index) == set(expected)
    np.testing.assert_allclose(got.to_numpy(), [expected[u] for u in got.index], atol=TOL)
