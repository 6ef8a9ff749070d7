"""Candidate sets: sampled negatives are valid, frozen by seed, shared by models and reruns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import nearly_everything_seen, short_of_negatives

from harness.candidates import CandidateSpec, build_candidates, sample_negatives
from harness.datasets import Dataset
from harness.experiment import MetricSuite, run_models
from harness.models import ImplicitItemCosine, PopularityModel
from harness.split import make_split
from harness.synthetic import generate


@pytest.fixture(scope="module")
def split():
    frame = generate(n_users=150, n_items=120, n_events=3000, seed=5)
    return make_split(frame, "leave_one_out")


def test_sampled_negatives_are_unseen_distinct_and_counted(split) -> None:
    cand = sample_negatives(split.train, split.test, 20, "uniform", seed=1)
    assert not cand.duplicated(["user", "item"]).any()
    test_pairs = set(zip(split.test["user"], split.test["item"], strict=True))
    train_pairs = set(zip(split.train["user"], split.train["item"], strict=True))
    pairs = set(zip(cand["user"], cand["item"], strict=True))
    assert test_pairs <= pairs  # every test item is a candidate
    negatives = pairs - test_pairs
    assert not negatives & train_pairs  # never an item the user trained on
    catalog = set(split.train["item"])
    assert {i for _, i in negatives} <= catalog
    per_user = pd.Series([u for u, _ in negatives]).value_counts()
    assert set(per_user.index) == set(split.test["user"])
    # 20 negatives each unless the user's unseen catalog is smaller
    seen = split.train.groupby("user")["item"].nunique()
    for user, count in per_user.items():
        assert count == min(20, len(catalog) - seen.get(user, 0) - 1)


def test_sampling_is_frozen_by_seed_and_changes_with_it(split) -> None:
    a = sample_negatives(split.train, split.test, 10, "popularity", seed=3)
    b = sample_negatives(split.train, split.test, 10, "popularity", seed=3)
    c = sample_negatives(split.train, split.test, 10, "popularity", seed=4)
    pd.testing.assert_frame_equal(a, b)
    assert not a.equals(c)


def test_popularity_sampling_prefers_popular_items(split) -> None:
    cand = sample_negatives(split.train, split.test, 30, "popularity", seed=0)
    test_pairs = set(zip(split.test["user"], split.test["item"], strict=True))
    neg = [i for u, i in zip(cand["user"], cand["item"], strict=True) if (u, i) not in test_pairs]
    uni = sample_negatives(split.train, split.test, 30, "uniform", seed=0)
    neg_u = [i for u, i in zip(uni["user"], uni["item"], strict=True) if (u, i) not in test_pairs]
    pop = split.train["item"].value_counts()
    assert pop.reindex(neg).mean() > pop.reindex(neg_u).mean()


def test_same_candidates_for_every_model_and_rerun(split, tmp_path: Path) -> None:
    spec = CandidateSpec(kind="sampled", n_negatives=15, seed=2)
    first, stats = build_candidates(spec, split, tmp_path / "cache")
    again, _ = build_candidates(spec, split, tmp_path / "cache")  # read back from the cache
    pd.testing.assert_frame_equal(first, again)
    assert stats["candidates.kind"] == "sampled" and stats["candidates.rows"] == len(first)
    frame = pd.concat([split.train, split.test])
    suite = MetricSuite(k=10, names=("ndcg@10", "recall@10"))
    result = run_models(
        Dataset("s", frame, "s"),
        split,
        {"pop": PopularityModel(), "knn": ImplicitItemCosine()},
        suite,
        tmp_path / "out",
        progress=False,
        candidates=first,
    )
    allowed = set(zip(first["user"], first["item"], strict=True))
    for outcome in result.outcomes.values():
        assert outcome.ok, outcome.error
        recs = outcome.recommendations
        assert set(zip(recs["user"], recs["item"], strict=True)) <= allowed
    # Ranking among few candidates is easier than among the full catalog.
    full = run_models(
        Dataset("s", frame, "s"),
        split,
        {"pop": PopularityModel()},
        suite,
        tmp_path / "full",
        progress=False,
    )
    assert result.table().loc["pop", "recall@10"] > full.table().loc["pop", "recall@10"]


def test_candidate_file(split, tmp_path: Path) -> None:
    users = np.sort(split.test["user"].unique())[:20]
    rows = split.test[split.test["user"].isin(users)][["user", "item"]]
    path = tmp_path / "cands.csv"
    rows.to_csv(path, index=False)
    cand, stats = build_candidates(CandidateSpec(kind="file", path=str(path)), split, None)
    assert stats["candidates.users"] == 20
    assert set(zip(cand["user"], cand["item"], strict=True)) == set(
        zip(rows["user"], rows["item"], strict=True)
    )


@pytest.mark.slow
def test_sampled_run_warns_and_is_tagged(tmp_path: Path) -> None:
    import subprocess
    import sys

    from mlflow import MlflowClient

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "experiment=quick",
            "progress=false",
            "candidates=sampled",
            "model=[popularity,item_knn]",
            "compare.segments=false",
            "gate.guardrails=[]",  # the default cold guardrail needs segments
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "WARNING: sampled candidates" in proc.stderr
    client = MlflowClient(f"sqlite:///{tmp_path}/runs/mlflow.db")
    exp = client.get_experiment_by_name("offline-eval")
    runs = client.search_runs([exp.experiment_id])
    assert runs and all(r.data.tags["candidates.kind"] == "sampled" for r in runs)
    assert all("biased" in r.data.tags["candidates.warning"] for r in runs)


def test_sampled_candidates_with_text_ids_score_as_integer_ids(tmp_path: Path) -> None:
    """pandas 3 ``str`` ids (zero-padded, so id order is number order) through sampled
    candidates give the integer-id run's lists and metrics on the same candidate set."""
    ints = generate(n_users=150, n_items=120, n_events=3000, seed=5)
    text = ints.assign(
        user=pd.array([f"u{v:04d}" for v in ints["user"]], dtype="str"),
        item=pd.array([f"i{v:04d}" for v in ints["item"]], dtype="str"),
    )
    split = make_split(text, "leave_one_out")
    cand, _ = build_candidates(CandidateSpec(kind="sampled", n_negatives=15, seed=2), split, None)
    assert str(cand["item"].dtype) == "str"
    suite = MetricSuite(k=10, names=("ndcg@10", "recall@10", "auc"))

    def run(frame: pd.DataFrame, candidates: pd.DataFrame, out: str):
        result = run_models(
            Dataset("s", frame, "s"),
            make_split(frame, "leave_one_out"),
            {"pop": PopularityModel(), "knn": ImplicitItemCosine()},
            suite,
            tmp_path / out,
            progress=False,
            candidates=candidates,
        )
        assert all(o.ok for o in result.outcomes.values()), [
            o.error for o in result.outcomes.values()
        ]
        return result

    as_int = cand.assign(
        user=cand["user"].str[1:].astype(np.int64), item=cand["item"].str[1:].astype(np.int64)
    )
    got, want = run(text, cand, "text"), run(ints, as_int, "int")
    pd.testing.assert_frame_equal(got.table(), want.table())
    for name in ("pop", "knn"):
        recs = got.outcomes[name].recommendations
        recs = recs.assign(
            user=recs["user"].str[1:].astype(np.int64), item=recs["item"].str[1:].astype(np.int64)
        )
        pd.testing.assert_frame_equal(
            recs.reset_index(drop=True),
            want.outcomes[name].recommendations.reset_index(drop=True),
            check_dtype=False,
        )


def test_users_left_short_of_negatives_are_counted_and_said() -> None:
    """Under popularity sampling a user who has seen the ten items holding all but 2.5e-5 of the
    training events almost never draws one of the five others, so after the last round they
    get fewer than the 3 negatives asked; the sample counts such users (checked against a
    naive count from the rows), the stats carry it and the warning says it."""
    from harness.candidates import SHORT, candidate_stats, short_warning

    train, test = short_of_negatives()
    cand = sample_negatives(train, test, 3, "popularity", seed=0)

    known = pd.concat([train, test]).drop_duplicates()
    short = 0
    for user, rows in cand.groupby("user"):
        unseen = 15 - known.loc[known["user"] == user, "item"].nunique()
        negatives = len(rows) - int((test["user"] == user).sum())
        short += negatives < min(3, unseen)
    assert short >= 1  # the two heavy-seen users (the others draw freely)
    assert cand.attrs[SHORT] == short
    stats = candidate_stats(CandidateSpec("sampled", 3, "popularity"), len(cand), 12, short)
    assert stats[SHORT] == short
    assert short_warning(stats) == (
        f"{short} test user(s) got fewer than candidates.n_negatives=3 sampled negatives: the "
        "items they have not seen carry too little of the popularity sampling weight to be "
        "drawn in 50 rounds; their metrics rank among fewer candidates "
        "(candidates.sampling=uniform avoids it)"
    )
    assert short_warning(candidate_stats(CandidateSpec("sampled", 3), 1, 1)) is None
    assert sample_negatives(train, test, 3, "uniform", seed=0).attrs[SHORT] == 0


def first_unseen_draws(
    train: pd.DataFrame, user: object, known: set, n: int, seed: int, draws: int
) -> list:
    """A naive reference of the documented sampling model (uniform weights): the first ``n``
    distinct items, in draw order, of the user's counter-based draw sequence that are not in
    ``known``, walked one draw at a time (no rounds)."""
    from harness.candidates import draw_positions
    from harness.hashing import hash_ids

    catalog = np.sort(pd.unique(train["item"]))
    cum = np.arange(1, len(catalog) + 1, dtype=np.int64)
    user_hash = hash_ids(np.array([user]))
    positions = draw_positions(seed, np.repeat(user_hash, draws), np.arange(draws), cum)
    picked: list = []
    for item in catalog[positions]:
        if item not in known and item not in picked:
            picked.append(item)
            if len(picked) == n:
                return picked
    raise AssertionError(f"{draws} draws were not enough for user {user!r}")


def test_validation_items_are_never_negatives_and_key_the_cache(tmp_path: Path) -> None:
    """With a validation part, a user's validation items are known like train and test ones:
    never drawn as negatives (checked pair by pair against the three parts); and the cache
    tells a split with a validation part from the same train/test without it."""
    from harness.split import Split

    frame = generate(n_users=300, n_items=100, n_events=6000, seed=2)
    split = make_split(frame, "leave_one_out", valid=True)
    assert split.valid is not None
    spec = CandidateSpec(kind="sampled", n_negatives=50, seed=0)
    cand, _ = build_candidates(spec, split, tmp_path / "cache")
    known = {
        (u, i)
        for part in (split.train, split.valid, split.test)
        for u, i in zip(part["user"], part["item"], strict=True)
    }
    test_pairs = set(zip(split.test["user"], split.test["item"], strict=True))
    valid_only = set(zip(split.valid["user"], split.valid["item"], strict=True)) - {
        (u, i) for u, i in zip(split.train["user"], split.train["item"], strict=True)
    }
    assert len(valid_only - test_pairs) > 100  # validation items a user did not train on
    negatives = set(zip(cand["user"], cand["item"], strict=True)) - test_pairs
    assert not negatives & known
    catalog = set(split.train["item"])
    for user, rows in cand.groupby("user"):
        unseen = len(catalog - {i for u, i in known if u == user})
        assert len(rows) - int((split.test["user"] == user).sum()) == min(50, unseen)
    # the same train and test without the validation part: other rows, not the cached ones
    bare = Split(split.train, split.test, None, split.stats, split.name, split.params)
    other, _ = build_candidates(spec, bare, tmp_path / "cache")
    pairs = set(zip(other["user"], other["item"], strict=True))
    assert pairs & (valid_only - test_pairs)  # drawn once validation items are not known
    assert len(list((tmp_path / "cache").glob("candidates-*.parquet"))) == 2


def test_uniform_sampling_leaves_no_user_short() -> None:
    """Uniform draws give every user min(n_negatives, unseen) negatives, the first that many
    distinct unseen items of their draw sequence: when n_negatives is close to the unseen
    count (98 of 100 items) and for users who have seen all but 100 of 20,000 items (asked
    98). Both used to leave users short (rounds sized without the items already drawn, and
    capped); the rows are checked against a naive one-draw-at-a-time walk."""
    from harness.candidates import SHORT

    train = pd.DataFrame({"user": -1, "item": np.arange(100)})
    test = pd.DataFrame({"user": np.arange(1000), "item": 10_000})  # not in the catalog
    cand = sample_negatives(train, test, 98, "uniform", seed=0)
    assert cand.attrs[SHORT] == 0
    negatives = cand[cand["item"] != 10_000]
    assert (negatives.groupby("user").size().reindex(range(1000)) == 98).all()
    for user in (0, 768, 778, 994):  # the last three were 1 short
        want = first_unseen_draws(train, user, set(), 98, 0, 5000)
        assert sorted(negatives.loc[negatives["user"] == user, "item"]) == sorted(want)

    train, test = nearly_everything_seen()
    heavy = np.arange(10)
    cand = sample_negatives(train, test, 98, "uniform", seed=0)
    assert cand.attrs[SHORT] == 0
    negatives = cand[cand["item"] != -5]
    assert (negatives.groupby("user").size().reindex(heavy) == 98).all()
    assert set(negatives["item"]) <= set(range(100))
    for user in (0, 9):
        want = first_unseen_draws(train, user, set(range(100, 20_000)), 98, 0, 400_000)
        assert sorted(negatives.loc[negatives["user"] == user, "item"]) == sorted(want)


def test_file_missing_test_users_are_counted_and_said(split, tmp_path: Path) -> None:
    """A candidates file that lists only some test users: the others have no candidate (their
    lists are empty, scored 0); the stats count them and the warning says how many the file
    covers, naive counts from the split and the file."""
    from harness.candidates import MISSING, TEST_USERS, short_warning

    users = np.sort(split.test["user"].unique())
    listed = users[::3]
    rows = pd.DataFrame({"user": np.repeat(listed, 2), "item": np.tile([1, 2], len(listed))})
    rows = pd.concat([rows, pd.DataFrame({"user": [10**6], "item": [1]})])  # not a test user
    path = tmp_path / "cands.csv"
    rows.to_csv(path, index=False)
    _, stats = build_candidates(CandidateSpec(kind="file", path=str(path)), split, None)
    missing = sum(1 for u in users if u not in set(listed))
    assert missing > 0
    assert stats[MISSING] == missing and stats[TEST_USERS] == len(users)
    assert stats["candidates.users"] == len(listed) + 1
    assert short_warning(stats) == (
        f"the candidates file (candidates.path) covers {len(listed)} of the {len(users)} test "
        f"users: the other {missing} have no candidate to rank, so their lists are empty and "
        "they count as misses (0) in the ranking metrics"
    )
    every = pd.DataFrame({"user": users, "item": 1})
    every.to_csv(path, index=False)
    _, stats = build_candidates(CandidateSpec(kind="file", path=str(path)), split, None)
    assert stats[MISSING] == 0 and short_warning(stats) is None


def test_file_integer_ids_against_text_ids_that_match_nothing_is_one_line(tmp_path: Path) -> None:
    """Integer ids in the file, text ids in the split: matched as text; when no file user is a
    test user (or no file item a training item) that is one line naming the file and column,
    not an empty run later. Integer-looking text ids that do match still work."""
    from harness.errors import DataError
    from harness.split import Split

    def text(values: list[str]) -> pd.Series:
        return pd.Series(pd.array(values, dtype="str"))

    train = pd.DataFrame({"user": text(["u1", "u1", "u2"]), "item": text(["a", "b", "c"])})
    test = pd.DataFrame({"user": text(["u1", "u2"]), "item": text(["c", "a"])})
    split = Split(train=train, test=test, valid=None, stats={}, name="x", params={})
    path = tmp_path / "c.csv"
    path.write_text("user,item\n1,3\n2,1\n")
    with pytest.raises(DataError) as err:
        build_candidates(CandidateSpec(kind="file", path=str(path)), split, None)
    assert str(err.value) == (
        f"{path}: column 'user' holds integer ids but the interactions have text ids and none "
        "is a test user's id, e.g. 1"
    )
    path.write_text("user,item\nu1,3\nu2,1\n")
    with pytest.raises(DataError) as err:
        build_candidates(CandidateSpec(kind="file", path=str(path)), split, None)
    assert str(err.value) == (
        f"{path}: column 'item' holds integer ids but the interactions have text ids and none "
        "is a training item's id, e.g. 3"
    )
    # text ids that look like integers: the file's integers match them as text
    digits = pd.DataFrame({"user": text(["7", "8"]), "item": text(["1", "2"])})
    split = Split(train=digits, test=digits, valid=None, stats={}, name="x", params={})
    path.write_text("user,item\n7,2\n9,1\n")
    cand, stats = build_candidates(CandidateSpec(kind="file", path=str(path)), split, None)
    assert sorted(zip(cand["user"], cand["item"], strict=True)) == [("7", "2"), ("9", "1")]
    assert stats["candidates.users_missing"] == 1  # user "8"


def test_candidate_seed_outside_int64_is_one_line() -> None:
    """The draws hash the seed as an int64: any other seed is one ValueError at the config,
    not an OverflowError deep in the sampler; the int64 ends still sample."""
    for bad in (2**63, -(2**63) - 1, 2**64, 1.5, True):
        with pytest.raises(ValueError) as err:
            CandidateSpec(kind="sampled", seed=bad)
        assert str(err.value) == (
            f"'candidates.seed' must be an int from -2**63 to 2**63 - 1 (got {bad!r})"
        )
    train = pd.DataFrame({"user": 0, "item": np.arange(10)})
    test = pd.DataFrame({"user": [1], "item": [0]})
    for seed in (2**63 - 1, -(2**63)):
        spec = CandidateSpec(kind="sampled", n_negatives=3, seed=seed)
        cand = sample_negatives(train, test, 3, "uniform", spec.seed)  # 3 of the 9 unseen
        assert len(cand) == 4 and set(cand["item"]) - {0} <= set(range(1, 10))
