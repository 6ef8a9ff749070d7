"""Reproduce trec_eval 10.0's own expected outputs with the ``trec_eval`` preset, and the CLI.

The reference files must be present: a missing folder makes these tests fail, never skip.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from trec_reference import REFERENCE, our_name, read_expected

import metrics

# (expected output, qrels, run, options on top of preset="trec_eval")
CASES = {
    "out.test.aq": ("qrels.test", "results.test", {}),
    "out.test.aqc": ("qrels.test", "results.trunc", {"user_set": "truth"}),
    "out.test.aql": ("qrels.rel_level", "results.test", {"relevance_threshold": 2}),
    "out.comment.test": ("qrels.comment.test", "results.comment.test", {}),
}

# Measures METRICS.md requires (for the -m all_trec outputs)
CUTS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)
REQUIRED = {
    "num_ret",
    "num_rel",
    "num_rel_ret",
    "map",
    "Rprec",
    "recip_rank",
    "ndcg",
    *(f"P_{k}" for k in CUTS),
    *(f"recall_{k}" for k in CUTS),
    *(f"ndcg_cut_{k}" for k in CUTS),
    *(f"map_cut_{k}" for k in CUTS),
    "success_1",
    "success_5",
    "success_10",
}
# out.comment.test is trec_eval's default summary (no -m all_trec)
REQUIRED_COMMENT = {
    "num_ret",
    "num_rel",
    "num_rel_ret",
    "map",
    "Rprec",
    "recip_rank",
    *(f"P_{k}" for k in CUTS),
}


def close_to_printed(value: float, printed: float) -> bool:
    """trec_eval prints 4 decimals: our value rounded to 4 must be the printed one."""
    return abs(round(value, 4) - printed) <= 1e-9 or abs(value - printed) <= 5e-5


def test_reference_folder_is_present():
    assert REFERENCE.is_dir(), f"trec_eval reference folder missing: {REFERENCE}"
    for name, (qrels, run, _) in CASES.items():
        for f in (name, qrels, run):
            assert (REFERENCE / f).is_file(), f"missing reference file {REFERENCE / f}"


@pytest.fixture(scope="module")
def evaluations():
    """One evaluation per reference case, over every measure the expected output has."""
    out = {}
    for name, (qrels_file, run_file, options) in CASES.items():
        expected = read_expected(name)
        qrels = metrics.read_trec_qrels(REFERENCE / qrels_file)
        run = metrics.read_trec_run(REFERENCE / run_file)
        names = sorted(set(expected["ours"]))
        out[name] = (expected, metrics.evaluate(qrels, run, names, preset="trec_eval", **options))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_reproduces_trec_eval_output(name, evaluations):
    expected, ev = evaluations[name]
    required = REQUIRED_COMMENT if name == "out.comment.test" else REQUIRED
    assert required <= set(expected["measure"]), "reference lacks measures METRICS.md requires"
    mismatches = []
    per_user = ev.per_user.set_axis(ev.per_user.index.astype(str))  # topics read as numbers
    for row in expected.itertuples(index=False):
        if row.query == "all":
            got = ev.summary[row.ours]
        else:
            assert row.query in per_user.index, f"query {row.query} missing from per_user"
            got = per_user.loc[row.query, row.ours]
        if not close_to_printed(float(got), row.value):
            mismatches.append(f"{row.measure} {row.query}: expected {row.value}, got {got!r}")
    assert not mismatches, "\n".join(mismatches)


@pytest.mark.parametrize("name", list(CASES))
def test_every_query_of_the_reference_is_evaluated(name, evaluations):
    expected, ev = evaluations[name]
    queries = set(expected["query"]) - {"all"}
    if name == "out.comment.test":
        assert not queries  # a summary-only output (no -q)
    else:
        assert set(map(str, ev.per_user.index)) == queries
    # num_q: the number of queries trec_eval averaged over
    num_q = [
        line.split()
        for line in (REFERENCE / name).read_text().splitlines()
        if line.startswith("num_q")
    ]
    assert len(num_q) == 1
    assert ev.counts["users"] == int(num_q[0][2])


def test_aqc_missing_topic_scores_zero(evaluations):
    # results.trunc has no line for topic 302: with -c (user_set=truth) it counts as 0
    _, ev = evaluations["out.test.aqc"]
    assert ev.counts["users_missing_from_run"] == 1
    row = ev.per_user.loc[302]
    assert row["map"] == 0.0
    assert row["num_ret"] == 0.0
    assert row["num_rel"] == 77  # out.test.aqc: num_rel 302 77
    assert abs(ev.summary["map"] - 0.1016) <= 5e-5


def test_without_c_the_missing_topic_is_dropped():
    qrels = metrics.read_trec_qrels(REFERENCE / "qrels.test")
    run = metrics.read_trec_run(REFERENCE / "results.trunc")
    ev = metrics.evaluate(qrels, run, ["map", "num_ret"], preset="trec_eval")
    assert sorted(ev.per_user.index) == [301, 303]
    # per-query values of out.test.aqc, averaged over the two topics trec_eval would keep
    assert abs(ev.summary["map"] - (0.0324 + 0.2723) / 2) <= 1e-4
    assert ev.summary["num_ret"] == 584


def test_reference_names_map_to_ours():
    assert our_name("P_5") == "precision@5"
    assert our_name("map_cut_10") == "ap@10"
    assert our_name("success_1") == "hit_rate@1"
    assert our_name("bpref") is None
    for measure, ours in [
        ("P_5", "precision@5"),
        ("map_cut_10", "ap@10"),
        ("ndcg_cut_20", "ndcg@20"),
        ("recall_100", "recall@100"),
        ("success_5", "hit_rate@5"),
        ("recip_rank", "mrr"),
        ("Rprec", "r_precision"),
    ]:
        assert str(metrics.parse(measure)) == ours


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------
def run_cli(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "metrics", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_trec_eval_preset(tmp_path):
    out = tmp_path / "per_user.csv"
    proc = run_cli(
        REFERENCE / "qrels.test",
        REFERENCE / "results.test",
        "--preset",
        "trec_eval",
        "-m",
        "map",
        "P_5",
        "ndcg",
        "--per-user",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    expected = read_expected("out.test.aq")
    printed = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("map", "P_5", "ndcg"):
            printed[parts[0]] = float(parts[1])
    assert set(printed) == {"map", "P_5", "ndcg"}
    for measure, value in printed.items():
        ref = expected[(expected["measure"] == measure) & (expected["query"] == "all")]
        assert len(ref) == 1
        assert close_to_printed(value, float(ref["value"].iloc[0])), (measure, value)
    assert "preset=trec_eval" in proc.stdout

    assert out.is_file()
    table = pd.read_csv(out, dtype={"user": str}).set_index("user")
    assert list(table.columns) == ["map", "P_5", "ndcg"]
    assert sorted(table.index) == ["301", "302", "303"]
    for measure in ("map", "P_5", "ndcg"):
        ref = expected[(expected["measure"] == measure) & (expected["query"] != "all")]
        for query, value in zip(ref["query"], ref["value"], strict=True):
            assert close_to_printed(float(table.loc[query, measure]), value), (measure, query)


def test_cli_csv_input(tmp_path):
    qrels = tmp_path / "qrels.csv"
    run = tmp_path / "run.csv"
    pd.DataFrame({"user": [1, 1], "item": [10, 11], "relevance": [1, 1]}).to_csv(qrels, index=False)
    pd.DataFrame({"user": [1, 1, 1], "item": [12, 10, 11], "score": [0.9, 0.8, 0.1]}).to_csv(
        run, index=False
    )
    proc = run_cli(qrels, run, "-m", "mrr", "precision@2")
    assert proc.returncode == 0, proc.stderr
    values = {
        p[0]: float(p[1])
        for p in (line.split() for line in proc.stdout.splitlines())
        if len(p) == 2 and p[0] in ("mrr", "precision@2")
    }
    # rel: 0 1 1 → mrr 1/2, P@2 = 1/2
    assert values == {"mrr": 0.5, "precision@2": 0.5}


def _nan_csv(tmp_path):
    qrels = tmp_path / "qrels.csv"
    run = tmp_path / "run.csv"
    pd.DataFrame({"user": [1], "item": [10], "relevance": [1]}).to_csv(qrels, index=False)
    pd.DataFrame({"user": [1, 1], "item": [10, 11], "score": [0.5, np.nan]}).to_csv(
        run, index=False
    )
    return qrels, run


@pytest.mark.parametrize(
    ("case", "pattern"),
    [
        ("unknown_metric", "unknown metric 'no_such_metric'"),
        ("missing_file", "no_such_file"),
        ("nan_score", "run.csv: run column 'score' must be finite numbers"),
        ("duplicate_truth", "qrels.csv: qrels has 1 duplicate (user, item) row(s)"),
        ("duplicate_run", "run.csv: run has duplicate (user, item) rows: user 1, item 10"),
    ],
)
def test_cli_bad_input_exits_2(tmp_path, case, pattern):
    """One line naming what is wrong, and the file it is in when it is in the data."""
    qrels, run = REFERENCE / "qrels.test", REFERENCE / "results.test"
    metric = "map"
    if case == "unknown_metric":
        metric = "no_such_metric"
    elif case == "missing_file":
        run = tmp_path / "no_such_file.txt"
    else:
        qrels, run = _nan_csv(tmp_path)
        if case == "duplicate_truth":
            pd.DataFrame({"user": [1, 1], "item": [10, 10], "relevance": [1, 1]}).to_csv(
                qrels, index=False
            )
        if case.startswith("duplicate"):
            pd.DataFrame(
                {
                    "user": [1, 1],
                    "item": [10, 10 if case == "duplicate_run" else 11],
                    "score": [0.5, 0.4],
                }
            ).to_csv(run, index=False)
    proc = run_cli(qrels, run, "-m", metric)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert pattern in lines[0]
    assert "Traceback" not in proc.stderr


def test_cli_relevance_threshold_reproduces_aql():
    proc = run_cli(
        REFERENCE / "qrels.rel_level",
        REFERENCE / "results.test",
        "--preset",
        "trec_eval",
        "--relevance-threshold",
        "2",
        "-m",
        "P_5",
        "map",
        "num_rel",
    )
    assert proc.returncode == 0, proc.stderr
    expected = read_expected("out.test.aql")
    printed = {
        p[0]: float(p[1])
        for p in (line.split() for line in proc.stdout.splitlines())
        if len(p) == 2 and p[0] in ("P_5", "map", "num_rel")
    }
    assert set(printed) == {"P_5", "map", "num_rel"}
    for measure, value in printed.items():
        ref = expected[(expected["measure"] == measure) & (expected["query"] == "all")]
        assert close_to_printed(value, float(ref["value"].iloc[0])), (measure, value)
    assert "relevance_threshold=2.0" in proc.stdout


# ---------------------------------------------------------------------------------------------
# Tie order: trec_eval compares document ids as strings, also when they are integers
# ---------------------------------------------------------------------------------------------
# every trec_eval measure family we implement; pytrec_eval reports its default cutoffs
PYTREC_FAMILIES = {
    "num_ret",
    "num_rel",
    "num_rel_ret",
    "map",
    "Rprec",
    "recip_rank",
    "ndcg",
    "P",
    "recall",
    "ndcg_cut",
    "map_cut",
    "success",
}


def pytrec(
    qrels: pd.DataFrame, run: pd.DataFrame, measures: set[str] = PYTREC_FAMILIES
) -> dict[str, dict[str, float]]:
    """pytrec_eval (trec_eval 9.0.x) on the same tables, ids as their decimal strings."""
    import pytrec_eval

    q: dict[str, dict[str, int]] = {}
    for u, i, rel in qrels.itertuples(index=False):
        q.setdefault(str(u), {})[str(i)] = int(rel)
    r: dict[str, dict[str, float]] = {}
    for u, i, s in run.itertuples(index=False):
        r.setdefault(str(u), {})[str(i)] = float(s)
    return pytrec_eval.RelevanceEvaluator(q, measures).evaluate(r)


def pytrec_mismatches(qrels: pd.DataFrame, run: pd.DataFrame, **options) -> list[str]:
    """Every (measure, query) where ``preset="trec_eval"`` differs from pytrec_eval."""
    expected = pytrec(qrels, run)
    measures = sorted(next(iter(expected.values())))
    assert {"P_5", "recall_1000", "ndcg_cut_10", "map_cut_20", "success_1"} <= set(measures)
    ev = metrics.evaluate(
        qrels, run, [our_name(m) for m in measures], preset="trec_eval", **options
    )
    assert sorted(map(str, ev.per_user.index)) == sorted(expected)
    ours = {str(u): u for u in ev.per_user.index}
    bad = []
    for m in measures:
        col = our_name(m)
        for query, values in expected.items():
            got = float(ev.per_user.loc[ours[query], col])
            if abs(got - values[m]) > 1e-9:
                bad.append(f"{m} {query}: pytrec_eval {values[m]}, ours {got}")
        # trec_eval's "all" line sums the counts and averages the rest
        per_query = [v[m] for v in expected.values()]
        overall = float(np.sum(per_query) if m.startswith("num_") else np.mean(per_query))
        if abs(ev.summary[col] - overall) > 1e-9:
            bad.append(f"{m} all: pytrec_eval {overall}, ours {ev.summary[col]}")
    return bad


def tied_int_tables(seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Integer ids 1-200 (one to three digits), scores tied in groups of up to ~40, graded
    truth, users in only one table, users without relevant items, a shuffled run."""
    rng = np.random.default_rng(seed)
    run_rows, truth_rows = [], []
    for user in range(1, 61):
        items = rng.choice(np.arange(1, 201), size=int(rng.integers(1, 120)), replace=False)
        levels = int(rng.integers(1, 5))  # 1 level: every score tied
        if user % 10 != 0:  # every tenth user has truth only
            run_rows += [(user, int(i), float(rng.integers(0, levels))) for i in items]
        if user % 10 != 5:  # and users 5, 15, ... have a run only
            judged = rng.choice(np.arange(1, 201), size=int(rng.integers(1, 30)), replace=False)
            grades = rng.integers(0, 4, len(judged)) if user % 7 else np.zeros(len(judged), int)
            truth_rows += [(user, int(i), int(g)) for i, g in zip(judged, grades, strict=True)]
    run = pd.DataFrame(run_rows, columns=["user", "item", "score"])
    qrels = pd.DataFrame(truth_rows, columns=["user", "item", "relevance"])
    return qrels, run.sample(frac=1.0, random_state=seed).reset_index(drop=True)


def test_issue_example_integer_ids_tie_as_strings():
    # issue 11: items 9 and 10 tie; trec_eval ranks "9" > "10" (strcmp, descending) first
    qrels = pd.DataFrame({"user": [1], "item": [9], "relevance": [1]})
    run = pd.DataFrame({"user": [1, 1], "item": [9, 10], "score": [1.0, 1.0]})
    assert pytrec(qrels, run, {"P_1", "recip_rank"})["1"] == {"P_1": 1.0, "recip_rank": 1.0}
    for q, r in ((qrels, run), (qrels.astype({"item": str}), run.astype({"item": str}))):
        ev = metrics.evaluate(q, r, ["precision@1", "mrr"], preset="trec_eval")
        assert ev.summary == {"precision@1": 1.0, "mrr": 1.0}
    assert metrics.evaluate(qrels, run, ["P_1"], preset="trec_eval").options["id_order"] == (
        "string"
    )
    # the default conventions keep integers in numeric order: 9 before 10 ascending
    assert metrics.evaluate(qrels, run, ["precision@1"]).summary["precision@1"] == 1.0
    # numeric descending puts 10 first; the string rule is an option of its own
    ev = metrics.evaluate(qrels, run, ["precision@1"], tie_break="item_desc")
    assert ev.summary["precision@1"] == 0.0
    ev = metrics.evaluate(qrels, run, ["precision@1"], tie_break="item_desc", id_order="string")
    assert ev.summary["precision@1"] == 1.0


@pytest.mark.parametrize("seed", range(4))
def test_tied_integer_ids_match_pytrec_eval(seed):
    qrels, run = tied_int_tables(seed)
    assert pytrec_mismatches(qrels, run) == []
    # the same ids as strings give the same result
    as_str = {"user": str, "item": str}
    assert pytrec_mismatches(qrels.astype(as_str), run.astype(as_str)) == []


def test_tied_integer_ids_in_numeric_order_would_differ():
    # the data above does exercise the tie order: numeric order disagrees with trec_eval
    qrels, run = tied_int_tables(0)
    assert pytrec_mismatches(qrels, run, id_order="natural")
