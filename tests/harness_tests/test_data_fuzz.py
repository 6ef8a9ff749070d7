"""Malformed input never crashes or is read silently: one ``DataError`` line naming the file.

Two layers: seeded random corruptions of a good CSV and of in-memory frames fed to the loader
(in-process, many cases), and a fixed set of malformed files run through ``python -m harness``
in subprocesses (exit 2, one ``error:`` line, no traceback, nothing evaluated).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from support import HarnessCli

from harness.data import load_interactions, validate_interactions
from harness.errors import DataError

GOOD_ROWS = [
    (1, 10, "2023-03-01 10:00:00", 4.0),
    (1, 11, "2023-03-02 11:30:00", 3.5),
    (2, 10, "2023-03-02 12:00:00", 5.0),
    (2, 12, "2023-03-04 08:15:00", 2.0),
    (3, 11, "2023-03-05 09:00:00", 1.0),
    (3, 13, "2023-03-06 23:59:59", 4.5),
]
GOOD_CSV = "user,item,timestamp,rating\n" + "".join(
    f"{u},{i},{t},{r}\n" for u, i, t, r in GOOD_ROWS
)


def check_outcome(call: Callable[[], pd.DataFrame], name: str) -> str:
    """Run a load: a valid Interactions frame, or one DataError line naming ``name``."""
    try:
        df = call()
    except DataError as err:
        message = str(err)
        assert "\n" not in message, message
        assert name in message, message
        return "error"
    assert list(df.columns)[:3] == ["user", "item", "timestamp"]
    ts = df["timestamp"]  # whole seconds as int64, sub-second times as float64 seconds
    assert ts.dtype == np.int64 or (ts.dtype == np.float64 and (ts != np.floor(ts)).any())
    for col in ("user", "item"):
        assert df[col].dtype == np.int64 or pd.api.types.is_string_dtype(df[col].dtype)
    assert df.index.equals(pd.RangeIndex(len(df)))
    return "ok"


# -------------------------------------------------------------- in-process random corruption


def corrupt(text: bytes, rng: np.random.Generator) -> bytes:
    """One to three random edits of the kind found in real broken exports."""
    data = bytearray(text)
    for _ in range(int(rng.integers(1, 4))):
        pos = int(rng.integers(0, max(len(data), 1)))
        kind = int(rng.integers(0, 10))
        if kind == 0:  # a random byte, often not UTF-8
            data[pos : pos + 1] = bytes([int(rng.integers(0, 256))])
        elif kind == 1:
            data[pos:pos] = b","
        elif kind == 2:
            data[pos:pos] = b'"'
        elif kind == 3:
            del data[pos : pos + int(rng.integers(1, 6))]
        elif kind == 4:
            data = data[:pos]
        elif kind == 5:
            data[pos:pos] = b"\x00"
        elif kind == 6:
            data[pos:pos] = rng.choice([b" ", b"\t", b"\r\n", b"\n"]).item()
        elif kind == 7:
            data[pos:pos] = rng.choice([b"13/07/2023 10:00", b"1700000000000", b"NaN", b"[1, 2]"])
        elif kind == 8:
            data[pos:pos] = "é€".encode()
        else:
            data[pos:pos] = b".0"
    return bytes(data)


def test_random_corruptions_of_a_csv_are_read_or_refused_in_one_line(tmp_path: Path) -> None:
    rng = np.random.default_rng(14)
    path = tmp_path / "fuzz.csv"
    outcomes: dict[str, int] = {"ok": 0, "error": 0}
    for _ in range(300):
        path.write_bytes(corrupt(GOOD_CSV.encode(), rng))
        outcomes[
            check_outcome(lambda: load_interactions(path, duplicates="keep_all"), "fuzz.csv")
        ] += 1
    # the corruptions are real: most are refused, some survive as valid data
    assert outcomes["error"] > 100 and outcomes["ok"] > 10, outcomes


VALUE_POOL: list[Any] = [
    1,
    "1",
    1.0,
    1.5,
    " 1",
    "1.0",
    "+1",
    -3,
    2**63 + 1,
    "abc",
    True,
    None,
    float("nan"),
    [1, 2],
    {"a": 1},
    b"x",
    "2023-01-05",
    "05/01/2023",
    "01/13/2023",
    1_700_000_000,
    1_700_000_000_000,
    pd.Timestamp("2023-01-01"),
]


def test_random_object_frames_are_validated_or_refused_in_one_line() -> None:
    rng = np.random.default_rng(7)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(300):
        n = int(rng.integers(1, 6))
        columns = {}
        for col in ("user", "item", "timestamp"):
            picks = rng.integers(0, len(VALUE_POOL), n)
            columns[col] = pd.Series([VALUE_POOL[k] for k in picks], dtype=object)
        frame = pd.DataFrame(columns)
        load = partial(validate_interactions, frame, source="frame", duplicates="keep_all")
        outcomes[check_outcome(load, "frame")] += 1
    assert outcomes["error"] > 100 and outcomes["ok"] > 0, outcomes


# ----------------------------------------------------------------- through python -m harness


def good_frame(n: int = 600, user_base: int = 0) -> pd.DataFrame:
    """Interactions over 40 users and 60 items, one event a minute."""
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(
        {
            "user": user_base + rng.integers(0, 40, n),
            "item": rng.integers(0, 60, n),
            "timestamp": 1_700_000_000 + np.arange(n) * 60,
        }
    )
    return frame.drop_duplicates(["user", "item"]).reset_index(drop=True)


def write_cases(base: Path) -> dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """case -> (data file name, extra overrides, fragments the error line must contain)."""
    header = "user,item,timestamp\n"
    (base / "mixed_layouts.csv").write_text(
        header + "1,1,05/07/2023 10:00\n1,2,07/13/2023 10:00\n2,1,13/07/2023 10:00\n"
    )
    (base / "ambiguous.csv").write_text(
        header + "1,1,05/07/2023 10:00\n1,2,06/07/2023 10:00\n2,1,08/07/2023 10:00\n"
    )
    (base / "epoch_and_date.csv").write_text(header + "1,1,1700000000\n1,2,2023-11-15\n")
    (base / "near_ids.csv").write_text(header + "abc,1,1\n70,2,2\n70.0,3,3\n")
    (base / "extra_fields.csv").write_text(header + "1,1,1\n1,2,2,9\n")
    (base / "binary.csv").write_bytes(bytes(range(256)) * 8)
    (base / "empty.csv").write_bytes(b"")
    (base / "no_rating.csv").write_text(header + "1,1,1\n")
    pd.DataFrame({"user": [[1, 2], [3]], "item": [1, 2], "timestamp": [1, 2]}).to_parquet(
        base / "nested.parquet"
    )
    one_time = good_frame().assign(timestamp=1_700_000_000)
    one_time.to_csv(base / "one_timestamp.csv", index=False)
    good_frame().to_csv(base / "good.csv", index=False)
    (base / "empty_candidates.csv").write_bytes(b"")
    (base / "binary_candidates.csv").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" * 20)
    no_rating = ("dataset.columns.rating=null",)
    return {
        "mixed_layouts": (
            "mixed_layouts.csv",
            no_rating,
            ("'timestamp'", "'07/13/2023 10:00' at row 1", "one format per column"),
        ),
        "ambiguous": ("ambiguous.csv", no_rating, ("ambiguous", "dataset.timestamp_format")),
        "epoch_and_date": ("epoch_and_date.csv", no_rating, ("'2023-11-15' at row 1",)),
        "near_ids": ("near_ids.csv", no_rating, ("'user'", "'70' at row 1", "'70.0' at row 2")),
        "extra_fields": ("extra_fields.csv", no_rating, ("line 3",)),
        "binary": ("binary.csv", no_rating, ("not a CSV text file",)),
        "empty": ("empty.csv", no_rating, ("empty file",)),
        "no_rating": ("no_rating.csv", (), ("'rating'", "dataset.columns.rating=null")),
        "nested": ("nested.parquet", no_rating, ("column 'user' holds nested values",)),
        "one_timestamp": ("one_timestamp.csv", no_rating, ("every event is at one timestamp",)),
        "untimed_time_split": (
            "good.csv",
            (*no_rating, "dataset.columns.timestamp=null"),  # split=global_time by default
            ("split=global_time orders events by time", "dataset.columns.timestamp=null"),
        ),
        "cut_after_last": (
            "good.csv",
            (*no_rating, "split.cut=2030-01-01"),
            ("split.cut='2030-01-01'", "after the last event"),
        ),
        "empty_candidates": (
            "good.csv",
            (*no_rating, "candidates=file", f"candidates.path={base / 'empty_candidates.csv'}"),
            ("empty_candidates.csv", "empty"),
        ),
        "binary_candidates": (
            "good.csv",
            (*no_rating, "candidates=file", f"candidates.path={base / 'binary_candidates.csv'}"),
            ("binary_candidates.csv", "not a CSV text file"),
        ),
    }


run_cli = HarnessCli().run


COMMON = ("dataset=file", "tracking=none", "model=popularity", "progress=false", "compare=none")


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("fuzz_cli")
    cases = write_cases(base)
    jobs = {
        case: (base / case, (*COMMON, f"dataset.path={base / name}", *extra))
        for case, (name, extra, _) in cases.items()
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {case: pool.submit(run_cli, cwd, *args) for case, (cwd, args) in jobs.items()}
        procs = {case: f.result() for case, f in futures.items()}
    return {"base": base, "cases": cases, "procs": procs}


def explain(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"


CLI_CASES = [
    "mixed_layouts",
    "ambiguous",
    "epoch_and_date",
    "near_ids",
    "extra_fields",
    "binary",
    "empty",
    "no_rating",
    "nested",
    "one_timestamp",
    "untimed_time_split",
    "cut_after_last",
    "empty_candidates",
    "binary_candidates",
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CLI_CASES)
def test_malformed_input_is_one_error_line_and_exit_2(case: str, cli_runs: dict[str, Any]) -> None:
    proc = cli_runs["procs"][case]
    name, _, fragments = cli_runs["cases"][case]
    assert proc.returncode == 2, explain(proc)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), explain(proc)
    assert "Traceback" not in proc.stderr + proc.stdout
    line = lines[0]
    if case not in ("one_timestamp", "untimed_time_split", "cut_after_last"):  # about the split
        assert name in line or any(f.endswith(".csv") and f in line for f in fragments), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    if "candidates" not in case:  # refused before anything was evaluated
        folder = cli_runs["base"] / case / "runs" / "results"
        assert not any(folder.rglob("summary.csv")) if folder.exists() else True


@pytest.mark.slow
def test_a_file_without_timestamps_runs_split_random(tmp_path: Path) -> None:
    """dataset.columns.timestamp=null with split=random gives the run of the same events with
    every timestamp 0, and the report shows no dates."""
    frame = good_frame(n=1500)
    frame.drop(columns="timestamp").to_csv(tmp_path / "untimed.csv", index=False)
    frame.assign(timestamp=0).to_csv(tmp_path / "zero.csv", index=False)
    common = (*COMMON, "dataset.columns.rating=null", "split=random")
    runs = {
        "untimed": (f"dataset.path={tmp_path / 'untimed.csv'}", "dataset.columns.timestamp=null"),
        "zero": (f"dataset.path={tmp_path / 'zero.csv'}",),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {k: pool.submit(run_cli, tmp_path / k, *common, *a) for k, a in runs.items()}
        procs = {kind: f.result() for kind, f in futures.items()}
    tables = {}
    for kind, proc in procs.items():
        assert proc.returncode == 0, explain(proc)
        folder = tmp_path / kind / re.search(r"^results: (.+)$", proc.stdout, re.M).group(1)
        tables[kind] = pd.read_csv(folder / "summary.csv", index_col=0)
        dated = "1970-01-01" in (folder / "report.md").read_text()
        assert dated == (kind == "zero")  # the zero file's times are real times
        stats = json.loads((folder / "split_stats.json").read_text())
        leakage = {k: v for k, v in stats.items() if k.startswith("leakage_")}
        assert len(leakage) == 3
        # no times: leakage cannot be measured (None), not "none" (0)
        assert all((v is None) == (kind == "untimed") for v in leakage.values()), leakage
    pd.testing.assert_frame_equal(tables["untimed"], tables["zero"])


@pytest.mark.slow
def test_csv_and_parquet_of_the_same_data_give_the_same_metrics(tmp_path: Path) -> None:
    # issue 14: 19-digit ids made the CSV column text and the Parquet column int64, and the two
    # runs disagreed (ties between items are broken by id order)
    frame = good_frame(n=1500, user_base=1_234_567_890_123_456_000)
    frame["item"] = frame["item"] * 1_000_000_000_000_000_007 % (2**62)  # 19-digit item ids too
    frame.to_csv(tmp_path / "events.csv", index=False)
    frame.to_parquet(tmp_path / "events.parquet")
    common = (
        *COMMON[:2],
        "model=[popularity,item_knn]",
        *COMMON[3:],
        "dataset.columns.rating=null",
    )
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            kind: pool.submit(
                run_cli, tmp_path / kind, *common, f"dataset.path={tmp_path / f'events.{kind}'}"
            )
            for kind in ("csv", "parquet")
        }
        procs = {kind: f.result() for kind, f in futures.items()}
    tables = {}
    for kind, proc in procs.items():
        assert proc.returncode == 0, explain(proc)
        found = re.findall(r"^results: (.+)$", proc.stdout, flags=re.MULTILINE)
        assert len(found) == 1, explain(proc)
        tables[kind] = pd.read_csv(tmp_path / kind / found[0].strip() / "summary.csv")
    assert len(tables["csv"]) == 2
    pd.testing.assert_frame_equal(tables["csv"], tables["parquet"])


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "empty file"),
        (b"user,item\n", "has no rows"),
        (b"\x89PNG\r\n\x1a\n\x00\x00" * 20, "not a CSV text file"),
        (b"user,item\n1,2\n1,3,4\n", "line 3"),
        (b"user,item\nabc,1\n70,2\n70.0,3\n", "differ only in number formatting"),
        (b"user,other\n1,2\n", "column 'item' is missing"),
    ],
)
def test_bad_candidates_files_name_the_file(tmp_path: Path, content: bytes, fragment: str) -> None:
    from harness.candidates import _read_file

    path = tmp_path / "cands.csv"
    path.write_bytes(content)
    with pytest.raises(DataError) as info:
        _read_file(str(path))
    message = str(info.value)
    assert message.startswith(str(path)) and fragment in message and "\n" not in message


@pytest.mark.slow
def test_bad_human_labels_file_is_refused_before_any_model_runs(tmp_path: Path) -> None:
    labels = tmp_path / "labels.csv"
    labels.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" * 20)
    proc = run_cli(
        tmp_path / "work",
        "experiment=quick",
        "tracking=none",
        "progress=false",
        "gate=none",
        "model=[popularity,random]",
        f"compare.human_labels={labels}",
    )
    assert proc.returncode == 2, explain(proc)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "labels.csv" in errors[0], explain(proc)
    assert "Traceback" not in proc.stderr
    assert "model popularity" not in proc.stderr and "fit" not in proc.stdout, explain(proc)
