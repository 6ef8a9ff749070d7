"""The metric CLI's trec_eval-style, JSON and two-run comparison outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from trec_reference import REFERENCE, read_expected

from metrics import stats
from metrics.cli import main

MEASURES = ["num_ret", "num_rel", "num_rel_ret", "map", "Rprec", "recip_rank", "ndcg",
            "P_5", "P_10", "recall_10", "ndcg_cut_10", "map_cut_10", "success_5"]  # fmt: skip


def _lines(text: str) -> dict[tuple[str, str], str]:
    out = {}
    for line in text.strip().splitlines():
        measure, query, value = (part.strip() for part in line.split("\t"))
        assert (measure, query) not in out, line
        out[(measure, query)] = value
    return out


def test_trec_output_per_query_reproduces_trec_eval(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [str(REFERENCE / "qrels.test"), str(REFERENCE / "results.test"), "-m", *MEASURES,
         "--preset", "trec_eval", "--output", "trec", "-q"]
    )  # fmt: skip
    assert code == 0
    printed = _lines(capsys.readouterr().out)
    expected = read_expected("out.test.aq")
    expected = expected[expected["measure"].isin(MEASURES)]
    assert len(expected) == len(MEASURES) * 4  # three queries and "all"
    assert set(printed) == set(zip(expected["measure"], expected["query"], strict=True))
    for measure, query, value in expected[["measure", "query", "value"]].itertuples(index=False):
        got = printed[(measure, query)]
        if measure.startswith("num_"):
            assert got == str(int(value)), (measure, query)
        else:
            assert got == f"{value:.4f}", (measure, query, got)
    # the "all" rows come last, as trec_eval prints them
    queries = [line.split("\t")[1] for line in capsys.readouterr().out.splitlines()]
    assert queries == sorted(queries, key=lambda q: q == "all")


def _data(seed: int) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    users, items = np.arange(40), np.arange(30)
    qrels = pd.DataFrame(
        [(u, i, 1) for u in users for i in rng.choice(items, rng.integers(1, 6), replace=False)],
        columns=["user", "item", "relevance"],
    )
    runs = []
    for _ in range(2):
        runs.append(
            pd.DataFrame(
                [(u, i, rng.random()) for u in users for i in rng.permutation(items)[:10]],
                columns=["user", "item", "score"],
            )
        )
    return qrels, runs[0], runs[1]


def _naive_precision(qrels: pd.DataFrame, run: pd.DataFrame, k: int) -> pd.Series:
    """precision@k per user by a plain loop: top k by score, ties by item ascending."""
    truth = qrels.groupby("user")["item"].apply(set)
    out = {}
    for user, rows in run.groupby("user"):
        top = sorted(zip(rows["score"], rows["item"], strict=True), key=lambda t: (-t[0], t[1]))
        out[user] = sum(item in truth.get(user, set()) for _, item in top[:k]) / k
    return pd.Series(out).sort_index()


def test_two_run_comparison_uses_the_harness_statistics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    qrels, run_a, run_b = _data(3)
    for name, frame in (("qrels", qrels), ("a", run_a), ("b", run_b)):
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
    code = main(
        [str(tmp_path / "qrels.csv"), str(tmp_path / "a.csv"), str(tmp_path / "b.csv"),
         "-m", "precision@5", "--output", "json", "--n-resamples", "500", "--seed", "7",
         "--correction", "none"]
    )  # fmt: skip
    assert code == 0
    table = json.loads(capsys.readouterr().out)["precision@5"]
    pa, pb = _naive_precision(qrels, run_a, 5), _naive_precision(qrels, run_b, 5)
    ref = stats.compare(pa, pb, n_resamples=500, seed=7)
    assert table["A"] == pytest.approx(pa.mean(), abs=1e-12)
    assert table["B"] == pytest.approx(pb.mean(), abs=1e-12)
    assert table["delta"] == pytest.approx(pb.mean() - pa.mean(), abs=1e-12)
    assert table["p"] == pytest.approx(ref.p_randomization)
    assert (table["lift_ci_low"], table["lift_ci_high"]) == pytest.approx(ref.lift_ci)
    good = int((pb > pa).sum())
    bad = int((pb < pa).sum())
    assert (table["gsb_good"], table["gsb_bad"]) == (good, bad)


def test_a_run_against_itself_has_no_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    qrels, run_a, _ = _data(5)
    qrels.to_csv(tmp_path / "q.csv", index=False)
    run_a.to_csv(tmp_path / "a.csv", index=False)
    code = main(
        [str(tmp_path / "q.csv"), str(tmp_path / "a.csv"), str(tmp_path / "a.csv"),
         "-m", "ndcg@10", "map@10", "--output", "json"]
    )  # fmt: skip
    assert code == 0
    table = json.loads(capsys.readouterr().out)
    for row in table.values():
        assert row["delta"] == 0.0
        assert row["gsb_good"] == row["gsb_bad"] == 0
        assert row["p"] == 1.0 and row["p_adjusted"] == 1.0


def test_json_summary_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qrels, run_a, _ = _data(1)
    qrels.to_csv(tmp_path / "q.csv", index=False)
    run_a.to_csv(tmp_path / "a.csv", index=False)
    assert main([str(tmp_path / "q.csv"), str(tmp_path / "a.csv"), "-m", "precision@5",
                 "--output", "json", "-q"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    naive = _naive_precision(qrels, run_a, 5)
    assert out["summary"]["precision@5"] == pytest.approx(naive.mean(), abs=1e-12)
    per_user = {int(u): v["precision@5"] for u, v in out["per_user"].items()}
    assert per_user == pytest.approx(naive.to_dict(), abs=1e-12)
    assert out["options"]["tie_break"] == "item_asc"


def test_bad_second_run_is_one_line_exit_2(tmp_path: Path) -> None:
    qrels, run_a, _ = _data(2)
    qrels.to_csv(tmp_path / "q.csv", index=False)
    run_a.to_csv(tmp_path / "a.csv", index=False)
    proc = subprocess.run(
        [sys.executable, "-m", "metrics", str(tmp_path / "q.csv"), str(tmp_path / "a.csv"),
         str(tmp_path / "missing.csv")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error:"), proc.stderr
    assert "missing.csv" in proc.stderr


def _write_tables(tmp_path: Path, qrels: list[tuple[str, str, int]], run: list[tuple]) -> dict:
    """The same truth and run as TREC, CSV and Parquet (ids as written in the text files)."""
    q = pd.DataFrame(qrels, columns=["user", "item", "relevance"])
    r = pd.DataFrame(run, columns=["user", "item", "score"])
    (tmp_path / "q.trec").write_text("".join(f"{u} 0 {i} {v}\n" for u, i, v in qrels))
    (tmp_path / "r.trec").write_text("".join(f"{u} Q0 {i} 0 {s} t\n" for u, i, s in run))
    q.to_csv(tmp_path / "q.csv", index=False)
    r.to_csv(tmp_path / "r.csv", index=False)
    return {"trec": ("q.trec", "r.trec"), "csv": ("q.csv", "r.csv")}


def test_trec_and_csv_files_of_the_same_data_give_the_same_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a walkthrough: TREC ids were read as text and CSV ids as integers, so tied
    scores were ordered differently ("10" < "9" as text) and the same data scored differently.
    References by hand. Integer ids: user 1's relevant item 10 ties with item 9; the default tie
    rule (item id ascending, integers as numbers, as the harness reads integral ids) puts 9
    first, so nDCG@10 = 1/log2(3). Text ids: ``007`` is not the number 7 (pandas made it 7);
    as text it sorts before ``8``, so the relevant ``8`` is second: 1/log2(3) again."""
    cases = {
        "int": ([("1", "10", 1)], [("1", "9", 1.0), ("1", "10", 1.0)]),
        "text": ([("1", "8", 1)], [("1", "8", 1.0), ("1", "007", 1.0)]),
    }
    for name, (qrels, run) in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        tables = {}
        for kind, (q, r) in _write_tables(folder, qrels, run).items():
            out = folder / f"per_user_{kind}.csv"
            args = [str(folder / q), str(folder / r), "-m", "ndcg@10", "--per-user", str(out)]
            assert main(args) == 0, capsys.readouterr()
            tables[kind] = pd.read_csv(out, dtype={"user": str}).set_index("user")["ndcg@10"]
        pd.testing.assert_series_equal(tables["trec"], tables["csv"], obj=name)
        assert tables["csv"]["1"] == pytest.approx(1 / np.log2(3), abs=1e-12), name


def test_ids_written_two_ways_among_text_ids_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    qrels = [("1", "70", 1), ("1", "abc", 1)]
    run = [("1", "70", 1.0), ("1", "70.0", 1.0), ("1", "abc", 0.5)]
    for kind, (q, r) in _write_tables(tmp_path, qrels, run).items():
        assert main([str(tmp_path / q), str(tmp_path / r), "-m", "ndcg@10"]) == 2
        err = capsys.readouterr().err.strip()
        column = "doc" if kind == "trec" else "item"
        assert err.endswith(
            f"{tmp_path / r}: column {column!r} has ids '70' and '70.0' that differ only in "
            "number formatting (the ids are text); write each id one way"
        ), err
