"""Bad inputs raise ``ValueError`` with a message naming the thing, the rule and the value; the
registry's grammar round-trips."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import metrics
from metrics import ranking
from metrics.registry import MetricDef, MetricSpec, get, list_metrics, parse, register


def qrels(**overrides) -> pd.DataFrame:
    base = {"user": ["u1", "u1", "u2"], "item": ["a", "b", "a"], "relevance": [1, 0, 2]}
    return pd.DataFrame({**base, **overrides})


def run(**overrides) -> pd.DataFrame:
    base = {"user": ["u1", "u1", "u2"], "item": ["a", "c", "b"], "score": [0.9, 0.5, 0.1]}
    return pd.DataFrame({**base, **overrides})


# (case id, qrels, run, metric names, keyword options, message pattern)
CASES = [
    (
        "qrels-missing-relevance",
        qrels().drop(columns="relevance"),
        run(),
        ["ndcg@5"],
        {},
        r"qrels is missing column 'relevance'",
    ),
    (
        "qrels-missing-user",
        qrels().drop(columns="user"),
        run(),
        ["ndcg@5"],
        {},
        r"qrels is missing column 'user'",
    ),
    (
        "run-missing-score",
        qrels(),
        run().drop(columns="score"),
        ["ndcg@5"],
        {},
        r"run is missing column 'score'",
    ),
    (
        "run-missing-item",
        qrels(),
        run().drop(columns="item"),
        ["ndcg@5"],
        {},
        r"run is missing column 'item'",
    ),
    (
        "run-renamed-score",
        qrels(),
        run().rename(columns={"score": "prediction"}),
        ["ndcg@5"],
        {},
        r"missing column 'score'.*prediction",
    ),
    (
        "nan-score",
        qrels(),
        run(score=[0.9, np.nan, 0.1]),
        ["ndcg@5"],
        {},
        r"run column 'score' must be finite.*user 'u1', item 'c'",
    ),
    (
        "inf-score",
        qrels(),
        run(score=[0.9, 0.5, np.inf]),
        ["ndcg@5"],
        {},
        r"run column 'score' must be finite.*inf.*user 'u2'",
    ),
    (
        "neg-inf-score",
        qrels(),
        run(score=[-np.inf, 0.5, 0.1]),
        ["ndcg@5"],
        {},
        r"'score' must be finite",
    ),
    (
        "nan-relevance",
        qrels(relevance=[1, np.nan, 2]),
        run(),
        ["ndcg@5"],
        {},
        r"qrels column 'relevance' must be finite.*user 'u1', item 'b'",
    ),
    (
        "text-score",
        qrels(),
        run(score=["high", "low", "mid"]),
        ["ndcg@5"],
        {},
        r"run column 'score' must be numeric",
    ),
    (
        "missing-user-id",
        qrels(user=["u1", None, "u2"]),
        run(),
        ["ndcg@5"],
        {},
        r"qrels column 'user' has a missing id",
    ),
    (
        "dup-run",
        qrels(),
        run(item=["a", "a", "b"]),
        ["ndcg@5"],
        {},
        r"run has duplicate \(user, item\).*user 'u1', item 'a'",
    ),
    (
        "dup-run-int",
        qrels(user=[1, 1, 2], item=[5, 6, 5]),
        run(user=[1, 2, 2], item=[5, 7, 7]),
        ["ndcg@5"],
        {},
        r"run has duplicate \(user, item\).*user (np\.int64\()?2\)?, item (np\.int64\()?7",
    ),
    (
        "dup-qrels",
        qrels(item=["a", "a", "a"]),
        run(),
        ["ndcg@5"],
        {},
        r"qrels has 1 duplicate \(user, item\).*user 'u1', item 'a'",
    ),
    ("k-zero", qrels(), run(), ["ndcg@0"], {}, r"'k' in 'ndcg@0' must be a positive int"),
    ("k-negative", qrels(), run(), ["recall@-3"], {}, r"'k' in 'recall@-3' must be a positive"),
    ("k-text", qrels(), run(), ["ndcg@x"], {}, r"'k' in 'ndcg@x' must be a positive int.*'x'"),
    ("k-float", qrels(), run(), ["ndcg@2.5"], {}, r"'k' in 'ndcg@2.5'"),
    ("cutoff-not-allowed", qrels(), run(), ["auc@5"], {}, r"metric 'auc' takes no cutoff"),
    ("empty-qrels", qrels().iloc[:0], run(), ["ndcg@5"], {}, r"qrels is empty"),
    ("empty-run", qrels(), run().iloc[:0], ["ndcg@5"], {}, r"run is empty"),
    (
        "gain-log",
        qrels(),
        run(),
        ["ndcg@5"],
        {"gain": "log"},
        r"option 'gain' must be one of 'exponential', 'linear', 'binary' \(got 'log'\)",
    ),
    (
        "bad-ap-denominator",
        qrels(),
        run(),
        ["map"],
        {"ap_denominator": "n"},
        r"option 'ap_denominator' must be one of",
    ),
    (
        "bad-tie-break",
        qrels(),
        run(),
        ["map"],
        {"tie_break": "random"},
        r"option 'tie_break' must be one of",
    ),
    (
        "bad-user-set",
        qrels(),
        run(),
        ["map"],
        {"user_set": "union"},
        r"option 'user_set' must be one of",
    ),
    (
        "bad-empty-users",
        qrels(),
        run(),
        ["map"],
        {"empty_users": "drop"},
        r"option 'empty_users' must be one of",
    ),
    (
        "bad-average",
        qrels(),
        run(),
        ["map"],
        {"average": "weighted"},
        r"option 'average' must be one of",
    ),
    (
        "threshold-zero",
        qrels(),
        run(),
        ["map"],
        {"relevance_threshold": 0},
        r"'relevance_threshold' must be a number > 0 \(got 0\)",
    ),
    (
        "threshold-text",
        qrels(),
        run(),
        ["map"],
        {"relevance_threshold": "2"},
        r"'relevance_threshold' must be a number",
    ),
    (
        "unknown-option",
        qrels(),
        run(),
        ["map"],
        {"gains": "linear"},
        r"unknown option 'gains'.*gain",
    ),
    (
        "unknown-preset",
        qrels(),
        run(),
        ["map"],
        {"preset": "ranx_v9"},
        r"option 'preset' must be one of .*'trec_eval'.*\(got 'ranx_v9'\)",
    ),
    (
        "unknown-metric",
        qrels(),
        run(),
        ["ndgc@10"],
        {},
        r"unknown metric 'ndgc@10'; known metrics: .*\bndcg\b",
    ),
    ("unknown-metric-lists-map", qrels(), run(), ["foo"], {}, r"unknown metric 'foo'.*\bmap\b.*"),
    (
        "mixed-user-ids",
        qrels(user=[1, 1, 2]),
        run(),
        ["map"],
        {},
        r"column 'user' has an integer dtype in one table and not in the other",
    ),
    (
        "mixed-item-ids",
        qrels(),
        run(item=[1, 2, 3]),
        ["map"],
        {},
        r"column 'item' has an integer dtype in one table and not in the other",
    ),
    (
        "float-ids",
        qrels(item=[1.0, 2.0, 1.0]),
        run(item=[1.0, 3.0, 2.0]),
        ["map"],
        {},
        r"ids in column 'item' must be integers or strings",
    ),
    ("no-metric", qrels(), run(), [], {}, r"no metric requested"),
    (
        "novelty-without-train",
        qrels(),
        run(),
        ["novelty@10"],
        {},
        r"metric 'novelty@10' needs train=",
    ),
    (
        "popularity-without-train",
        qrels(),
        run(),
        ["ndcg@5", "popularity@3"],
        {},
        r"metric 'popularity@3' needs train=",
    ),
    (
        "batch-cells-zero",
        qrels(),
        run(),
        ["map"],
        {"batch_cells": 0},
        r"'batch_cells' must be a positive int \(got 0\)",
    ),
    (
        "catalog-too-small",
        qrels(),
        run(),
        ["coverage@5"],
        {"catalog": 2},
        r"'catalog' has 2 items but the run recommends 3",
    ),
    ("qrels-not-a-frame", {"user": [1]}, run(), ["map"], {}, r"qrels must be a pandas DataFrame"),
]


@pytest.mark.parametrize(
    ("q", "r", "names", "options", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_raises_value_error(q, r, names, options, pattern):
    with pytest.raises(ValueError, match=pattern):
        metrics.evaluate(q, r, names, **options)


@pytest.mark.parametrize(
    ("q", "r", "expected"),
    [
        (
            qrels(user=[1, 1, 2], item=[5, 6, 5]),
            run(user=[1, 2, 2], item=[5, 7, 7]),
            "user 2, item 7",
        ),
        (
            qrels(user=[1, 1, 2], item=[5, 5, 5]),
            run(user=[1, 2, 2], item=[5, 7, 8]),
            "user 1, item 5",
        ),
        (
            qrels(user=[1, 1, 2], item=[5, 6, 5]),
            run(user=[1, 2, 2], item=[5, 7, 8], score=[1.0, np.nan, 2.0]),
            "(user 2, item 7)",
        ),
    ],
    ids=["dup-run", "dup-qrels", "nan-score"],
)
def test_int_ids_in_messages_are_plain(q, r, expected):
    with pytest.raises(ValueError) as info:
        metrics.evaluate(q, r, ["map"])
    assert expected in str(info.value)
    assert "np." not in str(info.value)


def test_duplicate_run_rows_of_another_user_in_other_order():
    # duplicates are found whatever the row order (run not grouped by user)
    r = pd.DataFrame(
        {"user": ["u2", "u1", "u2"], "item": ["b", "a", "b"], "score": [0.1, 0.2, 0.3]}
    )
    with pytest.raises(ValueError, match=r"user 'u2', item 'b'"):
        metrics.evaluate(qrels(), r, ["map"])


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"tolerance": -0.1}, r"'tolerance' must be >= 0 \(got -0.1\)"),
        ({"tolerance": math.nan}, r"'tolerance' must be >= 0"),
    ],
)
def test_gsb_bad_tolerance(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        metrics.gsb([0.1, 0.2], [0.2, 0.1], **kwargs)


def test_gsb_bad_inputs():
    with pytest.raises(ValueError, match=r"equal length"):
        metrics.gsb([0.1, 0.2], [0.2])
    with pytest.raises(ValueError, match=r"unique index"):
        metrics.gsb(
            pd.Series([0.1, 0.2], index=["u", "u"]), pd.Series([0.1, 0.2], index=["u", "v"])
        )
    with pytest.raises(ValueError, match=r"'good', 'same' or 'bad' \(got 'better' at position 1"):
        metrics.gsb_from_labels(["good", "better", "bad"])


def test_kernel_bad_denominator():
    j = metrics.Judged.from_lists([[1, 0]])
    with pytest.raises(ValueError, match=r"'denominator' must be one of .*\(got 'all'\)"):
        ranking.average_precision(j, k=2, denominator="all")


def test_reader_errors(tmp_path):
    bad_qrels = tmp_path / "qrels.txt"
    bad_qrels.write_text("q1 0 d1 1\nq1 0 d2\n")
    with pytest.raises(ValueError, match=r"qrels.txt:2: a qrels line needs 4 fields"):
        metrics.read_trec_qrels(bad_qrels)
    bad_run = tmp_path / "run.txt"
    bad_run.write_text("q1 Q0 d1 1 high tag\n")
    with pytest.raises(ValueError, match=r"run.txt:1: score \(field 5\) must be a number"):
        metrics.read_trec_run(bad_run)
    csv = tmp_path / "run.csv"
    pd.DataFrame({"user": [1], "item": [2], "prediction": [0.5]}).to_csv(csv, index=False)
    with pytest.raises(ValueError, match=r"missing column 'score'"):
        metrics.read_run(csv)


# ---------------------------------------------------------------------------------------------
# Registry and grammar
# ---------------------------------------------------------------------------------------------
def test_registering_a_name_twice_raises():
    with pytest.raises(ValueError, match=r"metric name 'ndcg' is already registered"):
        register(MetricDef("ndcg", "ranking", ranking.ndcg, "duplicate"))


def test_registering_a_taken_alias_raises_and_registers_nothing():
    before = list_metrics()
    with pytest.raises(ValueError, match=r"metric name 'map' is already registered"):
        register(
            MetricDef(
                "brand_new_metric_xyz", "ranking", ranking.ndcg, "dup alias", aliases=("map",)
            )
        )
    assert list_metrics() == before
    with pytest.raises(ValueError, match="unknown metric"):
        parse("brand_new_metric_xyz")


CANONICAL = sorted({str(parse(n).metric) for n in list_metrics()})


def test_list_metrics_covers_the_spec():
    for name in (
        "precision",
        "recall",
        "f1",
        "hit_rate",
        "hr",
        "mrr",
        "arhr",
        "ap",
        "map",
        "cg",
        "dcg",
        "idcg",
        "ndcg",
        "r_precision",
        "auc",
        "gauc",
        "global_auc",
        "rmse",
        "mae",
        "coverage",
        "novelty",
        "gini",
        "popularity",
    ):
        assert name in list_metrics(), name


@pytest.mark.parametrize("name", list_metrics())
def test_parse_round_trips(name):
    definition = get(name)
    spellings = []
    if definition.cutoff != "required":
        spellings.append(name)
    if definition.cutoff != "none":
        spellings += [f"{name}@7", f"{name}@1", f"{name}@1000"]
    assert spellings
    for text in spellings:
        spec = parse(text)
        assert isinstance(spec, MetricSpec)
        assert spec.metric == definition.name
        assert parse(str(spec)) == spec
        assert str(parse(str(spec))) == str(spec)
        assert hash(spec) == hash(parse(str(spec)))
    if name == definition.name:  # canonical names print as themselves
        for text in spellings:
            assert str(parse(text)) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("map", MetricSpec("ap")),
        ("map@10", MetricSpec("ap", 10)),
        ("hr@5", MetricSpec("hit_rate", 5)),
        ("hr", MetricSpec("hit_rate")),
        ("P_5", MetricSpec("precision", 5)),
        ("recall_100", MetricSpec("recall", 100)),
        ("ndcg_cut_10", MetricSpec("ndcg", 10)),
        ("map_cut_20", MetricSpec("ap", 20)),
        ("success_1", MetricSpec("hit_rate", 1)),
        ("recip_rank", MetricSpec("mrr")),
        ("Rprec", MetricSpec("r_precision")),
        ("ndcg @ 10", MetricSpec("ndcg", 10)),
        ("ndcg", MetricSpec("ndcg")),
    ],
)
def test_aliases(text, expected):
    assert parse(text) == expected


def test_alias_and_canonical_give_the_same_numbers():
    q, r = qrels(), run()
    ev = metrics.evaluate(
        q,
        r,
        [
            "map@2",
            "ap@2",
            "P_2",
            "precision@2",
            "recip_rank",
            "mrr",
            "Rprec",
            "r_precision",
            "hr@1",
            "hit_rate@1",
        ],
    )
    pairs = [
        ("map@2", "ap@2"),
        ("P_2", "precision@2"),
        ("recip_rank", "mrr"),
        ("Rprec", "r_precision"),
        ("hr@1", "hit_rate@1"),
    ]
    for alias, canonical in pairs:
        assert ev.summary[alias] == ev.summary[canonical]


def test_parse_rejects_non_strings():
    with pytest.raises(ValueError, match=r"metric name must be a string \(got 5\)"):
        parse(5)  # type: ignore[arg-type]


def test_parse_accepts_a_spec():
    spec = MetricSpec("ndcg", 3)
    assert parse(spec) is spec
    ev = metrics.evaluate(qrels(), run(), [spec])
    assert list(ev.summary) == ["ndcg@3"]


@pytest.mark.parametrize(
    ("column", "values", "row"),
    [
        ("user", ["u1", None, "u2"], 1),  # grouped users: found among each run's first id
        ("user", ["u1", "u2", "u1", None], 3),  # ungrouped users: found by the factorization
        ("user", [np.nan, "u1", "u1"], 0),
        ("item", ["a", "b", None], 2),
    ],
)
def test_missing_id_in_an_object_run_column(column: str, values: list, row: int) -> None:
    """Object id columns of the run are checked while they are encoded, not by a separate
    pass: the same one-line error, with the first missing row."""
    n = len(values)
    frame = pd.DataFrame(
        {
            "user": pd.Series((["u1", "u1", "u2", "u2"])[:n], dtype=object),
            "item": pd.Series(["a", "b", "c", "d"][:n], dtype=object),
            "score": np.arange(n, dtype=float),
        }
    )
    frame[column] = pd.Series(values, dtype=object)
    truth = pd.DataFrame({"user": ["u1", "u2"], "item": ["a", "c"], "relevance": [1, 1]})
    with pytest.raises(ValueError, match=rf"^run column '{column}' has a missing id at row {row}$"):
        metrics.evaluate(truth, frame, ["ndcg@5"])


def _dictionary_column(indices: list, values: list) -> pd.Series:
    """An Arrow dictionary id column (as ``read_parquet(dtype_backend="pyarrow")`` gives)."""
    array = pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(values))
    return pd.Series(pd.arrays.ArrowExtensionArray(array))


@pytest.mark.parametrize("table", ["qrels", "run"])
@pytest.mark.parametrize(
    ("indices", "values"),
    [
        ([0, 1, None, 0], ["a", "b"]),  # a null index
        ([0, 1, 2, 0], ["a", "b", None]),  # an index to a null value
    ],
)
def test_missing_id_in_an_arrow_dictionary_column(table: str, indices: list, values: list) -> None:
    """An Arrow dictionary misses an id either way (Arrow keeps no count of the second): the
    same one-line error, at row 2."""
    frames = {
        "qrels": pd.DataFrame({"user": ["u1", "u1", "u2", "u2"], "relevance": [1, 1, 1, 1]}),
        "run": pd.DataFrame({"user": ["u1", "u1", "u2", "u2"], "score": [4.0, 3.0, 2.0, 1.0]}),
    }
    for name, frame in frames.items():
        frame["item"] = (
            ["a", "b", "c", "a"] if name != table else _dictionary_column(indices, values)
        )
    with pytest.raises(ValueError, match=rf"^{table} column 'item' has a missing id at row 2$"):
        metrics.evaluate(frames["qrels"], frames["run"], ["ndcg@5"])


def test_an_unused_null_in_an_arrow_dictionary_is_no_missing_id() -> None:
    # no row points to the null value: the ids are the same as plain text's
    qrels = pd.DataFrame({"user": ["u1", "u2"], "item": ["b", "a"], "relevance": [1, 1]})
    run = pd.DataFrame({"user": ["u1", "u1", "u2"], "item": ["a", "b", "a"], "score": [2.0, 1, 1]})
    coded = run.assign(item=_dictionary_column([1, 2, 1], [None, "a", "b"]))
    want = metrics.evaluate(qrels, run, ["ndcg@5", "mrr", "auc"]).summary
    assert metrics.evaluate(qrels, coded, ["ndcg@5", "mrr", "auc"]).summary == want


def test_train_ids_of_another_kind_than_the_run_are_refused():
    """Found by an audit: string train items against integer run items made every popularity
    lookup miss (novelty log2(|train|), popularity 0, diversity 1) without a word."""
    q = pd.DataFrame({"user": [1, 2], "item": [1, 2], "relevance": [1, 1]})
    r = pd.DataFrame({"user": [1, 1, 2, 2], "item": [1, 2, 2, 3], "score": [2.0, 1, 2, 1]})
    train = pd.DataFrame({"user": [1, 2, 3, 3], "item": [1, 1, 2, 3]})
    # by hand: item 1 seen by 2 of 4 training rows, items 2 and 3 by 1; novelty = mean over
    # recommended items of -log2(count / 4): user 1 (1, 2): (1 + 2) / 2, user 2 (2, 3): 2
    ok = metrics.evaluate(q, r, ["novelty@2"], train=train)
    assert ok.summary["novelty@2"] == pytest.approx((1.5 + 2.0) / 2)
    text = train.astype({"item": str})
    with pytest.raises(ValueError, match=r"^train column 'item' holds strings but the run's item"):
        metrics.evaluate(q, r, ["novelty@2"], train=text)
    with pytest.raises(ValueError, match=r"^train column 'user' holds strings but the run's user"):
        metrics.evaluate(q, r, ["novelty@2"], train=train.astype({"user": str}))


def test_a_catalog_of_ids_must_hold_the_recommended_items():
    """Found by an audit: catalog=[1, 2, 3, 4] with item 5 recommended gave coverage 2/4."""
    q = pd.DataFrame({"user": [1, 2], "item": [1, 2], "relevance": [1, 1]})
    r = pd.DataFrame({"user": [1, 1, 2, 2], "item": [1, 5, 5, 1], "score": [2.0, 1, 2, 1]})
    with pytest.raises(ValueError, match=r"^'catalog' lacks item 5, which the run holds"):
        metrics.evaluate(q, r, ["coverage@2"], catalog=[1, 2, 3, 4])
    # by hand: top-1 lists hold items 1 and 5, of 5 catalog items
    assert metrics.evaluate(q, r, ["coverage@1"], catalog=range(1, 6)).summary == {
        "coverage@1": pytest.approx(2 / 5)
    }
