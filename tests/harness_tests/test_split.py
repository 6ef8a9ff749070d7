"""Splits: partition laws (Hypothesis), time order, leave-one-out, filters, stats and cache."""

from __future__ import annotations

import datetime as dt
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.datasets import Dataset
from harness.split import (
    METHODS,
    Split,
    apply_filters,
    check_split_has_time,
    data_hash,
    global_time,
    leave_one_out,
    load_or_make_split,
    make_split,
    random_split,
    split_cache_key,
    user_time,
)
from harness.synthetic import generate

T0 = int(dt.datetime(2023, 1, 1, tzinfo=dt.UTC).timestamp())


@st.composite
def interactions(draw: st.DrawFn) -> pd.DataFrame:
    """Small frames with repeated users, items and timestamps (ties) and a non-default index."""
    n = draw(st.integers(1, 40))
    cols = {
        name: draw(st.lists(st.integers(0, hi), min_size=n, max_size=n))
        for name, hi in (("user", 5), ("item", 7), ("timestamp", 15))
    }
    df = pd.DataFrame(cols).astype(np.int64)
    df["timestamp"] += T0
    df.index = pd.Index(np.arange(n) * 3 + 100)
    return df


METHOD_PARAMS = st.one_of(
    st.tuples(
        st.just("global_time"),
        st.fixed_dictionaries({"cut": st.floats(0.05, 0.95)}),
    ),
    st.tuples(
        st.just("leave_one_out"),
        st.fixed_dictionaries({"valid": st.booleans(), "min_history": st.integers(1, 4)}),
    ),
    st.tuples(
        st.just("user_time"),
        st.fixed_dictionaries(
            {"test_ratio": st.sampled_from([0.2, 0.5]), "valid_ratio": st.sampled_from([0, 0.2])}
        ),
    ),
    st.tuples(
        st.just("random"),
        st.fixed_dictionaries({"test_ratio": st.floats(0.1, 0.6), "seed": st.integers(0, 9)}),
    ),
)


def parts(split: Split) -> list[pd.DataFrame]:
    return [split.train, split.test] + ([] if split.valid is None else [split.valid])


# ------------------------------------------------------------------------- partition laws


@settings(max_examples=150, deadline=None)
@given(df=interactions(), method_params=METHOD_PARAMS)
def test_unfiltered_split_is_a_partition_of_the_input(
    df: pd.DataFrame, method_params: tuple[str, dict]
) -> None:
    method, params = method_params
    split = make_split(df, method, unseen="keep", **params)
    labels = np.concatenate([p.index.to_numpy() for p in parts(split)])
    assert len(labels) == len(set(labels)) == len(df)  # disjoint and complete
    assert set(labels) == set(df.index)
    for part in parts(split):
        pd.testing.assert_frame_equal(part, df.loc[part.index])  # rows unchanged
    assert split.stats["n_train_events"] + split.stats["n_test_events"] + split.stats[
        "n_valid_events"
    ] == len(df)


@settings(max_examples=150, deadline=None)
@given(
    df=interactions(),
    method_params=METHOD_PARAMS,
    kcore=st.integers(0, 3),
    min_user=st.integers(0, 3),
)
def test_filtered_split_accounts_for_every_removed_event(
    df: pd.DataFrame, method_params: tuple[str, dict], kcore: int, min_user: int
) -> None:
    method, params = method_params
    split = make_split(
        df, method, kcore=kcore, min_user_interactions=min_user, unseen="drop", **params
    )
    labels = np.concatenate([p.index.to_numpy() for p in parts(split)])
    assert len(labels) == len(set(labels))
    assert set(labels) <= set(df.index)
    s = split.stats
    removed = s["train_filtered_events"] + s["test_dropped_events"] + s["valid_dropped_events"]
    assert len(labels) + removed == len(df)
    train = split.train
    for part in parts(split)[1:]:  # nothing unseen survives the "drop" policy
        assert part["user"].isin(train["user"]).all()
        assert part["item"].isin(train["item"]).all()
    if kcore > 1 and len(train):
        assert train.groupby("user").size().min() >= kcore
        assert train.groupby("item").size().min() >= kcore


# --------------------------------------------------------------------------- global time


@settings(max_examples=100, deadline=None)
@given(df=interactions(), q=st.floats(0.05, 0.95), gap=st.floats(0.05, 0.5))
def test_global_time_orders_train_valid_test(df: pd.DataFrame, q: float, gap: float) -> None:
    valid_q = max(q - gap, 0.01)
    split = global_time(df, cut=q, valid_cut=valid_q) if valid_q < q else global_time(df, cut=q)
    cut = split.stats["cut"]
    assert (split.train["timestamp"] < cut).all()
    assert (split.test["timestamp"] >= cut).all()
    assert cut in set(df["timestamp"])  # a quantile cut is an observed timestamp
    if split.valid is not None:
        vcut = split.stats["valid_cut"]
        assert (split.train["timestamp"] < vcut).all()
        assert split.valid["timestamp"].between(vcut, cut - 1).all()


def test_global_time_date_cut_and_quantile_share() -> None:
    df = pd.DataFrame(
        {"user": [1, 1, 2, 2, 3], "item": [1, 2, 1, 3, 2], "timestamp": T0 + np.arange(5) * 86_400}
    )
    split = global_time(df, cut="2023-01-03", valid_cut="2023-01-02T00:00:00Z")
    assert split.train.index.tolist() == [0]
    assert split.valid is not None and split.valid.index.tolist() == [1]
    assert split.test.index.tolist() == [2, 3, 4]
    assert split.stats["cut"] == T0 + 2 * 86_400
    assert split.stats["cut_iso"] == "2023-01-03T00:00:00+00:00"
    big = pd.DataFrame({"user": 0, "item": np.arange(1000), "timestamp": T0 + np.arange(1000)})
    assert len(global_time(big, cut=0.8).test) == 200  # events at or after the 80 % quantile


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cut": 1.5}, "'split.cut' must be a date string or a quantile in \\(0, 1\\)"),
        ({"cut": 0}, "'split.cut' must be a date string or a quantile"),
        ({"cut": "not a date"}, "'split.cut' is not a parsable date"),
        ({"cut": 0.5, "valid_cut": 0.7}, "'split.valid_cut' must be earlier than 'split.cut'"),
    ],
)
def test_global_time_rejects_bad_cuts(kwargs: dict, message: str) -> None:
    df = pd.DataFrame({"user": [1, 2], "item": [1, 2], "timestamp": [T0, T0 + 10]})
    with pytest.raises(ValueError, match=message):
        global_time(df, **kwargs)


# ------------------------------------------------------------------------- leave one out


def latest_per_user(df: pd.DataFrame, rank_from_end: int) -> set[int]:
    """Test-only reference: the event ``rank_from_end`` places before each user's latest.

    Ordering by time, then item id, then input row (a stable sort keeps input order for ties).
    """
    ordered = df.sort_values(["timestamp", "item"], kind="stable")
    nth = ordered.groupby("user").nth(-1 - rank_from_end)
    return set(nth.index)


@settings(max_examples=150, deadline=None)
@given(df=interactions(), min_history=st.integers(1, 4), valid=st.booleans())
def test_leave_one_out_holds_out_each_eligible_users_latest(
    df: pd.DataFrame, min_history: int, valid: bool
) -> None:
    split = leave_one_out(df, valid=valid, min_history=min_history)
    sizes = df.groupby("user").size()
    eligible = set(sizes.index[sizes >= min_history])
    assert not split.test["user"].duplicated().any()  # at most one test event per user
    assert set(split.test["user"]) == eligible
    expected = {i for i in latest_per_user(df, 0) if df.loc[i, "user"] in eligible}
    assert set(split.test.index) == expected
    if valid:
        assert split.valid is not None
        with_valid = set(sizes.index[sizes >= min_history + 1])
        assert set(split.valid["user"]) == with_valid
        second = {i for i in latest_per_user(df, 1) if df.loc[i, "user"] in with_valid}
        assert set(split.valid.index) == second
    # no training event of a user is later than that user's test event
    assert split.stats["leakage_user_train_after_test"] in (0.0, None)


def test_leave_one_out_tie_break_and_leakage_reference_values() -> None:
    df = pd.DataFrame(
        {
            "user": [1, 1, 1, 2, 2, 3],
            "item": [9, 5, 7, 1, 2, 4],
            # user 1: items 5 and 7 tie at t=10; the larger item id (7) is the "latest"
            "timestamp": T0 + np.array([1, 10, 10, 3, 4, 2]),
        }
    )
    split = leave_one_out(df, min_history=2)
    assert split.test.index.tolist() == [2, 4]  # (user 1, item 7, t=10), (user 2, item 2, t=4)
    assert split.train.index.tolist() == [0, 1, 3, 5]  # user 3 (1 event) stays train-only
    s = split.stats
    assert (s["loo_eligible_users"], s["loo_train_only_users"]) == (2, 1)
    # training timestamps 1, 10, 3, 2; test timestamps 10 and 4
    assert s["leakage_user_train_after_test"] == 0.0
    # later than the earliest test event (4): only t=10 -> 1 of 4
    assert s["leakage_global_train_after_first_test"] == pytest.approx(1 / 4)
    # test t=10: 0 of 4 later; test t=4: 1 of 4 later -> mean (0 + 1/4) / 2
    assert s["leakage_mean_train_after_test"] == pytest.approx(1 / 8)


def test_random_split_user_leakage_matches_a_direct_count() -> None:
    df = generate(n_users=100, n_items=80, n_events=2_000, seed=2)
    split = random_split(df, test_ratio=0.25, seed=5)
    first_test = split.test.groupby("user")["timestamp"].min()
    own = split.train["user"].map(first_test)
    expected = (split.train["timestamp"] > own).sum() / len(split.train)
    assert split.stats["leakage_user_train_after_test"] == pytest.approx(expected)
    assert expected > 0.1  # a random holdout does leak the future


@settings(max_examples=100, deadline=None)
@given(df=interactions(), method_params=METHOD_PARAMS, text=st.booleans())
def test_pairs_already_in_training_match_a_set_count(
    df: pd.DataFrame, method_params: tuple[str, dict], text: bool
) -> None:
    method, params = method_params
    if text:  # text ids are coded before counting: the same counts
        df = df.assign(user="u" + df["user"].astype(str), item="i" + df["item"].astype(str))
    split = make_split(df, method, kcore=2, unseen="keep", **params)
    train = set(zip(split.train["user"], split.train["item"], strict=True))
    for name, part in (("test", split.test), ("valid", split.valid)):
        pairs = set() if part is None else set(zip(part["user"], part["item"], strict=True))
        assert split.stats[f"n_{name}_pairs"] == len(pairs)
        assert split.stats[f"{name}_pairs_in_train"] == len(pairs & train)


# ------------------------------------------------------------------------ user time, random


@settings(max_examples=100, deadline=None)
@given(df=interactions(), ratio=st.sampled_from([0.2, 0.25, 0.35, 0.5, 0.7, 0.15]))
def test_user_time_takes_each_users_latest_share(df: pd.DataFrame, ratio: float) -> None:
    split = user_time(df, test_ratio=ratio)
    for user, events in df.groupby("user"):
        n = len(events)
        # the decimal ratio in exact arithmetic, halves up
        expected = min(n - 1, math.floor(Fraction(str(ratio)) * n + Fraction(1, 2)))
        test = split.test[split.test["user"] == user]
        train = split.train[split.train["user"] == user]
        assert len(test) == expected
        assert len(train) == n - expected >= 1
        if expected:
            assert train["timestamp"].max() <= test["timestamp"].min()


def test_a_date_cut_is_read_as_the_loader_reads_dates() -> None:
    """01.02.2023 is 1 February in a data file (dotted dates are day-first), so as a cut too
    (pandas read it month-first: 2 January, and 13/02/2023 silently day-first); a date that
    reads both ways differently is a one-line error, as in a data file."""
    day = 86_400
    feb1 = 1_675_209_600  # 2023-02-01T00:00:00Z
    times = feb1 + day * np.arange(-40, 20)
    events = pd.DataFrame(
        {"user": np.arange(60) % 7, "item": np.arange(60) % 5, "timestamp": times}
    )
    for cut in ("01.02.2023", "2023-02-01", "2023-02-01T00:00:00Z"):
        split = make_split(events, "global_time", cut=cut, unseen="keep")
        assert split.stats["n_train_events"] == 40, cut
    with pytest.raises(ValueError, match=r"^'split.cut' '02/01/2023' is ambiguous: ") as err:
        make_split(events, "global_time", cut="02/01/2023")
    assert "\n" not in str(err.value)
    split = make_split(events, "global_time", cut="13/01/2023", unseen="keep")  # day-first only
    assert split.stats["n_train_events"] == 40 - 19


@pytest.mark.parametrize("method", ["leave_one_out", "user_time", "random"])
def test_categorical_ids_tie_by_id_not_by_category_order(method: str) -> None:
    """Ties on time go by item id: a categorical column whose categories are not in id order
    splits as the same ids as text (it followed the category order, and the split cache, which
    does not tell the two apart, returned whichever was made first)."""
    df = pd.DataFrame(
        {
            "user": [1, 1, 1, 2, 2, 2],
            "item": ["a", "z", "m", "a", "z", "m"],
            "timestamp": [5, 5, 1, 1, 2, 2],
        }
    )
    cat = df.assign(item=pd.Categorical(df["item"], categories=["z", "m", "a"]))
    params = {"test_ratio": 0.5} if method != "leave_one_out" else {}
    text, coded = (make_split(d, method, unseen="keep", **params) for d in (df, cat))
    assert text.test.index.tolist() == coded.test.index.tolist()
    if method == "leave_one_out":  # by hand: user 1's latest of a and z (both at 5) is z
        assert text.test["item"].astype(str).tolist() == ["z", "z"]


def test_ratio_counts_round_half_up_in_exact_arithmetic() -> None:
    """0.35 × 90 is 31.5, which rounds up to 32; float64 makes it 31.499999999999996 (31)."""
    assert math.floor(90 * 0.35 + 0.5) == 31  # the float rule this replaces
    events = pd.DataFrame({"user": 1, "item": np.arange(90), "timestamp": np.arange(90)})
    assert len(user_time(events, test_ratio=0.35).test) == 32
    assert len(random_split(events, test_ratio=0.35, seed=0).test) == 32
    valid = random_split(events, test_ratio=0.2, valid_ratio=0.35, seed=0).valid
    assert valid is not None and len(valid) == 32
    assert len(user_time(events, test_ratio=0.15).test) == 14  # 13.5 up


def test_random_split_is_seeded_and_exact() -> None:
    df = generate(n_users=50, n_items=40, n_events=1_000, seed=1)
    a = random_split(df, test_ratio=0.2, seed=3)
    b = random_split(df, test_ratio=0.2, seed=3)
    c = random_split(df, test_ratio=0.2, seed=4)
    pd.testing.assert_frame_equal(a.test, b.test)
    pd.testing.assert_frame_equal(a.train, b.train)
    assert not a.test.index.equals(c.test.index)
    assert len(a.test) == 200
    with_valid = random_split(df, test_ratio=0.2, valid_ratio=0.1, seed=3)
    assert with_valid.valid is not None and len(with_valid.valid) == 100
    pd.testing.assert_frame_equal(with_valid.test, a.test)  # same permutation prefix


# ------------------------------------------------------------------------ filters, unseen


def unseen_example() -> pd.DataFrame:
    #      user item  t   (cut at t=10: the last three rows are test)
    rows = [
        (1, 10, 1),
        (1, 11, 2),
        (2, 10, 3),
        (2, 12, 4),
        (1, 12, 10),  # seen user, seen item
        (2, 13, 11),  # item 13 never in training
        (3, 11, 12),  # user 3 never in training
    ]
    df = pd.DataFrame(rows, columns=["user", "item", "timestamp"])
    df["timestamp"] += T0
    return df


@pytest.mark.parametrize("policy", ["drop", "keep"])
def test_unseen_users_and_items_are_counted_under_both_policies(policy: str) -> None:
    cut = "2023-01-01T00:00:10"
    split = make_split(unseen_example(), "global_time", cut=cut, unseen=policy)
    s = split.stats
    assert s["test_unseen_events"] == 2
    assert s["test_unseen_user_events"] == 1
    assert s["test_unseen_item_events"] == 1
    assert (s["test_unseen_users"], s["test_unseen_items"]) == (1, 1)
    if policy == "drop":
        assert split.test.index.tolist() == [4]
        # users {1, 2, 3} -> {1}; items {12, 13, 11} -> {12}
        assert (s["test_dropped_events"], s["test_dropped_users"], s["test_dropped_items"]) == (
            2,
            2,
            2,
        )
    else:
        assert split.test.index.tolist() == [4, 5, 6]
        assert s["test_dropped_events"] == 0
    assert s["unseen_policy"] == policy


def naive_kcore(train: pd.DataFrame, k: int) -> set[int]:
    """Test-only k-core: drop rows of under-populated users/items one label at a time."""
    keep = set(train.index)
    changed = True
    while changed:
        changed = False
        cur = train.loc[sorted(keep)]
        for col in ("user", "item"):
            sizes = cur[col].value_counts()
            for value in sizes.index[sizes < k]:
                keep -= set(cur.index[cur[col] == value])
                changed = True
    return keep


@settings(max_examples=60, deadline=None)
@given(df=interactions(), k=st.integers(2, 3))
def test_kcore_matches_a_naive_implementation(df: pd.DataFrame, k: int) -> None:
    raw = random_split(df, test_ratio=0.2, seed=0)
    filtered = apply_filters(raw, kcore=k, unseen="keep")
    assert set(filtered.train.index) == naive_kcore(raw.train, k)


def test_min_user_and_item_filters_use_training_counts() -> None:
    train_rows = [(1, 1), (1, 2), (1, 3), (2, 1), (3, 1), (3, 2)]
    df = pd.DataFrame([*train_rows, (2, 2), (2, 3)], columns=["user", "item"])
    df["timestamp"] = T0 + np.array([0, 1, 2, 3, 4, 5, 100, 101])
    raw = global_time(df, cut="2023-01-01T00:01:00")
    split = apply_filters(raw, min_user_interactions=2, min_item_interactions=2, unseen="keep")
    # user 2 has 1 training event (its two test events do not count) -> removed first;
    # then item counts among the rest: item 1 -> 2, item 2 -> 2, item 3 -> 1 (removed)
    assert split.train.index.tolist() == [0, 1, 4, 5]
    s = split.stats
    assert (s["train_filtered_events"], s["train_filtered_users"], s["train_filtered_items"]) == (
        2,
        1,
        1,
    )
    assert s["test_unseen_user_events"] == 2  # user 2 is now unknown to training


def test_make_split_rejects_unknown_names() -> None:
    df = unseen_example()
    with pytest.raises(ValueError, match=r"unknown split method 'temporal'.*'global_time'"):
        make_split(df, "temporal")
    with pytest.raises(ValueError, match=r"unknown parameter 'ratio'.*'test_ratio'"):
        make_split(df, "random", ratio=0.2)
    with pytest.raises(ValueError, match=r"'split.unseen' must be one of 'drop', 'keep'"):
        make_split(df, "random", unseen="ignore")
    with pytest.raises(ValueError, match=r"'split.kcore' must be an int >= 0"):
        make_split(df, "random", kcore=-1)
    with pytest.raises(ValueError, match=r"'split\.test_ratio' must be in"):
        make_split(df, "user_time", test_ratio=1.0)


def test_stats_describe_the_parts() -> None:
    df = unseen_example()
    split = make_split(df, "global_time", cut="2023-01-01T00:00:10", unseen="keep")
    s = split.stats
    assert (s["n_train_events"], s["n_train_users"], s["n_train_items"]) == (4, 2, 3)
    assert (s["n_test_events"], s["n_test_users"], s["n_test_items"]) == (3, 3, 3)
    assert (s["train_time_min"], s["train_time_max"]) == (T0 + 1, T0 + 4)
    assert (s["test_time_min"], s["test_time_max"]) == (T0 + 10, T0 + 12)
    assert s["n_valid_events"] == 0 and s["valid_time_min"] is None
    assert split.name == "global_time"
    assert split.params["cut"] == "2023-01-01T00:00:10" and split.params["kcore"] == 0


# ---------------------------------------------------------------------------------- cache


def test_cache_reuses_identical_frames(tmp_path: Path) -> None:
    df = generate(n_users=80, n_items=60, n_events=1_500, seed=4)
    params = {"valid": True, "kcore": 2}
    first = load_or_make_split(df, "leave_one_out", params, tmp_path)
    key = split_cache_key(df, "leave_one_out", params)
    assert (tmp_path / key / "split.json").is_file()
    assert json.loads((tmp_path / key / "split.json").read_text())["data_hash"] == data_hash(df)
    second = load_or_make_split(df, "leave_one_out", params, tmp_path)
    fresh = make_split(df, "leave_one_out", **params)
    for a, b, c in zip(parts(first), parts(second), parts(fresh), strict=True):
        pd.testing.assert_frame_equal(a, b)
        pd.testing.assert_frame_equal(a, c)
    assert first.stats == second.stats == fresh.stats
    assert first.params == second.params == fresh.params

    # the second call really reads the cache: tamper with it and see the change come back
    tampered = first.test.iloc[:3]
    tampered.to_parquet(tmp_path / key / "test.parquet")
    third = load_or_make_split(df, "leave_one_out", params, tmp_path)
    pd.testing.assert_frame_equal(third.test, tampered)


def test_cache_round_trips_string_ids(tmp_path: Path) -> None:
    df = pd.DataFrame(
        {
            "user": pd.Series(["a", "b", "a", "c", "b"], dtype="str"),
            "item": pd.Series(["x", "y", "y", "x", "z"], dtype="str"),
            "timestamp": T0 + np.arange(5),
        }
    )
    first = load_or_make_split(df, "user_time", {"test_ratio": 0.5, "unseen": "keep"}, tmp_path)
    second = load_or_make_split(df, "user_time", {"test_ratio": 0.5, "unseen": "keep"}, tmp_path)
    fresh = make_split(df, "user_time", test_ratio=0.5, unseen="keep")
    pd.testing.assert_frame_equal(first.train, fresh.train)
    pd.testing.assert_frame_equal(second.test, fresh.test)
    assert second.valid is None


def test_cache_key_tracks_data_method_and_params() -> None:
    df = generate(n_users=30, n_items=30, n_events=300, seed=0)
    key = split_cache_key(df, "random", {"seed": 1})
    assert len(key) == 64 and int(key, 16) >= 0
    assert key == split_cache_key(df.copy(), "random", {"seed": 1})
    assert key == split_cache_key(df, "random", {"seed": 1}, digest=data_hash(df))  # precomputed
    assert Dataset("d", df, "d").sha256 == data_hash(df)
    assert key == split_cache_key(df, "random", {"seed": 1, "test_ratio": 0.2})  # a default
    assert key != split_cache_key(df, "random", {"seed": 2})
    assert key != split_cache_key(df, "random", {"seed": 1, "kcore": 2})
    assert key != split_cache_key(df, "user_time", {})
    changed = df.copy()
    changed.loc[0, "item"] += 1
    assert key != split_cache_key(changed, "random", {"seed": 1})
    assert data_hash(df) == data_hash(df.copy())
    assert data_hash(df) != data_hash(changed)
    # the rows, not their order (the key keeps it where ties use it: test_content_hash.py)
    assert data_hash(df) == data_hash(df.iloc[::-1])
    with pytest.raises(ValueError, match="unknown split method"):
        split_cache_key(df, "nope", {})


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("global_time", {"cut": 0.7, "valid_cut": 0.6}),
        ("global_time", {"cut": 0.5, "kcore": 3, "unseen": "keep"}),
        ("leave_one_out", {"valid": True, "min_user_interactions": 3}),
        ("user_time", {"test_ratio": 0.3, "valid_ratio": 0.1, "min_item_interactions": 4}),
    ],
)
def test_text_ids_split_like_integer_ids(method: str, params: dict) -> None:
    # the statistics count text ids through integer codes: they must equal the integer-id
    # split's, and the rows must be the same (zero-padded text keeps the id order)
    df = generate(n_users=120, n_items=80, n_events=3_000, seed=7)
    text = df.assign(
        user=pd.array([f"u{u:05d}" for u in df["user"]], dtype="str"),
        item=pd.array([f"i{i:05d}" for i in df["item"]], dtype="str"),
    )
    a, b = make_split(df, method, **params), make_split(text, method, **params)
    assert a.stats == b.stats
    for x, y in zip(parts(a), parts(b), strict=True):
        assert x.index.equals(y.index)
        assert (y["user"].str[1:].astype(int).to_numpy() == x["user"].to_numpy()).all()


@pytest.mark.parametrize("method", sorted(METHODS))
def test_only_the_random_split_takes_a_file_without_timestamps(method: str) -> None:
    untimed = {"kind": "file", "columns": {"user": "u", "timestamp": None}}
    for timed in ({"kind": "file", "columns": {"user": "u"}}, {"kind": "synthetic"}):
        check_split_has_time(method, timed)
    if method == "random":
        check_split_has_time(method, untimed)
    else:
        with pytest.raises(ValueError, match=rf"^split={method} orders events by time, but "):
            check_split_has_time(method, untimed)


def test_a_released_split_keeps_its_stats_and_column_types_but_no_rows() -> None:
    part = pd.DataFrame({"user": ["a", "b"], "item": [1, 2], "timestamp": [5, 6]})
    part["user"] = part["user"].astype("str")
    split = Split(part, part.iloc[:1], None, {"n_train_events": 2}, "random", {"seed": 0})
    out = split.released()
    assert (out.stats, out.name, out.params, out.valid) == (
        split.stats,
        "random",
        {"seed": 0},
        None,
    )
    for got in (out.train, out.test):
        assert len(got) == 0 and dict(got.dtypes) == dict(part.dtypes)
    assert len(split.train) == 2  # the original is unchanged
