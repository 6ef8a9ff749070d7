"""Beyond-accuracy metrics (diversity, unexpectedness, serendipity, miscalibration, exposure):
against naive loops written from the formulas, and against Microsoft Recommenders' published
test values (tests/unit/recommenders/evaluation, ``diversity_data`` fixture)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

import metrics
from metrics.beyond import group_gap

# ------------------------------------------------------------------------------ random data


def random_case(seed: int, text_ids: bool = False):
    """(qrels, run, train, features, embeddings, groups) with tied scores, short lists, users with
    no training history, users with no relevant item, multi-valued and missing categories."""
    rng = np.random.default_rng(seed)
    n_items = 25
    items = np.arange(n_items)
    run_rows, truth_rows, train_rows = [], [], []
    for u in range(40):
        size = int(rng.choice([0, 1, 2, 3, 6, 12]))
        chosen = rng.choice(items, size=size, replace=False)
        run_rows += [(u, i, float(rng.integers(0, 3))) for i in chosen]  # many ties
        for i in rng.choice(items, size=int(rng.integers(0, 4)), replace=False):
            truth_rows.append((u, i, float(rng.integers(0, 3))))  # graded, some 0
        if u % 7 != 0:  # every 7th user has no history
            hist = rng.choice(items, size=int(rng.integers(1, 8)), replace=False)
            train_rows += [(u, i) for i in hist]
            if rng.random() < 0.3:  # a repeated interaction
                train_rows.append((u, int(hist[0])))
    truth_rows.append((99, 0, 1.0))  # a user without any list
    run = pd.DataFrame(run_rows, columns=["user", "item", "score"])
    qrels = pd.DataFrame(truth_rows, columns=["user", "item", "relevance"])
    train = pd.DataFrame(train_rows, columns=["user", "item"])
    genre = []
    for _ in items:
        k = int(rng.integers(0, 4))  # 0: no category
        genre.append("|".join(sorted(rng.choice(list("abcde"), size=k, replace=False))))
    features = pd.DataFrame(
        {"item": items, "genre": genre, "studio": rng.choice(["x", "y", None], size=n_items)}
    )
    embeddings = pd.DataFrame(rng.normal(size=(n_items, 4)), columns=["e0", "e1", "e2", "e3"])
    embeddings.insert(0, "item", items)
    groups = pd.DataFrame({"item": items, "group": rng.choice(["p1", "p2", "p3"], size=n_items)})
    if text_ids:
        for df in (run, qrels, train, features, embeddings, groups):
            df["item"] = "i" + df["item"].astype(str)
    return qrels, run, train, features, embeddings, groups


def top_lists(run: pd.DataFrame, k: int) -> dict:
    """Each user's top-k: score descending, ties by item id ascending (the default tie rule)."""
    out = {}
    for u, g in run.groupby("user"):
        rows = sorted(zip(g["score"], g["item"], strict=True), key=lambda t: (-t[0], t[1]))
        out[u] = [i for _, i in rows[:k]]
    return out


def feature_sets(features: pd.DataFrame) -> dict:
    sets = {}
    for _, row in features.iterrows():
        values = set()
        if row["genre"]:
            values |= {"genre=" + g for g in row["genre"].split("|")}
        if isinstance(row["studio"], str):
            values.add("studio=" + row["studio"])
        sets[row["item"]] = values
    return sets


def set_cosine(a: set, b: set) -> float:
    return len(a & b) / math.sqrt(len(a) * len(b)) if a and b else 0.0


def set_jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


def vec_cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else 0.0


def naive_diversity(lists: dict, sim) -> dict:
    out = {}
    for u, items in lists.items():
        pairs = list(itertools.combinations(items, 2))
        out[u] = 1 - sum(sim(a, b) for a, b in pairs) / len(pairs) if pairs else np.nan
    return out


def similarities(kind: str, features, embeddings, train):
    if kind in ("features", "jaccard"):
        sets = feature_sets(features)
        f = set_cosine if kind == "features" else set_jaccard
        return lambda a, b: f(sets[a], sets[b])
    if kind == "embeddings":
        vec = {
            r["item"]: r[["e0", "e1", "e2", "e3"]].to_numpy(float) for _, r in embeddings.iterrows()
        }
        return lambda a, b: vec_cosine(vec[a], vec[b])
    users = train.groupby("item")["user"].agg(set).to_dict()
    return lambda a, b: set_cosine(users.get(a, set()), users.get(b, set()))


def check_per_user(ev: metrics.Evaluation, name: str, expected: dict) -> None:
    got = ev.per_user[name]
    for u in got.index:
        want = expected.get(u, np.nan)
        if np.isnan(want):
            assert np.isnan(got[u]), (name, u, got[u])
        else:
            assert got[u] == pytest.approx(want, abs=1e-12), (name, u)
    assert ev.summary[name] == pytest.approx(
        np.nanmean([expected.get(u, np.nan) for u in got.index]), abs=1e-12
    )


# --------------------------------------------------------------------------------- diversity


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", ["features", "jaccard", "embeddings", "cooccurrence"])
@pytest.mark.parametrize("text_ids", [False, True])
def test_diversity_matches_pairwise_loop(seed: int, kind: str, text_ids: bool) -> None:
    qrels, run, train, features, embeddings, _ = random_case(seed, text_ids)
    k = 5
    side = {
        "features": {"item_features": features},
        "jaccard": {"item_features": features, "diversity_similarity": "jaccard"},
        "embeddings": {"item_embeddings": embeddings, "item_features": features},
        "cooccurrence": {},
    }[kind]
    ev = metrics.evaluate(qrels, run, [f"diversity@{k}"], train=train, **side)
    expected = naive_diversity(top_lists(run, k), similarities(kind, features, embeddings, train))
    check_per_user(ev, f"diversity@{k}", expected)
    lists = top_lists(run, k)
    short = sum(1 for u in ev.per_user.index if len(lists.get(u, [])) < 2)
    assert ev.counts[f"diversity@{k}.undefined_users"] == short > 0


# ------------------------------------------------------------ unexpectedness / serendipity


def naive_unexpected(method, kind, lists, train, features, embeddings, k):
    """unexpected(u, i) from the formulas: outside the popularity top-k, or 1 − mean sim to H_u."""
    if method == "popularity":
        counts = train["item"].value_counts()
        ranked = sorted(counts.items(), key=lambda t: (-t[1], t[0]))
        primitive = {i for i, _ in ranked[:k]}
        return lambda u, i: float(i not in primitive)
    sim = similarities(kind, features, embeddings, train)
    history = train.drop_duplicates().groupby("user")["item"].agg(list).to_dict()

    def unexpected(u, i):
        h = history.get(u, [])
        return 1 - sum(sim(i, x) for x in h) / len(h) if h else np.nan

    return unexpected


@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.parametrize(
    ("method", "kind"),
    [
        ("popularity", None),
        ("history", "features"),
        ("history", "embeddings"),
        ("history", "cooccurrence"),
    ],
)
@pytest.mark.parametrize("empty_users", ["skip", "zero"])
def test_unexpectedness_and_serendipity_match_loops(seed, method, kind, empty_users) -> None:
    qrels, run, train, features, embeddings, _ = random_case(seed)
    k = 4
    side = {
        "features": {"item_features": features},
        "embeddings": {"item_embeddings": embeddings},
    }.get(kind, {})
    names = [f"unexpectedness@{k}", f"serendipity@{k}"]
    ev = metrics.evaluate(
        qrels, run, names, train=train, serendipity_method=method, empty_users=empty_users, **side
    )
    lists = top_lists(run, k)
    unexpected = naive_unexpected(method, kind, lists, train, features, embeddings, k)
    relevant = {(u, i) for u, i, r in qrels.itertuples(index=False) if r >= 1}
    has_relevant = {u for u, _ in relevant}
    unexp, seren = {}, {}
    for u, items in lists.items():
        if not items:
            continue
        values = [unexpected(u, i) for i in items]
        unexp[u] = float(np.mean(values))
        seren[u] = float(
            np.mean([v * ((u, i) in relevant) for v, i in zip(values, items, strict=True)])
        )
        if np.isnan(unexp[u]):
            seren[u] = np.nan
    for u in list(seren):
        if empty_users == "skip" and u not in has_relevant:
            seren[u] = np.nan
    check_per_user(ev, names[0], unexp)
    check_per_user(ev, names[1], seren)


# ---------------------------------------------------------------------------- miscalibration


def naive_distribution(items, cats) -> dict:
    p: dict = {}
    mass = 0
    for i in items:
        if cats[i]:
            mass += 1
            for g in cats[i]:
                p[g] = p.get(g, 0.0) + 1 / len(cats[i])
    return {g: v / mass for g, v in p.items()} if mass else {}


@pytest.mark.parametrize("seed", [0, 4])
@pytest.mark.parametrize("alpha", [0.01, 0.2])
def test_miscalibration_matches_explicit_kl(seed: int, alpha: float) -> None:
    qrels, run, train, features, _, _ = random_case(seed)
    k = 6
    ev = metrics.evaluate(
        qrels,
        run,
        [f"miscalibration@{k}"],
        train=train,
        item_features=features,
        calibration_alpha=alpha,
    )
    cats = feature_sets(features)
    history = train.drop_duplicates().groupby("user")["item"].agg(list).to_dict()
    expected = {}
    for u, items in top_lists(run, k).items():
        p = naive_distribution(history.get(u, []), cats)
        q = naive_distribution(items, cats)  # {} when no item of the list has a category
        if not p:  # no categorised history: undefined
            continue
        kl = 0.0
        for g, pg in p.items():
            kl += pg * math.log(pg / ((1 - alpha) * q.get(g, 0.0) + alpha * pg))
        expected[u] = kl
    check_per_user(ev, f"miscalibration@{k}", expected)
    assert not metrics.parse("miscalibration@10").definition.higher_is_better


# ---------------------------------------------------------------------------------- exposure


@pytest.mark.parametrize("seed", [0, 5])
def test_exposure_shares_match_loops(seed: int) -> None:
    qrels, run, _, features, _, groups = random_case(seed)
    k = 5
    evaluated = set(qrels["user"])  # the default user set: the users of the truth
    lists = {u: items for u, items in top_lists(run, k).items() if u in evaluated}
    names = [f"exposure_{g}@{k}" for g in ("p1", "p2", "p3")]
    ev = metrics.evaluate(qrels, run, names, item_groups=groups)
    group_of = dict(zip(groups["item"], groups["group"], strict=True))
    total = {g: 0.0 for g in ("p1", "p2", "p3")}
    for items in lists.values():
        for rank, i in enumerate(items, start=1):
            total[group_of[i]] += 1 / math.log2(rank + 1)
    whole = sum(total.values())
    for g, name in zip(("p1", "p2", "p3"), names, strict=True):
        assert ev.summary[name] == pytest.approx(total[g] / whole, abs=1e-12)
    assert sum(ev.summary[n] for n in names) == pytest.approx(1.0)
    # a column of item_features names the groups just as well
    by_column = metrics.evaluate(
        qrels,
        run,
        names,
        item_features=features.assign(provider=groups["group"]),
        item_groups="provider",
    )
    assert by_column.summary == pytest.approx(ev.summary)


def test_exposure_popularity_groups_head_mid_tail() -> None:
    # counts: a 5, b 3, c 1, d 1 (total 10); e never seen. head: before-share < 0.2 → a;
    # tail: share of the item and every less popular one <= 0.2 → c, d (and e); mid: b
    train = pd.DataFrame({"user": range(10), "item": list("aaaaabbbcd")})
    run = pd.DataFrame({"user": [1, 1, 1, 1], "item": list("abce"), "score": [4.0, 3, 2, 1]})
    qrels = pd.DataFrame({"user": [1], "item": ["a"], "relevance": [1]})
    names = ["exposure_head@4", "exposure_mid@4", "exposure_tail@4"]
    ev = metrics.evaluate(qrels, run, names, train=train)
    d = [1 / math.log2(r + 1) for r in range(1, 5)]
    assert ev.summary["exposure_head@4"] == pytest.approx(d[0] / sum(d))
    assert ev.summary["exposure_mid@4"] == pytest.approx(d[1] / sum(d))
    assert ev.summary["exposure_tail@4"] == pytest.approx((d[2] + d[3]) / sum(d))


# ------------------------------------------------------------- Microsoft Recommenders values


def ms_diversity_data():
    """The ``diversity_data`` fixture of Microsoft Recommenders' evaluation tests."""
    train = pd.DataFrame({"user": [1, 1, 1, 2, 2, 3, 3, 3], "item": [1, 2, 4, 3, 4, 3, 4, 5]})
    reco = pd.DataFrame(
        {"user": [1, 1, 2, 2, 3, 3], "item": [3, 5, 2, 5, 1, 2], "relevance": [1, 0, 1, 1, 1, 0]}
    )
    vectors = [[0, 1, 1, 0, 0], [0, 1, 0, 1, 0], [0, 0, 1, 1, 0], [0, 0, 1, 0, 1], [0, 0, 0, 1, 1]]
    features = pd.DataFrame(
        {"item": [1, 2, 3, 4, 5], "features": [np.array(v, float) for v in vectors]}
    )
    qrels = reco[reco["relevance"] == 1]
    run = reco[["user", "item"]].assign(score=1.0)
    return qrels, run, train, features


@pytest.mark.parametrize(
    ("side", "diversity", "user_diversity", "serendipity", "user_serendipity"),
    [
        # item_sim_measure="item_cooccurrence_count"
        ({}, 0.43096, [0.29289, 1.0, 0.0], 0.43408, [0.363915, 0.53455, 0.403775]),
        # item_sim_measure="item_feature_vector"
        ("embeddings", 0.5, [0.5, 0.5, 0.5], 0.4028, [0.25, 0.625, 0.3333]),
    ],
)
def test_microsoft_recommenders_published_values(
    side, diversity, user_diversity, serendipity, user_serendipity
) -> None:
    qrels, run, train, features = ms_diversity_data()
    kw = {"item_embeddings": features} if side == "embeddings" else {}
    ev = metrics.evaluate(
        qrels, run, ["diversity", "serendipity"], train=train, serendipity_method="history", **kw
    )
    preset = metrics.evaluate(
        qrels, run, ["diversity", "serendipity"], train=train, preset="ms_recommenders", **kw
    )
    assert preset.summary == pytest.approx(ev.summary)
    tol = 1e-4
    assert ev.summary["diversity"] == pytest.approx(diversity, abs=tol)
    assert ev.per_user["diversity"].tolist() == pytest.approx(user_diversity, abs=tol)
    assert ev.summary["serendipity"] == pytest.approx(serendipity, abs=tol)
    assert ev.per_user["serendipity"].tolist() == pytest.approx(user_serendipity, abs=tol)


def test_microsoft_recommenders_coverage_and_novelty_values() -> None:
    # test_catalog_coverage 0.8, test_distributional_coverage 1.9183, test_novelty 2.83333
    qrels, run, train, _ = ms_diversity_data()
    names = ["coverage", "distributional_coverage", "novelty"]
    ev = metrics.evaluate(qrels, run, names, train=train, catalog=train["item"].unique())
    assert ev.summary["coverage"] == pytest.approx(0.8, abs=1e-4)
    assert ev.summary["distributional_coverage"] == pytest.approx(1.9183, abs=1e-4)
    assert ev.summary["novelty"] == pytest.approx(2.83333, abs=1e-4)


@pytest.mark.parametrize("seed", [0, 1])
def test_distributional_coverage_matches_entropy_loop(seed: int) -> None:
    qrels, run, _, _, _, _ = random_case(seed)
    evaluated = set(qrels["user"])
    counts: dict = {}
    for u, items in top_lists(run, 5).items():
        if u in evaluated:
            for i in items:
                counts[i] = counts.get(i, 0) + 1
    total = sum(counts.values())
    entropy = -sum(c / total * math.log2(c / total) for c in counts.values())
    ev = metrics.evaluate(qrels, run, ["distributional_coverage@5"])
    assert ev.summary["distributional_coverage@5"] == pytest.approx(entropy, abs=1e-12)
    assert ev.per_user["distributional_coverage@5"].isna().all()  # whole-run only


# ------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("names", "kwargs", "message"),
    [
        (["miscalibration@5"], {}, "needs item_features="),
        (["diversity@5"], {"diversity_similarity": "jaccard"}, "needs item_features="),
        (["exposure@5"], {}, "needs an item group"),
        (["exposure_nope@5"], {"item_groups": "genre"}, "no item group 'nope'"),
        (["diversity@5"], {"item_features": "x"}, "item_features must be a pandas DataFrame"),
        (["diversity@5"], {"item_features": pd.DataFrame({"id": [1]})}, "missing column 'item'"),
        (
            ["diversity@5"],
            {"item_features": pd.DataFrame({"item": [1, 1], "g": ["a", "b"]})},
            "item 1 twice",
        ),
        (
            ["diversity@5"],
            {"item_features": pd.DataFrame({"item": ["1"], "g": ["a"]})},
            "holds strings",
        ),
        (
            ["diversity@5"],
            {"item_features": pd.DataFrame({"item": [0], "g": ["a"]})},
            "has no row for item",
        ),
        (
            ["diversity@5"],
            {"item_embeddings": pd.DataFrame({"item": range(25), "e": ["a"] * 25})},
            "column 'e' must be numeric",
        ),
        (
            ["diversity@5"],
            {"item_embeddings": pd.DataFrame({"item": range(25), "e": [np.nan] * 25})},
            "must be finite",
        ),
        (
            ["exposure_p1@5"],
            {"item_groups": pd.DataFrame({"item": [0], "group": ["p1"]})},
            "no group for recommended item",
        ),
        (
            ["diversity@5"],
            {"calibration_alpha": 0},
            "'calibration_alpha' must be a number in (0, 1]",
        ),
        (
            ["diversity@5"],
            {"serendipity_method": "magic"},
            "option 'serendipity_method' must be one of",
        ),
    ],
)
def test_bad_side_inputs_are_one_line_errors(names, kwargs, message) -> None:
    qrels, run, train, features, _, _ = random_case(0)
    if isinstance(kwargs.get("item_groups"), str):
        kwargs = kwargs | {"item_features": features}
    with pytest.raises(ValueError, match=None) as err:
        metrics.evaluate(qrels, run, names, train=train, **kwargs)
    assert message in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_train_is_required_where_the_definition_needs_it() -> None:
    qrels, run, _, _, _, _ = random_case(0)
    for name, kw in [
        ("diversity@5", {}),
        ("unexpectedness@5", {}),
        ("serendipity@5", {"serendipity_method": "history"}),
        ("exposure_tail@5", {}),
    ]:
        with pytest.raises(ValueError, match=r"needs train="):
            metrics.evaluate(qrels, run, [name], **kw)


# --------------------------------------------------------------------------------- group gap


def test_group_gap_means_and_ci() -> None:
    rng = np.random.default_rng(0)
    users = pd.Index(range(400), name="user")
    values = np.where(users < 200, rng.normal(0.6, 0.1, 400), rng.normal(0.4, 0.1, 400))
    values[5] = np.nan
    per_user = pd.DataFrame({"ndcg@10": values}, index=users)
    labels = pd.Series(np.where(users < 200, "light", "heavy"), index=users)
    gap = group_gap(per_user, labels, "ndcg@10", n_resamples=500)
    light = np.nanmean(values[:200])
    heavy = values[200:].mean()
    assert gap.means == pytest.approx({"heavy": heavy, "light": light})
    assert gap.gap == pytest.approx(light - heavy)
    assert gap.ci[0] < gap.gap < gap.ci[1]
    assert gap.ci[0] > 0.15 and gap.ci[1] < 0.25
    assert gap.sizes == {"heavy": 200, "light": 199} and gap.dropped == 1
    frame = labels.rename("group").rename_axis("user").reset_index()
    assert group_gap(per_user, frame, "ndcg@10", n_resamples=500) == gap
    with pytest.raises(ValueError, match="no column 'recall@10'"):
        group_gap(per_user, labels, "recall@10")


def test_group_gap_ci_of_alike_groups_holds_the_estimate() -> None:
    """Three groups drawn alike: the largest minus the smallest group mean is small, and the
    max − min of resampled means is biased upward (its interval could lie wholly above the
    estimate). The CI is that of the difference between the two groups highest and lowest in
    the data: it holds the estimate, reaches below 0, and matches the normal interval
    ``diff ± 1.96·√(s²_hi/n_hi + s²_lo/n_lo)`` within Monte-Carlo error."""
    users = pd.Index(range(1500), name="user")
    hits = {"a": 150, "b": 151, "c": 149}  # of 500 users each: 0.004 apart at most
    values = np.concatenate([np.r_[np.ones(k), np.zeros(500 - k)] for k in hits.values()])
    labels = pd.Series(np.repeat(list(hits), 500), index=users)
    per_user = pd.DataFrame({"hit": values}, index=users)
    gap = group_gap(per_user, labels, "hit", n_resamples=4000)
    means = {g: values[labels.to_numpy() == g].mean() for g in "abc"}
    high, low = max(means, key=means.get), min(means, key=means.get)
    assert gap.gap == pytest.approx(means[high] - means[low])
    assert gap.ci[0] < 0 < gap.gap < gap.ci[1]
    x, y = (values[labels.to_numpy() == g] for g in (high, low))
    half = 1.959964 * np.sqrt(x.var(ddof=1) / x.size + y.var(ddof=1) / y.size)
    assert gap.ci[0] == pytest.approx(gap.gap - half, abs=0.006)
    assert gap.ci[1] == pytest.approx(gap.gap + half, abs=0.006)


# -------------------------------------------------------------------- gate guardrail (e2e)


@pytest.mark.slow
def test_diversity_guardrail_end_to_end(harness_cli, tmp_path) -> None:
    """``python -m harness`` with a ``diversity@10`` guardrail: per-user diversity matches a
    pairwise loop over the saved top-10 lists and the synthetic item categories, and the gate
    passes a wide margin (GO, exit 0) and fails a tight one (NO_GO, exit 10)."""
    import re
    from concurrent.futures import ThreadPoolExecutor

    from harness.synthetic import generate_with_items

    common = (
        "metrics.names=[ndcg@10,diversity@10,miscalibration@10]",
        "gate.enforce=true",
        "tracking=none",  # nothing here reads MLflow: no store to create and migrate
    )
    rule = "gate.guardrails=[{{metric: diversity@10, segment: all, margin: {}}}]"
    jobs = {"wide": rule.format(0.5), "tight": rule.format(0.01)}
    with ThreadPoolExecutor(2) as pool:
        futures = {
            name: pool.submit(
                harness_cli.run, tmp_path / name, *common, arg, "gate.gsb=null", quick=True
            )
            for name, arg in jobs.items()
        }
        done = {name: f.result() for name, f in futures.items()}
    wide, tight = done["wide"], done["tight"]
    assert wide.returncode == 0, wide.stdout + wide.stderr
    assert tight.returncode == 10, tight.stdout + tight.stderr
    assert "overall gate decision: GO" in wide.stdout
    assert "overall gate decision: NO_GO" in tight.stdout

    folder = tmp_path / "wide" / re.search(r"^results: (.+)$", wide.stdout, re.M).group(1)
    _, items = generate_with_items(300, 200, 6000, seed=0)  # experiment=quick, seed 0
    category = dict(zip(items["item"], items["category"], strict=True))
    means = {}
    for model in ("popularity", "item_knn"):
        top = pd.read_parquet(folder / model / "topk.parquet")
        per_user = pd.read_parquet(folder / model / "per_user.parquet")
        lists = {u: g.sort_values("rank")["item"].tolist() for u, g in top.groupby("user")}
        same = lambda a, b: float(category[a] == category[b])  # noqa: E731 (one-hot cosine)
        expected = naive_diversity(lists, same)
        for user, value in per_user["diversity@10"].items():
            assert value == pytest.approx(expected[user], abs=1e-12)
        means[model] = per_user["diversity@10"].mean()
    change = means["item_knn"] / means["popularity"] - 1
    line = next(x for x in wide.stdout.splitlines() if "guardrail diversity@10" in x)
    assert f"change {change * 100:+.2f}%" in line, line
    assert "pass" in line


# ---------------------------------------------------------------- harness: side input files


def test_dataset_side_input_files(tmp_path) -> None:
    from harness.datasets import load_dataset
    from harness.errors import DataError

    base = {"kind": "synthetic", "n_users": 50, "n_items": 30, "n_events": 400, "seed": 1}
    synthetic = load_dataset(base)
    assert list(synthetic.item_features.columns) == ["item", "category"]
    assert synthetic.side_inputs().keys() == {"item_features"}

    features = tmp_path / "items.csv"
    features.write_text("item,genre,provider\n1,a|b,p1\n2.0,b,p2\n 3,,p1\n")
    embeddings = tmp_path / "emb.parquet"
    pd.DataFrame(
        {"item": ["1", "2", "3"], "e0": [0.1, 0.2, 0.3], "e1": [1.0, 0.0, 1.0]}
    ).to_parquet(embeddings)
    ds = load_dataset(
        base
        | {
            "item_features": str(features),
            "item_embeddings": str(embeddings),
            "item_groups": "provider",
        }
    )
    assert ds.item_features["item"].tolist() == [1, 2, 3]  # ids read as interaction ids are
    assert ds.item_embeddings["item"].tolist() == [1, 2, 3]
    assert ds.item_groups == "provider"
    assert ds.side_inputs().keys() == {"item_features", "item_embeddings", "item_groups"}

    bad_emb = tmp_path / "bad.csv"
    bad_emb.write_text("item,e0\n1,0.5\n2,x\n")
    cases = [
        ({"item_groups": "provider"}, "dataset.item_groups='provider' must name a column"),
        ({"item_embeddings": str(bad_emb)}, "column 'e0' must hold finite numbers; row 1 has 'x'"),
    ]
    dup = tmp_path / "dup.csv"
    dup.write_text("item,genre\n1,a\n1.0,b\n")
    cases.append(({"item_features": str(dup)}, "item 1 twice"))
    for extra, message in cases:
        with pytest.raises(DataError) as err:
            load_dataset(base | extra)
        assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("name", ["unexpectedness", "serendipity"])
def test_popularity_unexpectedness_without_cutoff_is_refused(name: str) -> None:
    """The primitive list's length would otherwise be the width of a user batch."""
    qrels = pd.DataFrame({"user": [1], "item": [1], "relevance": [1]})
    run = pd.DataFrame({"user": [1, 1], "item": [1, 2], "score": [2.0, 1.0]})
    train = pd.DataFrame({"user": [2, 2], "item": [1, 3]})
    with pytest.raises(ValueError, match=rf"'{name}'.*needs a cutoff.*{name}@10"):
        metrics.evaluate(qrels, run, [name], train=train)


def test_exposure_groups_break_count_ties_by_item_id_not_row_order() -> None:
    # counts: b 4, then a, c, d, e 1 each (total 8). tail: an item's share with every item after
    # it <= 0.2, i.e. the last item only (1/8; two would be 2/8). Ties in id order: e is tail,
    # whatever order the rows came in.
    rows = list("bbbbacde")
    run = pd.DataFrame({"user": [1] * 4, "item": list("acde"), "score": [4.0, 3, 2, 1]})
    qrels = pd.DataFrame({"user": [1], "item": ["a"], "relevance": [1]})
    d = [1 / math.log2(r + 1) for r in range(1, 5)]
    for order in (rows, rows[::-1], list("edcabbbb")):
        train = pd.DataFrame({"user": range(8), "item": order})
        ev = metrics.evaluate(qrels, run, ["exposure_tail@4"], train=train)
        assert ev.summary["exposure_tail@4"] == pytest.approx(d[3] / sum(d))


def test_a_categorical_train_counts_items_by_id_not_by_category() -> None:
    """Category order and unused categories are not data: a categorical ``train`` gives the
    numbers of the same ids as text. By hand: 10 events, a and b 2 each (tied), so the head
    (the first 20% of events in count order, then ascending id) is a; exposure_head@2 of the
    list [a, b] is 1/(1/log2(2) + 1/log2(3)) = 0.6131. The 3 most popular items of a 3-event
    train are a and b only (c, an unused category, has no interaction), so c and d are
    unexpected: 2/3, and the relevant c makes serendipity 1/3."""
    run = pd.DataFrame({"user": [1, 1], "item": ["a", "b"], "score": [2.0, 1.0]})
    qrels = pd.DataFrame({"user": [1], "item": ["a"], "relevance": [1]})
    train = pd.DataFrame({"user": range(10), "item": list("babacdefgh")})
    shuffled = pd.Categorical(train["item"], categories=list("bacdefgh"))
    head = 1 / (1 + 1 / np.log2(3))
    for t in (train, train.assign(item=shuffled)):
        got = metrics.evaluate(qrels, run, ["exposure_head@2", "exposure_mid@2"], train=t).summary
        assert got == pytest.approx({"exposure_head@2": head, "exposure_mid@2": 1 - head})

    run = pd.DataFrame({"user": [9, 9, 9], "item": ["c", "d", "a"], "score": [3.0, 2.0, 1.0]})
    qrels = pd.DataFrame({"user": [9], "item": ["c"], "relevance": [1]})
    train = pd.DataFrame({"user": [1, 2, 3], "item": ["a", "a", "b"]})
    unused = pd.Categorical(train["item"], categories=list("abcd"))
    for t in (train, train.assign(item=unused)):
        got = metrics.evaluate(qrels, run, ["unexpectedness@3", "serendipity@3"], train=t).summary
        assert got == pytest.approx({"unexpectedness@3": 2 / 3, "serendipity@3": 1 / 3})


def test_a_repeated_index_label_in_item_features_is_not_data() -> None:
    """Only the ``item`` column names the items: a repeated index label (e.g. frames
    concatenated) gives the same numbers as a fresh index (it was a cryptic scipy error)."""
    run = pd.DataFrame({"user": [1, 1, 1], "item": [1, 2, 3], "score": [3.0, 2.0, 1.0]})
    qrels = pd.DataFrame({"user": [1], "item": [1], "relevance": [1]})
    features = pd.DataFrame({"item": [1, 2, 3], "genre": ["a", "b", "a|b"]})
    want = metrics.evaluate(qrels, run, ["diversity@3"], item_features=features).summary
    repeated = features.set_axis([0, 0, 1])
    got = metrics.evaluate(qrels, run, ["diversity@3"], item_features=repeated).summary
    assert got == want
    # by hand: cosines of a, b, {a, b}: 0, 1/sqrt(2), 1/sqrt(2); diversity 1 - mean
    assert want["diversity@3"] == pytest.approx(1 - (2 / np.sqrt(2)) / 3)
